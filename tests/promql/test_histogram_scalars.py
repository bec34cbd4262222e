"""The compiled pass that reads each stored histogram's count, sum and reset hint (histogram_scalars.py) answers
what protobuf's parse answers, on well-formed histograms of every kind and on bytes it cannot walk (which it hands
to protobuf); and a selection over many histograms holds a bounded number decoded (native.Decoded)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from metricsgw.limits.context import QueryContext
from metricsgw.promql import histogram_scalars, native
from metricsgw.remote.proto import remote_v1_pb2 as v1pb


def _messages(rng: np.random.Generator) -> list[bytes]:
    out = []
    for k in range(300):
        h = v1pb.Histogram(sum=float(rng.normal() * 1e6), schema=int(rng.integers(-4, 9)),
                           zero_threshold=1e-128, reset_hint=int(rng.integers(0, 4)), timestamp=int(k))
        if k % 3 == 0:
            h.count_float = float(rng.random() * 1e3)
            h.positive_counts.extend(rng.random(5).tolist())
        else:
            h.count_int = int(rng.integers(0, 2**63)) if k % 7 == 0 else int(rng.integers(0, 1000))
            h.positive_deltas.extend(rng.integers(-3, 4, 6).tolist())
        h.positive_spans.add(offset=int(rng.integers(-5, 5)), length=6 if k % 3 else 5)
        if k % 11 == 0:
            h.custom_values.extend([0.1, 0.5, 1.0])
        out.append(h.SerializeToString())
    # the count given twice (the last on the wire counts, as protobuf's oneof), a stale marker's NaN sum
    out.append(v1pb.Histogram(count_int=5).SerializeToString() + v1pb.Histogram(count_float=2.5).SerializeToString())
    out.append(v1pb.Histogram(count_float=2.5).SerializeToString() + v1pb.Histogram(count_int=7).SerializeToString())
    out.append(v1pb.Histogram(sum=float(np.frombuffer(np.uint64(0x7FF0000000000002).tobytes(), np.float64)[0]))
               .SerializeToString())
    out.append(b"")
    return out


def _expected(blobs: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ms = [v1pb.Histogram.FromString(b) for b in blobs]
    count = [m.count_float if m.WhichOneof("count") == "count_float" else float(m.count_int) for m in ms]
    return np.array(count), np.array([m.sum for m in ms]), np.array([m.reset_hint for m in ms], np.int64)


def _columns(blobs: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(blobs) + 1, np.int64)
    np.cumsum([len(b) for b in blobs], out=offsets[1:])
    return np.frombuffer(b"".join(blobs) or b"\0", np.uint8), offsets


@pytest.mark.parametrize("compiled", [True, False])
def test_reads_what_protobuf_reads(compiled):
    blobs = _messages(np.random.default_rng(7))
    data, offsets = _columns(blobs)
    try:
        if not compiled:
            histogram_scalars.unload()
        got = histogram_scalars.read(data, offsets)
    finally:
        assert histogram_scalars.load()
    for g, want in zip(got, _expected(blobs)):
        assert g.dtype == want.dtype
        assert g.tobytes() == want.tobytes()  # bit for bit, NaN payloads included


def test_bytes_it_cannot_walk_go_to_protobuf():
    good = v1pb.Histogram(count_int=3, sum=1.5, reset_hint=2).SerializeToString()
    # a group wire type (3) the kernel does not walk, then a valid count: protobuf skips the group
    group = bytes([0x7B, 0x7C]) + v1pb.Histogram(count_int=9).SerializeToString()
    blobs = [good, group, good]
    got = histogram_scalars.read(*_columns(blobs))
    want = _expected(blobs)
    for g, w in zip(got, want):
        assert g.tolist() == w.tolist()


def test_a_selection_keeps_few_decoded_and_charges_them(monkeypatch):
    monkeypatch.setattr(native, "DECODED_KEPT", 8)
    blobs = _messages(np.random.default_rng(3))[:100]
    ctx = QueryContext()
    hists = native.Decoded(pa.array(blobs, pa.binary()).slice(10), ctx)  # an Arrow slice: its offset is kept
    assert len(hists) == 90
    for i in range(90):
        want = native.decode(blobs[10 + i])
        assert hists[i] == want
        assert hists[i] is hists[i]  # the one just decoded is kept
    assert len(hists._decoded) == 8
    assert hists.counts([0, 89]).tolist() == _expected([blobs[10], blobs[99]])[0].tolist()
    assert ctx.bytes == 8 * native.DECODED_BYTES


def test_the_decoded_cache_is_charged_to_the_query():
    blobs = _messages(np.random.default_rng(5))[:50]
    ctx = QueryContext(max_bytes=10 * native.DECODED_BYTES)
    with pytest.raises(Exception, match="too much memory in decoding histograms"):
        native.Decoded(blobs, ctx)


def _unpacked_deltas(fields: dict) -> bytes:
    """An integer histogram with its deltas unpacked (proto3 parsers take both): the compiled pass leaves it to
    protobuf."""
    h = v1pb.Histogram(count_int=fields["count_int"], sum=1.0, schema=0, zero_threshold=1e-128)
    h.positive_spans.add(offset=0, length=len(fields["positive_deltas"]))
    out = h.SerializeToString()
    for d in fields["positive_deltas"]:
        out += bytes([0x60]) + _varint((d << 1) ^ (d >> 63))  # field 12, wire 0, zigzag
    return out


def _varint(u: int) -> bytes:
    u &= (1 << 64) - 1
    out = bytearray()
    while True:
        b, u = u & 0x7F, u >> 7
        out.append(b | (0x80 if u else 0))
        if not u:
            return bytes(out)


def test_window_rows_read_compiled_equal_those_parsed():
    """native_columns.WindowRates from the compiled pass and from protobuf: the same layouts, rows and matrices,
    bit for bit, over every kind of histogram test_native_columns queries, and one encoded unpacked."""
    from metricsgw.promql import native_columns
    from tests.native_requests import histogram_bytes
    from tests.promql.test_native_columns import _series_histograms

    rng = np.random.default_rng(11)
    blobs = []
    for kind in ["int", "float", "mixed", "custom", "inside_zero", "gauge", "int"]:
        blobs += [histogram_bytes(h) for h in _series_histograms(rng, kind)]
    blobs.insert(5, _unpacked_deltas({"count_int": 6, "positive_deltas": [1, 2, -1]}))
    hists = native.Decoded(blobs)
    v = np.arange(len(blobs), dtype=np.float64)[rng.random(len(blobs)) > 0.05]  # some never in a window
    compiled = native_columns.WindowRates(hists, v)
    assert compiled.layout_of[5] == -1  # not read by the pass: its windows take native_math's path
    try:
        histogram_scalars.unload()
        parsed = native_columns.WindowRates(hists, v)
    finally:
        assert histogram_scalars.load()
    # the parser reads the unpacked one (a plain layout of its own); every other histogram is in the same layout
    # with the same row, bit for bit
    for j in range(len(blobs)):
        a, b = int(compiled.layout_of[j]), int(parsed.layout_of[j])
        if j == 5:
            continue
        assert (a >= 0) == (b >= 0), j
        if a >= 0:
            assert compiled.layouts[a].layout == parsed.layouts[b].layout
            row_a = compiled.layouts[a].matrix[compiled.row_of[j]]
            assert row_a.tobytes() == parsed.layouts[b].matrix[parsed.row_of[j]].tobytes()
    assert len(compiled.layouts) > 5 and (compiled.layout_of >= 0).sum() > len(blobs) // 2
