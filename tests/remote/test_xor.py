"""The XOR chunk encoder: byte for byte against chunks Prometheus 2.42 produced, and round trips
through the independent reference decoder (tests/remote/xor_reference.py) with special floats
and every timestamp delta-of-delta width. tests/e2e/test_remote_read.py re-encodes every chunk a
live Prometheus streams as well."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from metricsgw.model import STALE_NAN
from metricsgw.remote.xor import chunks, encode_chunk
from tests.remote.xor_reference import decode_xor

# Captured from Prometheus 2.42.0 (remote-write receiver, then a STREAMED_XOR_CHUNKS remote read).
T = 1796138715000
PROMETHEUS_CHUNKS = [
    ([T, T + 15000, T + 30000, T + 45000, T + 45001, T + 60000, T + 200000, T + 200500, T + 260000, T + 262000],
     [1.0, 1.0, 2.5, STALE_NAN, -0.0, math.inf, 1e-300, 123456.789, math.nan, 42.0],
     "000af09daea3c6683ff00000000000009875309bffd62f7ff4000000000003b8ad383ffff00000000000038752d7ff8000000000000e1"
     "e849c3ffe556e1fc2f8f359eddf14a0ada509aea342c86733c4fc1890327ef9db2747d927f7a0000000000000"),
    ([T], [3.25], "0001f09daea3c668400a00000000000000"),  # byte-aligned: ends in bstream's empty byte
]


def bits(values) -> list[int]:
    return np.asarray(values, np.float64).view(np.uint64).tolist()


@pytest.mark.parametrize("t, v, want", PROMETHEUS_CHUNKS, ids=["mixed", "one-sample"])
def test_bytes_equal_prometheus(t, v, want):
    assert encode_chunk(np.array(t, np.int64), np.array(v)).hex() == want
    assert decode_xor(bytes.fromhex(want)) == list(zip(t, bits(v)))


SPECIAL = [STALE_NAN, math.nan, struct.unpack("<d", struct.pack("<Q", 0xFFF0000000000001))[0], math.inf, -math.inf,
           -0.0, 0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 1.0, 1.0 + 2**-52]


@pytest.mark.parametrize("seed", range(40))
def test_round_trip_through_the_reference_decoder(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 260))
    # gaps giving dod 0 and every width: 14, 17, 20 and 64 bits, negative ones too
    gaps = rng.choice([15_000, 15_000, 15_000, 1, 7_000, 60_000, 500_000, 2**33, 15_001], size=n)
    t = int(rng.integers(-2**40, 2**41)) + np.cumsum(gaps)
    kinds = rng.integers(0, 4, n)
    v = np.where(kinds == 0, rng.choice(SPECIAL, n), np.round(rng.normal(0, 1e3, n), 2))
    v = np.where(kinds == 1, rng.integers(0, 2**63, n, dtype=np.uint64).view(np.float64), v)
    v = np.where(kinds == 2, np.roll(v, 1), v)  # repeats: the "value unchanged" bit
    data = encode_chunk(t, v)
    assert decode_xor(data) == list(zip(t.tolist(), bits(v)))
    assert int.from_bytes(data[:2], "big") == n


def test_empty_chunk_and_limits():
    assert encode_chunk(np.empty(0, np.int64), np.empty(0)) == b"\x00\x00"
    with pytest.raises(ValueError):
        encode_chunk(np.zeros(70_000, np.int64), np.zeros(70_000))


@pytest.mark.parametrize("n, sizes", [(119, [119]), (120, [120]), (121, [120, 1]), (1000, [120] * 8 + [40])])
def test_chunks_cut_every_120_samples(n, sizes):
    t = np.arange(n, dtype=np.int64) * 15_000
    v = np.sin(np.arange(n))
    got = list(chunks(t, v))
    assert [len(decode_xor(c)) for _, _, c in got] == sizes
    assert [(lo, hi) for lo, hi, _ in got] == [(int(t[a]), int(t[min(a + 120, n) - 1])) for a in range(0, n, 120)]
    assert [s for _, _, c in got for s in decode_xor(c)] == list(zip(t.tolist(), bits(v)))
