"""Restart after kill -9, and disk bytes per sample while ingesting: metricsgw, Prometheus 2.42 and
VictoriaMetrics side by side.

    python -m bench.restart --nodes 2670 --scrapes 3      # ~1M series, as in issue 9

Per server, one after the other: send the bench workload as live remote write (one sample per
series per request, every series new in the first scrape), measure the data dir right after the
last acknowledgement (bytes / acknowledged sample, "while ingesting": for a young Prometheus and
metricsgw mostly the WAL), kill -9, start it again on the same dir and time
- ready: until /-/ready (VictoriaMetrics: /health) answers 200, and the server's CPU seconds by then
  (user + system: steadier than wall time when other work shares the machine);
- first query: until an instant query for one metric answers with every one of its series;
and count the acknowledged samples of that metric the restarted server lost.
The machine is shared: read the figures as indicative and the ratios first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time
import urllib.parse
from pathlib import Path


from testkit import procs
from testkit.load import Plan, prepare, send_all

RESULTS = Path(__file__).resolve().parent / "results"
PROBE_METRIC = "DCGM_FI_DEV_GPU_UTIL"


def _count(server: procs.Server, t_s: float) -> int | None:
    """Samples of PROBE_METRIC at t (one per series), or None while the query does not answer."""
    q = urllib.parse.urlencode({"query": f"count({PROBE_METRIC})", "time": t_s})
    try:
        status, body = procs.http_get(f"{server.base_url}/api/v1/query?{q}", timeout=30)
    except OSError:
        return None
    if status != 200:
        return None
    result = json.loads(body)["data"]["result"]
    return int(float(result[0]["value"][1])) if result else 0




def _until(cond, timeout_s: float) -> float | None:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        try:
            if cond():
                return time.perf_counter() - t0
        except OSError:
            pass
        time.sleep(0.02)
    return None


def run_one(kind: str, shards, preamble, expect: int, last_t_s: float, work: Path, time_limit_s: float,
            keep: Path | None = None) -> dict:
    start = procs.STARTERS[kind]
    server = start(work / kind)
    port = int(server.base_url.rsplit(":", 1)[1])
    out: dict = {"server": kind}
    try:
        server.wait_ready()
        first = asyncio.run(send_all(server.write_url, [[r for r in sh if r.first_scrape == 0] for sh in shards],
                                     time_limit_s, preamble))
        rest = asyncio.run(send_all(server.write_url, [[r for r in sh if r.first_scrape > 0] for sh in shards],
                                    time_limit_s))
        acked = first.samples_ok + rest.samples_ok
        out["samples_acked"] = acked
        out["requests_failed"] = first.requests_failed + rest.requests_failed
        out["disk_bytes"] = procs.dir_bytes(server.data_dir)
        out["disk_bytes_per_sample"] = out["disk_bytes"] / max(acked, 1)
        out["rss_before_kill"] = procs.ResourceSampler(server.pid).start().stop().rss_last
        server.kill()
        if keep is not None:  # the killed server's directory, to restart again by hand (profiling a restart)
            shutil.copytree(work / kind, keep / kind, dirs_exist_ok=True, ignore=shutil.ignore_patterns("run"))
        t0 = time.perf_counter()
        server = start(work / kind, port=port)
        ready = _until(lambda: procs.http_get(server.base_url + server.ready_path, timeout=2)[0] == 200, 600)
        out["ready_s"] = ready
        out["ready_cpu_s"] = procs.tree_cpu_s(server.pid)  # steadier than wall time on a shared machine
        answered = _until(lambda: _count(server, last_t_s) is not None, 600)
        out["first_query_s"] = None if answered is None else time.perf_counter() - t0
        got = _count(server, last_t_s) or 0
        out["probe_series_expected"], out["probe_series_found"] = expect, got
    finally:
        out["exit_code"] = server.stop(timeout_s=300)
        out["log_tail"] = server.log_tail(1500)
    return out


def table(results: dict[str, dict]) -> str:
    names = list(results)
    rows = [("samples acknowledged", "samples_acked", "{:,}"),
            ("disk bytes / sample while ingesting", "disk_bytes_per_sample", "{:.2f}"),
            ("kill -9 -> ready, s", "ready_s", "{:.2f}"),
            ("  server CPU s until ready", "ready_cpu_s", "{:.2f}"),
            ("kill -9 -> first query answered, s", "first_query_s", "{:.2f}"),
            (f"{PROBE_METRIC} series at the last scrape, after restart", "probe_series_found", "{:,}"),
            ("  expected", "probe_series_expected", "{:,}")]
    lines = ["| figure | " + " | ".join(names) + " |", "|" + "---|" * (len(names) + 1)]
    for label, key, fmt in rows:
        cells = [fmt.format(results[n][key]) if results[n].get(key) is not None else "-" for n in names]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=2670)
    ap.add_argument("--scrapes", type=int, default=3)
    ap.add_argument("--targets", default=",".join(procs.STARTERS))
    ap.add_argument("--time-limit", type=float, default=900.0, help="send phase limit per server, s")
    ap.add_argument("--keep", type=Path, help="copy each server's directory here right after its kill -9")
    a = ap.parse_args(argv)
    # Prometheus and VictoriaMetrics are Go: a soft memory limit keeps their GC slack from pushing a
    # million-series head past what this shared machine can give (it does not change what they keep).
    os.environ.setdefault("GOMEMLIMIT", "2500MiB")
    end_ms = int(time.time()) // 15 * 15_000
    plan = Plan(a.nodes, duration_s=15.0 * a.scrapes, end_ms=end_ms)
    workload, preamble, shards = prepare(plan)
    last_t_s = end_ms / 1000
    expect = sum(1 for lb in workload.series() if dict(lb).get("__name__") == PROBE_METRIC)
    print(f"{workload.num_series:,} series x {plan.scrapes} scrapes", flush=True)
    work = Path(tempfile.mkdtemp(prefix="bench-restart-"))
    results: dict[str, dict] = {}
    try:
        for kind in procs.targets(a.targets):
            print(f"running {kind} ...", flush=True)
            results[kind] = run_one(kind, shards, preamble, expect, last_t_s, work, a.time_limit, a.keep)
            print("  " + json.dumps({k: v for k, v in results[kind].items() if k != "log_tail"}), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(table(results))
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / time.strftime("restart-%Y%m%dT%H%M%SZ.json", time.gmtime())
    path.write_text(json.dumps({"nodes": a.nodes, "scrapes": a.scrapes, "num_series": workload.num_series,
                                "results": results}, indent=2, default=str))
    print(f"results: {path}")


if __name__ == "__main__":
    main()
