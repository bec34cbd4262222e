"""Remote-write load that remembers what was acknowledged, and the check that every acknowledged
sample is readable exactly once (and with its value: a sample under the wrong series fails it).

Writer k sends request i with one sample per series at t = base + (i * writers + k) * step, so
every request has its own timestamp and the value names (series, writer, request).
"""

from __future__ import annotations

import collections
import threading
import time

from metricsgw.remote.codec import encode_v1
from tests.e2e.client import api, remote_write

METRIC = "acked_test"


def value_of(series: int, writer: int, i: int) -> float:
    return float(series * 10**9 + writer * 10**7 + i)


class AckedLoad:
    """``writers`` threads sending as fast as the server answers (bounded by ``max_requests`` each).

    ``max_ahead_ms``: a writer whose next timestamp is that far ahead of the wall clock waits for the clock
    instead, so a load that must run for a while is not refused as too far in the future (the server's
    --ingest.creation-grace-period) once it has outrun the clock: on a quiet machine it would, in seconds."""

    def __init__(self, base_url: str, base_ms: int, writers: int = 3, series: int = 50, step_ms: int = 100,
                 max_requests: int = 100_000, first_series: int = 0, max_ahead_ms: int | None = None) -> None:
        self.base_url, self.base_ms, self.writers, self.series = base_url, base_ms, writers, series
        self.first_series = first_series  # series s = first_series, ...: loads to different gateways do not share one
        self.step_ms, self.max_requests, self.max_ahead_ms = step_ms, max_requests, max_ahead_ms
        self.next_i = [0] * writers
        self.acked: list[tuple[int, int, float]] = []  # (series, t, value)
        self.statuses: collections.Counter = collections.Counter()
        self.last_ok = 0.0  # monotonic time of the last 204
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def t_of(self, writer: int, i: int) -> int:
        return self.base_ms + (i * self.writers + writer) * self.step_ms

    def start(self, base_url: str | None = None) -> "AckedLoad":
        self.base_url = base_url or self.base_url
        self._stop.clear()
        self._threads = [threading.Thread(target=self._run, args=(k,), daemon=True) for k in range(self.writers)]
        for th in self._threads:
            th.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for th in self._threads:
            th.join(timeout=60)

    def wait(self, cond, what: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not cond():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; statuses so far {dict(self.statuses)}")
            time.sleep(0.05)

    def _run(self, k: int) -> None:
        while not self._stop.is_set() and self.next_i[k] < self.max_requests:
            i = self.next_i[k]
            t = self.t_of(k, i)
            if self.max_ahead_ms is not None and t > time.time() * 1000 + self.max_ahead_ms:
                self._stop.wait(0.05)
                continue
            series = range(self.first_series, self.first_series + self.series)
            body = encode_v1([(((("__name__", METRIC), ("s", str(s)))), [(t, value_of(s, k, i))]) for s in series])
            try:
                status, _, _ = remote_write(self.base_url, body, timeout=30)
            except OSError:
                status = "conn"  # the server died or is not up: this one was never acknowledged
                time.sleep(0.05)
            with self._lock:
                self.statuses[status] += 1
                if status == 204:
                    self.acked.extend((s, t, value_of(s, k, i)) for s in series)
                    self.last_ok = time.monotonic()
            self.next_i[k] = i + 1  # a refused request is not resent: its timestamp is simply skipped


def stored_samples(base_url: str, start_ms: int, end_ms: int, ask=api) -> collections.Counter:
    """(series, t, value) -> how many times the server returns it, over [start_ms, end_ms]. ``ask`` is
    ``api`` or any function of the same signature (e.g. one that queries over a Unix socket)."""
    window_s = (end_ms - start_ms) // 1000 + 1
    status, body = ask(base_url, "/api/v1/query", {"query": f"{METRIC}[{window_s}s]", "time": end_ms / 1000},
                       timeout=120)
    assert status == 200, body
    out: collections.Counter = collections.Counter()
    for series in body["data"]["result"]:
        s = int(series["metric"]["s"])
        for ts, v in series["values"]:
            out[(s, round(float(ts) * 1000), float(v))] += 1
    return out


def assert_exactly_once(base_url: str | list[str], load: AckedLoad, since_ms: int | None = None, ask=api) -> int:
    """Every acknowledged sample (at or after ``since_ms``) is stored once, with its value; several servers
    (``base_url`` a list) are checked as one: each sample once among all of them."""
    acked = [a for a in load.acked if since_ms is None or a[1] >= since_ms]
    assert acked, "nothing was acknowledged"
    start = min(a[1] for a in acked)
    stored: collections.Counter = collections.Counter()
    for url in [base_url] if isinstance(base_url, str) else base_url:
        stored += stored_samples(url, start, max(a[1] for a in acked), ask)
    missing = [a for a in acked if a not in stored]
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged samples lost or changed, e.g. {missing[:3]}"
    twice = [k for k, n in stored.items() if n > 1]
    assert not twice, f"samples stored twice: {twice[:3]}"
    return len(acked)
