"""Which stretches of time late samples changed, so a cache of answers over old steps knows what to drop.

A range-query result cache (promql/results_cache.py) keeps steps older than its freshness (``after_ms``, the
newest minutes are never cached). A sample whose time is already that old when it is written is *late* (out of
order, a backfill, a sender that fell behind): it can change a cached step. Whatever else is written changes no
cached step, since a step only looks back in time.

Late samples are recorded by the time bucket they fall in (``BUCKET_MS`` wide), in a ring of ``SLOTS`` slots
indexed by bucket modulo the ring: each slot holds the sequence number of the last late write into any bucket
that maps to it. A reader that remembers the sequence number it saw (its mark) asks which slots moved past it,
and drops the cached steps whose windows cover a bucket of those slots. Buckets that share a slot are told
apart by nothing, so a late write into one also drops steps over the others: never too little is dropped,
whatever the age of the late sample, and the ring never overflows. ``boot`` tells a reader that the log was
started again (an ingest shard restarted): what it remembers is then void.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

BUCKET_MS = 300_000  # 5 minutes of sample time per bucket
SLOTS = 4096  # 14 days of buckets before two share a slot


@dataclass(frozen=True)
class LateState:
    """What a reader needs: ``slots[i]`` is the sequence number of the last late write into a bucket ``b`` with
    ``b % SLOTS == i`` (0: none since ``boot``)."""

    boot: int
    seq: int
    slots: np.ndarray  # uint64 [SLOTS]

    def touched_since(self, seq: int) -> np.ndarray:
        """bool [SLOTS]: the slots a late write moved after ``seq``."""
        return self.slots > np.uint64(seq)


def new_boot() -> int:
    return int.from_bytes(os.urandom(8), "little") >> 1 or 1


class LateWrites:
    """The writer's side, in its storage: ``note`` is called inside the file set's lock, before the write is
    acknowledged, so a reader that does not see a late write yet also does not read its samples."""

    def __init__(self, after_ms: int) -> None:
        self.after_ms = after_ms
        self.boot = new_boot()
        self.seq = 0
        self.slots = np.zeros(SLOTS, np.uint64)

    def note(self, t: np.ndarray, now_ms: int) -> bool:
        """Record the late ones among samples at times ``t`` (ms); True if there were any."""
        if not len(t):
            return False
        cutoff = now_ms - self.after_ms
        if int(t.min()) >= cutoff:  # the usual write: nothing late, one pass over t
            return False
        buckets = t[t < cutoff] // BUCKET_MS  # (a bucket named twice is set twice to the same number: no unique)
        self.seq += 1
        self.slots[buckets % SLOTS] = self.seq
        return True

    def state(self) -> LateState:
        return LateState(self.boot, self.seq, self.slots.copy())


def touched_steps(touched: np.ndarray, steps: np.ndarray, reach_ms: int) -> np.ndarray:
    """bool per step: whether the window (step - reach_ms, step] of a step covers a bucket of a touched slot.

    Vectorised: a circular prefix sum of the touched slots counts them over each step's buckets."""
    if not touched.any() or not len(steps):
        return np.zeros(len(steps), bool)
    lo = (steps - reach_ms) // BUCKET_MS
    hi = steps // BUCKET_MS
    n = hi - lo + 1
    prefix = np.concatenate([[0], np.cumsum(np.concatenate([touched, touched]), dtype=np.int64)])
    start = lo % SLOTS
    count = np.minimum(n, SLOTS)
    hits = prefix[start + count] - prefix[start]
    return hits > 0
