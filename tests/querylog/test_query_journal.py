"""The lists the status endpoints answer: bounded rings (by entries and by bytes), the recent lists by kind, and
VictoriaMetrics' top queries over the last N."""

from __future__ import annotations

from metricsgw.querylog.journal import LINE_OVERHEAD, QueryJournal, Ring
from metricsgw.querylog.owner import QueryLog
from metricsgw.querylog.record import QueryRecord, Source, to_line

NOW = 1796400000.0


def record(query: str, status: str = "ok", total_s: float = 0.1, ts: float = NOW, range_s: float = 0.0,
           peak_bytes: int = 0) -> QueryRecord:
    return QueryRecord(query=query, source=Source("127.0.0.1", "GET", "/api/v1/query"), ts=ts, status=status,
                       start=ts - range_s, end=ts, total_s=total_s, peak_bytes=peak_bytes)


def test_a_ring_keeps_the_newest_within_its_count():
    ring = Ring(3, 1 << 20)
    for i in range(5):
        ring.add(i, 10)
    assert list(ring.newest_first()) == [4, 3, 2] and ring.bytes == 30


def test_a_ring_keeps_the_newest_within_its_bytes_and_always_the_last():
    ring = Ring(100, 25)
    for i in range(5):
        ring.add(i, 10)
    assert list(ring.newest_first()) == [4, 3]
    ring.add("huge", 1000)  # alone over the budget: kept, the others out
    assert list(ring.newest_first()) == ["huge"] and ring.bytes == 1000


def test_a_ring_of_size_zero_keeps_nothing():
    ring = Ring(0, 1 << 20)
    ring.add(1, 1)
    assert len(ring) == 0


def test_recent_lists_by_kind_newest_first():
    qlog = QueryLog(slow_s=1.0, recent=2, last_queries=100)
    for r in [record("a", "refused"), record("b", "ok", total_s=5), record("c", "timeout", total_s=2),
              record("d", "refused"), record("e", "refused"), record("f", "error"), record("g", "canceled")]:
        qlog.add(r)
    lists = qlog.journal.recent_lists(["refused", "slow", "timeout", "canceled", "error"], 10)
    names = {kind: [line["params"]["query"] for line in lines] for kind, lines in lists.items()}
    assert names == {"refused": ["e", "d"], "slow": ["c", "b"], "timeout": ["c"], "canceled": ["g"], "error": ["f"]}
    assert lists["slow"][0]["slow"] and lists["slow"][0] == to_line(record("c", "timeout", total_s=2), slow=True)
    assert [line["params"]["query"] for line in qlog.journal.recent_lists(["refused"], 1)["refused"]] == ["e"]


def test_no_query_is_slow_with_the_threshold_off():
    qlog = QueryLog(slow_s=0, recent=10, last_queries=10)
    qlog.add(record("a", total_s=1000))
    assert qlog.journal.recent_lists(["slow"], 10) == {"slow": []}


def test_recent_lists_hold_a_bounded_number_of_bytes():
    journal = QueryJournal(recent=1000, last_queries=10)
    text = "x" * (1 << 20)
    for _ in range(20):
        r = record(text, "refused")
        journal.add(r, to_line(r), slow=False)
    assert journal.recent["refused"].bytes <= 8 << 20 and len(journal.recent["refused"]) == (8 << 20) // (len(text) + LINE_OVERHEAD)


def test_top_queries_as_victoriametrics_ranks_them():
    journal = QueryJournal(recent=10, last_queries=100)
    rows = [("a", 0.1, 100), ("a", 0.3, 300), ("a", 0.2, 200), ("b", 2.0, 10), ("c", 0.5, 5000), ("c", 0.5, 1000)]
    for q, d, b in rows:
        r = record(q, total_s=d, peak_bytes=b)
        journal.add(r, to_line(r), slow=False)
    r = record("a", total_s=0.1, range_s=3600)  # the same text over another window: another entry
    journal.add(r, to_line(r), slow=False)
    top = journal.top(2, 600, NOW)
    assert top["topByCount"] == [{"query": "a", "timeRangeSeconds": 0, "count": 3},
                                 {"query": "c", "timeRangeSeconds": 0, "count": 2}]
    assert top["topByAvgDuration"] == [{"query": "b", "timeRangeSeconds": 0, "avgDurationSeconds": 2.0, "count": 1},
                                       {"query": "c", "timeRangeSeconds": 0, "avgDurationSeconds": 0.5, "count": 2}]
    assert top["topBySumDuration"][0] == {"query": "b", "timeRangeSeconds": 0, "sumDurationSeconds": 2.0, "count": 1}
    assert top["topBySumDuration"][1]["query"] == "c"
    assert top["topByAvgMemoryUsage"][0] == {"query": "c", "timeRangeSeconds": 0, "avgMemoryBytes": 3000, "count": 2}
    assert {e["timeRangeSeconds"] for e in journal.top(10, 600, NOW)["topByCount"] if e["query"] == "a"} == {0, 3600}


def test_top_queries_only_over_the_lifetime_asked_and_the_last_n():
    journal = QueryJournal(recent=10, last_queries=3)
    for i, q in enumerate(["old", "x", "y", "z"]):
        r = record(q, ts=NOW - 100 + i)
        journal.add(r, to_line(r), slow=False)
    assert {e["query"] for e in journal.top(10, 1000, NOW)["topByCount"]} == {"x", "y", "z"}  # "old" left the ring
    assert {e["query"] for e in journal.top(10, 98.5, NOW)["topByCount"]} == {"y", "z"}
    assert journal.top(0, 1000, NOW)["topByCount"] == []
