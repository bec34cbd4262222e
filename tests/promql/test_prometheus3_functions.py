"""The pieces of Prometheus 3's functions whose every case the 3.14 corpus does not reach: Go's ``%g`` (the text
count_values gives a histogram), facette/natsort's order (sort_by_label); what 2.x does not know."""

from __future__ import annotations

import numpy as np
import pytest

from metricsgw.errors import BadData
from metricsgw.limits.context import QueryContext
from metricsgw.promql import compat
from metricsgw.promql.engine import Engine
from metricsgw.promql.format import format_g
from metricsgw.promql.functions import natural_less
from metricsgw.promql.memsource import MemSource


@pytest.mark.parametrize("x, text", [
    (0.0, "0"), (-0.0, "-0"), (1.0, "1"), (-2.5, "-2.5"), (0.001, "0.001"), (0.0001, "0.0001"),
    (0.00001, "1e-05"), (123456.0, "123456"), (1e6, "1e+06"), (1234567.0, "1.234567e+06"), (1e21, "1e+21"),
    (1.5e-300, "1.5e-300"), (float("inf"), "+Inf"), (float("-inf"), "-Inf"), (float("nan"), "NaN"),
    (0.1 + 0.2, "0.30000000000000004"),
])
def test_format_g_writes_floats_as_go_does(x, text):
    assert format_g(x) == text


@pytest.mark.parametrize("a, b", [
    ("1", "2"), ("2", "10"), ("a2", "a10"), ("a", "b"), ("", "a"), ("x9y", "x10a"), ("007", "8"),
    ("abc", "abd"), ("1a", "1b"), ("a1b2", "a1b10"),
])
def test_natural_order(a, b):
    assert natural_less(a, b)
    assert not natural_less(b, a)
    assert not natural_less(a, a)


def test_natural_order_of_equal_numbers_with_leading_zeros_is_neither():
    # natsort skips leading zeros: "01" and "1" are the same number, neither sorts first
    assert not natural_less("01", "1") and not natural_less("1", "01")


def _source() -> MemSource:
    src = MemSource()
    t = np.array([10_000, 20_000, 30_000, 40_000], np.int64)
    src.add((("__name__", "m"), ("job", "a")), t, np.array([1.0, 5.0, 5.0, 2.0]))
    return src


def _values(query: str, compat_version: int = compat.PROMETHEUS_3) -> list[float]:
    return Engine(_source(), promql_compat=compat_version).instant(query, 50.0, QueryContext()).values.tolist()


@pytest.mark.parametrize("query", ["first_over_time(m[1m])", "mad_over_time(m[1m])", 'sort_by_label(m, "job")',
                                   "ts_of_max_over_time(m[1m])"])
def test_prometheus_2_does_not_know_the_functions_3_added(query):
    assert _values(query) != []
    with pytest.raises(BadData, match="unknown function"):
        _values(query, compat.PROMETHEUS_2)


def test_ts_of_max_takes_the_last_of_equal_maxima_and_mad_is_the_median_deviation():
    assert _values("ts_of_max_over_time(m[1m])") == [30.0]
    assert _values("ts_of_min_over_time(m[1m])") == [10.0]
    # median 3.5; deviations 2.5, 1.5, 1.5, 1.5: their median 1.5
    assert _values("mad_over_time(m[1m])") == [1.5]
