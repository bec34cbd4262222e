"""limitk and limit_ratio (promql/limits.py, label_hash.py), as Prometheus 3.14 evaluates them; the corpus
(testdata3/limit.test, and those of aggregators.test and native_histograms.test) checks them at scale."""

from __future__ import annotations

import re

import numpy as np
import pytest
import xxhash

from metricsgw.errors import BadData, ExecError
from metricsgw.limits.context import QueryContext
from metricsgw.promql.engine import Engine
from metricsgw.promql.label_hash import encoding, sample_offsets
from metricsgw.promql.limits import instant_order
from metricsgw.promql.memsource import MemSource
from tests.promql import histogram_notation as hn

MIN = 60_000


@pytest.fixture(scope="module")
def source() -> MemSource:
    """x{i="0".."5"} with the values 5 1 3 0 2 4 at every minute (0..10m), in groups g="a" (i 0-2), "b" (3-5);
    h{i="0"} a histogram series, h{i="1"} a float one."""
    src = MemSource()
    t = np.arange(0, 11 * MIN, MIN, dtype=np.int64)
    for i, v in enumerate([5.0, 1.0, 3.0, 0.0, 2.0, 4.0]):
        src.add({"__name__": "x", "i": str(i), "g": "ab"[i // 3]}, t, np.full(len(t), v))
    src.add_histograms({"__name__": "h", "i": "0"}, t, [hn.blob(hn.parse("{{sum:1 count:1 buckets:[1]}}"), int(s))
                                                        for s in t])
    src.add({"__name__": "h", "i": "1"}, t, np.full(len(t), 7.0))
    return src


def _instant(source, query: str, compat: int = 3):
    ctx = QueryContext()
    return Engine(source, promql_compat=compat).instant(query, 600, ctx), ctx


def _rows(value) -> list[tuple[str, float]]:
    return [(dict(lb)["i"], v) for lb, v in zip(value.labels, value.values.tolist())]


def test_limitk_keeps_the_first_k_series_of_each_group_whole_in_heap_order(source):
    got, _ = _instant(source, "limitk by (g) (2, x)")
    # group a: i 0, 1 (5, 1), heap order 1, 5; group b: i 3, 4 (0, 2)
    assert _rows(got) == [("1", 1.0), ("0", 5.0), ("3", 0.0), ("4", 2.0)]
    assert all(dict(lb)["__name__"] == "x" for lb in got.labels)  # the name is kept
    four, _ = _instant(source, "limitk(4, x)")
    assert _rows(four) == [("3", 0.0), ("1", 1.0), ("2", 3.0), ("0", 5.0)]  # Go's heap.Push of 5, 1, 3, 0


def test_a_nan_goes_up_go_s_heap_past_anything_another_nan_too():
    labels = [(("i", str(i)),) for i in range(3)]
    order = instant_order(labels, np.ones(3, bool), np.array([np.nan, 1.0, np.nan]), False, [])
    assert order == [2, 1, 0]  # push NaN; push 1 (not less than NaN); push NaN: less than the NaN on top


def test_limitk_takes_k_at_each_step(source):
    m = Engine(source).range("count(limitk(scalar(x{i=\"2\"}) - 1 + (time() >= bool 300), x))", 0, 600, 60,
                             QueryContext())
    assert m.points(0)[1].tolist() == [2] * 5 + [3] * 6
    assert len(Engine(source).range("limitk(0.9, x)", 0, 600, 60, QueryContext()).labels) == 0


def test_limitk_ranks_histogram_and_float_samples_together(source):
    got, _ = _instant(source, "limitk(1, h)")
    assert len(got.labels) == 0 and [dict(lb)["i"] for lb in got.hist_labels] == ["0"]
    both, _ = _instant(source, "limitk(2, h)")
    assert _rows(both) == [("1", 7.0)] and len(both.hists) == 1


@pytest.mark.parametrize("query, error", [
    ("limitk(NaN, x)", "Parameter value is NaN"), ("limitk(NaN, nothing)", "Parameter value is NaN"),
    ("limitk(1e19, x)", "Scalar value 1e+19 overflows int64"),
    ("limitk(scalar(x{i=\"0\"}) - 1e19 * (time() < bool 300), x)", "Scalar value -1e+19 underflows int64"),
    ("limit_ratio(NaN, x)", "Ratio value is NaN")])
def test_a_parameter_out_of_range_fails_the_query(source, query, error):
    with pytest.raises(ExecError, match=re.escape(error)):
        Engine(source).range(query, 0, 600, 60, QueryContext())


def test_limitk_below_1_everywhere_is_empty_without_checking_more(source):
    assert _instant(source, "limitk(-1e300, x)")[0].labels == []


def test_the_stringlabels_encoding_is_hashed():
    assert encoding((("__name__", "up"), ("job", "a"))) == b"\x08__name__\x02up\x03job\x01a"
    long = "v" * 300
    assert encoding((("a", long),)) == b"\x01a\xff\x2c\x01\x00" + long.encode()
    offset = xxhash.xxh64_intdigest(b"\x08__name__\x02up\x03job\x01a") / 2.0 ** 64
    assert sample_offsets([(("__name__", "up"), ("job", "a"))]).tolist() == [offset]


def test_limit_ratio_keeps_the_series_its_hash_places_below_the_ratio(source):
    got, ctx = _instant(source, "limit_ratio(0.5, x)")
    labels = [lb for lb in _instant(source, "x")[0].labels]
    offsets = sample_offsets(labels)
    assert sorted(got.labels) == sorted(lb for lb, o in zip(labels, offsets) if o < 0.5)
    rest, _ = _instant(source, "limit_ratio(-0.5, x)")
    assert sorted(rest.labels) == sorted(lb for lb, o in zip(labels, offsets) if o >= 0.5)
    assert not ctx.warnings


def test_limit_ratio_beyond_1_is_capped_with_a_warning(source):
    got, ctx = _instant(source, "limit_ratio(1.5, x)")
    assert len(got.labels) == 6
    assert ctx.warnings == ["PromQL warning: ratio value should be between -1 and 1, got 1.5, capping to 1"]
    _, ctx = _instant(source, "limit_ratio(-2, x)")
    assert ctx.warnings == ["PromQL warning: ratio value should be between -1 and 1, got -2, capping to -1"]


@pytest.mark.parametrize("query, error", [
    ("limitk(2, x)", 'unknown function with name "limitk"'),
    ("limit_ratio(0.5, x) by (g)", 'unknown function with name "limit_ratio"'),
    ("limitk by (g) (2, x)", "unexpected <by>"), ("sum(limit_ratio without (g) (0.5, x))", "unexpected <without>")])
def test_prometheus_2_42_does_not_know_them(source, query, error):
    with pytest.raises(BadData, match=f"parse error: {error}"):
        _instant(source, query, compat=2)
