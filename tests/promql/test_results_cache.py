"""The range-query results cache over the engine and the in-memory double: a refresh read from the cache answers
what one evaluation answers, before and after late samples, over the differential corpus's queries and data."""

from __future__ import annotations

import numpy as np
import promql_parser as pp
import pytest

from metricsgw.limits.context import QueryContext
from metricsgw.promql import cached_range, matrix_parts
from metricsgw.promql.engine import Engine
from metricsgw.promql.memsource import MemSource
from metricsgw.promql.reach import reach_ms
from metricsgw.promql.render import render_json
from metricsgw.promql.results_cache import LateLog, ResultsCache
from metricsgw.promql.value import Matrix
from metricsgw.storage.memory.late_writes import BUCKET_MS, SLOTS, LateWrites, touched_steps
from tests.conformance import dataset
from tests.e2e import queries

FRESH_MS = 300_000
NOW_MS = 1_800_000_000_000  # the copy ends at "now": its last 5 minutes are never cached
STEP_MS = 61_000


def _ctx() -> QueryContext:
    return QueryContext(timeout_s=60)


def _same(a: Matrix, b: Matrix) -> bool:
    return (a.labels == b.labels and np.array_equal(a.t_ms, b.t_ms) and np.array_equal(a.offsets, b.offsets)
            and np.array_equal(a.v.view(np.int64), b.v.view(np.int64)))  # bit for bit: NaNs and -0.0 too


class Setup:
    def __init__(self) -> None:
        self.copy = dataset.copies(NOW_MS)["head"]
        self.source = MemSource()
        for labels, t, v in self.copy.series:
            self.source.add(labels, t, v)
        self.late = LateWrites(FRESH_MS)
        self.engine = Engine(self.source)
        self.cache = ResultsCache(64 << 20, FRESH_MS, LateLog([self.late.state]), retention_ms=10 * 365 * 86400_000)

    def cached(self, query: str, start_ms: int, end_ms: int, now_ms: int = NOW_MS) -> bytes:
        """The answer's JSON through the cache."""
        return cached_range.range_query(self.engine, self.cache, query, start_ms / 1000, end_ms / 1000,
                                        STEP_MS / 1000, _ctx(), now_ms, storable=lambda: True,
                                        charge=lambda points, series: None)

    def fresh(self, query: str, start_ms: int, end_ms: int) -> bytes:
        """The answer's JSON from one evaluation."""
        return render_json(self.matrix(query, start_ms, end_ms))

    def matrix(self, query: str, start_ms: int, end_ms: int) -> Matrix:
        return self.engine.range(query, start_ms / 1000, end_ms / 1000, STEP_MS / 1000, _ctx())

    def write_late(self, now_ms: int) -> None:
        """Every third series gets samples 7 s after each of its samples in the copy's first half."""
        mid = (self.copy.start_ms + self.copy.end_ms) // 2
        for labels, t, v in self.copy.series[::3]:
            keep = t < mid
            late_t = t[keep] + 7000
            self.source.add(labels, late_t, v[keep] * 2 + 1)
            self.late.note(late_t, now_ms)


def _range_queries() -> list[str]:
    """The corpus's queries that a range query answers (not a range vector or a string)."""
    return [q for q in queries.QUERIES if "<END>" not in q and "<START>" not in q]


def _answer(fn, *args):
    try:
        return fn(*args)
    except Exception as err:  # the same error either way
        return type(err).__name__ + str(err)


def _equal(a, b) -> bool:
    return a == b  # JSON bytes, or the same error


@pytest.fixture(scope="module")
def setup():
    return Setup()


def test_a_refresh_answers_as_one_evaluation_before_and_after_late_samples():
    s = Setup()
    start = s.copy.start_ms + 3300
    problems, served = [], 0
    qs = _range_queries()
    for q in qs:  # fill, then a refresh a few steps later (the dashboard's window moved on)
        for shift in (0, 3 * STEP_MS):
            got, want = _answer(s.cached, q, start + shift, s.copy.end_ms + shift), \
                _answer(s.fresh, q, start + shift, s.copy.end_ms + shift)
            if not _equal(got, want):
                problems.append(f"before late samples, shift {shift}: {q}")
    served = s.cache.stats()[2]
    assert served > 0, "nothing was read from the cache"
    s.write_late(NOW_MS)
    changed = 0
    for q in qs:
        got, want = _answer(s.cached, q, start, s.copy.end_ms), _answer(s.fresh, q, start, s.copy.end_ms)
        if not _equal(got, want):
            problems.append(f"after late samples: {q}")
        again = _answer(s.cached, q, start, s.copy.end_ms)
        if not _equal(again, want):
            problems.append(f"after late samples, refreshed: {q}")
    for q in qs:  # the late samples did change answers: dropping nothing would have failed above
        before = Setup()
        old = _answer(before.fresh, q, start, s.copy.end_ms)
        changed += not _equal(old, _answer(s.fresh, q, start, s.copy.end_ms))
    assert not problems, "\n".join(problems[:10])
    assert changed > len(qs) // 4, changed


def test_the_newest_minutes_are_never_cached():
    s = Setup()
    q = "sum(rate(node_cpu_seconds_total[5m]))"
    s.cached(q, s.copy.start_ms, s.copy.end_ms)
    entries, _, _, _ = s.cache.stats()
    assert entries == 1
    entry = next(iter(s.cache._entries.values()))
    assert entry.hi <= NOW_MS - FRESH_MS < entry.hi + STEP_MS


def test_a_late_sample_drops_only_the_steps_it_touches():
    s = Setup()
    q = "sum(rate(node_cpu_seconds_total[5m]))"
    start, end = s.copy.start_ms, s.copy.end_ms
    s.cached(q, start, end)
    labels, t, v = next(x for x in s.copy.series if x[0][0][1] == "node_cpu_seconds_total")
    late_t = int(t[len(t) // 2]) + 5000  # mid-copy
    s.source.add(labels, np.array([late_t]), np.array([v[len(v) // 2] + 100.0]))
    s.late.note(np.array([late_t]), NOW_MS)
    served_before = s.cache.stats()[2]
    got = s.cached(q, start, end)
    assert got == s.fresh(q, start, end)
    served = s.cache.stats()[2] - served_before
    steps = (end - start) // STEP_MS + 1
    assert 0 < served < steps  # the steps before the late sample came from the cache, the rest were evaluated


def test_queries_looking_at_fixed_times_are_not_cached(setup):
    for q in ["up @ 1800000000", "up offset -1m", "up @ end()"]:
        assert reach_ms(pp.parse(q), 300_000, 60_000) is None
    assert reach_ms(pp.parse("max_over_time(rate(x[1m] offset 1h)[10m:1m])"), 300_000, 60_000) == \
        3_600_000 + 60_000 + 600_000


def test_no_log_no_cache():
    s = Setup()
    s.cache.late = LateLog([s.late.state, lambda: None])  # a shard starting
    q = "sum(up)"
    assert s.cached(q, s.copy.start_ms, s.copy.end_ms) == s.fresh(q, s.copy.start_ms, s.copy.end_ms)
    assert s.cache.stats()[0] == 0


def test_a_restarted_log_voids_what_it_marked():
    s = Setup()
    q = "sum(up)"
    s.cached(q, s.copy.start_ms, s.copy.end_ms)
    s.late.boot += 1  # a shard restarted: its log starts again
    s.cached(q, s.copy.start_ms, s.copy.end_ms)
    assert s.cache.stats()[2] == 0  # nothing served


def test_touched_steps_match_a_plain_reading():
    rng = np.random.default_rng(7)
    touched = rng.random(SLOTS) < 0.01
    steps = np.sort(rng.integers(0, 40 * 86400_000, 2000))
    for reach in (0, 60_000, 300_000, 3_600_000, SLOTS * BUCKET_MS + 1):
        got = touched_steps(touched, steps, reach)
        want = [any(touched[b % SLOTS] for b in range((s - reach) // BUCKET_MS, s // BUCKET_MS + 1)) for s in steps]
        assert got.tolist() == want


def test_late_writes_mark_only_samples_older_than_the_freshness():
    late = LateWrites(FRESH_MS)
    assert not late.note(np.array([NOW_MS - FRESH_MS, NOW_MS]), NOW_MS)
    assert late.state().seq == 0
    assert late.note(np.array([NOW_MS - FRESH_MS - 1, NOW_MS]), NOW_MS)
    state = late.state()
    assert state.seq == 1 and np.flatnonzero(state.touched_since(0)).tolist() == \
        [((NOW_MS - FRESH_MS - 1) // BUCKET_MS) % SLOTS]


def test_join_of_stretches_is_the_whole(setup):
    q = "rate(node_cpu_seconds_total[5m])"
    start, end = setup.copy.start_ms, setup.copy.end_ms
    whole = setup.matrix(q, start, end)
    cut = start + 7 * STEP_MS
    parts = [matrix_parts.between(whole, start, cut), matrix_parts.between(whole, cut + STEP_MS, end)]
    assert _same(matrix_parts.join(parts[::-1]), whole)
    assert _same(matrix_parts.join([setup.matrix(q, start, cut), setup.matrix(q, cut + STEP_MS, end)]), whole)


def test_the_cache_holds_about_the_bytes_it_counts():
    """What the entries really hold (traced allocations of the answers the cache keeps, label sets included)
    against ``bytes``, the figure its bound and /metrics use. orjson's metric JSON once held 4 KiB each, 4x the
    counted bytes at the soak's 500 nodes."""
    import gc
    import tracemalloc

    cache = ResultsCache(512 << 20, FRESH_MS, LateLog([LateWrites(FRESH_MS).state]), retention_ms=10 * 365 * 86400_000)
    marks = ((0, 0),)
    points, series = 120, 3000
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for k in range(4):
            labels = [(("Hostname", f"gpu-node-{i // 8:05d}"), ("UUID", f"GPU-{k:02d}{i:034x}"),
                       ("__name__", "DCGM_FI_DEV_GPU_UTIL"), ("gpu", str(i % 8)), ("instance", f"10.0.{i // 250}.{i % 250}:9400"),
                       ("job", "dcgm"), ("modelName", "NVIDIA H100 80GB HBM3")) for i in range(series)]
            t = np.tile(NOW_MS - 3_600_000 + np.arange(points, dtype=np.int64) * 30_000, series)
            v = np.random.default_rng(k).random(series * points) * 100
            m = Matrix(labels, t, v, np.arange(series + 1, dtype=np.int64) * points)
            cache.store((f"q{k}", 30_000, 0), int(t[0]), int(t[points - 1]), 30_000, m, marks, NOW_MS)
            del labels, t, v, m
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    counted = cache.stats()[1]
    assert cache.stats()[0] == 4
    assert held <= 1.25 * counted, (held, counted)
    assert counted <= 2 * held, (held, counted)
