"""A gateway's lifetime (issue 35): hours of real-time ingest with pod churn, Grafana clients, an hour's close
and a kill -9 in the middle, then every acknowledged sample read back.

    python -m bench.lifetime --nodes 7500 --duration 2h --kill-at 1h             # the seed's scale
    python -m bench.lifetime --nodes 50 --duration 6m --kill-at 3m --churn-every 1m

One `metricsgw serve` (--metricsgw-flag=... for more flags) on a fresh data dir, loopback only:
- ingest: bench.scale's sender (every series a sample each --interval at the wall-clock time, each scrape
  spread over the interval, --connections Prometheus-like shards, 5xx/429/connection errors retried with
  Prometheus's backoff until a 2xx, other 4xx given up);
- pod churn: every --churn-every the pods of one namespace (round robin) are replaced by pods of new names
  (bench/lifetime_ledger.py): their series end, new ones begin;
- --clients Grafana screens (bench.scale's dashboard_prober, each a process of its own) ask the shipped
  dashboards' panels back to back;
- at --kill-at: SIGKILL to the gateway's process group (front and children), started again at once on the
  same data dir, port and flags; the sender keeps retrying meanwhile. Downtime runs from the kill to
  /-/ready's 200;
- per minute: Pss summed over the gateway's processes (read every --pss-every, the minute's mean), write
  p50/p99 of the requests acknowledged in it, write answers that were not 2xx (by status), panels
  answered / refused / timed out, active series (/api/v1/status/tsdb headStats.numSeries), and marks: the
  wall-clock boundary of a partition (an hour by default, or --storage.partition-duration), churns, the kill,
  the restart, and the close merge of a partition (its "compacted ... partition hour=" line in the log);
- at the end: every acknowledged sample read back, per series, with count_over_time
  (lifetime_ledger.verify): lost, extra (stored twice, or never sent) and those of requests that never got
  a 2xx ("may be present").
Reported: Pss slope (least squares, MiB/min) over the second half, over the second hour (runs of 2 h or
more) and from 5 minutes after the restart; peak Pss; write p99 overall and over each partition close
(the boundary's minute to the close merge's end); writes refused; panels; downtime; samples acknowledged /
found / lost. Markdown on stdout, JSON in bench/results/lifetime-<time>.json. The driver shares the machine
with the gateway: latencies are indicative; the figures that do not depend on speed are the memory, the
refusals and the read-back.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil

from bench.lifetime_ledger import LifetimeSender, PodChurn, verify
from bench.scale import _exit_on_signal, dashboard_clients, live, load_workload
from bench.scale_report import Recorder
from metricsgw.config import parse_duration
from testkit import procs
from testkit.load import check_loopback

RESULTS = Path(__file__).resolve().parent / "results"
MiB = 1 << 20
RESTART_SETTLE_S = 300.0  # the "after the restart" slope starts this long after the gateway is ready again
CLOSE_LINE = re.compile(r"ts=(\S+ \S+) .*msg=compacted \d+ files of partition hour=(\d+)")


def active_series(base_url: str) -> int | None:
    try:
        status, body = procs.http_get(base_url + "/api/v1/status/tsdb", timeout=10.0)
        return int(json.loads(body)["data"]["headStats"]["numSeries"]) if status == 200 else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


class Probe:
    """A thread: every every_s, the Pss of the gateway's process tree and its active series (the gateway of
    the moment: `server()` changes at the restart)."""

    def __init__(self, server, every_s: float) -> None:
        self.server, self.every_s = server, every_s
        self.samples: list[tuple[float, float | None, int | None]] = []  # (t, Pss MiB, active series)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "Probe":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30.0)

    def _run(self) -> None:
        while True:
            srv = self.server()
            try:
                pss = procs.tree_pss(srv.pid) / MiB
            except psutil.Error:  # killed, not started again yet
                pss = None
            self.samples.append((time.time(), pss, active_series(srv.base_url)))
            if self._stop.wait(self.every_s):
                return


def _panel_kind(p: dict) -> str:
    if p["status"] == 200:
        return "answered"
    err = str(p.get("error", "")).lower()
    return "timed_out" if "timed out" in err or "timeout" in err else "refused"


class LifetimeRecorder(Recorder):
    """bench.scale's per-minute recorder, plus Pss, active series, refusals, panels by outcome and marks."""

    def __init__(self, sender, server, probe: Probe, partition_s: float) -> None:
        super().__init__(sender, server, "metricsgw")
        self.window_start = self.t_start  # no warm-up phase: the lifetime counts from the first request
        self.probe, self.partition_s = probe, partition_s
        self.events: list[tuple[float, str]] = []
        self._answers0: dict[str, int] = {}

    def event(self, text: str, t: float | None = None) -> None:
        self.events.append((time.time() if t is None else t, text))
        print(f"  {time.strftime('%H:%M:%S')} {text}", flush=True)

    def extra_minute(self, t0: float, t1: float) -> dict:
        pss = [x for t, x, _ in self.probe.samples if t0 <= t < t1 and x is not None]
        series = [n for t, _, n in self.probe.samples if t0 <= t < t1 and n is not None]
        answers = dict(self.sender.status_counts)
        refused = {k: v - self._answers0.get(k, 0) for k, v in answers.items()
                   if not k.startswith("2") and v > self._answers0.get(k, 0)}
        self._answers0 = answers
        kinds = {"answered": 0, "refused": 0, "timed_out": 0}
        for p in self.panels:
            if t0 <= p["t"] < t1:
                kinds[_panel_kind(p)] += 1
        boundary = t1 // self.partition_s * self.partition_s
        return {"t_start": round(t0, 1), "pss_mib": round(float(np.mean(pss)), 1) if pss else None,
                "pss_max_mib": round(max(pss), 1) if pss else None, "active_series": series[-1] if series else None,
                "writes_refused": refused, "panels_outcome": kinds,
                "partition_boundary": bool(t0 < boundary <= t1),
                "events": [text for t, text in self.events if t0 <= t < t1]}


async def kill_and_restart(rec: LifetimeRecorder, work: Path, flags: list[str], ready_timeout_s: float,
                           out: dict, holder: list) -> None:
    """kill -9 the gateway's process group, start it again on the same dir, port and flags, wait for /-/ready."""
    old = rec.server
    port = int(old.base_url.rsplit(":", 1)[1])
    answers0 = dict(rec.sender.status_counts)
    out["at"] = time.time()
    out["processes_killed"] = 1 + len(psutil.Process(old.pid).children(recursive=True))
    old.kill()
    out["exit_code"] = old.proc.returncode
    rec.event(f"kill -9 of the gateway's {out['processes_killed']} processes")
    old.log_path.rename(old.log_path.with_name(old.log_path.stem + ".before-kill.log"))
    new = holder[0] = procs.start_metricsgw(work, port=port, extra=flags)
    rec.server_replaced(new)
    try:
        await asyncio.to_thread(new.wait_ready, ready_timeout_s)
    except (RuntimeError, TimeoutError) as e:
        out["error"] = str(e)[-2000:]
        rec.event(f"restart failed: {str(e)[:200]}")
        return
    out["ready_at"] = time.time()
    out["downtime_s"] = round(out["ready_at"] - out["at"], 2)
    out["write_answers_while_down"] = {k: v - answers0.get(k, 0) for k, v in rec.sender.status_counts.items()
                                       if v > answers0.get(k, 0)}
    rec.event(f"ready again {out['downtime_s']:.1f}s after the kill")


async def run(a, holder: list, workload, template, work: Path) -> dict:
    """The live part; holder[0] is the gateway (the restarted one after the kill)."""
    churn = PodChurn(workload, template)
    sender = LifetimeSender(holder[0].write_url, workload, template, a.interval, a.connections, churn)
    probe = Probe(lambda: holder[0], a.pss_every)
    rec = LifetimeRecorder(sender, holder[0], probe, a.partition_s)
    start, end = sender.start_s, sender.start_s + a.duration
    kill: dict = {}
    restart: asyncio.Task | None = None

    def step(now: float) -> bool:
        nonlocal restart
        if now >= end:
            return restart is None or restart.done()  # a restart still under way is waited for
        if a.churn_every and now >= start + (churn.epoch + 1) * a.churn_every:
            churn.advance(now)
            h = churn.history[-1]
            rec.event(f"churn: {h['pods']} pods of {h['namespace']} replaced (generation {h['generation']})", now)
        if a.kill_at and restart is None and now >= start + a.kill_at:
            restart = asyncio.create_task(kill_and_restart(rec, work, a.metricsgw_flag, a.ready_timeout, kill, holder))
        return False

    probe.start()
    try:
        with dashboard_clients(holder[0].base_url, a.clients, None, rec) as panels:
            result = await live(sender, rec, workload, panels, step, a.drain)
    finally:
        probe.stop()
    return result | {"start": start, "kill": kill, "churns": churn.history, "events": rec.events,
                     "pss_samples": probe.samples, "churn": churn, "ledger": sender.ledger, "sender": sender}


def close_merges(logs: list[Path]) -> list[tuple[float, int]]:
    """(time, partition start ms) of every "compacted ... partition hour=" line of the gateway's logs."""
    out = []
    for path in logs:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for m in CLOSE_LINE.finditer(text):
            stamp, frac = m.group(1).split(",")
            t = time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) + int(frac) / 1000
            out.append((t, int(m.group(2))))
    return sorted(out)


def slope(minutes: list[dict], t0: float, t1: float) -> float | None:
    """Least-squares slope of the minutes' mean Pss, MiB per minute, over the minutes ending in (t0, t1] (not the
    last few seconds the run's end leaves as a minute of their own)."""
    pts = [((m["t_start"] + m["t_end"]) / 2 / 60, m["pss_mib"]) for m in minutes
           if t0 < m["t_end"] <= t1 + 1 and m["pss_mib"] is not None and m["seconds"] >= 30]
    if len(pts) < 3:
        return None
    x, y = np.array(pts).T
    return round(float(np.polyfit(x - x[0], y, 1)[0]), 2)


def partition_closes(run: dict, merges: list[tuple[float, int]], partition_s: float) -> list[dict]:
    """Each partition boundary the run crossed: the write p99 of its minute, and from the boundary to the end of
    the closed partition's merge (the first compaction of it logged after the boundary)."""
    minutes, recs = run["minutes"], run["sender"].records
    out = []
    first = run["start"] // partition_s * partition_s + partition_s
    last = run["minutes"][-1]["t_end"] if run["minutes"] else run["start"]
    for boundary in np.arange(first, last, partition_s).tolist():
        part_ms = int((boundary - partition_s) * 1000)
        done = next((t for t, p in merges if p == part_ms and t >= boundary), None)
        until = done if done is not None else boundary + 60.0
        lat = np.array([(r.ack - r.first_send) * 1000 for r in recs if r.ok and boundary <= r.ack <= until])
        at = [i for i, m in enumerate(minutes) if m["t_start"] < boundary <= m["t_end"]]
        span = [m for m in minutes if m["t_end"] > boundary and m["t_start"] < until]
        out.append({"boundary": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(boundary)),
                    "minute": at[0] + 1 if at else None,
                    "minute_write_p99_ms": minutes[at[0]]["write_p99_ms"] if at else None,
                    "close_merge_done_s": None if done is None else round(done - boundary, 1),
                    "close_write_p99_ms": round(float(np.percentile(lat, 99)), 1) if len(lat) else None,
                    "close_write_max_ms": round(float(lat.max()), 1) if len(lat) else None,
                    "close_minutes": len(span),
                    "close_minutes_max_p99_ms": max((m["write_p99_ms"] for m in span
                                                     if m["write_p99_ms"] is not None), default=None)})
    return out


def summarize(a, run: dict, check: dict | None, merges) -> dict:
    minutes, start = run["minutes"], run["start"]
    end = minutes[-1]["t_end"] if minutes else start
    kill = run["kill"]
    slopes = {"second_half": slope(minutes, start + (end - start) / 2, end)}
    if end - start >= 7200 - 60:
        slopes["second_hour"] = slope(minutes, start + 3600, start + 7200)
    if kill.get("ready_at"):
        slopes["after_restart"] = slope(minutes, kill["ready_at"] + RESTART_SETTLE_S, end)
    pss = [x for _, x, _ in run["pss_samples"] if x is not None]
    answers = run["status_counts"]
    ledger = run["ledger"]
    window = run["window"]
    panels = {"answered": 0, "refused": 0, "timed_out": 0}
    for p in run["panels"]:
        panels[_panel_kind(p)] += 1
    series = [n for _, _, n in run["pss_samples"] if n is not None]
    return {
        "pss_slope_mib_per_min": slopes, "pss_peak_mib": round(max(pss), 1) if pss else None,
        "pss_first_minute_mib": minutes[0]["pss_mib"] if minutes else None,
        "pss_last_minute_mib": minutes[-1]["pss_mib"] if minutes else None,
        "write_p50_ms": window["write_p50_ms"], "write_p99_ms": window["write_p99_ms"],
        "write_max_ms": window["write_max_ms"],
        "partition_closes": partition_closes(run, merges, a.partition_s),
        "write_requests_acked": int((ledger.state == ledger.ACKED).sum()),
        "write_requests_never_acked": int((ledger.state == ledger.FAILED).sum()) + run["drain"]["requests_not_sent"],
        "write_answers": answers,
        "writes_refused": {k: v for k, v in answers.items() if not k.startswith("2") and k != "conn_error"},
        "write_connection_errors": answers.get("conn_error", 0),
        "panels": panels,
        "active_series_max": max(series) if series else None,
        "churns": len(run["churns"]),
        "kill": {k: v for k, v in kill.items() if k != "error"} | ({"error": kill["error"]} if "error" in kill else {}),
        "samples": check,
    }


def _fmt(x, spec="{:,.0f}") -> str:
    return "-" if x is None else spec.format(x)


def markdown(out: dict) -> str:
    s, k = out["summary"], out["summary"]["kill"]
    check = s["samples"] or {}
    slopes = s["pss_slope_mib_per_min"]
    closes = s["partition_closes"]
    rows = [
        ("nodes / series", f"{out['nodes']:,} / {out['series']:,}, {s['churns']} churns, "
                           f"active series max {_fmt(s['active_series_max'])}"),
        ("Pss slope MiB/min: second half / second hour / from 5 min after the restart",
         f"{_fmt(slopes.get('second_half'), '{:+.2f}')} / {_fmt(slopes.get('second_hour'), '{:+.2f}')} / "
         f"{_fmt(slopes.get('after_restart'), '{:+.2f}')}"),
        ("Pss MiB: first minute / last minute / peak",
         f"{_fmt(s['pss_first_minute_mib'])} / {_fmt(s['pss_last_minute_mib'])} / {_fmt(s['pss_peak_mib'])}"),
        ("write p50 / p99 / max ms",
         f"{_fmt(s['write_p50_ms'])} / {_fmt(s['write_p99_ms'])} / {_fmt(s['write_max_ms'])}"),
        ("partition closes: write p99 ms of the boundary's minute; from the boundary to the close merge's end",
         "; ".join(f"{c['boundary'][11:16]}: {_fmt(c['minute_write_p99_ms'])}; " + (
             f"p99 {_fmt(c['close_write_p99_ms'])}, max {_fmt(c['close_write_max_ms'])} over "
             f"{c['close_merge_done_s']:.0f} s" if c["close_merge_done_s"] is not None else "merge not seen")
             for c in closes) or "none in the run"),
        ("write requests acknowledged / never acknowledged",
         f"{s['write_requests_acked']:,} / {s['write_requests_never_acked']:,}"),
        ("write answers refused (non-2xx HTTP) / connection errors",
         f"{sum(s['writes_refused'].values()):,} {s['writes_refused'] or ''} / {s['write_connection_errors']:,}"),
        ("panels answered / refused / timed out",
         f"{s['panels']['answered']:,} / {s['panels']['refused']:,} / {s['panels']['timed_out']:,}"),
        ("kill -9 -> /-/ready s (write answers meanwhile)",
         f"{_fmt(k.get('downtime_s'), '{:.1f}')} ({k.get('write_answers_while_down', '-')})" if k else "no kill"),
        ("samples acknowledged / found / lost",
         f"{_fmt(check.get('acknowledged'))} / {_fmt(check.get('found'))} / {_fmt(check.get('lost'))}"),
        ("samples extra / of unacknowledged requests (found) / unverified",
         f"{_fmt(check.get('extra'))} / {_fmt(check.get('maybe'))} ({_fmt(check.get('maybe_found'))}) / "
         f"{_fmt(check.get('unverified'))}"),
        ("series read back (after churn) / missing",
         f"{_fmt(check.get('series_found'))} ({_fmt(check.get('series_found_after_churn'))}) / "
         f"{_fmt(check.get('series_missing'))}"),
    ]
    lines = ["| figure | value |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows]
    lines += ["", "| minute | Pss MiB | writes acked | write p50 / p99 ms | refused | panels ok / refused / timed out "
              "| active series | marks |", "|---|---|---|---|---|---|---|---|"]
    for i, m in enumerate(out["minutes"], 1):
        p = m["panels_outcome"]
        marks = (["partition boundary"] if m["partition_boundary"] else []) + m["events"]
        refused = "; ".join(f"{k}: {v}" for k, v in m["writes_refused"].items()) or "0"
        lines.append(f"| {i} | {_fmt(m['pss_mib'])} | {m['requests'] - m['failed']:,} | {_fmt(m['write_p50_ms'])} / "
                     f"{_fmt(m['write_p99_ms'])} | {refused} | {p['answered']} / {p['refused']} / {p['timed_out']} | "
                     f"{_fmt(m['active_series'])} | {'; '.join(marks)} |")
    return "\n".join(lines)


def _partition_seconds(flags: list[str]) -> float:
    for f in flags:
        if f.startswith("--storage.partition-duration="):
            return parse_duration(f.split("=", 1)[1])
    return 3600.0


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=7500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--duration", default="2h", help="of the live ingest, from its first scrape")
    ap.add_argument("--interval", default="15s", help="scrape interval")
    ap.add_argument("--churn-every", default="5m",
                    help="the pods of the next namespace are replaced this often (0: never)")
    ap.add_argument("--kill-at", default="1h", help="kill -9 and restart this long after the first scrape (0: never)")
    ap.add_argument("--clients", type=int, default=4, help="Grafana screens asking the panels back to back")
    ap.add_argument("--connections", type=int, default=8, help="remote-write shards (one request in flight each)")
    ap.add_argument("--samples-per-request", type=int, default=2000)
    ap.add_argument("--pss-every", default="10s", help="how often Pss and active series are read")
    ap.add_argument("--drain", default="5m", help="how long to wait for the last requests after the run")
    ap.add_argument("--ready-timeout", default="15m", help="how long the restarted gateway may take to be ready")
    ap.add_argument("--verify-budget", type=int, default=2_000_000, help="samples one read-back query may count")
    ap.add_argument("--no-verify", action="store_true", help="skip the read-back")
    ap.add_argument("--data-dir", default="", help="parent of the gateway's data dir (default: a temp dir, removed)")
    ap.add_argument("--metricsgw-flag", action="append", default=[], help="extra flag for metricsgw serve")
    ap.add_argument("--out", default="", help="results file (default bench/results/lifetime-<time>.json)")
    a = ap.parse_args(argv)
    for name in ("duration", "interval", "churn_every", "kill_at", "pss_every", "drain", "ready_timeout"):
        setattr(a, name, parse_duration(getattr(a, name)))
    a.partition_s = _partition_seconds(a.metricsgw_flag)
    # a run left in the background (nohup ... &) ignores SIGINT: stop on SIGTERM too, and stop the gateway then
    handlers = {sig: signal.signal(sig, _exit_on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return _main(a)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def _main(a) -> dict:
    # a big workload's labels and template take minutes of Python: bench.scale's cache keeps them
    workload, template, load_s = load_workload(a.nodes, a.seed, a.samples_per_request,
                                               **({} if a.nodes >= 1000 else {"cache_dir": None}))
    print(f"{a.nodes} nodes: {template.num_series:,} series in {template.num_requests:,} requests a scrape, "
          f"ready in {load_s:.0f}s; {a.duration:g}s, churn every {a.churn_every:g}s, kill -9 at {a.kill_at:g}s, "
          f"{a.clients} clients", flush=True)
    work = Path(a.data_dir) if a.data_dir else Path(tempfile.mkdtemp(prefix="bench-lifetime-", dir="/var/tmp"))
    holder = [procs.start_metricsgw(work / "metricsgw", extra=a.metricsgw_flag)]
    check_loopback(holder[0].write_url)
    try:
        holder[0].wait_ready(120.0)
        result = asyncio.run(run(a, holder, workload, template, work / "metricsgw"))
        server = holder[0]
        check = None
        if not a.no_verify and not result["stopped"]:
            print("reading every acknowledged sample back ...", flush=True)
            check = verify(server.base_url, workload, template, result["churn"], result["ledger"], result["start"],
                           a.interval, budget=a.verify_budget)
            print(f"  {json.dumps(check)}", flush=True)
    finally:
        server = holder[0]
        exit_code = server.stop(300.0)
        log_tail = server.log_tail(3000)
        logs = [server.log_path.with_name(server.log_path.stem + ".before-kill.log"), server.log_path]
        merges = close_merges(logs)
        if not a.data_dir:
            shutil.rmtree(work, ignore_errors=True)
    summary = summarize(a, result, check, merges)
    args = {k: v for k, v in vars(a).items()}
    out = {"args": args, "nodes": a.nodes, "series": template.num_series, "requests_per_scrape": template.num_requests,
           "summary": summary, "minutes": result["minutes"], "churns": result["churns"], "events": result["events"],
           "close_merges": merges, "exit_code": exit_code, "stopped": result["stopped"], "log_tail": log_tail,
           "panels_by_status": result["window"]["panels_by_status"], "drain": result["drain"],
           "first_error": result["first_error"]}
    RESULTS.mkdir(exist_ok=True)
    path = Path(a.out) if a.out else RESULTS / time.strftime("lifetime-%Y%m%dT%H%M%SZ.json", time.gmtime())
    path.write_text(json.dumps(out, indent=2, default=str))
    print()
    print(markdown(out))
    print(f"results: {path}", flush=True)
    return out


if __name__ == "__main__":
    main()
