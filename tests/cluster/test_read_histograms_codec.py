"""Native histograms in remote-read answers (TimeSeries.histograms, field 4 of prompb.TimeSeries in Prometheus
2.42's types.proto): what ?scope=head writes (read_codec) and what a querier decodes (read_client_codec), in our
layout and in any other a protobuf writer may use."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import snappy

from metricsgw.cluster import read_client_codec
from metricsgw.model import SampleBlock, series_keys_and_ids
from metricsgw.remote import read_codec
from metricsgw.storage.batch import HistogramBlock
from tests.native_requests import float_histogram, histogram_bytes, int_histogram

A = (("__name__", "nh"), ("k", "a"))
B = (("__name__", "up"), ("k", "b"))
C = (("__name__", "nh"), ("k", "c"))


def _ids(*labels) -> np.ndarray:
    return series_keys_and_ids(list(labels))[1]


def _hists(rows: list[tuple[int, int, bytes]]) -> HistogramBlock:
    rows = sorted(rows)
    return HistogramBlock(np.array([r[0] for r in rows], np.int64), np.array([r[1] for r in rows], np.int64),
                          pa.array([r[2] for r in rows], pa.binary()))


def test_histograms_and_samples_of_a_head_read_come_back_bit_exact():
    a, b, c = _ids(A, B, C)
    blobs = {(a, 1000): histogram_bytes(int_histogram(1000)), (a, 2000): histogram_bytes(int_histogram(2000, 3)),
             (c, -5): histogram_bytes(float_histogram(-5))}
    hists = _hists([(s, t, blob) for (s, t), blob in blobs.items()])
    sid = np.array([b, b], np.int64)
    block = SampleBlock(sid, np.array([10, 20], np.int64), np.array([1.5, -0.0]))
    result = read_codec.encode_query_result([A, B, C], block, np.array([a, b, c], np.int64), hists)
    got = read_client_codec.decode_response(read_codec.encode_samples_response([result]), 1 << 20)[0]
    assert got.labels == [A, B, C]
    assert {(int(s), int(t)): blob for s, t, blob in zip(got.hists.sid, got.hists.t, got.hists.blob.to_pylist())} \
        == blobs
    assert (got.block.sid.tolist(), got.block.t.tolist()) == ([b, b], [10, 20])
    assert np.signbit(got.block.v[1])  # -0.0 stays -0.0


def test_histograms_after_the_samples_as_another_writer_orders_them_are_decoded_too():
    """Prometheus writes TimeSeries fields in number order: labels, samples, then histograms."""
    def field(num: int, payload: bytes) -> bytes:
        return read_codec._len_field(num, payload)

    blob = histogram_bytes(int_histogram(7000))
    sample = b"\x09" + np.float64(2.5).tobytes() + b"\x10" + bytes([0xD8, 0x36])  # value 2.5, timestamp 7000
    series = read_codec._label_records(A) + field(2, sample) + field(4, blob)
    got = read_client_codec.decode_response(snappy.compress(field(1, field(1, series))), 1 << 20)[0]
    assert got.hists.t.tolist() == [7000] and got.hists.blob.to_pylist() == [blob]
    assert (got.block.t.tolist(), got.block.v.tolist()) == ([7000], [2.5])


def test_a_series_with_histograms_only_is_not_left_out():
    (a,) = _ids(A)
    blob = histogram_bytes(int_histogram(1))
    result = read_codec.encode_query_result([A], SampleBlock.empty(), np.array([a], np.int64), _hists([(a, 1, blob)]))
    assert result  # left out only when it has neither samples nor histograms
    got = read_client_codec.decode_response(read_codec.encode_samples_response([result]), 1 << 20)[0]
    assert got.labels == [A] and len(got.block) == 0 and got.hists.blob.to_pylist() == [blob]
    assert read_codec.encode_query_result([A], SampleBlock.empty(), np.array([a], np.int64)) == b""
