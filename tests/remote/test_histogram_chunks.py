"""The histogram chunk encoder: round trips through the independent reference decoder
(tests/remote/histogram_chunk_reference.py) over random integer and float histograms, and where chunks are
cut and with which header. tests/e2e/test_native_differential.py re-encodes every histogram chunk a live
Prometheus 2.42 streams, byte for byte."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from metricsgw.model import STALE_NAN
from metricsgw.remote import histogram_chunks as hc
from metricsgw.remote.proto import remote_v1_pb2 as v1pb
from tests.remote.histogram_chunk_reference import absolute_buckets, decode, from_bits

T0 = 1_796_000_000_000


def histogram(counts: dict[int, float], *, is_float=False, schema=0, zt=0.001, zero=1, total=None, sum_=1.5,
              neg: dict[int, float] | None = None, hint=0, custom=()) -> bytes:
    """A remote-write histogram of absolute bucket counts by index."""
    h = v1pb.Histogram(sum=sum_, schema=schema, zero_threshold=zt, reset_hint=hint, custom_values=custom)
    for side, buckets in (("positive", counts), ("negative", neg or {})):
        idx = sorted(buckets)
        prev_end, prev = None, 0
        for i in idx:
            if prev_end is None or i != prev_end:
                getattr(h, f"{side}_spans").add(offset=i if prev_end is None else i - prev_end, length=0)
            getattr(h, f"{side}_spans")[-1].length += 1
            prev_end = i + 1
            if is_float:
                getattr(h, f"{side}_counts").append(buckets[i])
            else:
                getattr(h, f"{side}_deltas").append(int(buckets[i]) - prev)
                prev = int(buckets[i])
    n = total if total is not None else zero + sum(counts.values()) + sum((neg or {}).values())
    if is_float:
        h.count_float, h.zero_count_float = n, zero
    else:
        h.count_int, h.zero_count_int = int(n), int(zero)
    return h.SerializeToString()


def absolute(s: dict, is_float: bool) -> tuple:
    """(count, zero count, {(sign, bucket index): count}) of a decoded sample, empty buckets left out."""
    out = {(sign, idx): c for sign, spans, values in ((1, s["pos_spans"], s["pos"]), (-1, s["neg_spans"], s["neg"]))
           for idx, c in absolute_buckets(spans, values, not is_float).items()}
    f = from_bits if is_float else float
    return f(s["count"]), f(s["zero_count"]), out


def decode_all(chunks) -> list[tuple[int, dict, int]]:
    out = []
    for lo, hi, enc, data in chunks:
        header, samples = decode(data, enc)
        assert (samples[0]["t"], samples[-1]["t"]) == (lo, hi) and len(samples) == int.from_bytes(data[:2], "big")
        out += [(header if k == 0 else None, s, enc) for k, s in enumerate(samples)]
    return out


def bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


@pytest.mark.parametrize("seed", range(30))
def test_random_histograms_round_trip(seed):
    rng = np.random.default_rng(seed)
    is_float = bool(seed % 2)
    n = int(rng.integers(1, 300))
    t = (T0 + np.cumsum(rng.choice([15_000, 15_000, 1, 30_000, 7_777, 2**31], n))).tolist()
    counts = {int(i): 0 for i in rng.choice(np.arange(-20, 20), 6, replace=False)}
    blobs, want = [], []
    for k in range(n):
        if rng.random() < 0.1:  # a bucket appears
            counts.setdefault(int(rng.integers(-30, 30)), 0)
        for i in counts:
            counts[i] += float(rng.integers(0, 50)) if not is_float else float(rng.uniform(0, 50))
        if rng.random() < 0.05:  # a counter reset
            counts = {i: 0 for i in counts}
        neg = {-3: float(k)} if seed % 3 == 0 else None
        sum_ = STALE_NAN if rng.random() < 0.03 else float(rng.normal(0, 1e6))
        schema = int(rng.choice([0, 0, 0, 3, -4])) if seed % 5 == 0 else 2
        blobs.append(histogram(dict(counts), is_float=is_float, schema=schema, zero=k, sum_=sum_, neg=neg))
        want.append((t[k], bits(sum_), schema, counts.copy(), neg))
    got = decode_all(hc.chunks(t, blobs))
    assert len(got) == n
    assert {enc for _, _, enc in got} == {hc.FLOAT_HISTOGRAM if is_float else hc.HISTOGRAM}
    for (_, s, _), (ts, sum_bits, schema, counts, neg) in zip(got, want):
        assert (s["t"], s["sum_bits"]) == (ts, sum_bits)
        if sum_bits == bits(STALE_NAN):
            continue
        total, _, buckets = absolute(s, is_float)
        expect = {(1, i): c for i, c in counts.items() if c} | {(-1, i): c for i, c in (neg or {}).items() if c}
        assert buckets == pytest.approx(expect) if is_float else buckets == expect
        assert s["schema"] == schema


def test_chunks_are_cut_where_prometheus_cuts_them_with_its_headers():
    t = [T0 + 15_000 * k for k in range(12)]
    blobs = [
        histogram({0: 1, 1: 2}),                    # 0: first chunk: header unknown
        histogram({0: 2, 1: 3}),                    # 1: appended
        histogram({0: 2, 1: 1}),                    # 2: a bucket lower: counter reset
        histogram({0: 2, 1: 1, 5: 1}),              # 3: a bucket appears: a new chunk, not a reset
        histogram({0: 2, 1: 1, 5: 1}, schema=1),    # 4: schema change: unknown
        histogram({0: 2, 1: 1, 5: 1}, schema=1, sum_=STALE_NAN),  # 5: a stale marker is appended
        histogram({0: 3, 1: 1, 5: 1}, schema=1),    # 6: after a stale marker: a new chunk, unknown
        histogram({0: 9, 1: 1, 5: 1}, schema=1, hint=1),  # 7: the sender says reset
        histogram({0: 1}, schema=1, hint=3),        # 8: a gauge: its own chunk
        histogram({0: 0}, schema=1, hint=3),        # 9: gauges go down without a cut
        histogram({0: 0}, schema=1, zero=0, is_float=True),  # 10: a float histogram: a float chunk
        histogram({1: 4}, schema=1, zero=0, is_float=True),  # 11: bucket 0 held nothing: a new layout, no reset
    ]
    chunks = hc.chunks(t, blobs)
    starts = [(k, header) for k, (header, _, _) in enumerate(decode_all(chunks)) if header is not None]
    assert starts == [(0, hc.UNKNOWN_RESET), (2, hc.COUNTER_RESET), (3, hc.NOT_COUNTER_RESET), (4, hc.UNKNOWN_RESET),
                      (6, hc.UNKNOWN_RESET), (7, hc.COUNTER_RESET), (8, hc.GAUGE_TYPE), (10, hc.UNKNOWN_RESET),
                      (11, hc.NOT_COUNTER_RESET)]
    assert [enc for _, _, enc, _ in chunks] == [hc.HISTOGRAM] * 7 + [hc.FLOAT_HISTOGRAM] * 2


def test_chunks_hold_at_most_120_samples():
    t = [T0 + 15_000 * k for k in range(250)]
    chunks = hc.chunks(t, [histogram({0: k}) for k in range(250)])
    assert [int.from_bytes(data[:2], "big") for _, _, _, data in chunks] == [120, 120, 10]
    assert [data[2] for _, _, _, data in chunks] == [hc.UNKNOWN_RESET, hc.NOT_COUNTER_RESET, hc.NOT_COUNTER_RESET]


def test_custom_bucket_histograms_keep_their_bounds():
    bounds = (0.005, 0.1, 1.0, 2.5, 1e9, math.pi)  # the last two: whole thousandths or not, written raw
    t = [T0, T0 + 15_000, T0 + 30_000]
    blobs = [histogram({0: k, 3: 2 * k, 6: 1}, schema=-53, zt=0, zero=0, custom=bounds) for k in (1, 2, 3)]
    blobs.append(histogram({0: 5}, schema=-53, zt=0, zero=0, custom=bounds[:3]))  # other bounds: a reset
    got = decode_all(hc.chunks(t + [T0 + 45_000], blobs))
    assert [s["custom_values"] for _, s, _ in got] == [bounds] * 3 + [bounds[:3]]
    assert [h for h, _, _ in got] == [hc.UNKNOWN_RESET, None, None, hc.COUNTER_RESET]
    assert [absolute(s, False)[2] for _, s, _ in got][2] == {(1, 0): 3.0, (1, 3): 6.0, (1, 6): 1.0}


def test_a_write_of_whole_bytes_that_ends_aligned_leaves_prometheus_s_empty_byte():
    """bstream.writeByte appends the next byte before it is needed (tests/remote/test_xor.py checks the same
    stream against Prometheus's bytes): a one-sample float chunk of 208 bits ends in a 27th byte of zeros."""
    blob = histogram({}, is_float=True, zt=0, zero=0, total=0, sum_=0.0)  # layout 11 bits, t=1: 5, three floats
    (_, _, _, data), = hc.chunks([1], [blob])
    assert len(data) == 3 + 26 + 1 and data[-1] == 0
    (_, _, _, data), = hc.chunks([0], [blob])  # t=0: 1 bit, 204 bits in 26 bytes, no empty byte
    assert len(data) == 3 + 26
