"""Counter reset hints of native histograms (promql/reset_hints.py, stats_decoding.py): Prometheus 3's warning of
conflicting counter resets, including where it reads histograms for their count and sum only and makes the
hints up as it goes (native_histograms.test checks the corpus' cases)."""

from __future__ import annotations

import pytest

from metricsgw.limits.context import QueryContext
from metricsgw.promql import reset_hints
from metricsgw.promql.engine import Engine
from metricsgw.promql.memsource import MemSource
from tests.promql import histogram_notation as hn

CONFLICT = "PromQL warning: conflicting counter resets during histogram "
MIN = 60_000


@pytest.fixture(scope="module")
def source() -> MemSource:
    """Two histograms of each series, at 0 and 6m: h{s="grows"} grows, h{s="drops"} has a counter reset;
    hinted{s="reset"} and hinted{s="not_reset"} carry the stored hints their names say."""
    src = MemSource()
    small, big = "{{sum:1 count:2 buckets:[1 1]}}", "{{sum:2 count:4 buckets:[2 2]}}"
    for name, texts in (("grows", (small, big)), ("drops", (big, small))):
        src.add_histograms({"__name__": "h", "s": name}, [0, 6 * MIN],
                           [hn.blob(hn.parse(x), t) for x, t in zip(texts, (0, 6 * MIN))])
    for hint in ("reset", "not_reset"):
        h = hn.parse("{{sum:1 count:2 counter_reset_hint:%s buckets:[1 1]}}" % hint)
        src.add_histograms({"__name__": "hinted", "s": hint}, [6 * MIN], [hn.blob(h, 6 * MIN)])
    return src


def _warnings(source, query: str, start_s: float, end_s: float | None = None, step_s: float = 60,
              compat: int = 3) -> list[str]:
    ctx = QueryContext()
    engine = Engine(source, promql_compat=compat)
    if end_s is None:
        engine.instant(query, start_s, ctx)
    else:
        engine.range(query, start_s, end_s, step_s, ctx)
    return ctx.warnings


def test_the_hint_of_a_sum_and_when_hints_conflict():
    R, N, U, G = reset_hints.RESET, reset_hints.NOT_RESET, reset_hints.UNKNOWN, reset_hints.GAUGE
    assert [reset_hints.combined(h) for h in ([N, N], [R], [N, U], [R, N], [G, R, N], [])] == [N, R, U, U, G, U]
    assert reset_hints.conflict([U, R, G, N]) and not reset_hints.conflict([R, R, U, G])


def test_stored_hints_conflict_in_sums_and_in_addition_and_subtraction(source):
    assert _warnings(source, "sum(hinted)", 360) == [CONFLICT + "aggregation"]
    assert _warnings(source, "avg(hinted)", 360) == [CONFLICT + "aggregation"]
    assert _warnings(source, 'hinted{s="reset"} + ignoring(s) hinted{s="not_reset"}', 360) == [CONFLICT + "addition"]
    assert _warnings(source, 'hinted{s="reset"} - ignoring(s) hinted{s="not_reset"}', 360) == \
        [CONFLICT + "subtraction"]
    assert _warnings(source, "sum(hinted)", 360, compat=2) == []  # 2.42 has no annotations


def test_stored_unknown_hints_do_not_conflict(source):
    assert _warnings(source, "sum(h)", 0, 360) == []


def test_reading_for_statistics_makes_hints_up_from_the_sample_returned_before(source):
    # From 0, the iterator returns the histogram at 0 before the one at 6m, and compares them: one series
    # is reset there, the other not.
    assert _warnings(source, "histogram_count(sum(h))", 0, 360) == [CONFLICT + "aggregation"]
    assert _warnings(source, "histogram_sum(sum(h))", 300, 360) == [CONFLICT + "aggregation"]
    assert _warnings(source, 'histogram_avg(h{s="grows"} - ignoring(s) h{s="drops"})', 0, 360) == \
        [CONFLICT + "subtraction"]
    assert _warnings(source, "histogram_count(sum(last_over_time(h[7m])))", 360) == [CONFLICT + "aggregation"]


def test_a_seek_forgets_the_sample_before(source):
    # At 6m alone (or from 5m59s) the lookback starts after 0: the iterator seeks past it, nothing to compare.
    assert _warnings(source, "histogram_count(sum(h))", 360) == []
    assert _warnings(source, "histogram_count(sum(h))", 359, 360, 1) == []
    # Steps wider than the lookback seek at every step.
    assert _warnings(source, "histogram_count(sum(h))", 0, 360, 360) == []


@pytest.mark.parametrize("query", ["histogram_quantile(0.5, sum(h))", "histogram_count(sum(last_over_time(h[7m:1m])))",
                                   "histogram_count(sum(h) </ 1)"])
def test_what_needs_the_buckets_keeps_the_stored_hints(source, query):
    """Under a histogram_quantile, a subquery or a trim operator, a selector is not read for statistics only."""
    assert _warnings(source, query, 0, 360) == []


def test_each_selector_is_read_as_its_own_place_in_the_query_says(source):
    query = "histogram_count(sum(h)) + histogram_quantile(0.5, sum(h))"
    assert _warnings(source, query, 0, 360) == [CONFLICT + "aggregation"]  # from the histogram_count side


def test_a_window_sums_its_own_series_hints_only(source):
    assert _warnings(source, "histogram_count(sum_over_time(h[7m]))", 360) == []
