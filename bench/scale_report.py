"""What bench.scale reports: per minute and per phase (warm-up, measured window), from the sender's
records, the server's processes (RSS, CPU), its /metrics (flush time), the dashboard panels' answers
and the machine's load average."""

from __future__ import annotations

import os
import time

import numpy as np
import psutil

from testkit import procs

MiB = 1 << 20
FLUSH_METRIC = "metricsgw_flush_duration_seconds"


def gateway_processes(server, kind: str) -> dict[str, psutil.Process]:
    """Every process of the server under test by role: metricsgw's front and its children, or the one server."""
    front = psutil.Process(server.pid)
    if kind != "metricsgw":
        return {kind: front}
    return {"front": front, **procs.gateway_children(server.pid)}


def scrape_flush_seconds(base_url: str) -> tuple[float, float] | None:
    """(sum, count) of the flush-duration histogram over every process of the gateway, or None."""
    try:
        status, body = procs.http_get(base_url + "/metrics", timeout=10.0)
    except OSError:
        return None
    if status != 200:
        return None
    total, count, seen = 0.0, 0.0, False
    for line in body.decode(errors="replace").splitlines():
        if line.startswith(FLUSH_METRIC + "_sum"):
            total += float(line.rsplit(" ", 1)[1])
            seen = True
        elif line.startswith(FLUSH_METRIC + "_count"):
            count += float(line.rsplit(" ", 1)[1])
    return (total, count) if seen else None


def _pct(xs: np.ndarray, q: float) -> float | None:
    return round(float(np.percentile(xs, q)), 1) if len(xs) else None


def _cpu_of(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


class Recorder:
    """Called once a second (tick); closes a minute every 60 s of the current phase."""

    def __init__(self, sender, server, kind: str) -> None:
        self.sender, self.server, self.kind = sender, server, kind
        self.t_start = time.time()
        self.window_start: float | None = None
        self.caught_up = False
        self.minutes: list[dict] = []
        self.panels: list[dict] = []
        self.behind: list[tuple[float, float]] = []
        self.rss: list[tuple[float, dict[str, int]]] = []
        self.load: list[tuple[float, float]] = []
        self._me = psutil.Process()
        self._probers: list[psutil.Process] = []
        self._minute_start = self.t_start
        self._rec_i = 0
        self._cpu0 = self._cpus()
        self._flush0 = scrape_flush_seconds(server.base_url)
        self._ticks = 0

    def attach_prober(self, pid: int) -> None:
        self._probers.append(psutil.Process(pid))

    def server_replaced(self, server) -> None:
        """The server was killed and started again: read the new one's processes and counters from now on."""
        self.server = server
        self._cpu0 = self._cpus()
        self._flush0 = scrape_flush_seconds(server.base_url)

    def extra_minute(self, t0: float, t1: float) -> dict:
        """More figures for the minute [t0, t1), for a bench built on this recorder."""
        return {}

    def panel(self, answer: dict) -> None:
        self.panels.append(answer)

    def _cpus(self) -> dict[str, float]:
        out = {"gateway": procs.tree_cpu_s(self.server.pid) or 0.0, "driver": _cpu_of(self._me)}
        if self._probers:
            try:
                out["prober"] = sum(_cpu_of(p) for p in self._probers)
            except psutil.Error:
                pass
        return out

    def _rss_now(self) -> dict[str, int]:
        out = {}
        try:
            processes = gateway_processes(self.server, self.kind)
        except psutil.Error:  # killed, and not started again yet
            return out
        for name, p in processes.items():
            try:
                out[name] = p.memory_info().rss
            except psutil.Error:
                pass
        return out

    def tick(self) -> None:
        now = time.time()
        self.behind.append((now, self.sender.behind(now)))
        self._ticks += 1
        if self._ticks % 5 == 0:
            self.rss.append((now, self._rss_now()))
        if now - self._minute_start >= 60.0:
            self._close_minute(now)

    def start_window(self, now: float, caught_up: bool) -> None:
        self._close_minute(now)
        self.window_start, self.caught_up = now, caught_up

    def _close_minute(self, now: float) -> None:
        t0, span = self._minute_start, max(1e-9, now - self._minute_start)
        recs = self.sender.records[self._rec_i:]
        self._rec_i += len(recs)
        cpu = self._cpus()
        flush = scrape_flush_seconds(self.server.base_url)
        rss = self._rss_now()
        load1 = os.getloadavg()[0]
        self.load.append((now, load1))
        lat = np.array([(r.ack - r.first_send) * 1000 for r in recs if r.ok])
        behind = [b for t, b in self.behind if t0 <= t < now] or [0.0]
        panels = [p for p in self.panels if t0 <= p["t"] < now]
        m = {"phase": "warm-up" if self.window_start is None else "window", "t_end": round(now, 1),
             "seconds": round(span, 1), "samples_per_s": round(sum(r.samples for r in recs if r.ok) / span),
             "requests": len(recs), "write_p50_ms": _pct(lat, 50), "write_p99_ms": _pct(lat, 99),
             "write_max_ms": round(float(lat.max()), 1) if len(lat) else None,
             "failed": sum(not r.ok for r in recs), "retries": sum(r.retries for r in recs),
             "behind_max_s": round(max(behind), 1), "behind_end_s": round(behind[-1], 1),
             "queued_requests": self.sender.queued(),
             "rss_mib": {k: round(v / MiB) for k, v in rss.items()}, "rss_total_mib": round(sum(rss.values()) / MiB),
             "cpu_cores": {k: round((cpu[k] - self._cpu0.get(k, cpu[k])) / span, 2) for k in cpu},
             "load1": round(load1, 2), **_panel_figures(panels), **self.extra_minute(t0, now)}
        if flush and self._flush0:
            n = flush[1] - self._flush0[1]
            m |= {"flushes": int(n), "flush_mean_s": round((flush[0] - self._flush0[0]) / n, 2) if n else None}
        self._cpu0, self._flush0, self._minute_start = cpu, flush, now
        self.minutes.append(m)
        print("minute", len(self.minutes), {k: v for k, v in m.items() if k not in ("t_end",)}, flush=True)

    def finish(self, drained: dict) -> dict:
        now = time.time()
        if now - self._minute_start >= 5.0:  # a last part-minute, unless it is too short to say anything
            self._close_minute(now)
        ws = self.window_start or now
        recs = self.sender.records
        enc = self.sender.encode_cpu_s
        enc_ms = np.array([enc[k] * 1000 for k in sorted(enc)[:-1]])  # the last scrape may be partial
        return {"t_start": self.t_start, "window_start": ws, "caught_up": self.caught_up,
                # by acknowledgement time: what the server did in each phase (a sender still behind at the
                # window's start sends warm-up requests then; "behind" says how late they are)
                "warm_up": self._phase([r for r in recs if r.ack < ws], self.t_start, ws),
                "window": self._phase([r for r in recs if r.ack >= ws], ws, now),
                "drain": drained, "status_counts": self.sender.status_counts, "first_error": self.sender.first_error,
                "driver_encode_cpu_ms_per_scrape": {"mean": _pct(enc_ms, 50) and round(float(enc_ms.mean()), 1),
                                                    "p50": _pct(enc_ms, 50), "max": _pct(enc_ms, 100),
                                                    "scrapes": len(enc_ms)},
                "minutes": self.minutes, "panels": self.panels}

    def _phase(self, recs: list, t0: float, t1: float) -> dict:
        lat = np.array([(r.ack - r.first_send) * 1000 for r in recs if r.ok])
        minutes = [m for m in self.minutes if t0 < m["t_end"] <= t1 + 1]
        rss = [r for t, r in self.rss if t0 <= t <= t1]
        peak: dict[str, int] = {}
        for r in rss:
            for k, v in r.items():
                peak[k] = max(peak.get(k, 0), v)
        span = max(1e-9, t1 - t0)
        cores: dict[str, float] = {}
        for m in minutes:
            for k, v in m["cpu_cores"].items():
                cores[k] = cores.get(k, 0.0) + v * m["seconds"] / span
        behind = [b for t, b in self.behind if t0 <= t <= t1] or [0.0]
        loads = [x for t, x in self.load if t0 <= t <= t1 + 1]
        return {"seconds": round(span, 1), "requests": len(recs), "samples_ok": sum(r.samples for r in recs if r.ok),
                "samples_per_s": round(sum(r.samples for r in recs if r.ok) / span),
                "failed": sum(not r.ok for r in recs), "retries": sum(r.retries for r in recs),
                "write_p50_ms": _pct(lat, 50), "write_p99_ms": _pct(lat, 99),
                "write_max_ms": round(float(lat.max()), 1) if len(lat) else None,
                "behind_max_s": round(max(behind), 1),
                "rss_peak_mib": {k: round(v / MiB) for k, v in peak.items()},
                "rss_peak_total_mib": round(max((sum(r.values()) for r in rss), default=0) / MiB),
                "rss_end_total_mib": round(sum(rss[-1].values()) / MiB) if rss else None,
                "cpu_cores": {k: round(v, 2) for k, v in cores.items()},
                "load1_mean": round(float(np.mean(loads)), 2) if loads else None,
                "load1_max": round(max(loads), 2) if loads else None,
                **_panel_figures([p for p in self.panels if t0 <= p["t"] <= t1])}


def _panel_figures(panels: list[dict]) -> dict:
    secs = np.array([p["seconds"] for p in panels if p["status"] == 200])
    by_status: dict[str, int] = {}
    for p in panels:
        by_status[str(p["status"])] = by_status.get(str(p["status"]), 0) + 1
    return {"panels": len(panels), "panels_by_status": by_status,
            "panels_with_warnings": sum(1 for p in panels if p["status"] == 200 and p.get("warnings")),
            "panel_p50_s": round(float(np.percentile(secs, 50)), 2) if len(secs) else None,
            "panel_max_s": round(float(secs.max()), 2) if len(secs) else None}


def markdown(result: dict) -> str:
    """The RESULTS.md tables of a run: one row per phase, then one per minute."""
    def fmt(x, spec="{:,.0f}"):
        return "-" if x is None else spec.format(x)

    def rss(d: dict) -> str:
        return " + ".join(f"{k} {v:,}" for k, v in d.items()) or "-"

    lines = ["| phase | s | samples/s acked | write p50 / p99 / max ms | failed | retries | behind max s "
             "| peak RSS MiB | gateway / driver cores | load1 mean | panels ok (with a warning) / asked, p50 / max s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in ("warm_up", "window"):
        p = result[name]
        cores = p["cpu_cores"]
        lines.append(f"| {name.replace('_', '-')} | {fmt(p['seconds'])} | {fmt(p['samples_per_s'])} | "
                     f"{fmt(p['write_p50_ms'])} / {fmt(p['write_p99_ms'])} / {fmt(p['write_max_ms'])} | "
                     f"{p['failed']} | {p['retries']} | {fmt(p['behind_max_s'])} | {fmt(p['rss_peak_total_mib'])} "
                     f"({rss(p['rss_peak_mib'])}) | {fmt(cores.get('gateway'), '{:.2f}')} / "
                     f"{fmt(cores.get('driver'), '{:.2f}')} | {fmt(p['load1_mean'], '{:.1f}')} | "
                     f"{p['panels_by_status'].get('200', 0)} ({p.get('panels_with_warnings', '-')}) / {p['panels']}, "
                     f"{fmt(p['panel_p50_s'], '{:.1f}')} / "
                     f"{fmt(p['panel_max_s'], '{:.1f}')} |")
    lines += ["", "| minute | phase | samples/s acked | write p50 / p99 / max ms | failed | retries | behind s (end) "
              "| RSS MiB | gateway / driver cores | flushes (mean s) | load1 | panels ok / asked (max s) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, m in enumerate(result["minutes"], 1):
        cores = m["cpu_cores"]
        flush = f"{m['flushes']} ({fmt(m['flush_mean_s'], '{:.1f}')})" if "flushes" in m else "-"
        lines.append(f"| {i} | {m['phase']} | {fmt(m['samples_per_s'])} | {fmt(m['write_p50_ms'])} / "
                     f"{fmt(m['write_p99_ms'])} / {fmt(m['write_max_ms'])} | {m['failed']} | {m['retries']} | "
                     f"{fmt(m['behind_end_s'])} | {fmt(m['rss_total_mib'])} | {fmt(cores.get('gateway'), '{:.2f}')} / "
                     f"{fmt(cores.get('driver'), '{:.2f}')} | {flush} | {m['load1']:.1f} | "
                     f"{m['panels_by_status'].get('200', 0)} / {m['panels']} ({fmt(m['panel_max_s'], '{:.1f}')}) |")
    return "\n".join(lines)
