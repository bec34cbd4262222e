"""The compiled scan of scrape-shaped 1.0 requests (scrape_scan.py): its keys are the ingest cache's keys bit
for bit, it reads exactly what the generated-code walk reads, and no byte string makes it read outside the
request or take what the walk would not."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import xxhash

from metricsgw.remote import codec, native_scan, scrape_scan
from metricsgw.remote.proto import remote_v1_pb2 as v1pb
from metricsgw.remote.series_keys import SEED, cache_keys, halves

T0 = 1_760_000_000_000


@pytest.fixture(scope="module", autouse=True)
def kernel():
    assert scrape_scan.load(), "the compiled scan must load where the tests run"
    assert native_scan.load()


def series(n, t=T0):
    return [([("__name__", "gpu_util"), ("gpu", str(i)), ("host", "h" * (i % 300))], [(t + i, 0.5 * i)])
            for i in range(n)]


def raw(s):
    return codec.encode_v1(s, compress=False)


def test_keys_are_the_seeded_xxh3_128_of_the_label_records_as_cache_keys_makes_them():
    # Label records of every length the hash treats apart (0-16, 17-128, 129-240, longer), and enough series
    # that some digests end in a 0 byte (a way to lose one when bytes are made in numpy).
    s = series(3000)
    scanned = scrape_scan.scan(raw(s), SEED)
    walked = codec.decode_v1(raw(s))
    want = cache_keys(walked.keys)
    assert scanned is not None and sum(d[-1] == 0 for d in want) > 0
    assert [(h << 64 | lo).to_bytes(16, "big") for h, lo in zip(scanned.hi.tolist(), scanned.lo.tolist())] == want
    hi, lo = halves(want)
    assert scanned.hi.tolist() == hi.tolist() and scanned.lo.tolist() == lo.tolist()
    body = raw(s)
    assert [body[a:b] for a, b in zip(scanned.starts.tolist(), scanned.label_ends.tolist())] == walked.keys
    assert scanned.t.tolist() == walked.t.tolist()
    assert scanned.v.view(np.uint64).tolist() == walked.v.view(np.uint64).tolist()
    other_seed = scrape_scan.scan(raw(s[:5]), 12345)
    assert [(h << 64 | lo).to_bytes(16, "big") for h, lo in zip(other_seed.hi.tolist(), other_seed.lo.tolist())] \
        == [xxhash.xxh3_128_digest(k, 12345) for k in walked.keys[:5]]


def test_metadata_is_flagged_and_read_apart():
    from metricsgw.model import MetricMetadata

    body = codec.encode_v1(series(3), [MetricMetadata("gpu_util", "gauge", "GPU use.", "")], compress=False)
    scanned = scrape_scan.scan(body, SEED)
    assert scanned is not None and scanned.has_metadata and len(scanned.hi) == 3
    assert not scrape_scan.scan(raw(series(3)), SEED).has_metadata


def _with_exemplar():
    req = v1pb.WriteRequest()
    ts = req.timeseries.add(labels=[v1pb.Label(name="__name__", value="x")])
    ts.samples.add(timestamp=T0, value=1.0)
    ts.exemplars.add(value=1.0, timestamp=T0)
    return req.SerializeToString()


def _reversed_sample_fields():
    key = codec.decode_v1(raw(series(1))).keys[0]
    sample = b"\x10" + codec.uvarint(T0) + b"\x09" + struct.pack("<d", 2.5)
    ts = key + b"\x12" + bytes([len(sample)]) + sample
    return b"\x0a" + codec.uvarint(len(ts)) + ts


@pytest.mark.parametrize("body", [
    raw([(labels, [(T0, 1.0), (T0 + 1, 2.0)]) for labels, _ in series(2)]),  # two samples
    raw([(labels, []) for labels, _ in series(2)]),  # none
    _with_exemplar(),
    _reversed_sample_fields(),
    raw(series(2)) + b"\x28\x01",  # an unknown top-level field (5, varint)
    b"\x0a\x05\x12\x03\x10" + b"\xff" * 9 + b"\x02",  # a timestamp varint past 64 bits
], ids=["two-samples", "no-sample", "exemplar", "reversed-sample-fields", "unknown-field", "varint-overflow"])
def test_other_shapes_are_not_taken(body):
    assert scrape_scan.scan(body, SEED) is None


def test_no_byte_string_reads_outside_the_request_or_differs_from_the_walk():
    # Truncations, flipped bytes and inserted bytes of a valid request: the scan either refuses, or the
    # generated-code walk reads the very same series, labels, times and values.
    rng = np.random.default_rng(7)
    base = raw(series(40))
    taken = 0
    for trial in range(3000):
        body = bytearray(base)
        kind = trial % 3
        if kind == 0:
            body = body[: int(rng.integers(0, len(body)))]
        elif kind == 1:
            for at in rng.integers(0, len(body), int(rng.integers(1, 4))).tolist():
                body[at] = int(rng.integers(0, 256))
        else:
            at = int(rng.integers(0, len(body)))
            body[at:at] = bytes(rng.integers(0, 256, int(rng.integers(1, 4))).astype(np.uint8))
        body = bytes(body)
        scanned = scrape_scan.scan(body, SEED)
        if scanned is None or (scanned.hist_start >= 0).any():  # (a histogram's bytes: native_scan's tests)
            continue
        taken += 1
        walked = codec._decode_v1_generic(body)  # the generated code; BadData if not a WriteRequest
        assert walked.counts.tolist() == [1] * len(walked.keys)
        assert [body[a:b] for a, b in zip(scanned.starts.tolist(), scanned.label_ends.tolist())] == walked.keys
        assert scanned.t.tolist() == walked.t.tolist()
        assert scanned.v.view(np.uint64).tolist() == walked.v.view(np.uint64).tolist()
    assert taken > 300  # flipped label bytes keep the shape: the comparison above ran


def test_its_arrays_carry_numpys_own_dtypes():
    # numba's arrays come with dtype objects of their own, equal to numpy's but not the same object; ufunc.at
    # (the catalog's touch of each series' time span) then leaves its fast loop, 40x slower.
    scanned = scrape_scan.scan(raw(series(10)), SEED)
    for column, dtype in ((scanned.t, np.int64), (scanned.v, np.float64), (scanned.starts, np.int64),
                          (scanned.label_ends, np.int64), (scanned.hi, np.uint64), (scanned.lo, np.uint64)):
        assert column.dtype is np.dtype(dtype)


def _histogram_request(n: int, bad: int | None = None) -> bytes:
    req = v1pb.WriteRequest()
    for i in range(n):
        ts = req.timeseries.add(labels=[v1pb.Label(name="__name__", value="nh"), v1pb.Label(name="i", value=str(i))])
        h = ts.histograms.add(schema=3, timestamp=T0 + i, count_int=3 if i != bad else 1, sum=1.0)
        h.positive_spans.add(offset=0, length=2)
        h.positive_deltas.extend([1, 1])
    ts = req.timeseries.add(labels=[v1pb.Label(name="__name__", value="floats")])
    ts.samples.add(timestamp=T0, value=2.5)
    return req.SerializeToString()


def _all_known(hi, lo):
    return np.arange(len(hi), dtype=np.int64), None


def test_a_request_of_one_histogram_a_series_is_read_as_the_walk_reads_it():
    body = _histogram_request(50)
    scanned = scrape_scan.scan(body, SEED)
    assert (scanned.hist_start >= 0).tolist() == [True] * 50 + [False]
    fast = codec.decode_v1(body, _all_known)
    walked = codec._decode_v1_generic(body)
    assert fast.sids is not None  # the known path took it
    assert list(fast.keys) == walked.keys and fast.counts.tolist() == walked.counts.tolist() == [0] * 50 + [1]
    assert fast.t.tolist() == walked.t.tolist() and fast.v.tolist() == walked.v.tolist()
    assert fast.histograms == walked.histograms == 50
    assert fast.native.hist_blobs == walked.native.hist_blobs
    assert fast.native.hist_t.tolist() == walked.native.hist_t.tolist() == [T0 + i for i in range(50)]
    assert fast.native.hist_counts.tolist() == walked.native.hist_counts.tolist()


def test_a_histogram_prometheus_would_refuse_sends_the_request_down_the_walk_which_names_it():
    body = _histogram_request(5, bad=3)
    decoded = codec.decode_v1(body, _all_known)
    assert decoded.sids is None and decoded.native.invalid[3][0] == 1
    assert "observations found in buckets" in decoded.native.invalid[3][1]
