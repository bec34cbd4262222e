"""The remote-read client codec: what our read handler encodes decodes back bit for bit (numpy path),
responses laid out otherwise (zero fields left out, fields reordered: what Go's protobuf writes) decode
through the protobuf fallback, and anything that is not a response is BadData."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
import snappy

from metricsgw.cluster import read_client_codec
from metricsgw.errors import BadData, PayloadTooLarge
from metricsgw.model import STALE_NAN, Matcher, SampleBlock, series_id
from metricsgw.remote import read_codec
from metricsgw.remote.proto import remote_read_pb2 as pb
from metricsgw.storage.read.merge import sort_block

T0 = 1_700_000_000_000


def _bits(v: np.ndarray) -> list[int]:
    return np.asarray(v, np.float64).view(np.uint64).tolist()


def _encoded(series: dict) -> bytes:
    """A SAMPLES response as api/remote_read.py encodes it: {labels: (t list, v list)}."""
    labels = sorted(series)
    ids = np.array([series_id(lb) for lb in labels], np.int64)
    sid = np.concatenate([np.full(len(series[lb][0]), i, np.int64) for lb, i in zip(labels, ids)])
    block = sort_block(SampleBlock(sid, np.concatenate([np.asarray(series[lb][0], np.int64) for lb in labels]),
                                   np.concatenate([np.asarray(series[lb][1], np.float64) for lb in labels])))
    return read_codec.encode_samples_response([read_codec.encode_query_result(labels, block, ids)])


def _as_dict(res) -> dict:
    out = {}
    for lb, sid in zip(res.labels, res.ids.tolist()):
        m = res.block.sid == sid
        out[lb] = (res.block.t[m].tolist(), _bits(res.block.v[m]))
    return out


def test_round_trip_is_bit_exact_across_varint_widths_and_special_values(monkeypatch):
    def no_fallback(series):
        raise AssertionError("our own layout must decode without the per-sample protobuf path")

    monkeypatch.setattr(read_client_codec, "samples_by_protobuf", no_fallback)
    special = [STALE_NAN, math.nan, struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000123))[0], math.inf,
               -math.inf, -0.0, 0.0, 5e-324]
    series = {
        (("__name__", "a"), ("job", "x")): (list(range(T0, T0 + 15_000 * 300, 15_000)), list(np.linspace(0, 1, 300))),
        (("__name__", "a"), ("job", "special")): ([T0 + k for k in range(len(special))], special),
        # timestamps crossing varint widths within one series (1, 2, 3 ... bytes), and a negative one
        (("__name__", "b"),): ([-5, 0, 1, 127, 128, 16_383, 16_384, 2**21, 2**35, T0], [float(k) for k in range(10)]),
        (("__name__", "c"), ("k", "é")): ([T0], [1.5]),
    }
    res, = read_client_codec.decode_response(_encoded(series), 1 << 20)
    want = {lb: (t, _bits(v)) for lb, (t, v) in series.items()}
    assert _as_dict(res) == want
    assert res.ids.tolist() == [series_id(lb) for lb in res.labels]
    b = res.block
    assert ((b.sid[1:] > b.sid[:-1]) | ((b.sid[1:] == b.sid[:-1]) & (b.t[1:] > b.t[:-1]))).all()


def test_other_layouts_decode_through_protobuf():
    resp = pb.ReadResponse()
    ts = resp.results.add().timeseries.add()
    ts.samples.add(value=0.0, timestamp=T0)  # value 0 is left out on the wire
    ts.samples.add(value=2.5, timestamp=0)  # and so is timestamp 0
    ts.labels.add(name="job", value="z")  # labels after samples, unsorted
    ts.labels.add(name="__name__", value="g")
    res, = read_client_codec.decode_response(snappy.compress(resp.SerializeToString()), 1 << 20)
    labels = (("__name__", "g"), ("job", "z"))
    assert _as_dict(res) == {labels: ([0, T0], _bits([2.5, 0.0]))}


def test_several_queries_and_series_only_answers():
    body = read_codec.encode_samples_response([b"", read_codec.encode_series_only([(("__name__", "s"),)])])
    empty, only = read_client_codec.decode_response(body, 1 << 20)
    assert empty.labels == [] and len(empty.block) == 0
    assert only.labels == [(("__name__", "s"),)] and len(only.block) == 0


@pytest.mark.parametrize("body", [b"", b"not snappy at all", snappy.compress(b"\x0a\x05abc"),
                                  snappy.compress(b"\x08\x01"), snappy.compress(b"\x0a\x04\x0a\x02\x0a\x09")],
                         ids=["empty-snappy", "not-snappy", "field-past-end", "varint-field", "truncated-series"])
def test_garbage_is_bad_data(body):
    with pytest.raises(BadData):
        read_client_codec.decode_response(body, 1 << 20)


def test_a_body_declaring_more_than_allowed_is_refused_before_decompressing():
    with pytest.raises(PayloadTooLarge):
        read_client_codec.decode_response(snappy.compress(b"\x00" * 5000), 4096)


def test_request_asks_for_samples_or_series_only():
    body = read_client_codec.encode_request([([Matcher("__name__", "=~", "a|b"), Matcher("job", "!=", "")], 1, 2)])
    queries, rtype = read_codec.decode_request(body)
    assert rtype == read_codec.SAMPLES
    assert queries == [read_codec.ReadQuery((Matcher("__name__", "=~", "a|b"), Matcher("job", "!=", "")), 1, 2)]
    queries, _ = read_codec.decode_request(read_client_codec.encode_request([([Matcher("x", "=", "y")], 5, 9)],
                                                                            series_only=True))
    assert queries[0].series_only and (queries[0].start_ms, queries[0].end_ms) == (5, 9)
