"""Binary operators between two vectors have two evaluations: whole (rows x steps) matrices when no
group_x labels are included, and row by row otherwise. Both must give the same bits, the same rows
in the same order and the same errors, whatever the matching."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from metricsgw.errors import ExecError
from metricsgw.promql import binary
from metricsgw.promql.value import Series

STEPS = 9


def _side(rng, name: str, n: int, extra: bool) -> Series:
    labels = []
    for i in range(n):
        pairs = [("__name__", name), ("job", f"j{i % 3}"), ("node", f"n{i}")]
        if extra:
            pairs.append(("zone", f"z{i % 2}"))
        labels.append(tuple(sorted(pairs)))
    values = rng.choice([0.0, -0.0, 1.5, -2.0, 3.0, np.inf, -np.inf, np.nan], size=(n, STEPS))
    values = np.where(rng.random((n, STEPS)) < 0.5, values, rng.normal(size=(n, STEPS)) * 1e3)
    mask = rng.random((n, STEPS)) < 0.8
    return Series(labels, np.where(mask, values, 0.0), mask)


def _both(op, lhs, rhs, on, names, card, return_bool):
    swap = card == "one-to-many"
    many, one = (rhs, lhs) if swap else (lhs, rhs)
    outs = []
    for way in (binary._match_rows, binary._match_each):
        try:
            sigs, row = binary._index_one_side(one, on, names, "left" if swap else "right")
            if way is binary._match_rows:
                outs.append(way(op, many, one, sigs, row, on, names, card, swap, return_bool, False))  # as 2.42
            else:
                outs.append(way(op, many, one, sigs, row, on, names, card, [], swap, return_bool))
        except ExecError as err:
            outs.append(str(err))
    return outs


@pytest.mark.parametrize("seed", range(4))
def test_matrix_and_row_by_row_matching_agree(seed):
    rng = np.random.default_rng(seed)
    lhs, rhs = _side(rng, "a", 12, extra=True), _side(rng, "b", 12, extra=False)
    matchings = [(False, [], "one-to-one"), (True, ["node", "job"], "one-to-one"), (False, ["zone"], "one-to-one"),
                 (True, ["job"], "many-to-one"), (True, ["job"], "one-to-many"), (True, ["job"], "one-to-one")]
    compared = 0
    for op, (on, names, card), rb in itertools.product(
            ["+", "-", "*", "/", "%", "^", "atan2", "==", "!=", ">", "<", ">=", "<="], matchings, [False, True]):
        if rb and op not in binary.COMPARE:
            continue
        fast, slow = _both(op, lhs, rhs, on, names, card, rb)
        if isinstance(slow, str) or isinstance(fast, str):
            assert fast == slow, (op, on, names, card)
            continue
        assert fast.labels == slow.labels, (op, on, names, card)
        assert np.array_equal(fast.mask, slow.mask)
        assert (fast.values.view(np.int64) == slow.values.view(np.int64)).all(), (op, on, names, card)
        compared += len(fast)
    assert compared > 100
