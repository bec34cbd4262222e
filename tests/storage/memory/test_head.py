"""The head's shortcuts for head reads (storage/memory/head.py): the series it holds and a count of a selection,
checked against the plain computation over random appends, windows and selections."""

from __future__ import annotations

import numpy as np
import pytest

from metricsgw.storage.memory.head import Head


def _filled(rng: np.random.Generator, chunks: int) -> tuple[Head, np.ndarray, np.ndarray]:
    head, all_sid, all_t = Head(), [], []
    for _ in range(chunks):
        n = int(rng.integers(1, 400))
        sid = rng.integers(0, 300, n).astype(np.int64)
        t = rng.integers(0, 10_000, n).astype(np.int64)
        head.append(sid, t, rng.random(n))
        all_sid.append(sid)
        all_t.append(t)
        if rng.random() < 0.5:
            head.blocks()  # consolidate now and then: several blocks, merged like an LSM tree
    return head, np.concatenate(all_sid), np.concatenate(all_t)


@pytest.mark.parametrize("seed", range(20))
def test_held_sids_and_count_equal_the_plain_computation(seed):
    rng = np.random.default_rng(seed)
    head, sid, t = _filled(rng, int(rng.integers(1, 12)))
    assert head.held_sids().tolist() == np.unique(sid).tolist()
    pairs = np.unique(np.stack([sid, t]), axis=1)  # one sample per (sid, t), as a read returns
    for _ in range(10):
        ids = np.unique(rng.integers(0, 320, int(rng.integers(0, 80)))).astype(np.int64)
        start, end = sorted(rng.integers(-100, 10_100, 2).tolist())
        if rng.random() < 0.3:
            start, end = -1, 20_000  # a window over the whole head: counted without gathering
        distinct = int((np.isin(pairs[0], ids) & (pairs[1] >= start) & (pairs[1] <= end)).sum())
        # what a read gathers before the merge drops a (sid, t) written again into a later block
        gathered = sum(len(b) for b in head.select(ids, start, end))
        assert head.count(ids, start, end) == gathered >= distinct


def test_held_sids_follow_new_appends():
    head = Head()
    head.append(np.array([5, 3], np.int64), np.array([1, 1], np.int64), np.zeros(2))
    assert head.held_sids().tolist() == [3, 5]
    head.append(np.array([4], np.int64), np.array([2], np.int64), np.zeros(1))
    assert head.held_sids().tolist() == [3, 4, 5]
