"""--query.promql-compat: each PromQL difference between Prometheus 2.42 and 3 (promql/compat.py), both ways.
The corpora check them at scale (2.42's with 2, 3.14's with the default); here one query shows each."""

from __future__ import annotations

import numpy as np
import pytest

from metricsgw.config import ConfigError, load
from metricsgw.errors import BadData
from metricsgw.limits.context import QueryContext
from metricsgw.procs.layout import Child, Layout, child_config
from metricsgw.promql.engine import Engine
from metricsgw.promql.memsource import MemSource


@pytest.fixture(scope="module")
def source() -> MemSource:
    src = MemSource()
    t = np.arange(0, 601_000, 60_000, dtype=np.int64)  # a sample every minute, on the minute, 0..10m
    src.add((("__name__", "m"), ("a", "x\ny")), t, np.arange(len(t), dtype=np.float64))
    src.add((("__name__", "once"),), np.array([0], np.int64), np.array([1.0]))
    return src


def _values(source, query: str, t_s: float, compat: int) -> list[float]:
    return Engine(source, promql_compat=compat).instant(query, t_s, QueryContext()).values.tolist()


@pytest.mark.parametrize("query", ["count_over_time(m[5m])", "count_over_time(m[5m:1m])"])
def test_a_window_leaves_out_the_sample_at_its_start_in_3_and_keeps_it_in_2(source, query):
    assert _values(source, query, 600, 3) == [5.0]
    assert _values(source, query, 600, 2) == [6.0]


def test_the_lookback_leaves_out_the_sample_at_its_start_in_3_and_keeps_it_in_2(source):
    assert _values(source, "once", 300, 3) == []
    assert _values(source, "once", 300, 2) == [1.0]


def test_a_regex_dot_matches_a_newline_in_3_only(source):
    assert _values(source, 'm{a=~"x.y"}', 600, 3) == [10.0]
    assert _values(source, 'm{a=~"x.y"}', 600, 2) == []
    replaced = 'label_replace(m, "b", "$1", "a", "(x.y)")'
    assert [dict(lb).get("b") for lb in Engine(source).instant(replaced, 600, QueryContext()).labels] == ["x\ny"]
    got = Engine(source, promql_compat=2).instant(replaced, 600, QueryContext())
    assert [dict(lb).get("b") for lb in got.labels] == [None]


def test_a_duration_without_a_unit_is_seconds_in_3_and_refused_in_2(source):
    assert _values(source, "count_over_time(m[300])", 600, 3) == [5.0]
    with pytest.raises(BadData, match="missing unit character in duration"):
        _values(source, "count_over_time(m[300])", 600, 2)


def test_each_version_knows_holt_winters_by_its_own_name_only(source):
    three = _values(source, "double_exponential_smoothing(m[5m], 0.5, 0.5)", 600, 3)
    assert three == _values(source, "holt_winters(m[5m], 0.5, 0.5)", 600, 2) != []
    for query, compat in (("holt_winters(m[5m], 0.5, 0.5)", 3), ("double_exponential_smoothing(m[5m], 0.5, 0.5)", 2)):
        with pytest.raises(BadData, match='unknown function with name "'):
            _values(source, query, 600, compat)


def test_the_flag_is_3_by_default_takes_2_and_reaches_the_query_processes():
    assert load({}).query_promql_compat == 3
    cfg = load({"query.promql-compat": "2"})
    querier = child_config(cfg, Child("querier", 0, "/run/x/querier-0.sock"), Layout(1, 1, "/run/x"))
    assert querier.query_promql_compat == 2
    with pytest.raises(ConfigError):
        load({"query.promql-compat": "4"})


def test_the_trim_operators_are_3s(source):
    assert _values(source, "m </ 5", 600, 3) == []  # a float sample is dropped (histograms are trimmed)
    with pytest.raises(BadData, match="parse error"):
        _values(source, "m </ 5", 600, 2)


def test_sums_are_compensated_in_3_whole_or_series_by_series():
    src = MemSource()
    for i, v in enumerate([1e16, 1, 1, -1e16]):
        src.add({"__name__": "n", "a": str(i)}, [0], [v])
    for batch_samples in (2_000_000, 1):  # one batch, and the cancelling cells added again across batches
        assert Engine(src, batch_samples=batch_samples).instant("sum(n)", 0, QueryContext()).values.tolist() == [2.0]
        assert Engine(src, batch_samples=batch_samples, promql_compat=2).instant(
            "sum(n)", 0, QueryContext()).values.tolist() == [0.0]
