"""group_sum replaces np.add.at in sum/count/avg and the streamed batches: the same additions in
the same order, so the same bits (a NaN's sign aside, which no result shows)."""

from __future__ import annotations

import numpy as np
import pytest

from metricsgw.promql.aggregations import group_sum


def _same_bits(a: np.ndarray, b: np.ndarray) -> None:
    nan = np.isnan(a)
    assert (nan == np.isnan(b)).all()
    assert (a[~nan].view(np.int64) == b[~nan].view(np.int64)).all()  # -0.0 and 0.0 told apart


@pytest.mark.parametrize("groups", [1, 3, 40])
def test_group_sum_adds_rows_in_order_like_add_at(groups):
    rng = np.random.default_rng(groups)
    specials = rng.choice([0.0, -0.0, np.inf, -np.inf, np.nan, 1e308, -1e308], size=(300, 7))
    v = np.where(rng.random((300, 7)) < 0.6, rng.normal(size=(300, 7)) * 10.0 ** rng.integers(-3, 16, (300, 1)), specials)
    gid = rng.integers(0, groups, 300)
    want = np.zeros((groups, 7))
    with np.errstate(invalid="ignore", over="ignore"):
        np.add.at(want, gid, v)
        _same_bits(group_sum(gid, groups, v), want)
        # folded batch by batch into an accumulator, as the streamed sum does
        acc = np.zeros((groups, 7))
        for a in range(0, 300, 70):
            acc = group_sum(gid[a:a + 70], groups, v[a:a + 70], into=acc)
    _same_bits(acc, want)
    counts = np.zeros((groups, 7))
    np.add.at(counts, gid, (v != 0).astype(np.float64))
    _same_bits(group_sum(gid, groups, v != 0), counts)
