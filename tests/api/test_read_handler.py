"""POST /api/v1/read on the real app and storage (head and Parquet): both response types,
matchers, hints, chunk and frame boundaries, bit-exact values, and a table of refusals."""

from __future__ import annotations

import asyncio
import math
import struct

import numpy as np
import pytest
import snappy
from aiohttp.test_utils import TestClient, TestServer

from metricsgw import appkeys
from metricsgw.app import build_app
from metricsgw.config import load
from metricsgw.model import STALE_NAN
from metricsgw.remote import codec
from metricsgw.remote.proto import remote_read_pb2 as pb
from tests.remote.read_client import HEADERS, build_request, decode_samples, decode_streamed
from tests.remote.xor_reference import decode_xor

SAMPLES, STREAMED = pb.ReadRequest.SAMPLES, pb.ReadRequest.STREAMED_XOR_CHUNKS
# Fixed 2023 timestamps: the apps keep a century of retention so the ingest time window accepts them.
T0 = 1_700_000_000_000
STEP = 15_000
NAN_PAYLOAD = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000123))[0]
SPECIAL = [STALE_NAN, math.nan, NAN_PAYLOAD, math.inf, -math.inf, -0.0, 0.0, 5e-324, 1.7976931348623157e308]
SIZES = {"s119": 119, "s120": 120, "s121": 121, "s1000": 1000}


def bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def dataset() -> dict[tuple, list[tuple[int, float]]]:
    """Series by sorted label pairs: chunk-boundary sizes, special floats, irregular timestamps."""
    out = {}
    for name, n in SIZES.items():
        out[(("__name__", "rr_size"), ("job", name))] = [(T0 + k * STEP, float(k % 17) * 1.5) for k in range(n)]
    out[(("__name__", "rr_special"), ("job", "floats"))] = [(T0 + k * STEP, v) for k, v in enumerate(SPECIAL * 3)]
    rng = np.random.default_rng(7)
    gaps = rng.choice([1, 999, 15_000, 65_537, 600_000, 3_000_000], size=300)  # every delta-of-delta width
    ts = T0 + np.cumsum(gaps)
    out[(("__name__", "rr_irregular"), ("job", "jitter"))] = [(int(t), float(rng.normal())) for t in ts]
    out[(("__name__", "rr_other"), ("env", "b"), ("job", "x"))] = [(T0 + k * STEP, float(k)) for k in range(10)]
    return out


DATA = dataset()


def make_app(path, **settings):
    return build_app(load({"storage.path": str(path), "storage.retention.time": "100y", **settings}))


async def _session(app, requests, flush_after_write=True):
    async with TestClient(TestServer(app)) as client:
        while not app[appkeys.STORAGE].ready:
            await asyncio.sleep(0.01)
        half = {k: v[: len(v) // 2] for k, v in DATA.items()}
        rest = {k: v[len(v) // 2:] for k, v in DATA.items()}
        for part in (half, rest):  # the first half ends up in Parquet, the second stays in the head
            resp = await client.post("/api/v1/write", data=codec.encode_v1(list(part.items())),
                                     headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy"})
            assert resp.status == 204, await resp.text()
            if flush_after_write and part is half:
                await asyncio.to_thread(app[appkeys.STORAGE].flush)
        out = []
        for body in requests:
            resp = await client.post("/api/v1/read", data=body, headers=HEADERS)
            out.append((resp.status, dict(resp.headers), await resp.read()))
        return out


def read(app, *bodies):
    return asyncio.run(_session(app, list(bodies)))


def query(matchers, start=T0 - 1, end=T0 + 10**9, hints=None):
    return {"matchers": matchers, "start": start, "end": end, "hints": hints}


def want(selector, start=T0 - 1, end=T0 + 10**9) -> dict:
    out = {}
    for labels, samples in sorted(DATA.items()):
        if selector(dict(labels)):
            kept = [(t, bits(v)) for t, v in samples if start <= t <= end]
            if kept:
                out[labels] = kept
    return out


MATCHER_CASES = [
    ([("__name__", "=", "rr_size")], lambda l: l["__name__"] == "rr_size"),
    ([("__name__", "=~", "rr_.*"), ("job", "!=", "s120")], lambda l: l["job"] != "s120"),
    ([("__name__", "=~", "rr_s.*"), ("job", "!~", "s1.*")], lambda l: l["__name__"].startswith("rr_s")
     and not l["job"].startswith("s1")),
    ([("__name__", "=~", "rr_.+"), ("env", "=", "")], lambda l: "env" not in l),  # missing label matches ""
    ([("job", "=", "x")], lambda l: l.get("job") == "x"),
]


@pytest.mark.parametrize("rtype", [SAMPLES, STREAMED], ids=["samples", "streamed"])
def test_matchers_and_bit_exact_values(tmp_path, rtype):
    bodies = [build_request([query(m)], [rtype]) for m, _ in MATCHER_CASES]
    results = read(make_app(tmp_path), *bodies)
    for (matchers, selector), (status, headers, body) in zip(MATCHER_CASES, results):
        assert status == 200, body
        if rtype == SAMPLES:
            assert headers["Content-Type"] == "application/x-protobuf"
            assert headers["Content-Encoding"] == "snappy"
            got = decode_samples(body)[0]
        else:
            assert headers["Content-Type"] == "application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse"
            assert "Content-Encoding" not in headers
            got = decode_streamed(body, 1)[0][0]
        assert list(got) == list(want(selector)), matchers  # label order, as Prometheus streams
        assert got == want(selector), matchers


def test_streamed_chunks_hold_at_most_120_samples_and_frames_split_by_size(tmp_path):
    small_frames = make_app(tmp_path, **{"storage.remote.read-max-bytes-in-frame": "600"})
    (status, _, body), = read(small_frames, build_request([query([("__name__", "=", "rr_size")])], [STREAMED]))
    assert status == 200
    series, frames = decode_streamed(body, 1)
    counts = {dict(labels)["job"]: [len(decode(c)) for f in frames if f["labels"] == labels for c in f["chunks"]]
              for labels in series[0]}
    assert counts == {"s1000": [120] * 8 + [40], "s119": [119], "s120": [120], "s121": [120, 1]}
    # 600 bytes hold one ~150-byte chunk of rr_size's slowly changing values at most 4 times
    for f in frames:
        label_bytes = sum(pb.ReadLabel(name=n, value=v).ByteSize() for n, v in f["labels"])
        chunk_bytes = [pb.Chunk(min_time_ms=a, max_time_ms=b, type=1, data=d).ByteSize() for a, b, d, _ in f["chunks"]]
        assert label_bytes + sum(chunk_bytes[:-1]) < 600  # cut right after the chunk that reached the limit
    assert len([f for f in frames if dict(f["labels"])["job"] == "s1000"]) > 1
    assert series[0] == want(lambda l: l["__name__"] == "rr_size")


def decode(chunk: tuple) -> list:
    return decode_xor(chunk[2])


@pytest.mark.parametrize("rtype", [SAMPLES, STREAMED], ids=["samples", "streamed"])
def test_window_hints_and_several_queries(tmp_path, rtype):
    start, end = T0 + 119 * STEP, T0 + 130 * STEP
    queries = [
        query([("__name__", "=", "rr_size")], start, end),
        # hints narrow the window (Prometheus sends them inside the query range)
        query([("__name__", "=", "rr_size")], T0 - 1, T0 + 10**9,
              hints={"start_ms": start, "end_ms": end, "step_ms": 60_000, "func": "rate", "range_ms": 300_000}),
        query([("__name__", "=", "nonexistent")]),
        query([]),  # no matchers select nothing, as in Prometheus's TSDB
    ]
    (status, _, body), = read(make_app(tmp_path), build_request(queries, [rtype]))
    assert status == 200
    got = decode_samples(body) if rtype == SAMPLES else decode_streamed(body, len(queries))[0]
    window = want(lambda l: l["__name__"] == "rr_size", start, end)
    assert set(dict(k)["job"] for k in window) == {"s120", "s121", "s1000"}  # s119 ends before the window
    assert got == [window, window, {}, {}]


def test_series_hint_returns_labels_without_samples(tmp_path):
    body = build_request([query([("__name__", "=~", "rr_s.*")], hints={"func": "series", "start_ms": T0,
                                                                        "end_ms": T0 + 10**9})], [SAMPLES])
    (status, _, out), = read(make_app(tmp_path), body)
    assert status == 200
    got = decode_samples(out)[0]
    assert got == {k: [] for k in want(lambda l: l["__name__"].startswith("rr_s"))}


def test_first_supported_response_type_wins(tmp_path):
    q = [query([("__name__", "=", "rr_other")])]
    results = read(make_app(tmp_path), build_request(q, [7, STREAMED, SAMPLES]), build_request(q, [SAMPLES, STREAMED]),
                   build_request(q, []))
    types = [h["Content-Type"] for _, h, _ in results]
    assert types == ["application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse",
                     "application/x-protobuf", "application/x-protobuf"]


def _raw_request(matchers=(("__name__", "=~", "rr_.*"),), accepted=(SAMPLES,)) -> bytes:
    return build_request([query(list(matchers))], list(accepted))


# name, settings, request body, status, message substring
REFUSALS = [
    ("corrupt snappy", {}, b"\x20" + b"\x01" * 40, 400, "snappy: corrupt input"),
    ("not a ReadRequest", {}, snappy.compress(b"\x0a\x30\x0a"), 400, "cannot decode remote-read request"),
    ("declared 1 GiB", {}, bytes([0x80, 0x80, 0x80, 0x80, 0x04]) + b"\x00" * 20, 413, "declares 1073741824"),
    ("unsupported response type", {}, _raw_request(accepted=(5, 9)), 400,
     "server does not support any of the requested response types"),
    ("bad regex", {}, _raw_request([("job", "=~", "(")]), 400, "invalid regular expression"),
    ("sample limit", {"storage.remote.read-sample-limit": "100"}, _raw_request(), 400, "exceeded sample limit (100)"),
    ("query sample budget", {"query.max-samples": "100"}, _raw_request(), 400, "--query.max-samples"),
    ("query sample budget, streamed", {"query.max-samples": "100"}, _raw_request(accepted=(STREAMED,)), 400,
     "--query.max-samples"),
    ("query series budget", {"query.max-series": "3"}, _raw_request(), 400, "--query.max-series"),
    ("query series budget, streamed", {"query.max-series": "3"}, _raw_request(accepted=(STREAMED,)), 400,
     "--query.max-series"),
]


@pytest.mark.parametrize("name, settings, body, status, message", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusals(tmp_path, name, settings, body, status, message):
    app = make_app(tmp_path, **settings)
    (got, headers, text), = read(app, body)
    assert got == status, text
    assert message in text.decode()
    assert headers["Content-Type"].startswith("text/plain")  # remote-read clients print the body as text
    assert app[appkeys.GUARD].running == 0


def test_sample_limit_off_and_exact(tmp_path):
    total = sum(len(v) for k, v in DATA.items() if dict(k)["__name__"].startswith("rr_"))
    app = make_app(tmp_path, **{"storage.remote.read-sample-limit": str(total)})
    (status, _, body), = read(app, _raw_request())
    assert status == 200 and sum(map(len, decode_samples(body)[0].values())) == total
