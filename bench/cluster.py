"""What a peer fan-out costs a dashboard query (--cluster.peers): the same dashboard range queries on

    single      one gateway holding all the data, no peers
    idle-peers  one gateway holding all the data, with two peers that hold nothing (the fan-out alone:
                two remote reads per selector, answered empty, and the merge)
    split       one of three gateways that each hold a third of the data in their heads, peers of each
                other (every selector reads two thirds of its samples from the peers: the worst case,
                a cluster whose data is all recent)

    python -m bench.cluster --nodes 100 --history 70m --repeat 5

Each query runs `--repeat` times on each side in turn (Grafana's form POST, 1 h window, 30 s step);
the table shows median latencies, the ratios to `single`, and whether each side's answer equals
`single`'s. The gateways of `split` never flush (long --storage.flush-interval), so the peers serve all
their data; the other two flush as usual.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from bench.queries import latest_timestamp, run
from metricsgw.config import parse_duration
from testkit.load import send_all
from testkit.procs import free_port, start_metricsgw
from testkit.panels import DASHBOARD_QUERIES
from testkit.wire import build_requests, metadata_request
from testkit.workload import Workload

INTERVAL_MS = 15_000
HEAD_ONLY = ["--storage.flush-interval=24h", "--storage.flush-max-samples=200000000"]


def _load(url: str, shards: list, workload: Workload) -> None:
    res = asyncio.run(send_all(url + "/api/v1/write", shards, 600.0, [metadata_request(workload)]))
    if res.requests_failed or res.requests_not_sent:
        raise RuntimeError(f"remote write to {url} failed: {res.summary()}")


def start(work: Path, nodes: int, history_s: float) -> tuple[dict[str, str], list]:
    """The servers, loaded: (side name -> base URL of the gateway queried, every server to stop)."""
    servers = []

    def gw(name: str, extra: list[str], port: int | None = None):
        s = start_metricsgw(work / name, port=port, extra=extra)
        servers.append(s)
        return s

    empty = [gw(f"empty{i}", []) for i in range(2)]
    single = gw("single", [])
    idle = gw("idle-peers", [f"--cluster.peers={e.base_url}" for e in empty])
    ports = [free_port() for _ in range(3)]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    split = [gw(f"split{i}", HEAD_ONLY + [f"--cluster.peers={u}" for u in urls if u != urls[i]], ports[i])
             for i in range(3)]
    for s in servers:
        s.wait_ready(120)
    workload = Workload(nodes, seed=1)
    end_ms = int(time.time() * 1000) // INTERVAL_MS * INTERVAL_MS
    scrapes = int(history_s * 1000 // INTERVAL_MS) + 1
    thirds = build_requests(workload, end_ms - (scrapes - 1) * INTERVAL_MS, scrapes, INTERVAL_MS, 3, 4000, 10)
    t0 = time.perf_counter()
    for s in (single, idle):
        _load(s.base_url, thirds, workload)
    for s, third in zip(split, thirds):
        _load(s.base_url, [third], workload)
    print(f"{len(workload.series()):,} series x {scrapes} scrapes loaded in {time.perf_counter() - t0:.0f}s",
          flush=True)
    return {"single": single.base_url, "idle-peers": idle.base_url, "split": split[0].base_url}, servers


def table(results, sides: list[str]) -> str:
    head = [f"{s} ms" for s in sides] + [f"{s}/single" for s in sides[1:]] + [f"{s} same" for s in sides[1:]]
    lines = ["| panel | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    ratios: dict[str, list[float]] = {s: [] for s in sides[1:]}
    for r in results:
        med = {s: r.median(s) * 1000 for s in sides}
        for s in sides[1:]:
            ratios[s].append(med[s] / med["single"])
        cells = ([f"{med[s]:.1f}" for s in sides] + [f"{med[s] / med['single']:.2f}" for s in sides[1:]]
                 + ["yes" if r.agree.get(s) else "NO" for s in sides[1:]])
        lines.append(f"| {r.panel} | " + " | ".join(cells) + " |")
    for s in sides[1:]:
        lines.append(f"\nmedian ratio {s}/single over {len(ratios[s])} queries: {statistics.median(ratios[s]):.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--history", default="70m")
    ap.add_argument("--window", default="1h")
    ap.add_argument("--step", default="30s")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        bases, servers = start(Path(tmp), args.nodes, parse_duration(args.history))
        try:
            end_s = latest_timestamp(bases["single"])
            run(bases, end_s, parse_duration(args.window), parse_duration(args.step), 1, reference="single")  # warm
            results = run(bases, end_s, parse_duration(args.window), parse_duration(args.step), args.repeat,
                          DASHBOARD_QUERIES, reference="single")
        finally:
            for s in servers:
                s.stop()
    print(table(results, list(bases)))


if __name__ == "__main__":
    main()
