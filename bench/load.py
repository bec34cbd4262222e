"""The load driver's command line: remote-write a workload to one loopback receiver (testkit/load.py sends).

    python -m bench.load --url http://127.0.0.1:9090/api/v1/write --nodes 100 --duration 2m
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from metricsgw.config import parse_duration
from testkit.load import Plan, check_loopback, prepare, send_all


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True, help="remote-write URL (loopback only)")
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--duration", default="2m", help="span of simulated data (scrapes = duration / interval)")
    ap.add_argument("--interval", default="15s")
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--samples-per-request", type=int, default=2000)
    ap.add_argument("--samples-per-series", type=int, default=1, help="consecutive scrapes per series in one request")
    ap.add_argument("--time-limit", default="5m", help="stop sending after this long")
    a = ap.parse_args(argv)
    check_loopback(a.url)
    plan = Plan(a.nodes, a.seed, parse_duration(a.duration), parse_duration(a.interval), a.connections,
                a.samples_per_request, a.samples_per_series)
    t0 = time.perf_counter()
    workload, pre, shards = prepare(plan)
    print(f"encoded {sum(len(s) for s in shards)} requests for {workload.num_series} series "
          f"x {plan.scrapes} scrapes in {time.perf_counter() - t0:.1f}s")
    res = asyncio.run(send_all(a.url, shards, parse_duration(a.time_limit), pre))
    print(json.dumps(res.summary(), indent=2))


if __name__ == "__main__":
    main()
