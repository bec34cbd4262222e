"""The engine's public API: errors, limits, range-query shape, rendering, and the runner itself."""

from __future__ import annotations

import json

import numpy as np
import pytest

from metricsgw.errors import BadData, LimitExceeded, NotSupported
from metricsgw.limits.context import SAMPLE_BYTES, QueryContext
from metricsgw.model import STALE_NAN
from metricsgw.promql.engine import Engine
from metricsgw.promql.format import format_json, format_value, format_values
from metricsgw.promql.memsource import MemSource
from metricsgw.promql.render import render, render_json
from metricsgw.promql.value import Matrix, Scalar, Vector
from tests.promql.promqltest import run_script


@pytest.fixture
def src() -> MemSource:
    s = MemSource()
    t = np.arange(0, 600_000, 15_000)
    s.add({"__name__": "up", "job": "a"}, t, np.ones(len(t)))
    s.add({"__name__": "up", "job": "b"}, t, np.zeros(len(t)))
    s.add({"__name__": "req", "job": "a"}, t, np.arange(len(t)) * 10.0)
    return s


def test_range_steps_are_aligned_to_start(src):
    m = Engine(src).range("up", 1, 10, 3, QueryContext())
    assert isinstance(m, Matrix)
    ts, _ = m.points(0)
    assert ts.tolist() == [1000, 4000, 7000, 10000]


def test_too_many_points_is_bad_data_with_prometheus_text(src):
    with pytest.raises(BadData, match=r"exceeded maximum resolution of 11,000 points per timeseries. "
                                      r"Try decreasing the query resolution \(\?step=XX\)"):
        Engine(src).range("up", 0, 11001, 1, QueryContext())
    Engine(src).range("up", 0, 11000, 1, QueryContext())  # exactly 11,000 intervals is allowed


def test_parse_error_is_bad_data():
    with pytest.raises(BadData, match=r'invalid parameter "query": .*parse error'):
        Engine(MemSource()).instant("sum(", 0, QueryContext())
    with pytest.raises(BadData):
        Engine(MemSource()).instant("rate(up)", 0, QueryContext())


@pytest.mark.parametrize("query", ['up{job="a" or job="b"}', "up @ -10", "info(up)"])
def test_unsupported_is_not_supported(query):
    with pytest.raises(NotSupported):
        Engine(MemSource()).instant(query, 0, QueryContext())


@pytest.mark.parametrize("query", ["up[100]", "up offset 50", "sum_over_time(up[5m:10])"])
def test_durations_need_a_unit_as_in_prometheus_2_42_and_not_3(query):
    # The parser package reads bare numbers as seconds, as Prometheus 3 does; Prometheus 2.42 refuses them.
    with pytest.raises(BadData, match="parse error"):
        Engine(MemSource(), promql_compat=2).instant(query, 0, QueryContext())
    Engine(MemSource()).instant(query, 0, QueryContext())


def test_range_vector_as_range_query_is_bad_data(src):
    with pytest.raises(BadData, match="range vector"):
        Engine(src).range("up[5m]", 0, 60, 15, QueryContext())


def test_scalar_range_query_is_one_series(src):
    m = Engine(src).range("1 + 1", 0, 60, 30, QueryContext())
    assert m.labels == [()]
    assert m.points(0)[1].tolist() == [2, 2, 2]


class RecordingSource:
    """The real MemSource, recording the order of calls the engine makes."""

    def __init__(self, inner: MemSource) -> None:
        self.inner, self.calls = inner, []

    def select_series(self, *a, **kw):
        self.calls.append("select")
        return self.inner.select_series(*a, **kw)

    def estimate_samples(self, *a, **kw):
        self.calls.append("estimate")
        return self.inner.estimate_samples(*a, **kw)

    def read_samples(self, *a, **kw):
        self.calls.append("read")
        return self.inner.read_samples(*a, **kw)


def test_estimate_is_charged_before_reading(src):
    rec = RecordingSource(src)
    with pytest.raises(LimitExceeded, match="too much memory"):
        Engine(rec, promql_compat=2).instant("rate(up[10m])", 600, QueryContext(max_bytes=10 * SAMPLE_BYTES))
    assert rec.calls == ["select", "estimate"]  # refused by its memory before any sample was read
    rec.calls.clear()
    # --query.max-samples counts what Prometheus's engine holds, which the raw estimate (80) is not
    # a lower bound of: rate holds one series' window (40) at a time, so no refusal by it up front.
    ctx = QueryContext(max_samples=50)
    Engine(rec, promql_compat=2).instant("rate(up[10m])", 600, ctx)
    assert rec.calls == ["select", "estimate", "read"]
    assert ctx.bytes >= 80 * SAMPLE_BYTES and ctx.peak_samples == 40 + 1 + 1  # a window, its point, the other's


def test_staleness_in_range_query():
    s = MemSource()
    s.add({"__name__": "m"}, [0, 10_000, 20_000, 30_000], [0, 1, STALE_NAN, 2])
    m = Engine(s).range("m", 0, 40, 10, QueryContext())
    ts, vs = m.points(0)
    assert ts.tolist() == [0, 10_000, 30_000, 40_000]  # gone at 20s, back at 30s
    assert vs.tolist() == [0, 1, 2, 2]


def test_same_labelset_error():
    s = MemSource()
    s.add({"__name__": "a", "x": "1"}, [0, 15_000], [1, 2])
    s.add({"__name__": "b", "x": "1"}, [0, 15_000], [2, 3])
    from metricsgw.errors import ExecError

    with pytest.raises(ExecError, match="same labelset"):
        Engine(s).instant('rate({__name__=~"a|b"}[5m])', 60, QueryContext())


# Strings seen from /usr/bin/prometheus 2.42 for vector(<x>) and count_values("x", vector(<x>)).
@pytest.mark.parametrize("x,want", [
    (1e21, "1e+21"), (1e20, "100000000000000000000"), (1e-7, "1e-07"), (1e-5, "0.00001"),
    (123456789012345678.0, "123456789012345680"), (0.1, "0.1"), (-0.0, "-0"), (1 / 3, "0.3333333333333333"),
    (2.0**70, "1.1805916207174113e+21"), (9.98846567431158e307, "9.98846567431158e+307"),
    (float("nan"), "NaN"), (float("inf"), "+Inf"), (float("-inf"), "-Inf"), (5.0, "5"),
])
def test_json_value_format_matches_prometheus(x, want):
    assert format_json(x) == want
    got = render(Vector(100.0, [()], np.array([x])))
    assert got == {"resultType": "vector", "result": [{"metric": {}, "value": [100, want]}]}


@pytest.mark.parametrize("x,want", [(1e21, "1000000000000000000000"), (1e-7, "0.0000001"), (6.0, "6")])
def test_label_value_format_matches_prometheus(x, want):
    assert format_value(x) == want


def test_render_shapes(src):
    assert render(Scalar(4.0, 2.0)) == {"resultType": "scalar", "result": [4, "2"]}
    m = Engine(src).range("req", 0.5, 60.5, 30, QueryContext())
    data = render(m)
    assert data["resultType"] == "matrix"
    assert data["result"][0]["values"][0] == [0.5, "0"]
    assert json.loads(render_json(m)) == data
    vals = np.array([0.5, 1e-7, 3.0, float("nan"), 2e16, 1.5e-5])
    mm = Matrix([(("a", "b"),)], np.array([1, 1000, 1500, 2001, 3000, 4123]), vals, np.array([0, 6]))
    assert json.loads(render_json(mm)) == render(mm)
    assert [p[1] for p in render(mm)["result"][0]["values"]] == ["0.5", "1e-07", "3", "NaN", "20000000000000000", "0.000015"]


def test_matrix_json_formats_every_value_as_the_scalar_path_does():
    """render_json formats a matrix in bulk (orjson digits + fixes); every value must come out
    as format_json writes it, across magnitudes, signs, integers and non-finite values."""
    rng = np.random.default_rng(7)
    vals = np.concatenate([10.0 ** rng.uniform(-12, 25, 3000) * rng.choice([-1, 1], 3000),
                           np.round(rng.uniform(-1e6, 1e6, 500)), [0.0, -0.0, np.nan, np.inf, -np.inf, 1e-6,
                                                                  1e-4, 1e15, 1e21, 5e-324, 2.0**70]])
    t = np.arange(len(vals), dtype=np.int64) * 250 - 10_000  # fractional and negative seconds
    m = Matrix([(("__name__", "x"), ("pod", "caf\u00e9 \"q\""))], t, vals, np.array([0, len(vals)]))
    got = json.loads(render_json(m))
    assert got["result"][0]["metric"] == {"__name__": "x", "pod": "caf\u00e9 \"q\""}
    assert [p[1] for p in got["result"][0]["values"]] == [format_json(x) for x in vals.tolist()]
    assert [p[0] for p in got["result"][0]["values"]] == [x / 1000 for x in t.tolist()]


def test_integral_values_format_in_bulk_as_one_by_one():
    """Whole numbers are written in bulk as int64 (orjson): the same strings as the scalar path, signs,
    negative zero and the largest magnitudes below 1e15 included, alone and among fractions."""
    rng = np.random.default_rng(11)
    whole = np.concatenate([np.round(rng.uniform(-1e15, 1e15, 2000)), rng.integers(-1000, 1000, 2000).astype(float),
                            [0.0, -0.0, 1e15 - 1, -(1e15 - 1), 2.0**53, -(2.0**53)]])
    assert format_values(whole) == [format_value(x) for x in whole.tolist()]
    mixed = rng.permutation(np.concatenate([whole, rng.uniform(-100, 100, 2000)]))
    m = Matrix([()], np.arange(len(mixed), dtype=np.int64) * 1000, mixed, np.array([0, len(mixed)]))
    assert [p[1] for p in json.loads(render_json(m))["result"][0]["values"]] == [format_json(x) for x in mixed.tolist()]


def test_runner_reports_wrong_values_with_line(tmp_path):
    script = tmp_path / "bad.test"
    script.write_text(
        "load 1m\n  m{a=\"1\"} 1 2 3\n\n"
        "eval instant at 2m m\n  m{a=\"1\"} 4\n\n"
        "eval_fail instant at 2m m\n\n"
        "eval instant at 2m m\n  m{a=\"1\"} 3\n"
    )
    n, failures = run_script(str(script), lambda s: Engine(s))
    assert n == 3
    assert len(failures) == 2
    assert failures[0].startswith("bad.test:4: m: series {__name__=\"m\", a=\"1\"}: got 3.0, want 4.0")
    assert failures[1].startswith("bad.test:7:") and "want an error" in failures[1]


def test_summation_order_is_prometheus_exact():
    """Values where the summation algorithm shows; the expected ones are what
    /usr/bin/prometheus 2.42 returned for the same data (Kahan-Neumaier in *_over_time,
    plain running sums in aggregations, kept with --query.promql-compat=2)."""
    s = MemSource()
    s.add({"__name__": "m"}, [0, 60_000, 120_000, 180_000], [1e16, 1, 1, -1e16])
    for i, v in enumerate([1e16, 1, 1, -1e16]):
        s.add({"__name__": "n", "a": str(i)}, [180_000], [v])
    e = Engine(s, promql_compat=2)

    def one(q: str, engine=e) -> float:
        got = engine.instant(q, 180, QueryContext())
        return float(got.values[0])

    # Prometheus 3 adds in aggregations with Kahan compensation too.
    assert one("sum(n)", Engine(s)) == 2.0 and one("avg(n)", Engine(s)) == 0.5

    assert one("sum_over_time(m[5m])") == 2.0
    assert one("avg_over_time(m[5m])") == 0.0
    assert one("stdvar_over_time(m[5m])") == 4.999999999999999e31
    assert one("sum(n)") == 0.0
    assert one("avg(n)") == 0.0
    assert one("stdvar(n)") == 4.999999999999999e31
