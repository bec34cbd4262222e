"""CPU per remote-write request in the front (distributor) and in the ingest shards, for `metricsgw serve`.

    python -m bench.front_cost --nodes 100 --scrapes 6 --shards 1,2 [--samples-per-request 2000]
        [--py-spy [--py-spy-process shard-0] [--py-spy-phase first] [--py-spy-keep /tmp/shard.raw]]

For each --shards value: a fresh gateway, the first scrape written (every series new), then the CPU seconds
(user + system, from /proc) of the front and of each shard are read before and after the later scrapes
(known series: the steady state), sent as pre-encoded 2,000-sample requests over 4 connections. CPU time,
not wall time: it is what the front costs whatever else the machine does (the system share is given
apart). With --py-spy the front (or the child --py-spy-process names) is sampled (py-spy record, raw
format; `pip install -e .[bench]`) during the later scrapes (or, --py-spy-phase first, during the first
scrape, every series new) and its top functions by own time are listed; --py-spy-keep keeps the profile.
A small --samples-per-request shows the fixed cost of a request.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from testkit import procs
from testkit.load import send_all
from testkit.wire import build_requests, metadata_request
from testkit.workload import Workload

RESULTS = Path(__file__).resolve().parent / "results"
INTERVAL_MS = 15_000


def _cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


def _wait_accepting(server: procs.Server, workload: Workload, timeout_s: float = 120.0) -> None:
    """With several shards /-/ready says queries cannot be served yet; a stored metadata write says ingest is up."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        res = asyncio.run(send_all(server.write_url, [], 10.0, [metadata_request(workload)], max_attempts=1))
        if res.status_counts.get("204"):
            return
        time.sleep(0.2)
    raise TimeoutError(f"no 204 from {server.write_url}: {server.log_tail()}")


def _top_functions(raw: str, n: int = 12) -> list[tuple[str, float]]:
    own: collections.Counter = collections.Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        own[stack.split(";")[-1]] += int(count)
        total += int(count)
    return [(f, c / total) for f, c in own.most_common(n)] if total else []


def _spy(a, front, kids, work: Path) -> subprocess.Popen:
    target = front if a.py_spy_process == "front" else kids[a.py_spy_process]
    spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--format", "raw", "--threads",
                            "-r", "200", "-p", str(target.pid), "-o", str(work / "front.raw"), "--nonblocking"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    return spy


def _stop(spy: subprocess.Popen) -> None:
    spy.send_signal(2)
    spy.wait(30)


def run(shards: int, a, workload: Workload, work: Path) -> dict:
    server = procs.start_metricsgw(work / f"shards-{shards}", extra=[f"--ingest.shards={shards}"])
    try:
        _wait_accepting(server, workload)
        front = psutil.Process(server.pid)
        kids = procs.gateway_children(server.pid)
        start_ms = (int(time.time() * 1000) // INTERVAL_MS - a.scrapes) * INTERVAL_MS
        reqs = build_requests(workload, start_ms, a.scrapes, INTERVAL_MS, 4, a.samples_per_request)
        first = [[r for r in sh if r.first_scrape == 0] for sh in reqs]
        later = [[r for r in sh if r.first_scrape > 0] for sh in reqs]
        spy = _spy(a, front, kids, work) if a.py_spy and a.py_spy_phase == "first" else None
        t0 = time.perf_counter()
        asyncio.run(send_all(server.write_url, first, 600.0))
        first_s = time.perf_counter() - t0
        if spy is None and a.py_spy:
            spy = _spy(a, front, kids, work)
        elif spy is not None:
            _stop(spy)
        before = {"front": _cpu(front), **{n: _cpu(p) for n, p in kids.items()}}
        sys_before = {"front": front.cpu_times().system, **{n: p.cpu_times().system for n, p in kids.items()}}
        t0 = time.perf_counter()
        res = asyncio.run(send_all(server.write_url, later, 600.0))
        seconds = time.perf_counter() - t0
        after = {"front": _cpu(front), **{n: _cpu(p) for n, p in kids.items()}}
        sys_after = {"front": front.cpu_times().system, **{n: p.cpu_times().system for n, p in kids.items()}}
        if spy is not None:
            _stop(spy)
        n = res.requests_ok
        out = {"shards": shards, "requests": n, "samples": res.samples_ok, "failed": res.requests_failed,
               "first_scrape_s": first_s, "seconds": seconds, "samples_per_s": res.samples_ok / seconds,
               "cpu_ms_per_request": {k: 1000 * (after[k] - before[k]) / max(n, 1) for k in before},
               "system_cpu_ms_per_request": {k: 1000 * (sys_after[k] - sys_before[k]) / max(n, 1) for k in before}}
        if a.py_spy and (work / "front.raw").exists():
            out[f"{a.py_spy_process}_top_functions"] = _top_functions((work / "front.raw").read_text(), 25)
            if a.py_spy_keep:
                shutil.copy(work / "front.raw", a.py_spy_keep)
        return out
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--scrapes", type=int, default=6)
    ap.add_argument("--shards", default="1,2")
    ap.add_argument("--samples-per-request", type=int, default=2000)
    ap.add_argument("--py-spy", action="store_true")
    ap.add_argument("--py-spy-process", default="front", help="front, or a child's name: shard-0, querier-0")
    ap.add_argument("--py-spy-phase", default="later", choices=["first", "later"],
                    help="profile the first scrape (every series new) or the later ones (known series)")
    ap.add_argument("--py-spy-keep", help="copy the raw profile here")
    a = ap.parse_args(argv)
    workload = Workload(a.nodes)
    work = Path(tempfile.mkdtemp(prefix="bench-front-"))
    results = []
    try:
        for shards in (int(s) for s in a.shards.split(",")):
            r = run(shards, a, workload, work)
            results.append(r)
            print(json.dumps(r, indent=1), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / time.strftime("front-cost-%Y%m%dT%H%M%SZ.json", time.gmtime())
    path.write_text(json.dumps({"args": vars(a), "num_series": workload.num_series, "results": results}, indent=2))
    print(f"results: {path}")
    return results


if __name__ == "__main__":
    main()
