"""The read-side merge of sorted parts (files in write order, then the head): the linear path
for parts that follow each other per series, the sorting path otherwise, same answer."""

import numpy as np

from metricsgw.model import STALE_NAN, SampleBlock
from metricsgw.storage.read.merge import interleave, merge_parts


def _block(rows):
    rows = sorted(rows, key=lambda r: (r[0], r[1]))
    return SampleBlock(np.array([r[0] for r in rows], np.int64), np.array([r[1] for r in rows], np.int64),
                       np.array([r[2] for r in rows], np.float64))


def _reference(parts):
    """First-written sample per (sid, t), sorted: the contract, the slow obvious way."""
    seen = {}
    for p in parts:
        for s, t, v in zip(p.sid.tolist(), p.t.tolist(), p.v.tolist()):
            seen.setdefault((s, t), v)
    return _block([(s, t, v) for (s, t), v in seen.items()])


def _same(a: SampleBlock, b: SampleBlock) -> bool:
    return (np.array_equal(a.sid, b.sid) and np.array_equal(a.t, b.t)
            and np.array_equal(a.v.view(np.int64), b.v.view(np.int64)))


def test_flush_cut_mid_scrape_takes_the_linear_path():
    # Series -5 is flushed up to t=30 in part 0 while series 7 only reaches t=20: the parts'
    # time ranges overlap, but each series' runs follow each other.
    big = -(1 << 62)
    p0 = _block([(-5, 10, 1.0), (-5, 20, 2.0), (-5, 30, 3.0), (7, 10, 4.0), (7, 20, 5.0), (big, 10, 9.0)])
    p1 = _block([(-5, 40, 6.0), (7, 30, 7.0), (7, 40, 8.0), (big, 20, 10.0)])
    p2 = _block([(7, 50, 11.0)])
    ids = np.array(sorted({-5, 7, big}), np.int64)
    fast = interleave(ids, [p0, p1, p2])
    assert fast is not None
    assert _same(fast, _reference([p0, p1, p2]))
    assert _same(merge_parts(ids, [p0, p1, p2], 0, 100), fast)


def test_overlap_and_duplicates_take_the_sorting_path_and_first_written_wins():
    stale = STALE_NAN
    p0 = _block([(1, 10, 1.0), (1, 30, stale), (2, 10, 3.0)])
    p1 = _block([(1, 20, 4.0), (1, 30, 99.0), (2, 10, 98.0), (2, 20, 5.0)])
    ids = np.array([1, 2], np.int64)
    assert interleave(ids, [p0, p1]) is None
    got = merge_parts(ids, [p0, p1], 0, 100)
    assert _same(got, _reference([p0, p1]))
    assert got.v[np.flatnonzero((got.sid == 1) & (got.t == 30))[0]].tobytes() == np.float64(stale).tobytes()
    assert got.v[np.flatnonzero((got.sid == 2) & (got.t == 10))[0]] == 3.0


def test_random_parts_agree_with_the_reference():
    rng = np.random.default_rng(3)
    for trial in range(50):
        ids = np.unique(rng.integers(-2**63, 2**63 - 1, 6, dtype=np.int64))
        parts, t0 = [], {int(s): 0 for s in ids}
        for _ in range(rng.integers(1, 5)):
            rows = []
            for s in ids.tolist():
                n = int(rng.integers(0, 4))
                start = t0[s] - (int(rng.integers(0, 3)) if trial % 2 else 0)  # odd trials overlap
                ts = sorted(set(start + 10 * k + int(rng.integers(0, 3)) for k in range(n)))
                rows += [(s, t, float(rng.integers(0, 100))) for t in ts]
                if ts:
                    t0[s] = max(t0[s], ts[-1] + 1)
            parts.append(_block(rows) if rows else SampleBlock.empty())
        parts = [p for p in parts if len(p)]
        if parts:
            assert _same(merge_parts(ids, parts, -100, 10_000), _reference(parts)), trial
