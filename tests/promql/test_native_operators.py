"""Native histograms through the PromQL nodes beyond selection and rate (promql/native_ops.py): range
selectors, the *_over_time functions that count samples, histogram * / scalar, histogram +/- histogram,
the set operators, avg; and the refusal (400, never an empty answer) of what is not evaluated over them.
Answers are checked against Prometheus 2.42 in tests/e2e/test_native_differential.py; here the engine's
own invariants, in-process."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from metricsgw.errors import NotSupported
from metricsgw.limits.context import QueryContext
from metricsgw.model import canonical, series_id
from metricsgw.promql import native
from metricsgw.promql.engine import Engine
from metricsgw.promql.render import render
from metricsgw.storage.batch import AppendBatch, NativeSamples
from metricsgw.storage.store import Storage
from tests.native_requests import histogram_bytes, int_histogram

STEP_MS = 15_000
POINTS = 21  # 5 minutes at 15 s


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """Two integer histogram counters (growing: scale k + 1), and a float counter ``floats``."""
    st = Storage(str(tmp_path_factory.mktemp("native-ops")))
    st.open()
    now = int(time.time()) // 60 * 60_000  # on the minute: a subquery's steps [1m] fall on samples
    t = [now - (POINTS - 1 - k) * STEP_MS for k in range(POINTS)]
    new, sids, ts, blobs = [], [], [], []
    for job in ("a", "b"):
        labels = canonical([("__name__", "nh"), ("job", job)])
        new.append((series_id(labels), labels))
        for k, tk in enumerate(t):
            sids.append(series_id(labels))
            ts.append(tk)
            blobs.append(histogram_bytes(int_histogram(tk, k + 1)))
    floats = canonical([("__name__", "floats"), ("job", "a")])
    new.append((series_id(floats), floats))
    asyncio.run(st.append(AppendBatch(new_series=new, sid=np.full(POINTS, series_id(floats), np.int64),
                                      t=np.array(t, np.int64), v=np.arange(POINTS, dtype=np.float64),
                                      native=NativeSamples(np.array(sids, np.int64), np.array(ts, np.int64), blobs))))
    yield Engine(st, promql_compat=2), now / 1000  # checked against 2.42: its windows
    st.close(flush=False)


def _ask(loaded, query: str) -> dict:
    engine, now_s = loaded
    return render(engine.instant(query, now_s, QueryContext()))


def _range(loaded, query: str) -> dict:
    engine, now_s = loaded
    return render(engine.range(query, now_s - 120, now_s, 30, QueryContext()))


def test_a_range_selector_shows_each_series_histograms_in_its_window(loaded):
    out = _ask(loaded, "nh[1m]")
    assert out["resultType"] == "matrix"
    assert [(r["metric"]["job"], len(r["histograms"])) for r in out["result"]] == [("a", 5), ("b", 5)]
    last = out["result"][0]["histograms"][-1]
    assert last[1] == native.to_json(native.decode(histogram_bytes(int_histogram(0, POINTS))))
    mixed = _ask(loaded, '{job="a"}[30s]')["result"]  # a float series beside them: values, not histograms
    assert [sorted(r) for r in mixed] == [["metric", "values"], ["histograms", "metric"]]


def test_counting_functions_count_histogram_samples(loaded):
    assert [r["value"][1] for r in _ask(loaded, "count_over_time(nh[1m])")["result"]] == ["5", "5"]
    assert [r["value"][1] for r in _ask(loaded, "present_over_time(nh[1m])")["result"]] == ["1", "1"]
    assert _ask(loaded, "absent(nh)")["result"] == [] and _ask(loaded, "absent_over_time(nh[1m])")["result"] == []
    assert [r["value"][1] for r in _ask(loaded, 'timestamp(nh{job="a"})')["result"]] == [str(int(loaded[1]))]


def test_histogram_times_a_scalar_scales_every_bucket(loaded):
    twice = _ask(loaded, "rate(nh[5m]) * 2")["result"]
    added = _ask(loaded, "rate(nh[5m]) + rate(nh[5m])")["result"]
    assert twice == added == _ask(loaded, "2 * rate(nh[5m])")["result"] and len(twice) == 2
    assert "__name__" not in twice[0]["metric"]
    one = _ask(loaded, "histogram_count(rate(nh[5m]))")["result"][0]["value"][1]
    assert _ask(loaded, "histogram_count(rate(nh[5m]) / 60)")["result"][0]["value"][1] == repr(float(one) / 60)


def test_unary_minus_negates_every_bucket(loaded):
    assert _ask(loaded, "-nh")["result"] == _ask(loaded, "nh * -1")["result"]
    assert _ask(loaded, "histogram_count(-nh)")["result"][0]["value"][1].startswith("-")


def test_dividing_a_histogram_by_zero_drops_its_buckets(loaded):
    """As Prometheus 3's FloatHistogram.Div: counts and sum divided (x/0), buckets dropped, the zero bucket kept."""
    h = _ask(loaded, 'nh{job="a"} / 0')["result"][0]["histogram"][1]
    assert h == {"count": "+Inf", "sum": "+Inf", "buckets": [[3, "-0.001", "0.001", "+Inf"]]}


def test_histograms_add_and_subtract_by_vector_matching(loaded):
    total = _ask(loaded, "sum(nh)")["result"][0]["histogram"][1]
    assert _ask(loaded, 'nh{job="a"} + ignoring(job) nh{job="b"}')["result"][0]["histogram"][1] == total
    zero = _ask(loaded, "nh - nh")["result"]
    assert [r["histogram"][1] for r in zero] == [{"count": "0", "sum": "0"}] * 2
    assert _range(loaded, "sum(nh) - sum(nh offset 1m)")["result"][0]["histograms"]


def test_avg_is_the_sum_divided_by_the_count(loaded):
    avg = _ask(loaded, "histogram_sum(avg(nh))")["result"][0]["value"][1]
    assert float(avg) == float(_ask(loaded, "histogram_sum(sum(nh))")["result"][0]["value"][1]) / 2


def test_set_operators_keep_or_drop_histogram_samples(loaded):
    assert [r["metric"]["job"] for r in _ask(loaded, 'nh and on(job) floats')["result"]] == ["a"]
    assert [r["metric"]["job"] for r in _ask(loaded, 'nh unless on(job) floats')["result"]] == ["b"]
    either = _ask(loaded, 'floats or on(job) nh')["result"]
    assert [(r["metric"]["__name__"], "histogram" in r) for r in either] == [("floats", False), ("nh", True)]
    assert [r["metric"]["__name__"] for r in _ask(loaded, 'floats and on(job) nh')["result"]] == ["floats"]


def test_a_subquery_over_histograms_is_a_range_vector_of_them(loaded):
    assert len(_ask(loaded, "nh[2m:1m]")["result"][0]["histograms"]) == 3
    rates = _ask(loaded, "rate(nh[5m:1m])")["result"]
    assert [sorted(r) for r in rates] == [["histogram", "metric"]] * 2
    assert _ask(loaded, "count_over_time(nh[5m:1m])")["result"][0]["value"][1] == "6"


def test_prometheus_3s_histogram_functions(loaded):
    """histogram_avg = sum / count; the spread of the buckets' geometric means around it (int_histogram: count
    12, sum 18.4; buckets (-4,-2] 1, (-2,-1] 2, zero 2, (0.5,1] 1, (1,2] 2, (4,8] 1, (8,16] 3, at scale 21)."""
    assert float(_ask(loaded, 'histogram_avg(nh{job="a"})')["result"][0]["value"][1]) == (18.4 * 21) / (12 * 21)
    mean = 18.4 / 12
    points = [(-8 ** 0.5, 1), (-(2 ** 0.5), 2), (0, 2), (0.5 ** 0.5, 1), (2 ** 0.5, 2), (32 ** 0.5, 1), (128 ** 0.5, 3)]
    want = sum(n * (v - mean) ** 2 for v, n in points) / 12
    got = float(_ask(loaded, 'histogram_stdvar(nh{job="a"})')["result"][0]["value"][1])
    assert abs(got - want) < 1e-9 * want
    assert float(_ask(loaded, 'histogram_stddev(nh{job="a"})')["result"][0]["value"][1]) == got ** 0.5


def test_last_over_time_is_the_last_histogram(loaded):
    assert _ask(loaded, "last_over_time(nh[1m])")["result"] == _ask(loaded, "nh")["result"]


@pytest.mark.parametrize("query", [
    "max_over_time(nh[5m])", "abs(nh)", "nh > 0", "nh * nh", "max(nh)", "max_over_time(nh[5m:1m])", "1 - nh",
    'label_replace(nh, "x", "y", "", "")', "count(abs(nh))", "histogram_quantile(scalar(sum(nh)), nh)",
    'nh + on(job) floats', "sort(nh)", "topk(1, nh)", "irate(nh[1m])",
    'sum by (job) ({job="a"})', 'avg({__name__=~"nh|floats"})'])
def test_what_is_not_evaluated_over_histograms_is_refused(loaded, query):
    with pytest.raises(NotSupported, match="native histogram"):
        _ask(loaded, query)


def test_label_functions_relabel_histogram_samples_as_prometheus_3(loaded):
    engine, now_s = loaded
    three = (Engine(engine.source, promql_compat=3), now_s)
    plain = _ask(three, "nh")["result"]
    for query, extra in (('label_replace(nh, "x", "j-$1", "job", "(.*)")', lambda job: {"x": f"j-{job}"}),
                         ('label_join(nh, "x", "+", "__name__", "job")', lambda job: {"x": f"nh+{job}"})):
        got = _ask(three, query)["result"]
        assert [r["metric"] for r in got] == [{**r["metric"], **extra(r["metric"]["job"])} for r in plain]
        assert [r["histogram"] for r in got] == [r["histogram"] for r in plain]
        with pytest.raises(NotSupported, match="native histogram"):  # 2.42 made each the float 0
            _ask(loaded, query)
    with pytest.raises(Exception, match="same labelset"):  # two series made one, as Prometheus refuses
        _ask(three, 'label_replace(nh, "job", "same", "", "")')


def test_sum_and_avg_over_time_add_a_windows_histograms(loaded):
    total = _ask(loaded, "histogram_count(sum_over_time(nh[1m]))")["result"]
    assert [float(r["value"][1]) for r in total] == [12.0 * sum(range(POINTS - 4, POINTS + 1))] * 2  # scales 17..21
    mean = _ask(loaded, "histogram_count(avg_over_time(nh[1m]))")["result"]
    assert [float(r["value"][1]) for r in mean] == [12.0 * sum(range(POINTS - 4, POINTS + 1)) / 5] * 2


@pytest.mark.parametrize("query", ["sum_over_time(floats[5m])", "-floats", "floats > 0", "max(floats)",
                                   "rate(floats[5m:1m])", "count(abs(floats))", "sort(floats)"])
def test_the_same_shapes_over_floats_answer(loaded, query):
    assert _ask(loaded, query)["result"]
