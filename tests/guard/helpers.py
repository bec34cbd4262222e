"""Small tools for the guard tests: timed API calls, the server's own metrics, RSS while a call
runs, and a client that hangs up mid-request."""

from __future__ import annotations

import socket
import time
import urllib.parse
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from testkit.procs import ResourceSampler, http_get, tree_cpu_s, tree_rss
from tests.e2e.client import api

MiB = 1 << 20


def timed_api(base: str, path: str, params=None, method: str = "GET", timeout: float = 120.0):
    """(status, body, seconds)."""
    t0 = time.perf_counter()
    status, body = api(base, path, params, method=method, timeout=timeout)
    return status, body, time.perf_counter() - t0


def own_metrics(base: str) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted label pairs): value} from the server's /metrics."""
    status, body = http_get(base + "/metrics")
    assert status == 200
    out = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def metric(base: str, name: str, **labels) -> float:
    """The sample with exactly these labels; a multi-process gateway labels each sample by process
    (metricsgw/procs/exposition.py), so without a ``process`` label given this sums over the processes."""
    want = tuple(sorted(labels.items()))
    total = 0.0
    for (n, got), v in own_metrics(base).items():
        if n == name and (got if "process" in labels else tuple(kv for kv in got if kv[0] != "process")) == want:
            total += v
    return total


@dataclass
class RssReport:
    before: int = 0
    peak: int = 0
    after: int = 0

    @property
    def growth(self) -> int:
        return self.peak - self.before

    def __str__(self) -> str:
        return f"RSS before {self.before / MiB:.0f} MiB, peak {self.peak / MiB:.0f}, after {self.after / MiB:.0f}"


@contextmanager
def rss_of(pid: int):
    """Samples the server's RSS every 20 ms while the block runs."""
    rep = RssReport(before=tree_rss(pid))
    sampler = ResourceSampler(pid, period_s=0.02).start()
    try:
        yield rep
    finally:
        usage = sampler.stop()
        rep.peak, rep.after = max(usage.rss_peak, rep.before), usage.rss_last


def cpu_seconds(pid: int) -> float:
    return tree_cpu_s(pid) or 0.0  # the server and its children


def busy_fraction(pid: int, window_s: float = 0.5) -> float:
    """Share of one core the server used over the next window."""
    c0, t0 = cpu_seconds(pid), time.perf_counter()
    time.sleep(window_s)
    return (cpu_seconds(pid) - c0) / (time.perf_counter() - t0)


def send_and_hang_up(base: str, path: str, params: list, after_s: float = 0.0, reset: bool = False,
                     wait=None) -> None:
    """POST a form request, wait (``after_s``, or until ``wait()`` returns), then close the socket
    without reading the answer (a client that left).

    A plain close sends FIN, as a client timing out does; ``reset`` sends RST instead."""
    u = urllib.parse.urlparse(base)
    body = urllib.parse.urlencode(params).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection((u.hostname, u.port), timeout=10) as s:
        s.sendall(head + body)
        if wait is not None:
            wait()
        else:
            time.sleep(after_s)
        if reset:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")


def api_with_headers(base: str, path: str, params: dict, timeout: float = 120.0) -> tuple[int, dict, dict]:
    """A form POST; (status, JSON body, headers)."""
    import json
    import urllib.error
    import urllib.request

    req = urllib.request.Request(base + path, data=urllib.parse.urlencode(params).encode(), method="POST",
                                 headers={"Content-Type": "application/x-www-form-urlencoded"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), dict(e.headers)


class QueryHold:
    """Drives the server's test hook (metricsgw/testhooks.py): queries marked with HELD (or
    HELD_BUSY) stop at a named stage until ``release``; events say when they got there and how
    they left. The waits are liveness bounds only: a working server passes them at any speed."""

    HELD = " # metricsgw_test_hold"
    HELD_BUSY = " # metricsgw_test_hold_busy"

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    @property
    def env(self) -> dict[str, str]:
        return {"METRICSGW_TEST_HOLD_DIR": str(self.root)}

    def engage(self) -> None:
        (self.root / "hold").touch()

    def release(self) -> None:
        (self.root / "hold").unlink(missing_ok=True)

    def hold_start(self, process: str) -> None:
        """The front's child ``process`` ("querier-0") waits before it listens at its next start."""
        (self.root / f"hold-start-{process}").touch()

    def release_start(self, process: str) -> None:
        (self.root / f"hold-start-{process}").unlink(missing_ok=True)

    def starts_held(self, process: str) -> int:
        return sum(1 for e in self.events() if e == ["start-held", process])

    def events(self) -> list[list[str]]:
        path = self.root / "events"
        return [line.split() for line in path.read_text().splitlines()] if path.exists() else []

    def reached(self) -> int:
        return sum(1 for e in self.events() if e[0] == "reached")

    def endings(self) -> list[str]:
        """How each held query that has left ended: released, canceled or timeout."""
        return [e[3] for e in self.events() if e[0] == "left"]

    def wait(self, pred, what: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not pred():
            assert time.monotonic() < deadline, f"not seen within {timeout_s:g}s: {what}; events {self.events()}"
            time.sleep(0.01)
