"""The read path's merge of sorted parts (Parquet files in write order, then the head), and the
sorted-block slicing the head and the sample cache share: checked against a plain lexsort."""

from __future__ import annotations

import numpy as np
import pytest

from metricsgw.model import SampleBlock
from metricsgw.storage.memory.head import select_sorted
from metricsgw.storage.read.merge import is_sorted_strict, merge_parts
from metricsgw.storage.read.sample_cache import CachedSamples, SampleCache


def _reference(parts: list[SampleBlock]) -> SampleBlock:
    """Sorted by (sid, t); of duplicated (sid, t) the first-written part wins."""
    sid = np.concatenate([p.sid for p in parts])
    t = np.concatenate([p.t for p in parts])
    v = np.concatenate([p.v for p in parts])
    rank = np.concatenate([np.full(len(p), i) for i, p in enumerate(parts)])
    o = np.lexsort((rank, t, sid))
    sid, t, v = sid[o], t[o], v[o]
    keep = np.r_[True, (sid[1:] != sid[:-1]) | (t[1:] != t[:-1])]
    return SampleBlock(sid[keep], t[keep], v[keep])


def _part(rng, ids, t_lo, t_hi, tag) -> SampleBlock:
    rows = [(s, t) for s in ids for t in range(t_lo, t_hi, 1000) if rng.random() < 0.7]
    sid = np.array([r[0] for r in rows], np.int64)
    t = np.array([r[1] for r in rows], np.int64)
    return SampleBlock(sid, t, np.full(len(rows), float(tag)) + t / 1e6)


def _same(a: SampleBlock, b: SampleBlock) -> None:
    np.testing.assert_array_equal(a.sid, b.sid)
    np.testing.assert_array_equal(a.t, b.t)
    np.testing.assert_array_equal(a.v.view(np.int64), b.v.view(np.int64))  # bit-exact


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_merge_matches_lexsort(seed, overlap):
    rng = np.random.default_rng(seed)
    # the full int64 range: differences of such sids overflow, comparisons must not
    ids = np.unique(rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, 30, endpoint=True))
    parts = []
    for k in range(3):  # hourly files in time order, or overlapping ones (out-of-order writes)
        lo = 0 if overlap else k * 20_000
        sub = ids[rng.random(len(ids)) < 0.8]
        parts.append(_part(rng, sub, lo, lo + 20_000, k))
    parts = [p for p in parts if len(p)]
    _same(merge_parts(ids, parts, 0, 60_000), _reference(parts))


def test_merge_keeps_stale_nan_bits_and_first_written():
    stale = np.array([0x7FF0000000000002], np.uint64).view(np.float64)
    a = SampleBlock(np.array([1, 1]), np.array([0, 1000]), np.array([1.0, stale[0]]))
    b = SampleBlock(np.array([1, 2]), np.array([1000, 0]), np.array([9.0, 3.0]))
    got = merge_parts(np.array([1, 2]), [a, b], 0, 1000)
    assert got.t.tolist() == [0, 1000, 0] and got.sid.tolist() == [1, 1, 2]
    assert got.v.view(np.uint64)[1] == 0x7FF0000000000002  # a's stale marker, not b's 9.0


def test_select_sorted_windows_and_views():
    rng = np.random.default_rng(7)
    ids = np.unique(rng.integers(0, 1000, 40))
    block = _reference([_part(rng, ids, 0, 50_000, 0)])
    want_ids = np.sort(rng.choice(ids, 10, replace=False))
    for lo, hi in [(0, 50_000), (10_500, 30_000), (60_000, 70_000)]:
        got = select_sorted(block.sid, block.t, block.v, want_ids, lo, hi)
        keep = np.isin(block.sid, want_ids) & (block.t >= lo) & (block.t <= hi)
        _same(got, SampleBlock(block.sid[keep], block.t[keep], block.v[keep]))


def test_sample_cache_evicts_least_recent_and_freezes_entries():
    def blk(n):
        return CachedSamples.of(SampleBlock(np.zeros(n, np.int64), np.arange(n, dtype=np.int64), np.zeros(n)))

    cache = SampleCache(max_bytes=blk(100).nbytes * 4)  # four entries of 100 samples (one per quarter)
    for i in range(4):
        cache.put((f"f{i}", "m", "*"), blk(100))
    cache.get(("f0", "m", "*"))  # f0 is now the most recent
    cache.put(("f4", "m", "*"), blk(100))
    assert cache.get(("f1", "m", "*")) is None and cache.get(("f0", "m", "*")) is not None
    assert cache.bytes <= cache.max_bytes
    with pytest.raises(ValueError):
        cache.get(("f0", "m", "*")).v[0] = 1.0  # shared between queries: read-only
    cache.put(("big", "m", "*"), blk(101))  # more than a quarter of the budget: not kept
    assert cache.get(("big", "m", "*")) is None
    cache.retain({"f0"})
    assert cache.get(("f4", "m", "*")) is None and cache.get(("f0", "m", "*")) is not None


@pytest.mark.parametrize("t_span", [50_000, 2**33])  # int32 times from the entry's base; int64 past that
def test_cached_samples_select_what_select_sorted_selects(t_span):
    rng = np.random.default_rng(3)
    ids = np.unique(rng.integers(-2**62, 2**62, 60))
    block = _reference([_part(rng, ids, 0, 50_000, 0)])
    block = SampleBlock(block.sid, block.t * (t_span // 50_000) + 1_796_000_000_000, block.v)
    cached = CachedSamples.of(block)
    assert cached.t.dtype == (np.int32 if t_span < 2**31 else np.int64) and len(cached) == len(block)
    _same(cached.block(), block)
    t0, t1 = int(block.t.min()), int(block.t.max())
    absent = np.setdiff1d(np.arange(-5, 5), ids)
    for want in (ids, np.sort(rng.choice(ids, 7, replace=False)), np.sort(np.r_[ids[:3], absent]), absent):
        for lo, hi in [(t0, t1), (t0 - 10**12, t1 + 10**12), ((t0 + t1) // 2, t1 - 1), (t1 + 1, t1 + 5), (0, t0 - 1)]:
            _same(cached.select(want, lo, hi), select_sorted(block.sid, block.t, block.v, want, lo, hi))


def test_sortedness_check_survives_sid_overflow():
    big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    assert not is_sorted_strict(np.array([big, small]), np.array([0, 0]))  # big - small overflows
    assert is_sorted_strict(np.array([small, big]), np.array([5, 0]))
    assert not is_sorted_strict(np.array([1, 1]), np.array([0, 0]))  # a duplicate is not "sorted"


def test_duplicates_inside_one_part_are_dropped():
    a = SampleBlock(np.array([3, 3, 3]), np.array([0, 0, 1000]), np.array([1.0, 2.0, 3.0]))
    got = merge_parts(np.array([3]), [a], 0, 1000)
    assert got.t.tolist() == [0, 1000] and got.v.tolist() == [1.0, 3.0]
