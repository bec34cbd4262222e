"""One per-query object that carries the deadline, the budgets and cancellation down.

Every stage that loads data calls ``ctx.check(stage)`` and ``ctx.charge_loaded(n, stage)``
as it goes, so a query fails the moment it crosses a limit, not after the damage is done.

Two things are guarded, each as it is held at once:

* memory, in bytes: raw samples loaded, evaluated matrices, JSON, against the query's own
  ``max_bytes`` and the process-wide pool all queries share (``limits/memory.py``). A stage that
  lets go of data (a batch of series evaluated and folded into its aggregate) gives its charge
  back with ``release_to(mark)``.
* ``max_samples`` (--query.max-samples), counted as its reader expects. A remote read answers
  raw samples, and Prometheus counts those: raw loads count (``counts_raw_samples``). A PromQL
  query is judged as Prometheus 2.42's engine judges it, by its ``currentSamples`` (points its
  evaluation holds at once, promql/held.py): the engine turns raw counting off and reports
  those with ``count_held``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from ..errors import LimitExceeded, QueryCanceled, QueryTimeout
from .memory import MemoryPool

# Bytes a query holds per raw sample (sid, t, v: 3 x 8) and per point of an evaluated
# (series x step) matrix (value, presence mask, and the temporaries that build them).
SAMPLE_BYTES = 24
POINT_BYTES = 16
# Per selected series: its id, its place in the selection's lists and index arrays (label
# sets themselves are shared with the storage's cache of them).
SERIES_BYTES = 64


@dataclass
class QueryContext:
    timeout_s: float = 120.0
    timeout_setting: str = "--query.timeout"
    max_samples: int = 50_000_000
    max_series: int = 500_000
    max_bytes: int = 1 << 62
    max_bytes_setting: str = "--query.max-memory-per-query"
    pool: MemoryPool | None = None
    started: float = field(default_factory=time.monotonic)
    # When the guard gave the query its slot (time.monotonic()); None while it waits, or when it never took one.
    admitted: float | None = None
    # Raw samples loaded count against max_samples (remote read); PromQL counts held points instead.
    counts_raw_samples: bool = True
    samples: int = 0
    peak_samples: int = 0
    series: int = 0
    bytes: int = 0
    peak_bytes: int = 0
    # Raw samples read in all, whatever was released since: the query log's totalQueryableSamples.
    loaded_samples: int = 0
    # Reads of a query evaluated in series batches (promql/batching.py) are each one batch of a selection this many
    # series big: the storage fills its sample cache only when the whole selection would stay there (read/plan.py).
    scan_series: int = 0
    # Prometheus 3's annotations of the answer ("PromQL warning: ...", "PromQL info: ..."), each once, in order.
    warnings: list[str] = field(default_factory=list)
    infos: list[str] = field(default_factory=list)
    _cancelled: threading.Event = field(default_factory=threading.Event)
    _cancel_reason: str = "the client went away"
    # Callbacks that stop blocking work in progress (e.g. a DuckDB connection's interrupt()).
    _interrupters: list[Callable[[], None]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # Guards what is held (samples, bytes, series): a query's parts charge it from several threads.
    _held_lock: threading.RLock = field(default_factory=threading.RLock)

    @classmethod
    def for_request(cls, requested_timeout_s: float | None, max_timeout_s: float, **kw) -> "QueryContext":
        """A client's ``timeout`` may only shorten the configured maximum."""
        t = max_timeout_s
        if requested_timeout_s is not None and 0 < requested_timeout_s < max_timeout_s:
            t = requested_timeout_s
        return cls(timeout_s=t, **kw)

    def annotate(self, message: str) -> None:
        """Add an annotation to the answer: a warning or an info, by its prefix (as Prometheus words them)."""
        kind = self.infos if message.startswith("PromQL info:") else self.warnings
        with self._lock:
            if message not in kind:
                kind.append(message)

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

    def charge_samples(self, n: int, stage: str, bytes_each: int = SAMPLE_BYTES) -> None:
        """Count samples held in memory; raise as soon as the budget is crossed."""
        with self._held_lock:
            self.samples += int(n)
            self.peak_samples = max(self.peak_samples, self.samples)
            if self.samples > self.max_samples:
                raise _too_many_samples(stage, self.max_samples)
            self.charge_bytes(int(n) * bytes_each, stage)

    def charge_loaded(self, n: int, stage: str, bytes_each: int = SAMPLE_BYTES) -> None:
        """Raw samples read from storage: always their bytes; samples only where they are what is counted."""
        self.note_loaded(n)
        if self.counts_raw_samples:
            self.charge_samples(n, stage, bytes_each)
        else:
            self.charge_bytes(int(n) * bytes_each, stage)

    def charge_points(self, n: int, stage: str) -> None:
        """Points of an evaluated (series x step) matrix: memory (the count is ``count_held``'s)."""
        self.charge_bytes(int(n) * POINT_BYTES, stage)

    def note_loaded(self, n: int) -> None:
        """Count raw samples read (never refuses: what is held is judged by the charges)."""
        with self._held_lock:
            self.loaded_samples += int(n)

    def count_held(self, peak: int, after: int, stage: str) -> None:
        """Prometheus's ``currentSamples`` through one step of evaluation: it reached ``peak``, and
        ``after`` are held once the step is done (both absolute; promql/held.py computes them)."""
        with self._held_lock:
            self.peak_samples = max(self.peak_samples, int(peak))
            if peak > self.max_samples:
                raise _too_many_samples(stage, self.max_samples)
            self.samples = int(after)

    def charge_bytes(self, n: int, stage: str) -> None:
        """Bytes held: against this query's ``max_bytes``, then the pool all queries share."""
        n = int(n)
        if n <= 0:
            return
        with self._held_lock:
            if self.bytes + n > self.max_bytes:
                raise LimitExceeded(
                    f"query would hold too much memory in {stage} (more than {self.max_bytes} bytes; "
                    f"raise {self.max_bytes_setting} or narrow the query)"
                )
            if self.pool is not None:
                self.pool.take(n, stage)  # raises Unavailable (503) when the process has no room
            self.bytes += n
            self.peak_bytes = max(self.peak_bytes, self.bytes)

    def can_hold(self, samples: int) -> bool:
        """Whether loading this many more samples would stay within the query's budgets."""
        return ((not self.counts_raw_samples or self.samples + samples <= self.max_samples)
                and self.bytes + samples * SAMPLE_BYTES <= self.max_bytes)

    def mark(self) -> tuple[int, int]:
        """What is held now; ``release_to`` gives back everything charged after it."""
        return self.samples, self.bytes

    def release_to(self, mark: tuple[int, int]) -> None:
        samples, held = mark
        with self._held_lock:
            self.samples = min(self.samples, samples)
            if self.bytes > held:
                if self.pool is not None:
                    self.pool.give(self.bytes - held)
                self.bytes = held

    def give_back(self, samples: int, held: int) -> None:
        """Release this many samples and bytes (what one part of the query charged)."""
        with self._held_lock:
            self.samples = max(0, self.samples - samples)
            held = min(held, self.bytes)
            if held > 0:
                if self.pool is not None:
                    self.pool.give(held)
                self.bytes -= held

    def part(self) -> "QueryPart":
        """A context for one part of this query evaluated beside others (promql/parallel.py)."""
        return QueryPart(self)

    def release_all(self) -> None:
        """The query is over: its memory goes back to the pool."""
        self.release_to((0, 0))

    def check_estimate(self, n: int, stage: str) -> None:
        """Refuse before loading when an estimate of raw samples alone would cross a budget
        (charges nothing). Against max_samples only where raw samples are what is counted: a
        PromQL query may load many more than its engine holds at once (Prometheus allows it)."""
        # The refusal names what the query holds already (e.g. the other side of a binary
        # operation): an estimate under the limit is refused when the two together are over it.
        if self.counts_raw_samples and self.samples + int(n) > self.max_samples:
            raise LimitExceeded(
                f"query processing would load too many samples into memory in query execution "
                f"({stage}: about {int(n)} estimated{_on_top(self.samples, '')}, {self.max_samples} may be "
                f"held at once; raise --query.max-samples or narrow the query)"
            )
        if self.bytes + int(n) * SAMPLE_BYTES > self.max_bytes:
            raise LimitExceeded(
                f"query would hold too much memory in {stage} (about {int(n) * SAMPLE_BYTES} bytes of "
                f"samples estimated{_on_top(self.bytes, ' bytes')}, {self.max_bytes} allowed; "
                f"raise {self.max_bytes_setting} or narrow the query)"
            )

    def charge_series(self, n: int, stage: str) -> None:
        with self._held_lock:
            self.series += int(n)
            if self.series > self.max_series:
                raise LimitExceeded(
                    f"query would select too many series in {stage} "
                    f"(more than {self.max_series}; raise --query.max-series or add label matchers)"
                )
            self.charge_bytes(int(n) * SERIES_BYTES, stage)

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


class QueryPart:
    """One part of a query running beside its other parts (a batch of series on another core).

    Its charges count against the query's budgets at once, so parts together stay within
    them; ``mark``/``release_to`` and ``release_all`` give back only what this part charged,
    whatever the others hold meanwhile. Everything else (deadline, cancellation, limits, what
    the whole query holds) is the query's."""

    def __init__(self, query: QueryContext) -> None:
        self.query = query
        self.held_samples = 0
        self.held_bytes = 0
        # Prometheus's count of what this part's evaluation holds, from zero: where the part's
        # series come in the whole query's order decides what is held beside them, so the
        # part's caller folds these in (promql/batching.py).
        self.samples = 0
        self.peak_samples = 0

    def __getattr__(self, name: str):
        return getattr(self.query, name)

    def charge_samples(self, n: int, stage: str, bytes_each: int = SAMPLE_BYTES) -> None:
        n = int(n)
        try:
            self.query.charge_samples(n, stage, bytes_each)
        finally:
            self.held_samples += n  # counted even when a limit fired (the bytes were not)
        self.held_bytes += n * bytes_each

    charge_loaded = QueryContext.charge_loaded
    charge_points = QueryContext.charge_points

    def count_held(self, peak: int, after: int, stage: str) -> None:
        """Refused already when the part's own peak, on top of what the query held before any
        part, is over the limit: whatever comes before it in order only adds to that."""
        self.peak_samples = max(self.peak_samples, int(peak))
        if self.query.samples + peak > self.query.max_samples:
            raise _too_many_samples(stage, self.query.max_samples)
        self.samples = int(after)

    def charge_bytes(self, n: int, stage: str) -> None:
        n = int(n)
        if n > 0:
            self.query.charge_bytes(n, stage)
            self.held_bytes += n

    def charge_series(self, n: int, stage: str) -> None:
        self.query.charge_series(n, stage)
        self.held_bytes += int(n) * SERIES_BYTES

    def mark(self) -> tuple[int, int]:
        return self.held_samples, self.held_bytes

    def release_to(self, mark: tuple[int, int]) -> None:
        samples, held = mark
        if self.held_samples > samples or self.held_bytes > held:
            self.query.give_back(max(0, self.held_samples - samples), max(0, self.held_bytes - held))
            self.held_samples, self.held_bytes = min(self.held_samples, samples), min(self.held_bytes, held)

    def release_all(self) -> None:
        self.release_to((0, 0))


def _too_many_samples(stage: str, limit: int) -> LimitExceeded:
    return LimitExceeded(
        f"query processing would load too many samples into memory in query execution "
        f"({stage}: more than {limit} held at once; raise --query.max-samples or narrow the query)"
    )


def _on_top(held: int, unit: str) -> str:
    return f" on top of the {held}{unit} it holds" if held else ""
