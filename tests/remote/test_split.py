"""The distributor's split: every series in exactly one part, byte for byte; the same series always on the same
shard; parts that the shard's own decoder reads as it reads the whole request."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from metricsgw.remote import codec, split
from metricsgw.remote.proto import remote_v1_pb2 as v1pb
from metricsgw.model import MetricMetadata

MD = MetricMetadata("m", "gauge", "help text", "")


def _series(n: int, samples: int = 1) -> list:
    return [([("__name__", "m"), ("instance", f"node-{i}"), ("gpu", str(i % 8))],
             [(1_000 + 15_000 * k + i, float(i) + k / 10) for k in range(samples)]) for i in range(n)]


def _by_labels(decoded: codec.DecodedWrite) -> dict:
    out, offsets = {}, decoded.offsets()
    for i in range(len(decoded)):
        key = tuple(decoded.label_pairs(i))
        out[key] = list(zip(decoded.t[offsets[i]:offsets[i + 1]].tolist(),
                            decoded.v[offsets[i]:offsets[i + 1]].view(np.int64).tolist()))
    return out


@pytest.mark.parametrize("shards", [2, 3, 7])
@pytest.mark.parametrize("version", [1, 2])
def test_every_series_is_in_exactly_one_part_with_all_its_samples(version, shards):
    series = _series(500, samples=3)
    if version == 1:
        raw, cut, decode = codec.encode_v1(series, [MD], compress=False), split.split_v1, codec.decode_v1
    else:
        raw, cut, decode = codec.encode_v2(series, {"m": MD}, compress=False), split.split_v2, codec.decode_v2
    whole = _by_labels(decode(raw))
    parts = [_by_labels(decode(p)) for p in cut(raw, shards) if p]
    assert len(parts) == shards  # 500 series reach every shard
    merged: dict = {}
    for part in parts:
        assert not set(part) & set(merged), "a series was sent to two shards"
        merged.update(part)
    assert merged == whole


def test_the_same_series_goes_to_the_same_shard_whatever_else_is_in_the_request():
    series = _series(300)
    alone = {}
    for s in series[:40]:
        parts = split.split_v1(codec.encode_v1([s], compress=False), 4)
        alone[tuple(s[0])] = [i for i, p in enumerate(parts) if p and codec.decode_v1(p).samples]
    parts = split.split_v1(codec.encode_v1(series, compress=False), 4)
    for i, p in enumerate(parts):
        d = codec.decode_v1(p)
        for j in range(len(d)):
            labels = tuple((n.decode(), v.decode()) for n, v in d.label_pairs(j))
            if labels in alone:
                assert alone[labels] == [i]


def test_the_shard_is_crc32_of_the_raw_label_bytes_not_a_salted_hash():
    key = v1pb.TimeSeries(labels=[v1pb.Label(name="__name__", value="up")]).SerializeToString()
    assert split.shard_of_keys([key], 5).tolist() == [zlib.crc32(key) % 5]


def test_metadata_goes_with_every_part_and_alone_to_every_shard():
    parts = split.split_v1(codec.encode_v1(_series(200), [MD], compress=False), 3)
    assert all(codec.decode_v1(p).metadata == [MD] for p in parts)
    only = split.split_v1(codec.encode_v1([], [MD], compress=False), 3)
    assert [codec.decode_v1(p).metadata for p in only] == [[MD]] * 3


def test_an_unusual_layout_is_reframed_with_the_same_result():
    """Metadata records between series records: the byte-slicing path does not apply; re-framing does."""
    series = _series(60)
    req = v1pb.WriteRequest()
    for k, (labels, samples) in enumerate(series):
        ts = req.timeseries.add()
        ts.labels.extend(v1pb.Label(name=n, value=v) for n, v in labels)
        ts.samples.extend(v1pb.Sample(timestamp=t, value=v) for t, v in samples)
    ts_records = [b"\x0a" + codec.uvarint(len(b)) + b for b in (t.SerializeToString() for t in req.timeseries)]
    md = v1pb.MetricMetadata(type=2, metric_family_name="m", help="help text").SerializeToString()
    md_record = b"\x1a" + codec.uvarint(len(md)) + md
    interleaved = b"".join(ts_records[:30]) + md_record + b"".join(ts_records[30:])
    usual = b"".join(ts_records) + md_record
    assert split.split_v1(interleaved, 3) == split.split_v1(usual, 3)


def test_a_corrupt_request_is_bad_data():
    from metricsgw.errors import BadData

    with pytest.raises(BadData):
        split.split_v1(b"\x0a\xff\xff\xff", 2)
    with pytest.raises(BadData):
        split.split_v2(b"\x2a\xff\xff\xff", 2)
