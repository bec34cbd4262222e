"""One per-query object that carries the deadline, the budgets and cancellation down.

Every stage that loads data calls ``ctx.check(stage)`` and ``ctx.charge_samples(n, stage)``
as it goes, so a query fails the moment it crosses a limit, not after the damage is done.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from ..errors import LimitExceeded, QueryCanceled, QueryTimeout


@dataclass
class QueryContext:
    timeout_s: float = 120.0
    timeout_setting: str = "--query.timeout"
    max_samples: int = 50_000_000
    max_series: int = 500_000
    started: float = field(default_factory=time.monotonic)
    samples: int = 0
    peak_samples: int = 0
    series: int = 0
    _cancelled: threading.Event = field(default_factory=threading.Event)
    _cancel_reason: str = "the client went away"
    # Callbacks that stop blocking work in progress (e.g. a DuckDB connection's interrupt()).
    _interrupters: list[Callable[[], None]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def for_request(cls, requested_timeout_s: float | None, max_timeout_s: float, **kw) -> "QueryContext":
        """A client's ``timeout`` may only shorten the configured maximum."""
        t = max_timeout_s
        if requested_timeout_s is not None and 0 < requested_timeout_s < max_timeout_s:
            t = requested_timeout_s
        return cls(timeout_s=t, **kw)

    @property
    def deadline(self) -> float:
        return self.started + self.timeout_s

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def check(self, stage: str) -> None:
        if self._cancelled.is_set():
            raise QueryCanceled(f"query canceled in {stage}: {self._cancel_reason}")
        if time.monotonic() > self.deadline:
            raise self.timed_out(stage)

    def timed_out(self, stage: str) -> QueryTimeout:
        return QueryTimeout(
            f"query timed out in {stage} after {self.timeout_s:g}s "
            f"(limit: {self.timeout_setting}; a request's timeout parameter can only shorten it)"
        )

    def charge_samples(self, n: int, stage: str) -> None:
        """Count samples held in memory; raise as soon as the budget is crossed."""
        self.samples += int(n)
        self.peak_samples = max(self.peak_samples, self.samples)
        if self.samples > self.max_samples:
            raise LimitExceeded(
                f"query processing would load too many samples into memory in {stage} "
                f"(more than {self.max_samples}; raise --query.max-samples or narrow the query)"
            )

    def check_estimate(self, n: int, stage: str) -> None:
        """Refuse before loading when an estimate alone would cross the budget (charges nothing)."""
        if self.samples + int(n) > self.max_samples:
            raise LimitExceeded(
                f"query processing would load too many samples into memory in {stage} "
                f"(about {int(n)} estimated, limit {self.max_samples}; raise --query.max-samples or narrow the query)"
            )

    def charge_series(self, n: int, stage: str) -> None:
        self.series += int(n)
        if self.series > self.max_series:
            raise LimitExceeded(
                f"query would select too many series in {stage} "
                f"(more than {self.max_series}; raise --query.max-series or add label matchers)"
            )

    def cancel(self, reason: str = "the client went away") -> None:
        """Called from the event loop when the client disconnects (or the server shuts down)."""
        self._cancel_reason = reason
        self._cancelled.set()
        self._interrupt_all()

    def interrupt(self) -> None:
        """Stop blocking work now (the deadline timer); ``check`` then reports the timeout."""
        self._interrupt_all()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def add_interrupter(self, fn: Callable[[], None]) -> None:
        with self._lock:
            self._interrupters.append(fn)

    def remove_interrupter(self, fn: Callable[[], None]) -> None:
        with self._lock:
            if fn in self._interrupters:
                self._interrupters.remove(fn)

    def _interrupt_all(self) -> None:
        with self._lock:
            fns = list(self._interrupters)
        for fn in fns:
            try:
                fn()
            except Exception:  # an interrupt of a finished query is harmless
                pass
