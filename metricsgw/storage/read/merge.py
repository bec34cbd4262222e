"""Merging blocks of samples sorted by (sid, t) (files in write order, then the head) into one,
keeping the first-written sample of a duplicated (sid, t)."""

from __future__ import annotations

import numpy as np

from ... import npsort
from ...model import SampleBlock


def is_sorted_strict(sid: np.ndarray, t: np.ndarray) -> bool:
    if len(sid) < 2:
        return True
    # Compare, never subtract: sids are 64-bit hashes and their differences overflow.
    a, b = sid[:-1], sid[1:]
    return bool((b >= a).all() and ((t[1:] > t[:-1]) | (b != a)).all())


def sort_block(b: SampleBlock) -> SampleBlock:
    if is_sorted_strict(b.sid, b.t):
        return b
    perm = np.lexsort((b.t, b.sid))
    return SampleBlock(b.sid[perm], b.t[perm], b.v[perm])


def merge_blocks(parts: list[SampleBlock]) -> SampleBlock:
    """Blocks of files (each sorted by (sid, t), in write order) as one block, keeping the
    first-written sample of a duplicated (sid, t): linear when each series' samples in a file
    follow its samples in earlier files (the usual case), a sort only when they overlap."""
    parts = [p for p in parts if len(p)]
    if len(parts) <= 1:
        return parts[0] if parts else SampleBlock.empty()
    ids = npsort.unique(np.concatenate([npsort.distinct_sorted(p.sid) for p in parts]))
    return merge_parts(ids, parts, min(int(p.t.min()) for p in parts), max(int(p.t.max()) for p in parts))


def merge_parts(ids_sorted: np.ndarray, parts: list[SampleBlock], start_ms: int, end_ms: int) -> SampleBlock:
    """Merge blocks (each sorted by (sid, t), in write order) into one sorted block, keeping
    the first-written sample of a duplicated (sid, t)."""
    if not parts:
        return SampleBlock.empty()
    if all(is_sorted_strict(p.sid, p.t) for p in parts):  # strictly: no duplicate inside a part
        if len(parts) == 1:
            return parts[0]
        merged = interleave(ids_sorted, parts)
        if merged is not None:
            return merged
    sid = np.concatenate([p.sid for p in parts])
    t = np.concatenate([p.t for p in parts])
    v = np.concatenate([p.v for p in parts])
    span = end_ms - start_ms + 1
    if len(ids_sorted) * span < (1 << 62):
        # One int64 key per sample (series rank, time): a stable sort of already sorted runs
        # (timsort merges them) replaces a three-key lexsort and keeps write order on ties.
        key = np.searchsorted(ids_sorted, sid).astype(np.int64) * span + (t - start_ms)
        order = np.argsort(key, kind="stable")
        key = key[order]
        keep = np.r_[True, key[1:] != key[:-1]]
    else:
        rank = np.concatenate([np.full(len(p), i, np.int64) for i, p in enumerate(parts)])
        order = np.lexsort((rank, t, sid))
        keep = np.r_[True, (sid[order][1:] != sid[order][:-1]) | (t[order][1:] != t[order][:-1])]
    order = order[keep]
    return SampleBlock(sid[order], t[order], v[order])


def interleave(ids_sorted: np.ndarray, parts: list[SampleBlock]) -> SampleBlock | None:
    """Merge sorted parts in which every series' samples follow each other in time from part
    to part (flushes and the head in write order: the usual case, even though a flush cut in
    the middle of a scrape makes the parts' overall time ranges overlap). Each series' runs
    are laid end to end by computing every sample's output position: O(n), no sort. None
    when some series' runs overlap or touch in time (then duplicates need the sorting merge)."""
    cnt = np.empty((len(parts), len(ids_sorted)), np.int64)
    run_start = []
    newest = np.full(len(ids_sorted), np.iinfo(np.int64).min)  # last t so far, per series
    for i, p in enumerate(parts):
        lo = np.searchsorted(p.sid, ids_sorted, "left")
        cnt[i] = np.searchsorted(p.sid, ids_sorted, "right") - lo
        has = cnt[i] > 0
        if not (p.t[lo[has]] > newest[has]).all():
            return None
        newest[has] = p.t[lo[has] + cnt[i][has] - 1]
        run_start.append(lo)
    total = cnt.sum(axis=0)
    out_start = np.cumsum(total) - total
    before = np.cumsum(cnt, axis=0) - cnt  # samples of earlier parts in the same series
    n = int(total.sum())
    sid, t, v = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.float64)
    for i, p in enumerate(parts):
        dest = np.repeat(out_start + before[i] - run_start[i], cnt[i]) + np.arange(len(p))
        sid[dest], t[dest], v[dest] = p.sid, p.t, p.v
    return SampleBlock(sid, t, v)
