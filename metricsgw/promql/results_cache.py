"""The range-query results cache: a dashboard's refresh evaluates only the steps it has not seen.

As VictoriaMetrics' rollup result cache and the Thanos/Mimir query-frontend's results cache do, the answer of a
range query is kept by (query, step, start's place on the step grid), as the stretch of steps [lo, hi] it covers;
a later query with the same key reads the steps it shares from here and evaluates only the others (before lo,
after hi), and the whole is joined (matrix_parts.py). What makes a cached step as good as a new evaluation:

* **the newest minutes are never cached** (``freshness_ms``, --query.cache-max-freshness): samples for them
  may still be arriving. A step older than that reads only samples that were already written, except
* **late samples**, written when their time was already older than ``freshness_ms``: the storage records which
  stretches of time they fall in (storage/memory/late_writes.py; an ingest shard shows it on its extent board),
  and a lookup drops every cached step whose window (``reach_ms``, reach.py) covers one of them, before use.
* **retention**: a step whose window reaches back past the retention horizon is dropped too, since what it read
  may be deleted meanwhile.
* only whole, plain answers are stored: not an error, not an answer with warnings (a peer missing), not one
  with native histograms, not a query with ``@`` or a negative offset (reach.py).

Entries are LRU within ``max_bytes`` (a share of --query.max-memory, limits/memory.py). Thread-safe: query
worker threads look up and store.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..storage.memory.late_writes import SLOTS, LateState, touched_steps
from ..model import Labels
from . import matrix_parts
from .render import metric_json, point_pieces
from .value import Matrix

Key = tuple[str, int, int]  # query, step ms, start ms modulo step
Marks = tuple[tuple[int, int], ...]  # (boot, seq) of each late-write log, when the entry's data was read
Rows = dict[Labels, tuple[bytes, bytes]]  # a series' metric JSON and its points' JSON pieces (render.py)
# A refresh stores its answer only once it adds this share of its steps to what the entry holds: storing joins
# and renders the whole stretch again, so it is paid once every few refreshes, not at each.
STORE_SHARE = 16


@dataclass
class Entry:
    lo: int  # first and last step held (ms, on the key's grid)
    hi: int
    matrix: Matrix  # points at steps in [lo, hi] only
    marks: Marks
    nbytes: int = 0
    # the matrix's points rendered (render.point_pieces) and each series' metric JSON: a refresh writes its answer
    # from these and renders only the steps it evaluated
    blob: bytes = b""
    starts: np.ndarray | None = None
    metrics: list[bytes] | None = None

    def rows(self, lo: int, hi: int) -> tuple[Matrix, Rows]:
        """The points at steps in [lo, hi], as a Matrix and as rendered rows."""
        m = self.matrix
        keep = (m.t_ms >= lo) & (m.t_ms <= hi)
        counts = np.bincount(matrix_parts.series_of_points(m)[keep], minlength=len(m.labels))
        present = np.flatnonzero(counts)
        kept = np.flatnonzero(keep)
        first = kept[np.cumsum(counts[present]) - counts[present]]  # a series' kept points are contiguous
        a, b = self.starts[first].tolist(), self.starts[first + counts[present]].tolist()
        rows = {m.labels[i]: (self.metrics[i], self.blob[x:y]) for i, x, y in zip(present.tolist(), a, b)}
        return matrix_parts.between(m, lo, hi), rows


@dataclass(frozen=True)
class Lookup:
    """What a query takes from the cache: ``held`` (steps [lo, hi], None: nothing), the late-write ``marks`` its
    own evaluation is stored with."""

    held: Matrix | None
    lo: int
    hi: int
    marks: Marks
    rows: Rows | None = None  # ``held`` rendered


class LateLog:
    """The late-write logs whose samples a query reads: the gateway's own storage's, or its ingest shards'."""

    def __init__(self, readers: list[Callable[[], LateState | None]]) -> None:
        self.readers = readers

    def now(self) -> list[LateState] | None:
        """Each log as it is now; None when one cannot be read (a shard starting): cache nothing then."""
        states = [read() for read in self.readers]
        return None if any(s is None for s in states) else states


def marks_of(states: list[LateState]) -> Marks:
    return tuple((s.boot, s.seq) for s in states)


def touched_slots(states: list[LateState], marks: Marks) -> np.ndarray | None:
    """bool [SLOTS]: where late samples landed since ``marks``; None when a log was started again (void)."""
    if len(marks) != len(states):
        return None
    touched = np.zeros(SLOTS, bool)
    for s, (boot, seq) in zip(states, marks):
        if s.boot != boot:
            return None
        touched |= s.touched_since(seq)
    return touched


class ResultsCache:
    def __init__(self, max_bytes: int, freshness_ms: int, late: LateLog, retention_ms: int,
                 observe: Callable[[int, int], None] | None = None) -> None:
        self.max_bytes = max_bytes
        self.observe = observe  # (steps served, steps evaluated) of each query, for /metrics
        self.freshness_ms = freshness_ms
        self.late = late
        self.retention_ms = retention_ms
        self._entries: OrderedDict[Key, Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.bytes = 0
        self.hits = 0  # steps served from here
        self.misses = 0  # steps evaluated

    def lookup(self, key: Key, start: int, end: int, step: int, reach: int, now_ms: int) -> Lookup | None:
        """The cached steps of [start, end] (after dropping what late samples and retention void); None when the
        late-write logs cannot be read (evaluate, store nothing)."""
        states = self.late.now()
        if states is None:
            return None
        marks = marks_of(states)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                entry = self._revalidate(key, entry, states, marks, step, reach, now_ms)
            if entry is None or entry.hi < start or entry.lo > end:
                return Lookup(None, 0, -1, marks)
            self._entries.move_to_end(key)
            lo, hi = max(entry.lo, start), min(entry.hi, end)
            held, rows = entry.rows(lo, hi)
            return Lookup(held, lo, hi, marks, rows)

    def _revalidate(self, key: Key, entry: Entry, states: list[LateState], marks: Marks, step: int, reach: int,
                    now_ms: int) -> Entry | None:
        """``entry`` without the steps late samples or retention voided since it was read; its marks now ``marks``."""
        touched = touched_slots(states, entry.marks)
        if touched is None:
            self._drop(key)
            return None
        steps = np.arange(entry.lo, entry.hi + 1, step, dtype=np.int64)
        bad = touched_steps(touched, steps, reach) | (steps - reach < now_ms - self.retention_ms)
        if bad.any():
            lo, hi = _longest_good_run(steps, bad)
            if lo is None:
                self._drop(key)
                return None
            self._drop(key)
            entry = self._put(key, Entry(lo, hi, matrix_parts.between(entry.matrix, lo, hi), marks))
        else:
            entry.marks = marks
        return entry

    def worth_storing(self, key: Key, start: int, end: int, step: int, now_ms: int) -> bool:
        """Whether storing this answer adds enough steps to what the cache holds (STORE_SHARE)."""
        hi = _last_cacheable(start, end, step, now_ms - self.freshness_ms)
        if hi is None:
            return False
        with self._lock:
            entry = self._entries.get(key)
        if entry is None or entry.hi < start - step or entry.lo > hi + step:
            return True
        gain = max(0, (hi - entry.hi) // step) + max(0, (entry.lo - start) // step)
        return gain >= max(1, ((end - start) // step + 1) // STORE_SHARE)

    def store(self, key: Key, start: int, end: int, step: int, answer: Matrix, marks: Marks, now_ms: int) -> None:
        """Keep the steps of ``answer`` (over [start, end]) older than the freshness horizon, joined with the cached
        stretch they touch when that was read with the same marks."""
        hi = _last_cacheable(start, end, step, now_ms - self.freshness_ms)
        if hi is None:
            return
        fresh = matrix_parts.between(answer, start, hi)
        lo = start
        with self._lock:
            old = self._entries.get(key)
            if old is not None and old.marks == marks and old.lo <= hi + step and old.hi >= start - step:
                parts = [fresh]
                if old.lo < start:
                    parts.append(matrix_parts.between(old.matrix, old.lo, start - step))
                if old.hi > hi:
                    parts.append(matrix_parts.between(old.matrix, hi + step, old.hi))
                lo, hi = min(old.lo, start), max(old.hi, hi)
                # a rolling window would grow the stretch for ever: keep at most twice the query's span
                lo = max(lo, hi - 2 * (end - start) // step * step)
                fresh = matrix_parts.between(matrix_parts.join(parts), lo, hi)
            self._drop(key)
            self._put(key, Entry(lo, hi, fresh, marks))

    def note(self, served: int, evaluated: int) -> None:
        with self._lock:
            self.hits += served
            self.misses += evaluated
        if self.observe is not None:
            self.observe(served, evaluated)

    def stats(self) -> tuple[int, int, int, int]:
        """(entries, bytes, steps served, steps evaluated)."""
        with self._lock:
            return len(self._entries), self.bytes, self.hits, self.misses

    def _put(self, key: Key, entry: Entry) -> Entry | None:
        entry.blob, entry.starts = point_pieces(entry.matrix)
        entry.metrics = [metric_json(l) for l in entry.matrix.labels]
        entry.nbytes = (matrix_parts.nbytes(entry.matrix) + len(entry.blob) + entry.starts.nbytes
                        + sum(map(len, entry.metrics)) + 33 * len(entry.metrics))
        if entry.nbytes > self.max_bytes // 2:  # one answer never takes most of the cache
            return None
        self._entries[key] = entry
        self.bytes += entry.nbytes
        while self.bytes > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self.bytes -= evicted.nbytes
        return entry

    def _drop(self, key: Key) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.bytes -= entry.nbytes


def _last_cacheable(start: int, end: int, step: int, newest: int) -> int | None:
    """The query's last step at or before ``newest`` (None: none is)."""
    newest = min(end, newest)
    return None if newest < start else start + (newest - start) // step * step


def _longest_good_run(steps: np.ndarray, bad: np.ndarray) -> tuple[int | None, int | None]:
    """(first, last) step of the longest run of steps not ``bad``."""
    good = ~bad
    if not good.any():
        return None, None
    edges = np.diff(np.concatenate([[0], good.astype(np.int8), [0]]))
    starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    i = int(np.argmax(stops - starts))
    return int(steps[starts[i]]), int(steps[stops[i] - 1])
