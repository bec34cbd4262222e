"""Soak and attack runs: live ingest plus query clients, each server in turn, one table.

    python -m bench.soak --nodes 500 --duration 10m                       # soak
    python -m bench.soak --mode attack --nodes 1000 --duration 30s --clients 30
    python -m bench.soak --mode writes-under-queries --nodes 300 --duration 2m --clients 3
    python -m bench.soak --targets metricsgw,prometheus,victoria-metrics ...

Per server (fresh data dir, loopback): --history of past scrapes is written as fast as it is
taken, then for --duration every series gets a sample each --interval at the wall-clock time
(real time, as Prometheus sends them), while
- soak: --clients Grafana-like clients refresh the shipped dashboards' panels (range queries over
  the last hour) every --refresh, and one abusive call goes out every 20 s, in turn: `{le!=""}`
  series with no range, a client that hangs up 1 s into `count({__name__=~".+"})` over 24 h,
  `__name__` values, a 24 h `sum by (le) (rate(apiserver..._bucket[5m]))`;
- attack: --clients clients send heavy PromQL back to back (HEAVY below);
- writes-under-queries: ingest alone for --duration (the idle write latency), then for another --duration
  with --clients (3) heavy clients as in attack; reported: write p99 idle, under queries, and their ratio
  (issue 10's target: within 1.5x). Compare `--metricsgw-flag=--server.single-process` with the default.
/-/ready is polled every 0.5 s (2 s timeout). Reported: peak RSS and RSS --settle seconds after
the load stopped, write latency p50/p99/max, writes that never got a 2xx, non-2xx write answers,
ready probes that failed, query answers by status. Writes to bench/results/soak-<time>.json.
The load driver shares the machine with the server: read the figures with that in mind.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import shutil
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from bench.attack import Attack, hang_up, send
from bench.ingest import _merge
from metricsgw.config import parse_duration
from testkit import procs
from testkit.load import LoadResult, send_all
from testkit.panels import DASHBOARD_QUERIES
from testkit.wire import build_requests, metadata_request
from testkit.workload import Workload

RESULTS = Path(__file__).resolve().parent / "results"
MiB = 1 << 20
DAY = (("start", "{day_ago}"), ("end", "{now}"), ("step", "60"))
ABUSE = (
    Attack('series {le!=""}, no range', "GET", "/api/v1/series", (("match[]", '{le!=""}'),)),
    Attack('count({__name__=~".+"}) 24h, client leaves after 1s', "POST", "/api/v1/query_range",
           (("query", 'count({__name__=~".+"})'),) + DAY, hang_up_after_s=1.0),
    Attack("__name__ values", "GET", "/api/v1/label/__name__/values", ()),
    Attack("24h sum by (le) (rate(apiserver buckets[5m]))", "POST", "/api/v1/query_range",
           (("query", "sum by (le) (rate(apiserver_request_duration_seconds_bucket[5m]))"),) + DAY),
)
HEAVY = (
    "sum by (namespace) (rate(DCGM_FI_DEV_POWER_USAGE[5m]))",
    "histogram_quantile(0.99, sum by (le, verb) (rate(apiserver_request_duration_seconds_bucket[5m])))",
    'count({__name__=~".+"})',
    "topk(20, rate(node_network_receive_bytes_total[5m]))",
    "quantile by (mode) (0.99, rate(node_cpu_seconds_total[5m]))",
    "sum by (le) (rate(apiserver_request_duration_seconds_bucket[5m]))",
)


class Counts:
    """Thread-safe tallies of answers by status."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_status: dict[str, int] = {}
        self.seconds: list[float] = []
        self.first_error: dict[str, str] = {}  # status -> the first error text seen with it

    def add(self, status: str, seconds: float, error: str = "") -> None:
        with self.lock:
            self.by_status[status] = self.by_status.get(status, 0) + 1
            self.seconds.append(seconds)
            if error and status not in self.first_error:
                self.first_error[status] = error


def _timed(base: str, attack: Attack, window: dict, counts: Counts, timeout_s: float) -> None:
    # "{start}", "{end}", "{now}", "{day_ago}" are times, filled in now; any other value is sent as is
    attack = replace(attack, params=tuple((k, window.get(v[1:-1], v) if v[:1] == "{" and v[-1:] == "}" else v)
                                          for k, v in attack.params))
    t0 = time.perf_counter()
    if attack.hang_up_after_s > 0:
        hang_up(base, attack, window)
        counts.add("client left", time.perf_counter() - t0)
        return
    status, _, err = send(base, attack, window, timeout_s)
    counts.add(status, time.perf_counter() - t0, err)


def _window(now_s: float, hours: float = 1.0) -> dict[str, str]:
    return {"start": f"{now_s - hours * 3600:.3f}", "end": f"{now_s:.3f}", "now": f"{now_s:.3f}",
            "day_ago": f"{now_s - 86400:.3f}"}


def grafana_client(base: str, stop: threading.Event, refresh_s: float, counts: Counts) -> None:
    panels = [Attack(name, "POST", "/api/v1/query_range", (("query", q), ("start", "{start}"), ("end", "{end}"),
                                                           ("step", "30"))) for name, q in DASHBOARD_QUERIES]
    while not stop.is_set():
        t0 = time.monotonic()
        for panel in panels:
            if stop.is_set():
                return
            _timed(base, panel, _window(time.time()), counts, 60.0)
        stop.wait(max(0.0, refresh_s - (time.monotonic() - t0)))


def abuser(base: str, stop: threading.Event, every_s: float, counts: dict[str, Counts]) -> None:
    k = 0
    while not stop.wait(every_s if k else 2.0):
        attack = ABUSE[k % len(ABUSE)]
        # in a thread of its own: a slow answer must not delay the next abusive call
        threading.Thread(target=_timed, args=(base, attack, _window(time.time()), counts[attack.name], 120.0),
                         daemon=True).start()
        k += 1


def heavy_client(base: str, stop: threading.Event, seed: int, counts: Counts) -> None:
    rng = np.random.default_rng(seed)
    while not stop.is_set():
        q = HEAVY[int(rng.integers(len(HEAVY)))]
        _timed(base, Attack(q, "POST", "/api/v1/query_range", (("query", q),) + DAY), _window(time.time()),
               counts, 120.0)


def ready_prober(base: str, stop, out) -> None:
    """Runs in a process of its own: the driver's encoding must not delay a probe (GIL)."""
    while not stop.wait(0.5):
        t0 = time.perf_counter()
        try:
            status, _ = procs.http_get(base + "/-/ready", timeout=2.0)
        except OSError:
            status = 0
        out[0] += 1
        out[2] = max(out[2], time.perf_counter() - t0)
        if status != 200:
            out[1] += 1


async def live_ingest(url: str, workload: Workload, start_ms: int, scrapes: int, interval_ms: int,
                      connections: int) -> LoadResult:
    """Scrape k is encoded just before and sent at its own timestamp (wall clock)."""
    total = LoadResult()
    for k in range(scrapes):
        t_ms = start_ms + k * interval_ms
        shards = build_requests(workload, t_ms, 1, interval_ms, connections)
        await asyncio.sleep(max(0.0, t_ms / 1000 - time.time()))
        total = _merge(total, await send_all(url, shards, time_limit_s=4 * interval_ms / 1000))
    return total


def run_server(kind: str, a, workload: Workload, work: Path) -> dict:
    server = procs.STARTERS[kind](work / kind, extra=a.metricsgw_flag if kind == "metricsgw" else None)
    interval_ms = int(a.interval * 1000)
    out: dict = {"server": kind}
    try:
        server.wait_ready()
        rss_idle = procs.ResourceSampler(server.pid).start().stop().rss_last
        now_ms = int(time.time() * 1000) // interval_ms * interval_ms
        hist = max(1, int(a.history // a.interval))
        backfill = build_requests(workload, now_ms - hist * interval_ms, hist, interval_ms, a.connections)
        t0 = time.perf_counter()
        loaded = asyncio.run(send_all(server.write_url, backfill, 600.0, [metadata_request(workload)]))
        out["backfill"] = {"samples": loaded.samples_ok, "failed": loaded.requests_failed,
                           "seconds": time.perf_counter() - t0}
        del backfill
        stop = threading.Event()
        mp = multiprocessing.get_context("spawn")
        probe_stop, probe_out = mp.Event(), mp.Array("d", 3)  # probes, failed, slowest seconds
        prober = mp.Process(target=ready_prober, args=(server.base_url, probe_stop, probe_out), daemon=True)
        prober.start()
        queries, abuse = Counts(), {x.name: Counts() for x in ABUSE}
        threads = []
        for i in range(a.clients):
            if a.mode == "soak":
                threads.append(threading.Thread(target=grafana_client,
                                                args=(server.base_url, stop, a.refresh, queries), daemon=True))
            else:
                threads.append(threading.Thread(target=heavy_client, args=(server.base_url, stop, i, queries),
                                                daemon=True))
        if a.mode == "soak":
            threads.append(threading.Thread(target=abuser, args=(server.base_url, stop, 20.0, abuse), daemon=True))
        sampler = procs.ResourceSampler(server.pid, period_s=0.1).start()
        if a.mode == "writes-under-queries":
            out["idle"] = _write_figures(_live(server, workload, a, interval_ms))
        for t in threads:
            t.start()
        writes = _live(server, workload, a, interval_ms)
        stop.set()
        probe_stop.set()
        prober.join(10.0)
        ready = {"probes": int(probe_out[0]), "failed": int(probe_out[1]), "max_s": probe_out[2]}
        for t in threads:
            t.join(130.0)
        time.sleep(a.settle)
        usage = sampler.stop()
        out |= {"rss_idle_mib": rss_idle / MiB, "rss_peak_mib": usage.rss_peak / MiB, "pss_peak_mib": usage.pss_peak / MiB,
                "rss_after_mib": usage.rss_last / MiB, **_write_figures(writes), "ready": ready,
                "queries": queries.by_status, "query_p50_s": _pct(queries.seconds, 50),
                "abuse": {k: c.by_status for k, c in abuse.items()},
                "errors": {"queries": queries.first_error, **{k: c.first_error for k, c in abuse.items()}}}
    finally:
        out["exit_code"] = server.stop()
        out["log_tail"] = server.log_tail(1500)
    return out


def _live(server, workload: Workload, a, interval_ms: int) -> LoadResult:
    first_ms = (int(time.time() * 1000) // interval_ms + 1) * interval_ms
    return asyncio.run(live_ingest(server.write_url, workload, first_ms, max(1, int(a.duration // a.interval)),
                                   interval_ms, a.connections))


def _write_figures(writes: LoadResult) -> dict:
    lat = np.array(writes.latencies_ms) if writes.latencies_ms else np.zeros(1)
    return {"write_p50_ms": float(np.percentile(lat, 50)), "write_p99_ms": float(np.percentile(lat, 99)),
            "write_max_ms": float(lat.max()), "writes": writes.requests_ok,
            "writes_failed": writes.requests_failed + writes.requests_not_sent,
            "write_answers": writes.status_counts, "samples_ok": writes.samples_ok}


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else float("nan")


def table(results: dict[str, dict]) -> str:
    rows = (("peak RSS MiB", "rss_peak_mib", "{:,.0f}"), ("peak Pss MiB (shared pages once)", "pss_peak_mib", "{:,.0f}"),
            (" RSS MiB idle before", "rss_idle_mib", "{:,.0f}"),
            (" RSS MiB after the load (+settle)", "rss_after_mib", "{:,.0f}"),
            ("write p50 ms", "write_p50_ms", "{:,.0f}"), ("write p99 ms", "write_p99_ms", "{:,.0f}"),
            ("write max ms", "write_max_ms", "{:,.0f}"), ("writes acknowledged", "writes", "{:,}"),
            ("writes failed (never 2xx)", "writes_failed", "{:,}"))
    names = list(results)
    lines = ["| figure | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for label, key, fmt in rows:
        lines.append(f"| {label} | " + " | ".join(fmt.format(results[n][key]) if key in results[n] else "-"
                                                   for n in names) + " |")
    for label, fn in (("write p99 ms with no queries (first phase)", lambda r: f'{r["idle"]["write_p99_ms"]:,.0f}'),
                      ("write p99 under queries / idle", lambda r: f'{r["write_p99_ms"] / r["idle"]["write_p99_ms"]:.2f}'),
                      ("write answers", lambda r: r["write_answers"]),
                      ("/-/ready failed / probes (max s)",
                       lambda r: f'{r["ready"]["failed"]} / {r["ready"]["probes"]} ({r["ready"]["max_s"]:.2f})'),
                      ("queries by status", lambda r: r["queries"]), ("query p50 s", lambda r: f'{r["query_p50_s"]:.2f}'),
                      ("abusive calls by status", lambda r: r["abuse"] or "-")):
        lines.append(f"| {label} | " + " | ".join(_cell(fn, results[n]) for n in names) + " |")
    return "\n".join(lines)


def _cell(fn, r: dict) -> str:
    try:
        v = fn(r)
    except KeyError:
        return "-"
    if isinstance(v, dict):
        return "; ".join(f"{k}: {x}" for k, x in v.items())
    return str(v)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("soak", "attack", "writes-under-queries"), default="soak")
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--duration", default="10m", help="live phase (real time)")
    ap.add_argument("--history", default="10m", help="past scrapes written before the live phase")
    ap.add_argument("--interval", default="15s")
    ap.add_argument("--clients", type=int, default=None, help="soak: Grafana clients (4); attack: heavy clients (30)")
    ap.add_argument("--refresh", default="10s", help="soak: dashboard refresh period")
    ap.add_argument("--settle", default="10s", help="wait after the load before the last RSS reading")
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--targets", default="metricsgw,prometheus")
    ap.add_argument("--metricsgw-flag", action="append", default=[], help="extra flag for metricsgw serve")
    a = ap.parse_args(argv)
    for name in ("duration", "history", "interval", "refresh", "settle"):
        setattr(a, name, parse_duration(getattr(a, name)))
    if a.clients is None:
        a.clients = {"soak": 4, "attack": 30, "writes-under-queries": 3}[a.mode]
    workload = Workload(a.nodes)
    print(f"{a.mode}: {a.nodes} nodes, {workload.num_series:,} series every {a.interval:g}s for {a.duration:g}s "
          f"after {a.history:g}s of history; {a.clients} clients", flush=True)
    work = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    results: dict[str, dict] = {}
    try:
        for kind in procs.targets(a.targets):
            print(f"running {kind} ...", flush=True)
            results[kind] = run_server(kind, a, workload, work)
            r = {k: v for k, v in results[kind].items() if k != "log_tail"}
            print(f"  {json.dumps(r, default=str)}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(table(results))
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / time.strftime(f"soak-{a.mode}-%Y%m%dT%H%M%SZ.json", time.gmtime())
    path.write_text(json.dumps({"args": vars(a), "num_series": workload.num_series, "results": results},
                               indent=2, default=str))
    print(f"\nresults: {path}")
    return results


if __name__ == "__main__":
    main()
