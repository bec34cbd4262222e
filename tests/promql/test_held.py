"""--query.max-samples counted as Prometheus 2.42's engine counts (promql/held.py): the peaks below are
worked out by hand from engine.go (vectorSelector, matrixSelector, rangeEval, the Call with a matrix
argument, evalSubquery); at the peak a query is answered, one below it refused."""

from __future__ import annotations

import numpy as np
import pytest

from metricsgw.errors import LimitExceeded
from metricsgw.limits.context import QueryContext
from metricsgw.promql.engine import Engine
from metricsgw.promql.memsource import MemSource

END_S = 600


@pytest.fixture(scope="module")
def src() -> MemSource:
    s = MemSource()
    t = np.arange(0, END_S * 1000 + 1, 15_000)  # 41 samples
    for i in range(10):
        s.add({"__name__": "m", "i": str(i)}, t, np.arange(len(t)) * (i + 1.0))
    return s


def _peak(src, run) -> int:
    ctx = QueryContext()
    run(Engine(src, promql_compat=2), ctx)
    with pytest.raises(LimitExceeded, match="too many samples.*--query.max-samples"):
        run(Engine(src, promql_compat=2), QueryContext(max_samples=ctx.peak_samples - 1))
    run(Engine(src, promql_compat=2), QueryContext(max_samples=ctx.peak_samples))  # at the limit: answered
    return ctx.peak_samples


def _instant(q):
    return lambda e, ctx: e.instant(q, END_S, ctx)


def _range(q, start, step):
    return lambda e, ctx: e.range(q, start, END_S, step, ctx)


def test_an_instant_selector_holds_a_point_per_series_not_its_lookback(src):
    assert _peak(src, _instant("m")) == 10
    assert _peak(src, _range("m", 300, 60)) == 10 * 6


def test_an_aggregation_holds_its_input_step_by_step_beside_it(src):
    # the selector's 10 points, then at the step: its 10 input points and its 1 output
    assert _peak(src, _instant("count(m)")) == 10 + 10 + 1
    # 6 steps: 60 points held; at the last step 10 inputs and the 6 outputs so far
    assert _peak(src, _range("count(m)", 300, 60)) == 60 + 10 + 6


def test_a_range_function_holds_one_series_window_at_a_time(src):
    # m[5m] at 600 s: 21 samples a window; series i holds the i outputs before it, its window and its point
    assert _peak(src, _instant("rate(m[5m])")) == 9 + 21 + 1
    # 6 steps: the last series holds 9 x 6 outputs before it, then its last window with its 6 outputs
    assert _peak(src, _range("rate(m[5m])", 300, 60)) == 9 * 6 + 21 + 6
    assert _peak(src, _range("sum(rate(m[5m]))", 300, 60)) == 9 * 6 + 21 + 6  # the sum's step holds 60 + 10 + 6


def test_a_matrix_selector_asked_for_as_such_holds_all_its_samples(src):
    assert _peak(src, _instant("m[5m]")) == 10 * 21


def test_a_binary_operation_holds_both_sides_and_its_output(src):
    # lhs 10 points, the literal 1; at the step 10 + 1 inputs and 10 outputs
    assert _peak(src, _instant("m * 2")) == 11 + 11 + 10


def test_a_subquery_holds_its_points_until_the_function_over_it_is_done(src):
    # m[5m:1m]: 6 grid points per series = 60 held; then series by series windows of 6 and their points
    assert _peak(src, _instant("max_over_time(m[5m:1m])")) == 60 + 9 + 6 + 1
    ctx = QueryContext()
    Engine(src, promql_compat=2).instant("max_over_time(m[5m:1m])", END_S, ctx)
    assert ctx.samples == 10  # the subquery's 60 points let go; the 10 outputs held


def test_batches_of_series_count_as_all_at_once(src):
    whole, batched = QueryContext(), QueryContext()
    Engine(src, batch_samples=10**12, promql_compat=2).range("sum(rate(m[5m]))", 300, END_S, 60, whole)
    Engine(src, batch_samples=50, promql_compat=2).range("sum(rate(m[5m]))", 300, END_S, 60, batched)
    assert batched.peak_samples == whole.peak_samples


def test_raw_samples_are_charged_as_memory_only(src):
    ctx = QueryContext(max_samples=10)
    Engine(src, promql_compat=2).instant("m", END_S, ctx)  # 10 series x 21 samples of lookback read
    assert ctx.peak_samples == 10 and ctx.bytes >= 10 * 21 * 24
    raw = QueryContext(max_samples=10)  # a remote read's context: raw samples are what is counted
    with pytest.raises(LimitExceeded):
        raw.charge_loaded(11, "read")
