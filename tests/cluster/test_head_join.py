"""The front's ?scope=head answer joins the shards' SAMPLES ReadResponses query by query (cluster/head_join.py);
checked by decoding the joined bytes with the generated protobuf classes, not with our own parser."""

from __future__ import annotations

import pytest
import snappy

from metricsgw.errors import BadData
from metricsgw.cluster.head_join import join
from metricsgw.remote.proto import remote_read_pb2 as pb


def _response(per_query: list[list[tuple[str, list[tuple[int, float]]]]]) -> bytes:
    resp = pb.ReadResponse()
    for series in per_query:
        result = resp.results.add()
        for name, samples in series:
            ts = result.timeseries.add()
            ts.labels.add(name="__name__", value=name)
            for t, v in samples:
                ts.samples.add(timestamp=t, value=v)
    return resp.SerializeToString()


def _decoded(body: bytes) -> list[list[tuple[str, list[tuple[int, float]]]]]:
    resp = pb.ReadResponse.FromString(snappy.uncompress(body))
    return [[(ts.labels[0].value, [(s.timestamp, s.value) for s in ts.samples]) for ts in r.timeseries]
            for r in resp.results]


def test_each_query_gets_the_series_of_every_shard_in_shard_order():
    a = _response([[("a", [(1, 1.0), (2, 2.0)])], [("x", [(5, 5.0)])]])
    b = _response([[("b", [(1, 3.0)]), ("c", [(9, 9.0)])], []])
    assert _decoded(join([a, b])) == [[("a", [(1, 1.0), (2, 2.0)]), ("b", [(1, 3.0)]), ("c", [(9, 9.0)])],
                                      [("x", [(5, 5.0)])]]


def test_empty_results_and_no_shard_series():
    assert _decoded(join([_response([[]]), _response([[]])])) == [[]]


def test_answers_that_do_not_line_up_or_are_cut_are_refused():
    with pytest.raises(BadData):
        join([_response([[("a", [(1, 1.0)])]]), _response([[], []])])
    with pytest.raises(BadData):
        join([_response([[("a", [(1, 1.0)])]])[:-3]])
