"""What a dashboard refresh costs the query process, on the data a seed-scale run left behind.

    python -m bench.scale --nodes 7500 --duration 6m --clients 4 --data-dir /var/tmp/seeddata   # keeps the data
    python -m bench.panel_reads --data-dir /var/tmp/seeddata --rounds 3                        # this checkout
    python -m bench.panel_reads --compare bench/results/panel-reads-A.json bench/results/panel-reads-B.json

A refresh of a range panel evaluates the steps the results cache does not hold: the last
``--query.cache-max-freshness`` (5 minutes) and whatever arrived since the last refresh. This asks each of the
shipped panels (testkit/panels.py) for exactly that, ``nocache=1`` over the last 5 minutes of the data at a 30 s
step, ``--rounds`` times, on a copy of the kept data directory (so every run, of any checkout, starts from the same
files), with nothing else running: the evaluation alone, without ingest or other clients competing for the cores.
Each answer's digest is kept, so ``--compare`` says whether two checkouts answered the same, byte for byte, beside
the ratio of their median times. Results: bench/results/panel-reads-<time>.json.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import shutil
import statistics
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq

from bench.queries import RESULTS
from testkit.panels import DASHBOARD_QUERIES
from testkit.procs import start_metricsgw

STEP_S = 30
FRESH_S = 300  # --query.cache-max-freshness: the steps every refresh evaluates again


def _last_sample_s(data: Path) -> int:
    """The newest sample time in the data's sample files (their footers' statistics), on the step grid."""
    newest = 0
    for path in glob.glob(str(data / "table" / "samples" / "**" / "*.parquet"), recursive=True):
        if "_delta_log" in path:  # the log's checkpoints
            continue
        meta = pq.ParquetFile(path).metadata
        col = meta.schema.names.index("t")
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(col).statistics
            if stats is not None and stats.has_min_max:
                newest = max(newest, int(stats.max))
    return newest // 1000 // STEP_S * STEP_S


def run(data_dir: Path, rounds: int, flags: list[str]) -> dict:
    data = next(Path(p).parent for p in glob.glob(str(data_dir / "**" / "table"), recursive=True))
    end = _last_sample_s(data)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    out = {"data_dir": str(data_dir), "end": end, "commit": commit, "flags": flags, "panels": {}}
    with tempfile.TemporaryDirectory(dir=data_dir.parent) as work:
        shutil.copytree(data, Path(work) / "data")
        gw = start_metricsgw(Path(work), extra=flags)
        try:
            gw.wait_ready()
            for k in range(rounds):
                for name, query in DASHBOARD_QUERIES:
                    params = {"query": query, "start": end - FRESH_S, "end": end, "step": STEP_S, "nocache": 1}
                    t0 = time.perf_counter()
                    with urllib.request.urlopen(f"{gw.base_url}/api/v1/query_range?{urllib.parse.urlencode(params)}",
                                                timeout=600) as resp:
                        body = resp.read()
                    seconds = time.perf_counter() - t0
                    row = out["panels"].setdefault(name, {"seconds": [], "digest": None})
                    row["seconds"].append(round(seconds, 3))
                    digest = hashlib.sha256(body).hexdigest()
                    if row["digest"] not in (None, digest):
                        raise SystemExit(f"{name}: round {k} answered differently from round 0")
                    row["digest"] = digest
                    print(f"round {k} {name:24s} {seconds:7.2f} s", flush=True)
        finally:
            gw.stop()
    return out


def compare(a: dict, b: dict) -> None:
    print(f"| panel | {a['commit']} median s | {b['commit']} median s | ratio | same answer |")
    print("|---|---|---|---|---|")
    for name, ra in a["panels"].items():
        rb = b["panels"][name]
        ma, mb = statistics.median(ra["seconds"]), statistics.median(rb["seconds"])
        print(f"| {name} | {ma:.2f} | {mb:.2f} | {mb / ma:.2f} | {'yes' if ra['digest'] == rb['digest'] else 'NO'} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, help="the --data-dir a bench.scale run kept")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--metricsgw-flag", action="append", default=[])
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = ap.parse_args()
    if args.compare:
        compare(*(json.loads(p.read_text()) for p in args.compare))
        return
    if args.data_dir is None:
        ap.error("--data-dir is required (or --compare)")
    out = run(args.data_dir, args.rounds, args.metricsgw_flag)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"panel-reads-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    path.write_text(json.dumps(out, indent=1))
    print(f"results: {path}")


if __name__ == "__main__":
    main()
