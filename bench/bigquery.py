"""One big aggregation, and whether memory comes back after it.

    python -m bench.bigquery --nodes 1000 --hours 24 [--targets metricsgw,prometheus]

Writes --hours of one metric (default DCGM_FI_DEV_POWER_USAGE: every GPU of every node, 15 s
apart) into each server in turn, then asks `sum by (namespace) (rate(METRIC[5m]))` over the whole
span at a 60 s step (what a Grafana 24 h panel asks), --repeat times. Per run: status, seconds,
the server's peak RSS during it, and its RSS --settle seconds after the answer next to the RSS
just before the query (the "memory is given back" check). Writes bench/results/bigquery-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.attack import Attack, send
from metricsgw.config import parse_duration
from testkit import procs
from testkit.load import send_all
from testkit.wire import build_requests, metadata_request
from testkit.workload import Workload

RESULTS = Path(__file__).resolve().parent / "results"
MiB = 1 << 20
CHUNK_SCRAPES = 240  # an hour at 15 s: encoded and sent a chunk at a time


class OneMetric:
    """The workload's series of one metric only (same labels and values)."""

    def __init__(self, workload: Workload, metric: str) -> None:
        self.inner = workload
        self.idx = np.array([i for i, lb in enumerate(workload.series()) if dict(lb).get("__name__") == metric])
        self._labels = [workload.series()[i] for i in self.idx]
        self._meta = [m for m in workload.metadata() if m.metric == metric]

    def series(self):
        return self._labels

    @property
    def num_series(self) -> int:
        return len(self._labels)

    def metadata(self):
        return self._meta

    def samples_at(self, t_ms: int) -> np.ndarray:
        return self.inner.samples_at(t_ms)[self.idx]


def backfill(server: procs.Server, wl: OneMetric, end_ms: int, scrapes: int, interval_ms: int) -> dict:
    t0 = time.perf_counter()
    ok = failed = 0
    asyncio.run(send_all(server.write_url, [], 60.0, [metadata_request(wl)]))
    first = end_ms - (scrapes - 1) * interval_ms
    for k0 in range(0, scrapes, CHUNK_SCRAPES):
        n = min(CHUNK_SCRAPES, scrapes - k0)
        shards = build_requests(wl, first + k0 * interval_ms, n, interval_ms, 4, 20_000, 20)
        res = asyncio.run(send_all(server.write_url, shards, 900.0))
        ok += res.samples_ok
        failed += res.requests_failed + res.requests_not_sent
    return {"samples": ok, "failed_requests": failed, "seconds": time.perf_counter() - t0}


def ask(server: procs.Server, query: str, end_s: float, hours: float, settle_s: float) -> dict:
    sampler = procs.ResourceSampler(server.pid, period_s=0.05).start()
    before = procs.ResourceSampler(server.pid).start().stop().rss_last
    attack = Attack("big", "POST", "/api/v1/query_range",
                    (("query", query), ("start", f"{end_s - hours * 3600:.3f}"), ("end", f"{end_s:.3f}"),
                     ("step", "60")))
    t0 = time.perf_counter()
    status, body, err = send(server.base_url, attack, {}, 600.0)
    seconds = time.perf_counter() - t0
    peak = sampler.stop().rss_peak
    time.sleep(settle_s)
    after = procs.ResourceSampler(server.pid).start().stop().rss_last
    out = {"status": status, "seconds": seconds, "rss_before_mib": before / MiB, "rss_peak_mib": peak / MiB,
           "rss_after_mib": after / MiB, "error": err}
    if isinstance(body, bytes) and status == "200":
        out["series"] = len(json.loads(body)["data"]["result"])
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--metric", default="DCGM_FI_DEV_POWER_USAGE")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--settle", default="10s")
    ap.add_argument("--targets", default="metricsgw,prometheus")
    ap.add_argument("--metricsgw-flag", action="append", default=[], help="extra flag for metricsgw serve")
    a = ap.parse_args(argv)
    settle = parse_duration(a.settle)
    wl = OneMetric(Workload(a.nodes), a.metric)
    interval_ms = 15_000
    scrapes = int(a.hours * 3600 * 1000 // interval_ms) + 1
    end_ms = int(time.time() * 1000) // interval_ms * interval_ms
    query = f"sum by (namespace) (rate({a.metric}[5m]))"
    print(f"{wl.num_series:,} series of {a.metric} x {scrapes:,} scrapes = {wl.num_series * scrapes:,} samples; "
          f"query: {query} over {a.hours:g} h, step 60 s", flush=True)
    work = Path(tempfile.mkdtemp(prefix="bench-bigquery-"))
    results: dict[str, dict] = {}
    try:
        for kind in procs.targets(a.targets):
            server = procs.STARTERS[kind](work / kind, extra=a.metricsgw_flag if kind == "metricsgw" else None)
            try:
                server.wait_ready()
                r = {"load": backfill(server, wl, end_ms, scrapes, interval_ms)}
                time.sleep(settle)
                r["runs"] = [ask(server, query, end_ms / 1000, a.hours, settle) for _ in range(a.repeat)]
                results[kind] = r
                print(f"  {kind}: {json.dumps(r)}", flush=True)
            finally:
                server.stop()
                shutil.rmtree(work / kind, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\n| server | run | status | seconds | RSS before MiB | peak MiB | after +settle MiB |")
    print("|---|---|---|---|---|---|---|")
    for kind, r in results.items():
        for i, run in enumerate(r["runs"]):
            print(f"| {kind} | {i + 1} | {run['status']} | {run['seconds']:.1f} | {run['rss_before_mib']:,.0f} | "
                  f"{run['rss_peak_mib']:,.0f} | {run['rss_after_mib']:,.0f} |")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / time.strftime("bigquery-%Y%m%dT%H%M%SZ.json", time.gmtime())
    path.write_text(json.dumps({"args": vars(a), "series": wl.num_series, "scrapes": scrapes, "results": results},
                               indent=2))
    print(f"\nresults: {path}")
    return results


if __name__ == "__main__":
    main()
