"""Pre-encoding remote-write v1 requests for the load driver, fast.

`metricsgw.remote.codec.encode_v1` builds protobuf objects field by field, which is right for
tests but costs seconds per million samples. Here each series' label bytes are encoded once
and spliced into every request, producing the same bytes upb would (fields in number order,
proto3 zero values omitted) -- tests/testkit/test_wire_and_load.py checks that byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import snappy

from metricsgw.model import Labels, MetricMetadata

_TYPES = ("unknown", "counter", "gauge", "histogram", "gaugehistogram", "summary", "info", "stateset")


def varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64  # int64 negatives are 10-byte varints
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field_bytes(tag: int, payload: bytes) -> bytes:
    return bytes([tag]) + varint(len(payload)) + payload


def encode_labels(labels: Labels, cache: dict | None = None) -> bytes:
    """The `repeated Label labels = 1` part of a TimeSeries (pairs repeat a lot: pass a cache)."""
    cache = {} if cache is None else cache
    parts = []
    for pair in labels:
        enc = cache.get(pair)
        if enc is None:
            name, value = pair
            body = (_field_bytes(0x0A, name.encode()) if name else b"") + (
                _field_bytes(0x12, value.encode()) if value else b"")
            enc = cache[pair] = _field_bytes(0x0A, body)
        parts.append(enc)
    return b"".join(parts)


def _sample(value_bytes: bytes, ts_part: bytes) -> bytes:
    body = (b"\x09" + value_bytes if value_bytes != b"\x00" * 8 else b"") + ts_part
    return b"\x12" + varint(len(body)) + body


def encode_write_request(label_bytes: list[bytes], values: np.ndarray, timestamps: list[int]) -> bytes:
    """Uncompressed WriteRequest: series j has labels label_bytes[j] and samples values[j, k] at timestamps[k]."""
    ts_parts = [(b"\x10" + varint(t)) if t else b"" for t in timestamps]
    raw = np.ascontiguousarray(values, dtype=np.float64).tobytes()
    k = len(timestamps)
    out = []
    for j, lb in enumerate(label_bytes):
        base = j * k * 8
        samples = b"".join(_sample(raw[base + 8 * s: base + 8 * s + 8], ts_parts[s]) for s in range(k))
        body = lb + samples
        out.append(b"\x0a" + varint(len(body)) + body)
    return b"".join(out)


def encode_metadata_request(metadata: list[MetricMetadata]) -> bytes:
    parts = []
    for m in metadata:
        t = _TYPES.index(m.type) if m.type in _TYPES else 0
        body = (b"\x08" + varint(t) if t else b"") + _field_bytes(0x12, m.metric.encode())
        if m.help:
            body += _field_bytes(0x22, m.help.encode())
        if m.unit:
            body += _field_bytes(0x2A, m.unit.encode())
        parts.append(_field_bytes(0x1A, body))
    return b"".join(parts)


@dataclass
class Request:
    body: bytes  # snappy-compressed
    samples: int
    series: int
    first_scrape: int = 0  # index of the first scrape in it (0 = creates the series)


def build_requests(workload, start_ms: int, scrapes: int, interval_ms: int, shards: int = 4,
                   samples_per_request: int = 2000, samples_per_series: int = 1) -> list[list[Request]]:
    """All requests of a run, per shard (= connection), in send order.

    Series i goes to shard i % shards, so each series' samples stay in time order on one
    connection even when a request is retried (as Prometheus's sharded queue does).
    Within a shard, a request holds `samples_per_series` consecutive scrapes of
    samples_per_request // samples_per_series series.
    """
    labels = workload.series()
    cache: dict = {}
    label_bytes = [encode_labels(lb, cache) for lb in labels]
    times = [start_ms + k * interval_ms for k in range(scrapes)]
    values = np.stack([workload.samples_at(t) for t in times], axis=1)  # (series, scrapes)
    per_req = max(1, samples_per_request // samples_per_series)
    out: list[list[Request]] = []
    for shard in range(shards):
        idx = np.arange(shard, len(labels), shards)
        reqs = []
        for k0 in range(0, scrapes, samples_per_series):
            ts = times[k0: k0 + samples_per_series]
            for c0 in range(0, len(idx), per_req):
                chunk = idx[c0: c0 + per_req]
                raw = encode_write_request([label_bytes[i] for i in chunk], values[chunk, k0: k0 + len(ts)], ts)
                reqs.append(Request(snappy.compress(raw), len(chunk) * len(ts), len(chunk), k0))
        out.append(reqs)
    return out


def metadata_request(workload) -> Request:
    return Request(snappy.compress(encode_metadata_request(workload.metadata())), 0, 0)

