"""Ingest benchmark: the same pre-encoded remote-write load against metricsgw, Prometheus and
VictoriaMetrics.

    python -m bench.ingest --nodes 1000 --duration 2m

Runs the servers one after the other on this machine (the load driver shares the CPU with
them: read the ratios, not the absolute numbers), prints a Markdown table and writes the
full results to bench/results/ingest-<time>.json.

What is measured, per server:
- samples/s: acknowledged samples / wall time of the send phase;
- CPU s per million samples: server user+system CPU during the send phase;
- RSS per active series: (RSS at the end - RSS when idle before the load) / series, and peak RSS;
- disk bytes per sample: data-dir bytes after the load / samples. A young Prometheus holds all of
  it in its WAL (not compressed), so we also ask it for a snapshot, which writes the head as a
  compacted block: that "block" figure is what the data costs at rest after compaction.
  For metricsgw, the dir is measured both while running and after a clean shutdown; for
  VictoriaMetrics too, after /internal/force_flush - but 1.79 keeps its newest parts in memory
  (the flush makes them searchable, not durable on disk), so only its at-rest figure (after a
  clean shutdown, without the caches it saves then) says what its data costs on disk.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import psutil

from metricsgw.config import parse_duration
from testkit import procs
from testkit.load import LoadResult, Plan, prepare, send_all

RESULTS = Path(__file__).resolve().parent / "results"
STARTERS = procs.STARTERS
LABEL = {"prometheus": "Prometheus", "victoria-metrics": "VictoriaMetrics"}


def active_series(server: procs.Server, fallback: int) -> int:
    """From /api/v1/status/tsdb (all three serve it; VictoriaMetrics counts today's series as
    totalSeries); the workload's count if unavailable."""
    try:
        status, body = procs.http_get(server.base_url + "/api/v1/status/tsdb", timeout=30)
        if status == 200:
            data = json.loads(body)["data"]
            return int(data["headStats"]["numSeries"] if "headStats" in data else data["totalSeries"])
    except (OSError, KeyError, ValueError, TypeError):
        pass
    return fallback


def run_one(kind: str, shards, preamble, num_series: int, time_limit_s: float, work: Path,
            extra: list[str]) -> dict:
    start = STARTERS[kind]
    server = start(work / kind, extra=extra)
    out: dict = {"server": kind}
    try:
        server.wait_ready()
        time.sleep(1.0)
        idle = procs.ResourceSampler(server.pid).start().stop()
        # phase 1: the first scrape creates every series; phase 2: appends to known series
        new_shards = [[r for r in sh if r.first_scrape == 0] for sh in shards]
        known_shards = [[r for r in sh if r.first_scrape > 0] for sh in shards]
        deadline = time.monotonic() + time_limit_s
        me0 = sum(os.times()[:2])  # the driver shares the CPU with the server: say how much it took
        sys0 = _busy_cpu_s()  # and so may other processes on this machine: measure them too
        sampler = procs.ResourceSampler(server.pid).start()
        first = asyncio.run(send_all(server.write_url, new_shards, time_limit_s, preamble))
        u1 = sampler.stop()
        sampler = procs.ResourceSampler(server.pid).start()
        rest = asyncio.run(send_all(server.write_url, known_shards, max(1.0, deadline - time.monotonic())))
        u2 = sampler.stop()
        out["driver_cpu_s"] = sum(os.times()[:2]) - me0
        out["machine_busy_cpu_s"] = _busy_cpu_s() - sys0
        res = _merge(first, rest)
        usage = procs.Usage(u1.cpu_s + u2.cpu_s, max(u1.rss_peak, u2.rss_peak), u2.rss_last)
        out["phases"] = {"new_series": {"load": first.summary(), "cpu_s": u1.cpu_s},
                         "known_series": {"load": rest.summary(), "cpu_s": u2.cpu_s}}
        if kind == "victoria-metrics":  # its index (and samples) become searchable when flushed
            procs.victoria_metrics_flush(server)
        series = active_series(server, num_series)
        out |= {"load": res.summary(), "cpu_s": usage.cpu_s, "rss_idle": idle.rss_last,
                "rss_peak": usage.rss_peak, "rss_end": usage.rss_last, "active_series": series}
        if kind == "prometheus":
            disk = procs.prometheus_disk(server.data_dir)
            out["disk_running"] = vars(disk)
            t0 = time.perf_counter()
            out["disk_block"] = vars(procs.prometheus_snapshot(server))
            out["snapshot_s"] = time.perf_counter() - t0
        elif kind == "victoria-metrics":
            out["disk_running"] = vars(procs.victoria_metrics_disk(server.data_dir))
        else:
            out["disk_running"] = vars(procs.metricsgw_disk(server.data_dir))
    finally:
        out["exit_code"] = server.stop()
        out["log_tail"] = server.log_tail(1500)
    if kind == "metricsgw":
        out["disk_stopped"] = vars(procs.metricsgw_disk(server.data_dir))
    elif kind == "victoria-metrics":
        out["disk_stopped"] = vars(procs.victoria_metrics_disk(server.data_dir))
    return out


def _busy_cpu_s() -> float:
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def _merge(a: LoadResult, b: LoadResult) -> LoadResult:
    m = LoadResult()
    for f in ("samples_ok", "samples_failed", "requests_ok", "requests_failed", "requests_not_sent", "retries",
              "bytes_sent", "wall_s"):
        setattr(m, f, getattr(a, f) + getattr(b, f))
    m.status_counts = {k: a.status_counts.get(k, 0) + b.status_counts.get(k, 0)
                       for k in set(a.status_counts) | set(b.status_counts)}
    m.latencies_ms = a.latencies_ms + b.latencies_ms
    m.first_error = a.first_error or b.first_error
    return m


def _rate(phase: dict) -> float:
    return phase["load"]["samples_per_s"]


def derive(r: dict) -> dict:
    """The table's figures from one raw result."""
    ok = r["load"]["samples_ok"]
    series = max(r["active_series"], 1)
    d = {"samples_per_s": r["load"]["samples_per_s"],
         "new_series_samples_per_s": _rate(r["phases"]["new_series"]),
         "known_series_samples_per_s": _rate(r["phases"]["known_series"]),
         "known_cpu_s_per_M": r["phases"]["known_series"]["cpu_s"] / max(
             r["phases"]["known_series"]["load"]["samples_ok"] / 1e6, 1e-9),
         "cpu_s_per_M": r["cpu_s"] / (ok / 1e6) if ok else float("nan"),
         "rss_bytes_per_series": (r["rss_end"] - r["rss_idle"]) / series,
         "rss_peak_mb": r["rss_peak"] / 2**20,
         "disk_bytes_per_sample": r["disk_running"]["total"] / ok if ok else float("nan"),
         "p99_ms": r["load"]["latency_p99_ms"], "failed": r["load"]["requests_failed"],
         "server_cores": r["cpu_s"] / max(r["load"]["wall_s"], 1e-9),
         "driver_cores": r.get("driver_cpu_s", float("nan")) / max(r["load"]["wall_s"], 1e-9),
         "other_cores": (r.get("machine_busy_cpu_s", float("nan")) - r["cpu_s"] - r.get("driver_cpu_s", 0.0))
         / max(r["load"]["wall_s"], 1e-9)}
    at_rest = r.get("disk_block") or r.get("disk_stopped")
    if at_rest and ok:
        d["at_rest_bytes_per_sample"] = at_rest["total"] / ok
        if "chunks" in at_rest["parts"]:
            d["at_rest_chunk_bytes_per_sample"] = at_rest["parts"]["chunks"] / ok
    return d


def table(results: dict[str, dict]) -> str:
    rows = [("samples/s (whole run)", "samples_per_s", "{:,.0f}"),
            ("samples/s, first scrape (new series)", "new_series_samples_per_s", "{:,.0f}"),
            ("samples/s, later scrapes (known series)", "known_series_samples_per_s", "{:,.0f}"),
            ("server CPU s / 1M samples", "cpu_s_per_M", "{:.2f}"),
            ("server CPU s / 1M samples, known series", "known_cpu_s_per_M", "{:.2f}"),
            ("RSS bytes / active series", "rss_bytes_per_series", "{:,.0f}"), ("peak RSS MiB", "rss_peak_mb", "{:,.0f}"),
            ("disk bytes / sample (running)", "disk_bytes_per_sample", "{:.2f}"),
            ("disk bytes / sample (at rest*)", "at_rest_bytes_per_sample", "{:.2f}"),
            ("  of which chunk bytes / sample", "at_rest_chunk_bytes_per_sample", "{:.2f}"),
            ("request p99 ms", "p99_ms", "{:.1f}"), ("failed requests", "failed", "{:d}"),
            ("server CPU cores busy (avg)", "server_cores", "{:.2f}"),
            ("load driver CPU cores (avg)", "driver_cores", "{:.2f}"),
            ("other processes' CPU cores (avg)", "other_cores", "{:.2f}")]
    names = [n for n in STARTERS if n in results]
    derived = {n: derive(results[n]) for n in names}
    # metricsgw against each of the others that ran
    refs = [n for n in names if n != "metricsgw"] if "metricsgw" in names else []
    head = "| figure | " + " | ".join(names) + "".join(f" | metricsgw / {LABEL[n]}" for n in refs) + " |"
    lines = [head, "|" + "---|" * (len(names) + 1 + len(refs))]
    for label, key, fmt in rows:
        vals = {n: derived[n].get(key) for n in names}
        cells = [fmt.format(vals[n]) if vals[n] is not None else "-" for n in names]
        for ref in refs:
            a, b = vals["metricsgw"], vals[ref]
            cells.append(f"{a / b:.2f}" if a is not None and b not in (None, 0) else "-")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append(f"\nmachine: {psutil.cpu_count()} cores; when 'other processes' is well above 0, samples/s is "
                 "contended: compare CPU s / 1M samples instead.")
    lines.append("*at rest: Prometheus = its head written as a block by the snapshot API (what compaction "
                 "would keep); metricsgw and VictoriaMetrics = data dir after a clean shutdown (VictoriaMetrics: "
                 "without cache/). VictoriaMetrics's 'running' disk misses the parts it still holds in memory.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--duration", default="5m", help="span of simulated data (scrapes = duration / interval)")
    ap.add_argument("--interval", default="15s")
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--samples-per-series", type=int, default=1)
    ap.add_argument("--time-limit", default="3m", help="send phase limit per server")
    ap.add_argument("--targets", default=",".join(STARTERS))
    ap.add_argument("--metricsgw-flag", action="append", default=[], help="extra flag for metricsgw serve")
    ap.add_argument("--keep", action="store_true", help="keep the data dirs")
    a = ap.parse_args(argv)
    plan = Plan(a.nodes, a.seed, parse_duration(a.duration), parse_duration(a.interval), a.connections,
                samples_per_series=a.samples_per_series)
    t0 = time.perf_counter()
    workload, preamble, shards = prepare(plan)
    n_req = sum(len(s) for s in shards)
    print(f"workload: {a.nodes} nodes, {workload.num_series:,} series x {plan.scrapes} scrapes = "
          f"{workload.num_series * plan.scrapes:,} samples in {n_req:,} requests (encoded in "
          f"{time.perf_counter() - t0:.1f}s)", flush=True)
    work = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    results: dict[str, dict] = {}
    try:
        for kind in procs.targets(a.targets):
            print(f"running {kind} ...", flush=True)
            try:
                results[kind] = run_one(kind, shards, preamble, workload.num_series,
                                        parse_duration(a.time_limit), work,
                                        a.metricsgw_flag if kind == "metricsgw" else [])
            except (RuntimeError, TimeoutError, OSError) as err:
                print(f"  {kind} failed: {err}", flush=True)
                continue
            print(f"  {json.dumps(derive(results[kind]))}", flush=True)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print(table(results))
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / time.strftime("ingest-%Y%m%dT%H%M%SZ.json", time.gmtime())
    path.write_text(json.dumps({"plan": vars(plan), "num_series": workload.num_series, "results": results},
                               indent=2, default=str))
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
