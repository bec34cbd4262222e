"""Merging ?scope=head answers of the exemplars and metadata APIs, and adding up shards' tsdb figures (pure)."""

from __future__ import annotations

from metricsgw.cluster.head_json import merge_exemplars, merge_metadata
from metricsgw.storage.catalog import stats


def _ex(trace: str, t, v="1"):
    return {"labels": {"trace_id": trace}, "value": v, "timestamp": t}


def test_exemplars_merge_by_series_one_per_timestamp_the_first_part_wins():
    local = [{"seriesLabels": {"__name__": "b"}, "exemplars": [_ex("x", 2), _ex("local", 3)]}]
    peer = [{"seriesLabels": {"__name__": "b"}, "exemplars": [_ex("peer", 3), _ex("y", 1.5)]},
            {"seriesLabels": {"__name__": "a", "z": "1"}, "exemplars": [_ex("z", 9)]}]
    assert merge_exemplars([local, peer]) == [
        {"seriesLabels": {"__name__": "a", "z": "1"}, "exemplars": [_ex("z", 9)]},
        {"seriesLabels": {"__name__": "b"}, "exemplars": [_ex("y", 1.5), _ex("x", 2), _ex("local", 3)]}]
    assert merge_exemplars([[], []]) == []


def test_metadata_merges_per_metric_in_the_order_first_seen_then_the_limit():
    g1 = {"type": "gauge", "help": "one", "unit": ""}
    g2 = {"type": "gauge", "help": "two", "unit": "s"}
    c = {"type": "counter", "help": "c", "unit": ""}
    parts = [{"m_gauge": [g1]}, {"m_gauge": [g2, g1], "a_total": [c]}]
    assert merge_metadata(parts) == {"a_total": [c], "m_gauge": [g1, g2]}
    assert list(merge_metadata(parts)) == ["a_total", "m_gauge"]  # sorted, as one process answers
    assert merge_metadata(parts, limit=1) == {"a_total": [c]}
    assert merge_metadata(parts, limit=0) == merge_metadata(parts)  # 0: no limit, as Prometheus


def test_tsdb_counts_of_disjoint_shards_add_up():
    one = {"numSeries": 2, "minTime": 5, "maxTime": 9, "seriesByMetric": {"up": 2}, "pairs": {"__name__=up": 2,
           "job=a": 2}, "memory": {"__name__": 4, "job": 2}, "valuesByName": {"__name__": ["up"], "job": ["a"]}}
    two = {"numSeries": 1, "minTime": 1, "maxTime": 7, "seriesByMetric": {"up": 1}, "pairs": {"__name__=up": 1,
           "job=b": 1}, "memory": {"__name__": 2, "job": 1}, "valuesByName": {"__name__": ["up"], "job": ["b"]}}
    empty = {"numSeries": 0, "minTime": None, "maxTime": None, "seriesByMetric": {}, "pairs": {}, "memory": {},
             "valuesByName": {}}
    got = stats.render([one, two, empty], limit=2)
    assert got["headStats"] == {"numSeries": 3, "numLabelPairs": 3, "chunkCount": 0, "minTime": 1, "maxTime": 9}
    assert got["seriesCountByMetricName"] == [{"name": "up", "value": 3}]
    assert got["labelValueCountByLabelName"] == [{"name": "job", "value": 2}, {"name": "__name__", "value": 1}]
    assert got["seriesCountByLabelValuePair"] == [{"name": "__name__=up", "value": 3}, {"name": "job=a", "value": 2}]
    assert stats.render([empty], 10)["headStats"] == {"numSeries": 0, "numLabelPairs": 0, "chunkCount": 0,
                                                       "minTime": 0, "maxTime": 0}
