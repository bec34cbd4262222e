"""The fixed-width request template of bench.scale: the bytes it refills decode to exactly the
samples meant, through the generated protobuf code and through the gateway's own fast scanner."""

from __future__ import annotations

import numpy as np
import pytest
import snappy

from bench import scale_wire
from metricsgw.remote.fastscan import scan_series
from metricsgw.remote.proto import remote_v1_pb2 as v1pb
from testkit import wire
from testkit.workload import Workload

T0 = 1_796_000_000_000  # December 2026


@pytest.fixture(scope="module")
def wl() -> Workload:
    return Workload(1, seed=5)


def _decoded(body: bytes):
    return v1pb.WriteRequest.FromString(snappy.decompress(body))


def test_fixed_varint_is_the_protobuf_varint():
    ts = np.array([scale_wire.MIN_TS, T0, scale_wire.MAX_TS - 1])
    for t, enc in zip(ts.tolist(), scale_wire.fixed_varint(ts)):
        assert enc.tobytes() == wire.varint(t)
    with pytest.raises(ValueError):
        scale_wire.fixed_varint(scale_wire.MAX_TS)
    with pytest.raises(ValueError):
        scale_wire.fixed_varint(scale_wire.MIN_TS - 1)


def test_refilled_requests_carry_every_series_once_with_its_value(wl):
    cache: dict = {}
    tpl = scale_wire.Template([wire.encode_labels(lb, cache) for lb in wl.series()], series_per_request=50)
    assert tpl.num_requests == -(-wl.num_series // 50)
    for t in (T0, T0 + 15_000):  # refilled in place: the second scrape must not show the first
        values = wl.samples_at(t)
        values[:2] = 0.0, -0.0
        values.view(np.uint64)[2] = 0x7FF0000000000002  # a NaN with a payload (the staleness marker's kind)
        got_labels, got_t, got_bits = [], [], []
        for j in range(tpl.num_requests):
            msg = _decoded(tpl.fill(j, values, t + j))
            for ts in msg.timeseries:
                got_labels.append(tuple((lb.name, lb.value) for lb in ts.labels))
                (s,) = ts.samples
                got_t.append(s.timestamp)
                got_bits.append(np.float64(s.value).view(np.uint64))
        assert got_labels == list(wl.series())
        want_t = [t + i // 50 for i in range(wl.num_series)]
        assert got_t == want_t
        assert np.array_equal(np.array(got_bits, np.uint64), values.view(np.uint64))  # bit-exact, NaN payload too


def test_the_gateways_fast_scanner_reads_the_template(wl):
    """Explicit 0.0 values and 6-byte timestamps must not push the gateway onto its slow path."""
    cache: dict = {}
    tpl = scale_wire.Template([wire.encode_labels(lb, cache) for lb in wl.series()], series_per_request=200)
    values = wl.samples_at(T0)
    values[:5] = 0.0
    raw = snappy.decompress(tpl.fill(0, values, T0))
    blobs = list(v1pb.BlobWriteRequest.FromString(raw).timeseries)
    scanned = scan_series(blobs)
    assert scanned is not None
    assert scanned.t.tolist() == [T0] * 200
    assert np.array_equal(scanned.v.view(np.uint64), values[:200].view(np.uint64))
