"""The seed's scale in real time: 7,500 GPU nodes (~2.7M series, ~180k samples/s) into one gateway.

    python -m bench.scale --nodes 7500 --duration 30m          # default `metricsgw serve`
    python -m bench.scale --nodes 7500 --duration 5m --metricsgw-flag=--ingest.shards=2
    python -m bench.scale --target victoria-metrics --nodes 7500 --duration 10m

Sends as Prometheus's remote_write does: every series gets one sample per --interval, its scrape
spread over the interval (request j of a scrape is due, and stamped, j/R of an interval after the
scrape's start, as targets scraped at different offsets would be), ~2,000 samples a request, over
--connections shards that each send one request at a time in order (series stay in time order on a
retry), 5xx/429/connection errors retried with backoff (30 ms doubling to 5 s, forever, as
Prometheus does), other 4xx counted as failed. A request's latency runs from its first send to its
2xx, retries included; "behind" is how far the oldest request not yet acknowledged is behind real
time (0 when the sender is caught up).

The first scrape creates every series; the gateway takes minutes of CPU over it, so the run is a
warm-up (until the sender has stayed less than --catch-up behind for 15 s, at most --max-warm-up)
followed by the measured --duration window, each reported by itself, minute by minute: samples/s
acknowledged, write p50/p99/max, failures, retries, behind, RSS of every gateway process (front and
children), CPU of the gateway and of this driver, flush time from the gateway's /metrics, the
1-minute load average (other work on the machine shows there), and the dashboard panels that a
separate process asks every 30 s (testkit/panels.py's DASHBOARD_QUERIES, ranges of 15-60 min).
Results: bench/results/scale-<target>-<time>.json. Loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import pickle
import queue
import shutil
import signal
import tempfile
import time
from pathlib import Path

from bench.scale_report import Recorder, markdown
from bench.scale_send import Sender
from bench.scale_wire import Template
from metricsgw.config import parse_duration
from testkit import procs
from testkit.load import check_loopback
from testkit.wire import encode_labels, metadata_request
from testkit.workload import Workload

RESULTS = Path(__file__).resolve().parent / "results"
CACHE = Path(os.environ.get("SCALE_CACHE", "/var/tmp/metricsgw-bench-scale"))
PANEL_RANGES_MIN = (15, 30, 60)
PANEL_STEP_S = 30


def load_workload(nodes: int, seed: int, per_request: int, cache_dir: Path | None = CACHE
                  ) -> tuple[Workload, Template, float]:
    """The workload (values only: its label list is dropped) and its request template, cached on disk
    (cache_dir None: not): building 7,500 nodes' label sets takes about two minutes of Python."""
    # v2: the workload knows each series' pod (pod churn); a v1 pickle is another version's, left alone
    path = (cache_dir or CACHE) / f"w{nodes}-s{seed}-r{per_request}-v2.pickle"
    t0 = time.perf_counter()
    if cache_dir is not None and path.exists():
        with open(path, "rb") as f:
            workload, template = pickle.load(f)
        return workload, template, time.perf_counter() - t0
    workload = Workload(nodes, seed)
    cache: dict = {}
    template = Template([encode_labels(lb, cache) for lb in workload.series()], per_request)
    workload.drop_labels()
    if cache_dir is None:
        return workload, template, time.perf_counter() - t0
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        pickle.dump((workload, template), f, protocol=pickle.HIGHEST_PROTOCOL)
    tmp.rename(path)
    return workload, template, time.perf_counter() - t0


def dashboard_prober(base: str, every_s: float, stop, out, client: int = -1) -> None:
    """A process of its own (the driver's event loop must not wait on it): every every_s a few panels,
    in turn over DASHBOARD_QUERIES and PANEL_RANGES_MIN, each answer put on `out`. ``client`` >= 0: one of
    --clients Grafana screens, asking the panels back to back (every_s 0) on one kept-alive connection, over
    ranges aligned to the step as Grafana aligns them (start and end floored to a multiple of the step)."""
    from bench.queries import KeptAlive, post
    from testkit.panels import DASHBOARD_QUERIES

    conn = KeptAlive(base, timeout_s=120.0) if client >= 0 else None
    k = 0
    while not stop.is_set():
        t_round = time.monotonic()
        for _ in range(4):
            name, q = DASHBOARD_QUERIES[k % len(DASHBOARD_QUERIES)]
            minutes = PANEL_RANGES_MIN[k % len(PANEL_RANGES_MIN)]
            k += 1
            now = time.time()
            start, end = now - minutes * 60, now
            if conn is not None:
                start, end = start // PANEL_STEP_S * PANEL_STEP_S, end // PANEL_STEP_S * PANEL_STEP_S
            params = {"query": q, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": str(PANEL_STEP_S)}
            try:
                if conn is not None:
                    status, body, seconds = conn.post("/api/v1/query_range", params)
                else:
                    status, body, seconds = post(base, "/api/v1/query_range", params, timeout_s=60.0)
                series = len(body.get("data", {}).get("result", [])) if status == 200 else 0
                err = "" if status == 200 else str(body.get("error", ""))[:200]
                warnings = [str(w)[:200] for w in body.get("warnings", [])]  # e.g. a shard that did not answer
            except OSError as e:
                status, seconds, series, err, warnings = 0, 60.0, 0, f"{type(e).__name__}: {e}"[:200], []
            out.put({"t": time.time(), "panel": name, "range_min": minutes, "status": status, "client": client,
                     "seconds": round(seconds, 3), "series": series, "error": err, "warnings": warnings})
            if status == 0 and stop.wait(1.0):  # no server (it restarts): a screen shows the error, then refreshes
                return
        stop.wait(max(0.0, every_s - (time.monotonic() - t_round)))


@contextlib.contextmanager
def dashboard_clients(base: str, clients: int, every_s: float | None, rec: Recorder):
    """The dashboard prober processes (``clients`` Grafana screens asking back to back, or with 0 one prober every
    every_s, or none if every_s is None), their CPU read by `rec`; yields the queue of their answers
    (drain_panels), stops them on the way out."""
    mp = multiprocessing.get_context("spawn")
    stop, panels = mp.Event(), mp.Queue()
    probers = [] if every_s is None else [mp.Process(target=dashboard_prober, args=(base, every_s, stop, panels),
                                                     daemon=True)]
    if clients:
        probers = [mp.Process(target=dashboard_prober, args=(base, 0.0, stop, panels, i), daemon=True)
                   for i in range(clients)]
    for prober in probers:
        prober.start()
        rec.attach_prober(prober.pid)
    try:
        yield panels
    finally:
        stop.set()
        for prober in probers:
            prober.join(130.0)
            if prober.is_alive():
                prober.kill()


async def live(sender: Sender, rec: Recorder, workload: Workload, panels, step, drain_s: float) -> dict:
    """Metadata, then the sender running; once a second the panels' answers and a recorder tick, then
    ``step(now)``, until it says the run is over (True) or SIGTERM/SIGINT stops it (what was measured so far is
    reported). Then the sender's queue gets up to drain_s to empty. Returns the recorder's figures."""
    await sender.send_preamble([metadata_request(workload)])
    send_task = asyncio.create_task(sender.run())
    stopped = ""
    signalled = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, signalled.set)
    while True:
        await asyncio.sleep(1.0)
        if signalled.is_set():
            stopped = "stopped by a signal"
            break
        drain_panels(panels, rec)
        rec.tick()
        if send_task.done():
            send_task.result()  # raises what the sender hit
        if step(time.time()):
            break
    sender.stop_scheduling()
    drained = await sender.drain(timeout_s=0.0 if stopped else drain_s)
    drain_panels(panels, rec)
    return rec.finish(drained) | {"stopped": stopped}


async def run(a, server, workload: Workload, template: Template) -> dict:
    sender = Sender(server.write_url, workload, template, a.interval, a.connections)
    rec = Recorder(sender, server, a.target)
    caught_up_since, warm_up_end, window_end = None, time.time() + a.max_warm_up, None

    def step(now: float) -> bool:
        nonlocal caught_up_since, window_end
        if window_end is None:
            behind = sender.behind(now)
            ok = sender.first_scrape_done() and behind < a.catch_up
            caught_up_since = (caught_up_since or now) if ok else None
            if (caught_up_since and now - caught_up_since >= 15.0) or now >= warm_up_end:
                window_end = now + a.duration
                rec.start_window(now, caught_up=bool(caught_up_since))
                print(f"warm-up over after {now - rec.t_start:.0f}s; measuring {a.duration:.0f}s", flush=True)
            return False
        return now >= window_end

    # Grafana screens refreshing back to back (--clients) instead of the one prober every --panel-every
    with dashboard_clients(server.base_url, a.clients, a.panel_every, rec) as panels:
        return await live(sender, rec, workload, panels, step, a.drain)


def drain_panels(panels, rec: Recorder) -> None:
    while True:
        try:
            rec.panel(panels.get_nowait())
        except queue.Empty:
            return


def _exit_on_signal(signum, _frame) -> None:
    raise SystemExit(f"stopped by signal {signum}")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", choices=tuple(procs.STARTERS), default="metricsgw")
    ap.add_argument("--nodes", type=int, default=7500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--duration", default="30m", help="the measured window, after the warm-up")
    ap.add_argument("--interval", default="15s", help="scrape interval")
    ap.add_argument("--connections", type=int, default=8, help="remote-write shards (one request in flight each)")
    ap.add_argument("--samples-per-request", type=int, default=2000)
    ap.add_argument("--catch-up", default="5s", help="warm-up ends once the sender stays less than this behind")
    ap.add_argument("--max-warm-up", default="20m")
    ap.add_argument("--drain", default="5m", help="how long to wait for the last requests after the window")
    ap.add_argument("--panel-every", default="30s")
    ap.add_argument("--clients", type=int, default=0, help="Grafana screens asking the panels back to back, on "
                    "step-aligned ranges (instead of one prober every --panel-every)")
    ap.add_argument("--data-dir", default="", help="parent of the server's data dir (default: a temp dir, removed)")
    ap.add_argument("--metricsgw-flag", action="append", default=[], help="extra flag for metricsgw serve")
    ap.add_argument("--ready-path", default="", help="wait for 200 here instead of the server's readiness path "
                    "(e.g. /-/healthy: metricsgw with --ingest.shards=2 takes writes but is never ready, since no "
                    "process of this build answers queries over two shards)")
    ap.add_argument("--out", default="", help="results file (default bench/results/scale-<target>-<time>.json)")
    ap.add_argument("--table", default="", help="print the Markdown tables of a results file, and nothing else")
    a = ap.parse_args(argv)
    if a.table:
        result = json.loads(Path(a.table).read_text())
        print(markdown(result))
        return result
    for name in ("duration", "interval", "catch_up", "max_warm_up", "drain", "panel_every"):
        setattr(a, name, parse_duration(getattr(a, name)))
    # A run left in the background (nohup ... &) ignores SIGINT: stop on SIGTERM too, and stop the server then.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGINT, _exit_on_signal)
    workload, template, load_s = load_workload(a.nodes, a.seed, a.samples_per_request)
    print(f"{a.nodes} nodes: {template.num_series:,} series in {template.num_requests:,} requests a scrape "
          f"({template.raw_bytes() / 2**20:,.0f} MiB uncompressed), ready in {load_s:.0f}s", flush=True)
    work = Path(a.data_dir) if a.data_dir else Path(tempfile.mkdtemp(prefix="bench-scale-", dir="/var/tmp"))
    extra = a.metricsgw_flag if a.target == "metricsgw" else None
    server = procs.STARTERS[a.target](work / a.target, extra=extra)
    check_loopback(server.write_url)
    if a.ready_path:
        server.ready_path = a.ready_path
    try:
        server.wait_ready(120.0)
        result = asyncio.run(run(a, server, workload, template))
    finally:
        result_exit = server.stop(300.0)
        log_tail = server.log_tail(3000)
        if not a.data_dir:
            shutil.rmtree(work, ignore_errors=True)
    out = {"args": vars(a), "nodes": a.nodes, "series": template.num_series,
           "requests_per_scrape": template.num_requests, "uncompressed_bytes_per_scrape": template.raw_bytes(),
           "server_flags": extra or [], **result, "exit_code": result_exit, "log_tail": log_tail}
    RESULTS.mkdir(exist_ok=True)
    path = Path(a.out) if a.out else RESULTS / time.strftime(f"scale-{a.target}-%Y%m%dT%H%M%SZ.json", time.gmtime())
    path.write_text(json.dumps(out, indent=2, default=str))
    print(markdown(result))
    print(f"results: {path}", flush=True)
    return out


if __name__ == "__main__":
    main()
