"""codec.py: round trips, negotiation, size bounds, corrupt input; fast scanner == generated code."""

from __future__ import annotations

import math
from pathlib import Path
import random
import struct

import numpy as np
import pytest
import snappy

from metricsgw.errors import BadData, PayloadTooLarge, UnsupportedMediaType
from metricsgw.model import STALE_NAN_BITS, MetricMetadata, labels_from_key
from metricsgw.remote import codec
from metricsgw.remote.fastscan import scan_series
from metricsgw.remote.proto import remote_v1_pb2 as v1pb
from metricsgw.remote.proto import remote_v2_pb2 as v2pb

STALE = struct.unpack("<d", struct.pack("<Q", STALE_NAN_BITS))[0]
OTHER_NAN = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000001))[0]
V1_CT = "application/x-protobuf;proto=prometheus.WriteRequest"
V2_CT = "application/x-protobuf;proto=io.prometheus.write.v2.Request"

SERIES = [
    ([("__name__", "up"), ("job", "a")], [(1000, 1.0), (2000, 0.0), (3000, STALE)]),
    ([("__name__", "temp"), ("zone", "ü-ñ")], [(0, math.inf), (-5, -math.inf), (7, OTHER_NAN), (2**62, -0.0)]),
    ([("__name__", "empty")], []),
]


def bits(a) -> list[int]:
    return np.asarray(a, np.float64).view(np.uint64).tolist()


def expected_columns(series):
    t = [ts for _, s in series for ts, _ in s]
    v = [val for _, s in series for _, val in s]
    return t, bits(v), [len(s) for _, s in series]


def pairs_as_str(decoded, i):
    return [(n.decode(), v.decode()) for n, v in decoded.label_pairs(i)]


@pytest.mark.parametrize("version, encode, ctype", [(1, codec.encode_v1, V1_CT), (2, codec.encode_v2, V2_CT)])
def test_round_trip_bit_exact(version, encode, ctype):
    d = codec.decode_request(encode(SERIES), ctype, "snappy", 1 << 20)
    t, vbits, counts = expected_columns(SERIES)
    assert d.version == version
    assert d.t.dtype == np.int64 and d.v.dtype == np.float64
    assert d.t.tolist() == t
    assert bits(d.v) == vbits  # stale NaN, other NaN payloads, -0.0, +-Inf all exact
    assert d.counts.tolist() == counts
    assert [pairs_as_str(d, i) for i in range(len(d))] == [labels for labels, _ in SERIES]
    assert d.offsets().tolist() == [0, 3, 7, 7]


def test_keys_identify_label_sets_not_samples():
    a = codec.decode_v1(codec.encode_v1([(SERIES[0][0], [(1, 1.0)])], compress=False))
    b = codec.decode_v1(codec.encode_v1([(SERIES[0][0], [(9, 2.0), (10, 3.0)])], compress=False))
    c = codec.decode_v1(codec.encode_v1([(SERIES[1][0], [(1, 1.0)])], compress=False))
    assert a.keys == b.keys and a.keys != c.keys
    a2 = codec.decode_v2(codec.encode_v2([(SERIES[0][0], [(1, 1.0)])], compress=False))
    b2 = codec.decode_v2(codec.encode_v2([(SERIES[1][0], [(1, 1.0)]), (SERIES[0][0], [(5, 1.0)])], compress=False))
    assert a2.keys[0] == b2.keys[1]  # v2 keys do not depend on the request's symbol order


def test_metadata_v1_and_v2():
    md = MetricMetadata("up", "gauge", "1 if up", "")
    d1 = codec.decode_v1(codec.encode_v1(SERIES, [md, MetricMetadata("x_seconds", "counter", "h", "seconds")],
                                         compress=False))
    assert d1.metadata == [md, MetricMetadata("x_seconds", "counter", "h", "seconds")]
    d2 = codec.decode_v2(codec.encode_v2(SERIES + [([("__name__", "up"), ("job", "b")], [(1, 1.0)])],
                                         {"up": md}, compress=False))
    assert d2.metadata == [md]  # one entry per distinct metadata, not per series


def test_histograms_and_exemplars_are_counted():
    req = v1pb.WriteRequest()
    ts = req.timeseries.add()
    ts.labels.add(name="__name__", value="h")
    ts.histograms.add(count_int=3, sum=1.5, timestamp=1)
    ts.histograms.add(count_int=4, sum=2.5, timestamp=2)
    ts.exemplars.add(value=1.0, timestamp=1)
    ts.samples.add(value=1.0, timestamp=1)
    d = codec.decode_v1(req.SerializeToString())
    assert (d.histograms, d.exemplars, d.counts.tolist()) == (2, 1, [1])
    req2 = v2pb.Request(symbols=["", "__name__", "h"])
    ts2 = req2.timeseries.add(labels_refs=[1, 2])
    ts2.histograms.add(count_int=3, timestamp=1)
    ts2.exemplars.add(value=1.0, timestamp=1)
    ts2.exemplars.add(value=2.0, timestamp=2)
    d2 = codec.decode_v2(req2.SerializeToString())
    assert (d2.histograms, d2.exemplars, d2.counts.tolist()) == (1, 2, [0])


@pytest.mark.parametrize("version", [1, 2])
def test_histograms_are_kept_as_the_bytes_sent_and_exemplars_decoded(version):
    """Custom values, a NaN payload in sum, -0.0 and a field this codec does not know all come
    through as sent; 2.0's exemplar label references resolve to the same labels as 1.0's; an
    exemplar whose references are out of range is dropped, not the request."""
    from tests.native_requests import histogram_bytes, v1_request, v2_request

    odd = histogram_bytes({"count_int": 2, "sum": struct.unpack("<d", struct.pack("<Q", 0x7FF8_0000_0000_0BAD))[0],
                           "schema": -53, "zero_threshold": -0.0, "positive_spans": [(0, 2)],
                           "positive_deltas": [1, 0], "custom_values": [0.25, 1.0], "reset_hint": 2,
                           "timestamp": 7}) + b"\x98\x06\x01"  # field 99: unknown
    series = [{"labels": [("__name__", "h"), ("job", "a")], "samples": [(1, 1.0)],
               "histograms": [{"count_int": 1, "sum": 0.5, "schema": 0, "zero_count_int": 1, "timestamp": 5}],
               "exemplars": [([("trace_id", "x"), ("span", "y")], 0.5, 5)]},
              {"labels": [("__name__", "h"), ("job", "b")], "histograms": []}]
    body = (v1_request if version == 1 else v2_request)(series, compress=False)
    # splice the odd histogram into the second series as raw bytes (it cannot be built field by field)
    req = (v1pb.WriteRequest if version == 1 else v2pb.Request).FromString(body)
    req.timeseries[1].histograms.add().MergeFromString(odd)
    d = (codec.decode_v1 if version == 1 else codec.decode_v2)(req.SerializeToString())
    nat = d.native
    assert nat.hist_counts.tolist() == [1, 1] and nat.hist_t.tolist() == [5, 7]
    assert nat.hist_blobs[1] == req.timeseries[1].histograms[0].SerializeToString()
    assert nat.hist_blobs[1].endswith(b"\x98\x06\x01") and len(nat.hist_blobs[1]) == len(odd)
    assert nat.ex_counts.tolist() == [1, 0] and nat.ex_t.tolist() == [5] and nat.ex_v.tolist() == [0.5]
    assert labels_from_key(nat.ex_labels[0]) == (("span", "y"), ("trace_id", "x"))


def test_a_v2_exemplar_with_a_bad_reference_is_dropped_alone():
    req = v2pb.Request(symbols=["", "__name__", "h", "trace_id", "t"])
    ts = req.timeseries.add(labels_refs=[1, 2])
    ts.exemplars.add(labels_refs=[3, 4], value=1.0, timestamp=1)
    ts.exemplars.add(labels_refs=[3, 99], value=2.0, timestamp=2)
    d = codec.decode_v2(req.SerializeToString())
    assert d.native.ex_v.tolist() == [1.0] and d.exemplars == 2


# ---------------------------------------------------------------- negotiation


@pytest.mark.parametrize("ctype, enc, version", [
    (None, None, 1),
    ("application/x-protobuf", "snappy", 1),
    ("application/x-protobuf; proto=prometheus.WriteRequest", "snappy", 1),
    ('application/x-protobuf;proto="io.prometheus.write.v2.Request"', "snappy", 2),
    (V2_CT, None, 2),  # no Content-Encoding: snappy assumed, as Prometheus does
])
def test_negotiate_accepts(ctype, enc, version):
    assert codec.negotiate(ctype, enc) == version


@pytest.mark.parametrize("ctype, enc, message", [
    ("application/json", "snappy", "expected application/x-protobuf"),
    ("application/x-protobuf;proto=io.prometheus.write.v3.Request", "snappy", "unsupported remote-write protobuf"),
    ("application/x-protobuf;proto", "snappy", "malformed Content-Type parameter"),
    (V1_CT, "gzip", "only snappy"),
    (V1_CT, "zstd", "only snappy"),
])
def test_negotiate_refuses_with_415(ctype, enc, message):
    with pytest.raises(UnsupportedMediaType, match=message) as info:
        codec.negotiate(ctype, enc)
    assert info.value.status == 415


# ---------------------------------------------------------------- bounds and corrupt input


def test_declared_size_over_limit_is_refused_before_decompressing():
    # 1 GiB declared in the varint preamble, followed by garbage: decompressing it would
    # fail (or allocate); the limit must fire first, so we get 413, not 400.
    body = bytes([0x80, 0x80, 0x80, 0x80, 0x04]) + b"\x00garbage"
    assert codec.snappy_declared_length(body) == 1 << 30
    with pytest.raises(PayloadTooLarge, match="declares 1073741824 decoded bytes") as info:
        codec.decode_request(body, V1_CT, "snappy", 128 * 1024**2)
    assert info.value.status == 413


def test_size_at_the_limit_is_accepted():
    raw = codec.encode_v1(SERIES, compress=False)
    d = codec.decode_request(snappy.compress(raw), V1_CT, "snappy", len(raw))
    assert len(d) == 3
    with pytest.raises(PayloadTooLarge):
        codec.decode_request(snappy.compress(raw), V1_CT, "snappy", len(raw) - 1)


@pytest.mark.parametrize("body, message", [
    (b"", "bad length preamble"),
    (b"\xff\xff\xff", "bad length preamble"),
    (b"\x10not snappy at all", "snappy: corrupt input"),
    (snappy.compress(b"\x0a\x05\x0a\x03"), "cannot decode remote-write 1.0 protobuf"),  # truncated series
    (snappy.compress(b"\xff\xff\xff\xff"), "cannot decode remote-write 1.0 protobuf"),
])
def test_corrupt_payloads_are_bad_data(body, message):
    with pytest.raises(BadData, match=message) as info:
        codec.decode_request(body, V1_CT, "snappy", 1 << 20)
    assert info.value.status == 400


def test_corrupt_v2_payload():
    with pytest.raises(BadData, match="cannot decode remote-write 2.0 protobuf"):
        codec.decode_request(snappy.compress(b"\x2a\x09\x0a"), V2_CT, "snappy", 1 << 20)


def test_v1_body_sent_as_v2_decodes_to_nothing():
    # v2 reserves v1's field numbers, so a mislabelled body is an empty request (the
    # 2.0 headers then tell the sender that nothing was written), never wrong series.
    d = codec.decode_request(codec.encode_v1(SERIES), V2_CT, "snappy", 1 << 20)
    assert len(d) == 0 and d.samples == 0


def test_v2_bad_refs_fail_only_their_series():
    req = v2pb.Request(symbols=["", "__name__", "ok"])
    req.timeseries.add(labels_refs=[1, 2]).samples.add(value=1, timestamp=1)
    req.timeseries.add(labels_refs=[1, 9]).samples.add(value=1, timestamp=1)
    req.timeseries.add(labels_refs=[1]).samples.add(value=1, timestamp=1)
    d = codec.decode_v2(req.SerializeToString())
    assert d.keys[0] == (b"__name__", b"ok") and d.keys[1] is None and d.keys[2] is None
    assert "out of range" in d.problems[1] and "odd length" in d.problems[2]


# ---------------------------------------------------------------- fast scanner vs generated code


def _random_series(rng: random.Random, n: int):
    out = []
    for i in range(n):
        labels = [("__name__", f"m{rng.randrange(5)}")] + [(f"l{j}", "v" * rng.randrange(0, 300))
                                                           for j in range(rng.randrange(0, 12))]
        samples = [(rng.choice([0, 1, -1, 2**40, -(2**62), rng.randrange(-2**63, 2**63)]),
                    rng.choice([0.0, 1.5, -0.0, STALE, math.inf, OTHER_NAN, rng.random()]))
                   for _ in range(rng.choice([0, 1, 1, 1, 3]))]
        out.append((labels, samples))
    return out


@pytest.mark.parametrize("seed", range(5))
def test_fast_scan_matches_generic_decoder(seed):
    raw = codec.encode_v1(_random_series(random.Random(seed), 300), compress=False)
    blobs = list(v1pb.BlobWriteRequest.FromString(raw).timeseries)
    fast = scan_series(blobs)
    assert fast is not None  # these are all standard encodings
    slow = codec._decode_v1_generic(raw)
    assert fast.keys == slow.keys
    assert fast.t.tolist() == slow.t.tolist()
    assert bits(fast.v) == bits(slow.v)
    assert fast.counts.tolist() == slow.counts.tolist()


def _one_sample_series(rng: random.Random, n: int, same_width: bool):
    t0 = rng.choice([1_700_000_000_000, 5, -(2**62)])
    out = []
    for labels, _ in _random_series(rng, n):  # labels of 0..300 bytes: one- and two-byte lengths
        t = t0 if same_width else rng.choice([0, 1, -1, 2**40, -(2**62), rng.randrange(-2**63, 2**63)])
        out.append((labels, [(t, rng.choice([0.0, 1.5, -0.0, STALE, math.inf, OTHER_NAN, rng.random()]))]))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_one_sample_per_series_shortcut_matches_the_field_walk(seed):
    # Scrape-shaped requests (labels, then the one sample) take fastscan's shortcut; it must give what the
    # general field walk and the generated code give: same keys, label counts, times and value bits.
    from metricsgw.remote import fastscan

    rng = random.Random(seed)
    raw = codec.encode_v1(_one_sample_series(rng, 300, same_width=seed % 2 == 0), compress=False)
    blobs = list(v1pb.BlobWriteRequest.FromString(raw).timeseries)
    flat = b"".join([*blobs, fastscan._PAD])
    buf = np.frombuffer(flat, np.uint8)
    lengths = np.array([len(b) for b in blobs], np.int64)
    ends = np.cumsum(lengths)
    short = fastscan._labels_then_one_sample(flat, buf, ends - lengths, ends)
    walk = fastscan._scan_fields(flat, buf, ends - lengths, ends, lengths)
    slow = codec._decode_v1_generic(raw)
    assert short is not None and walk is not None
    for got in (short, walk):
        assert got.keys == slow.keys and got.counts.tolist() == slow.counts.tolist() == [1] * 300
        assert got.label_counts.tolist() == slow.label_counts.tolist()
        assert got.t.tolist() == slow.t.tolist() and bits(got.v) == bits(slow.v)
        assert got.exemplars == got.histograms == 0


def test_one_sample_shortcut_leaves_other_shapes_to_the_field_walk():
    from metricsgw.remote import fastscan

    for series in ([(SERIES[0][0], SERIES[0][1][:2])], [(SERIES[2][0], [])]):  # two samples; none
        raw = codec.encode_v1(series, compress=False)
        blobs = list(v1pb.BlobWriteRequest.FromString(raw).timeseries)
        flat = b"".join([*blobs, fastscan._PAD])
        lengths = np.array([len(b) for b in blobs], np.int64)
        ends = np.cumsum(lengths)
        assert fastscan._labels_then_one_sample(flat, np.frombuffer(flat, np.uint8), ends - lengths, ends) is None
        assert scan_series(blobs).counts.tolist() == [len(s) for _, s in series]


def test_unusual_encodings_fall_back_to_generated_code():
    # A sample with its fields reversed, and labels interleaved with samples: valid
    # protobuf that the scanner does not take; the decoder must still get it right.
    sample_reversed = b"\x10\x05" + b"\x09" + struct.pack("<d", 2.5)
    label = v1pb.Label(name="__name__", value="x").SerializeToString()
    label2 = v1pb.Label(name="a", value="b").SerializeToString()
    ts = (b"\x0a" + bytes([len(label)]) + label + b"\x12" + bytes([len(sample_reversed)]) + sample_reversed
          + b"\x0a" + bytes([len(label2)]) + label2)
    raw = b"\x0a" + bytes([len(ts)]) + ts
    assert scan_series(list(v1pb.BlobWriteRequest.FromString(raw).timeseries)) is None
    d = codec.decode_v1(raw)
    assert d.t.tolist() == [5] and d.v.tolist() == [2.5]
    assert pairs_as_str(d, 0) == [("__name__", "x"), ("a", "b")]


def test_invalid_utf8_label_does_not_fail_the_request():
    req = v1pb.RawWriteRequest()
    ts = req.timeseries.add()
    ts.labels.append(v1pb.RawLabel(name=b"__name__", value=b"\xff\xfe").SerializeToString())
    ts.samples.add(value=1.0, timestamp=1)
    d = codec.decode_v1(req.SerializeToString())
    assert d.label_pairs(0) == [(b"__name__", b"\xff\xfe")]


def test_real_prometheus_payload_takes_the_fast_path():
    # A body Prometheus 2.42 sent while remote-writing its own scrape (captured once).
    body = (Path(__file__).parent / "testdata" / "prometheus-2.42-self-scrape.snappy").read_bytes()
    raw = codec.decompress(body, 1 << 24)
    assert scan_series(list(v1pb.BlobWriteRequest.FromString(raw).timeseries)) is not None
    fast, slow = codec.decode_request(body, "application/x-protobuf", "snappy", 1 << 24), codec._decode_v1_generic(raw)
    assert len(fast) > 100 and fast.keys == slow.keys and fast.counts.tolist() == slow.counts.tolist()
    assert fast.t.tolist() == slow.t.tolist() and bits(fast.v) == bits(slow.v)
    names = {dict(pairs_as_str(fast, i))["__name__"] for i in range(len(fast))}
    assert "prometheus_build_info" in names or "up" in names


def test_real_prometheus_metadata_payload():
    body = (Path(__file__).parent / "testdata" / "prometheus-2.42-metadata.snappy").read_bytes()
    d = codec.decode_request(body, "application/x-protobuf", "snappy", 1 << 24)
    assert len(d) == 0 and len(d.metadata) > 100
    by_name = {m.metric: m for m in d.metadata}
    assert by_name["prometheus_http_requests_total"].type == "counter"
    assert by_name["prometheus_http_requests_total"].help


def _generated_label_strings(keys):
    labels = v1pb.TimeSeries.FromString(b"".join(keys)).labels
    return [lb.name for lb in labels], [lb.value for lb in labels]


@pytest.mark.parametrize("seed", range(4))
def test_label_strings_shortcut_matches_the_generated_code(seed):
    # The vectorised label reader (new series) against the generated code on the same label bytes.
    from metricsgw.remote.fastscan import label_strings

    rng = random.Random(seed)
    series = []
    for i in range(400):
        labels = [("__name__", f"m_{rng.randrange(9)}")] + [
            (f"l{j}", "".join(rng.choice("abcXYZ09_-./:= ") for _ in range(rng.randrange(0, 60))) or "x")
            for j in range(rng.randrange(0, 14))]
        series.append((labels, [(1, 1.0)]))
    d = codec.decode_v1(codec.encode_v1(series, compress=False))
    idx = rng.sample(range(len(d)), 300)
    keys = [d.keys[i] for i in idx]
    got = label_strings(keys, d.label_counts[idx])
    assert got is not None
    assert got == _generated_label_strings(keys)
    names, values, counts = d.bulk_label_strings(idx)
    assert (names, values) == got and counts.tolist() == d.label_counts[idx].tolist()


@pytest.mark.parametrize("labels", [
    [("__name__", "m"), ("zone", "ü")],  # not ASCII: the generated code checks the UTF-8
    [("__name__", "m"), ("long", "v" * 200)],  # a length of two bytes
    [("__name__", "m"), ("empty", "")],  # an empty value is left out of the record
])
def test_label_strings_shortcut_leaves_other_labels_to_the_generated_code(labels):
    from metricsgw.remote.fastscan import label_strings

    d = codec.decode_v1(codec.encode_v1([(labels, [(1, 1.0)]), ([("__name__", "ok")], [(1, 1.0)])], compress=False))
    assert label_strings(d.keys, d.label_counts) is None
    names, values, _ = d.bulk_label_strings([0, 1])
    assert (names, values) == _generated_label_strings(d.keys)
