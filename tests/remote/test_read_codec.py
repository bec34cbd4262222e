"""remote/read_codec.py on its own: the vectorised SAMPLES encoding read back by the protobuf
library (negative and huge timestamps, special floats), request decoding and negotiation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import snappy

from metricsgw.errors import BadData
from metricsgw.model import STALE_NAN, Matcher, SampleBlock
from metricsgw.remote import read_codec
from metricsgw.remote.proto import remote_read_pb2 as pb
from tests.remote.read_client import build_request


def test_query_result_parses_back_bit_exact():
    rng = np.random.default_rng(3)
    n = 500
    t = np.sort(rng.choice(np.array([-2**62, -1, 0, 1, 127, 128, 2**35, 2**62]), n)
                + rng.integers(0, 5, n))
    v = np.where(rng.random(n) < 0.5, rng.integers(0, 2**63, n, dtype=np.uint64).view(np.float64),
                 rng.choice(np.array([0.0, -0.0, math.inf, -math.inf, math.nan, STALE_NAN, 1.5]), n))
    sid = np.repeat(np.array([5, 9, 11]), [200, 0, 300])[:n]
    order = np.lexsort((t, sid))
    block = SampleBlock(sid[order], t[order], v[order])
    labels = [(("__name__", "a"), ("x", "1")), (("__name__", "b"),), (("__name__", "c"), ("y", "é"))]
    ids = np.array([5, 9, 11])
    raw = read_codec.encode_query_result(labels, block, ids)
    result = pb.QueryResult.FromString(raw)
    assert [tuple((lb.name, lb.value) for lb in ts.labels) for ts in result.timeseries] == [labels[0], labels[2]]
    got_t = [s.timestamp for ts in result.timeseries for s in ts.samples]
    got_v = np.array([s.value for ts in result.timeseries for s in ts.samples]).view(np.uint64)
    assert got_t == block.t.tolist()
    assert got_v.tolist() == block.v.view(np.uint64).tolist()
    response = pb.ReadResponse.FromString(snappy.uncompress(read_codec.encode_samples_response([raw, b""])))
    assert len(response.results) == 2 and response.results[1] == pb.QueryResult()


def test_decode_request_matchers_window_and_hints():
    body = build_request([
        {"matchers": [("__name__", "=", "up"), ("job", "!=", "a"), ("i", "=~", "1|2"), ("z", "!~", ".+")],
         "start": 1000, "end": 9000},
        {"matchers": [("__name__", "=", "up")], "start": 1000, "end": 9000,
         "hints": {"start_ms": 2000, "end_ms": 20000, "func": "series"}},
    ], [pb.ReadRequest.STREAMED_XOR_CHUNKS])
    queries, rtype = read_codec.decode_request(body)
    assert rtype == pb.ReadRequest.STREAMED_XOR_CHUNKS
    assert queries[0] == read_codec.ReadQuery((Matcher("__name__", "=", "up"), Matcher("job", "!=", "a"),
                                               Matcher("i", "=~", "1|2"), Matcher("z", "!~", ".+")), 1000, 9000)
    assert (queries[1].start_ms, queries[1].end_ms, queries[1].series_only) == (2000, 9000, True)


@pytest.mark.parametrize("accepted, want", [([], 0), ([0], 0), ([1], 1), ([1, 0], 1), ([0, 1], 0), ([3, 1], 1)])
def test_negotiation_takes_the_first_supported(accepted, want):
    assert read_codec.negotiate(accepted) == want


def test_negotiation_refuses_only_unknown_types():
    with pytest.raises(BadData, match="does not support any of the requested response types"):
        read_codec.negotiate([2, 7])


@pytest.mark.parametrize("labels", [
    (("__name__", "up"),),
    (("__name__", "DCGM_FI_DEV_POWER_USAGE"), ("Hostname", "gpu-node-00001"), ("gpu", "3")),
    (("__name__", "x"), ("long", "é" * 300), ("empty", "")),  # lengths over one varint byte; an empty value
])
def test_label_bytes_are_what_the_generated_code_writes(labels):
    want = pb.QueryResult(timeseries=[pb.ReadTimeSeries(labels=[pb.ReadLabel(name=n, value=v) for n, v in labels])])
    assert read_codec.encode_series_only([labels]) == want.SerializeToString()


def test_a_series_of_floats_and_histograms_is_cut_where_its_kind_changes():
    """No two chunks of a series overlap in time: a reader iterates them one after the other."""
    from metricsgw.storage.batch import HistogramBlock
    from tests.remote.histogram_chunk_reference import decode
    from tests.remote.test_histogram_chunks import histogram
    from tests.remote.xor_reference import decode_xor

    ft = np.array([0, 1, 2, 6, 7, 300, 301], np.int64) * 1000  # floats, histograms at 3..5 and 8..9 and 400
    block = SampleBlock(np.array([7] * len(ft) + [8], np.int64), np.r_[ft, 0], np.arange(len(ft) + 1, dtype=float))
    ht = [3000, 4000, 5000, 8000, 9000, 400_000]
    hists = HistogramBlock(np.array([7] * len(ht) + [9], np.int64), np.array(ht + [1000], np.int64),
                           [histogram({0: k}) for k in range(len(ht) + 1)])
    chunks = read_codec.series_chunks(block, hists)
    kinds = [(enc, lo // 1000, hi // 1000) for lo, hi, _, enc in chunks[7]]
    assert kinds == [(1, 0, 2), (2, 3, 5), (1, 6, 7), (2, 8, 9), (1, 300, 301), (2, 400, 400)]
    times = [t for _, _, data, enc in chunks[7]
             for t in ([t for t, _ in decode_xor(data)] if enc == 1 else [s["t"] for s in decode(data, enc)[1]])]
    assert times == sorted(ft.tolist() + ht)
    assert [enc for *_, enc in chunks[8]] == [1] and [enc for *_, enc in chunks[9]] == [2]
