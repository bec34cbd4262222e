"""A query's batches of series evaluated side by side (promql/parallel.py): the same answer bit for bit,
results in order, failures raised in order after the parts beside them end, and what the budgets count."""

from __future__ import annotations

import threading
import time

import pytest

from metricsgw.errors import LimitExceeded
from metricsgw.limits.context import QueryContext
from metricsgw.promql import batching
from metricsgw.promql.engine import Engine
from metricsgw.promql.parallel import Parts
from tests.promql.test_batching import QUERIES, CountingSource, _same, src  # noqa: F401 (src: a fixture)


@pytest.fixture
def parts():
    p = Parts(2)
    yield p
    p.shutdown()


def test_results_come_back_in_order_and_run_on_two_threads(parts):
    threads, both = set(), threading.Barrier(2, timeout=30)

    def fn(i):
        threads.add(threading.get_ident())
        if i < 2:
            both.wait()  # items 0 and 1 run at the same time, or this times out
        time.sleep(0.001 * (7 - i))  # later items finish first
        return i * i

    assert list(parts.map(fn, range(8))) == [i * i for i in range(8)]
    assert len(threads) == 2


def test_no_spare_core_means_the_callers_thread(parts):
    """A part never waits for a helper: with the helper busy, the caller evaluates every item itself."""
    hold, started = threading.Event(), threading.Event()

    def blocker(_):
        started.set()
        hold.wait(30)
        return "held"

    it = parts.map(blocker, [0])
    occupant = threading.Thread(target=lambda: list(it))
    occupant.start()
    try:
        assert started.wait(30)
        caller = threading.get_ident()
        assert list(parts.map(lambda i: (i, threading.get_ident() == caller), range(4))) == \
            [(i, True) for i in range(4)]
    finally:
        hold.set()
        occupant.join(30)


def test_a_failure_is_raised_in_order_once_the_parts_beside_it_have_ended(parts):
    ended = []

    def fn(i):
        if i == 1:
            raise ValueError("part 1")
        time.sleep(0.05)
        ended.append(i)
        return i

    got = []
    with pytest.raises(ValueError, match="part 1"):
        for x in parts.map(fn, range(6)):
            got.append(x)
    assert got == [0]
    # whatever started beside the failing part finished before the error reached the caller
    assert sorted(ended) == ended and set(ended) <= {0, 2, 3, 4, 5}
    snapshot = list(ended)
    time.sleep(0.2)
    assert ended == snapshot, "a part was still running after the failure was raised"


def test_one_worker_is_a_plain_map():
    p = Parts(1)
    assert list(p.map(lambda i: i + 1, range(3))) == [1, 2, 3]
    p.shutdown()


@pytest.mark.parametrize("query", QUERIES)
def test_batches_side_by_side_answer_bit_for_bit_as_all_at_once(src, query, parts, monkeypatch):  # noqa: F811
    monkeypatch.setattr(batching, "MIN_SPLIT_SAMPLES", 1)
    whole = Engine(src, batch_samples=10**12)
    counting = CountingSource(src)
    side_by_side = Engine(counting, batch_samples=200, parts=parts)
    _same(side_by_side.range(query, 600, 1800, 15, QueryContext()), whole.range(query, 600, 1800, 15, QueryContext()))
    _same(side_by_side.instant(query, 1500, QueryContext()), whole.instant(query, 1500, QueryContext()))


def test_a_large_selection_is_cut_into_a_first_batch_then_one_per_core_at_least(src, parts, monkeypatch):  # noqa: F811
    monkeypatch.setattr(batching, "MIN_SPLIT_SAMPLES", 1)
    counting = CountingSource(src)
    Engine(counting, parts=parts).range("sum(rate(requests_total[5m]))", 600, 1800, 60, QueryContext())
    # a small first batch alone (it fills the sample cache), then one per core
    assert [len(ids) for ids in counting.reads] == [30, 105, 105]
    small = CountingSource(src)
    monkeypatch.setattr(batching, "MIN_SPLIT_SAMPLES", 10**9)  # below the threshold: one batch, one thread
    Engine(small, parts=parts).range("sum(rate(requests_total[5m]))", 600, 1800, 60, QueryContext())
    assert [len(ids) for ids in small.reads] == [240]


def test_parts_side_by_side_stay_within_max_memory_and_give_everything_back(src, parts, monkeypatch):  # noqa: F811
    monkeypatch.setattr(batching, "MIN_SPLIT_SAMPLES", 1)
    query = "sum by (namespace) (rate(requests_total[5m]))"
    probe = QueryContext()
    Engine(src, batch_samples=10**12).range(query, 600, 1800, 60, probe)
    limit = probe.peak_bytes // 3
    ctx = QueryContext(max_bytes=limit)
    got = Engine(src, parts=parts).range(query, 600, 1800, 60, ctx)
    assert len(got.labels) == 5
    assert ctx.peak_bytes <= limit  # two batches at once, each a share of what one batch would be
    # what --query.max-samples counts is Prometheus's count, whatever the batches and cores
    assert ctx.peak_samples == probe.peak_samples
    ctx.release_all()
    assert ctx.bytes == 0
    with pytest.raises(LimitExceeded, match="--query.max-memory-per-query"):
        Engine(src, parts=parts).range("rate(requests_total[5m])", 600, 1800, 60, QueryContext(max_bytes=limit))


def test_a_part_gives_back_only_what_it_charged():
    q = QueryContext(max_samples=1000)
    q.charge_samples(100, "before")
    a, b = q.part(), q.part()
    a.charge_samples(200, "a")
    b.charge_points(50, "b")  # an evaluated matrix's memory (held.py counts its points)
    mark = a.mark()
    a.charge_bytes(64, "a")
    assert (q.samples, q.bytes) == (300, 100 * 24 + 200 * 24 + 50 * 16 + 64)
    a.release_to(mark)
    assert (q.samples, q.bytes) == (300, 100 * 24 + 200 * 24 + 50 * 16)
    a.release_all()
    assert (q.samples, q.bytes) == (100, 100 * 24 + 50 * 16)
    with pytest.raises(LimitExceeded):
        b.charge_samples(901, "b")  # the query's budget, whoever charges it
    b.release_all()  # what the failed charge counted (the samples) goes back as well
    assert (q.samples, q.bytes) == (100, 100 * 24)
    assert a.max_samples == 1000 and a.deadline == q.deadline  # the rest is the query's


def test_parts_charging_from_threads_lose_no_count():
    q = QueryContext(max_samples=10**9)

    def work():
        p = q.part()
        for _ in range(2000):
            p.charge_samples(1, "t")
        for _ in range(1000):
            mark = p.mark()
            p.charge_samples(3, "t")
            p.release_to(mark)
        return p

    threads = [threading.Thread(target=work) for _ in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert q.samples == 8000 and q.bytes == 8000 * 24
