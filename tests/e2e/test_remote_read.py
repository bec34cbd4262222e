"""Remote read against real Prometheus 2.42, both as the client and as the reference server.

Series that only metricsgw holds (remote-written to it directly) are read by two Prometheus
servers whose only data source is ``remote_read`` pointed at metricsgw: one with
``read_recent: true``, one with the default. Prometheus 2.42's remote-read client always asks
for SAMPLES (it learned STREAMED_XOR_CHUNKS in 2.55), so the streamed answer is checked against
Prometheus as a *server*: a third Prometheus receives the same series by remote write, and the
same STREAMED_XOR_CHUNKS (and SAMPLES) requests go to it and to metricsgw. Checks:

- PromQL through remote read (instant and range queries, staleness, chunk-boundary series of
  119/120/121/1000 samples) equals metricsgw's own answers and the reference Prometheus's;
- both response types carry the same series and the same samples, values compared bit for bit
  (stale markers, NaN payloads, -0.0, infinities);
- every XOR chunk Prometheus sends is re-encoded byte for byte by metricsgw/remote/xor.py, and
  given Prometheus's chunks our frames equal its frames byte for byte;
- a read refused for a limit reaches the Prometheus user (as a warning, remote storage being a
  secondary source in Prometheus).
"""

from __future__ import annotations

import math
import struct
import time

import numpy as np
import pytest

from metricsgw.model import STALE_NAN
from metricsgw.remote import codec, read_codec
from metricsgw.remote.proto import remote_read_pb2 as pb
from metricsgw.remote.xor import encode_chunk
from testkit.procs import start_metricsgw, start_prometheus
from tests.e2e.client import api, remote_write
from tests.e2e.compare import diff
from tests.remote.read_client import build_request, decode_samples, decode_streamed, post
from tests.remote.xor_reference import decode_xor, read_frames

FRAME_BYTES = 600  # the reference's frame size: small, so its series span several frames
STEP = 3_000  # 1000 samples span 50 minutes: all inside the reference Prometheus's appendable hour
NAN_PAYLOAD = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000123))[0]


def dataset(end_ms: int) -> dict[tuple, list[tuple[int, float]]]:
    out: dict[tuple, list[tuple[int, float]]] = {}
    for n in (119, 120, 121, 1000):
        t = end_ms - STEP * np.arange(n)[::-1]
        counter = np.cumsum(np.arange(n) % 7 * 0.5)
        counter[n // 2:] -= counter[n // 2] - 1.0  # one counter reset half way
        out[(("__name__", "rr_size"), ("job", f"s{n}"))] = list(zip(t.tolist(), counter.tolist()))
    # 15 minutes of a gauge with special values; stale markers 10 and 5 minutes before the end
    k = np.arange(300)
    t = end_ms - STEP * k[::-1]
    v = 20 + 5 * np.sin(k / 9.0)
    special = {40: math.nan, 41: NAN_PAYLOAD, 60: math.inf, 61: -math.inf, 80: -0.0, 81: 0.0, 82: 5e-324,
               83: 1.7976931348623157e308, 100: STALE_NAN, 101: STALE_NAN, 200: STALE_NAN}
    for i, x in special.items():
        v[i] = x
    out[(("__name__", "rr_special"), ("job", "floats"))] = list(zip(t.tolist(), v.tolist()))
    # every delta-of-delta width of the XOR encoding, gaps from 1 ms to 12 minutes
    gaps = np.full(200, STEP)
    gaps[[10, 11, 50, 51, 90, 120, 150, 151]] = [1, 999, 9_000, 2_000, 70_000, 700_000, 65_537, 1]
    t = end_ms - np.cumsum(gaps[::-1])[::-1] + gaps[-1]
    rng = np.random.default_rng(5)
    out[(("__name__", "rr_irregular"), ("job", "jitter"))] = list(zip(t.tolist(), np.cumsum(rng.uniform(0, 9, 200)).tolist()))
    out[(("__name__", "rr_other"), ("env", "b"), ("job", "x"))] = [(end_ms - STEP * i, float(i)) for i in range(40)][::-1]
    return out


def remote_read_config(gw_url: str, read_recent: bool | None) -> str:
    extra = "" if read_recent is None else f"    read_recent: {str(read_recent).lower()}\n"
    return f"remote_read:\n  - url: {gw_url}/api/v1/read\n{extra}"


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    work = tmp_path_factory.mktemp("remote_read")
    gw = start_metricsgw(work / "gw", extra=["--storage.flush-max-samples=1000",  # Parquet + head
                                            "--query.promql-compat=2"])  # compared with Prometheus 2.42
    started = [gw]
    try:
        gw.wait_ready()
        ref = start_prometheus(work / "ref", extra=[f"--storage.remote.read-max-bytes-in-frame={FRAME_BYTES}"])
        recent = start_prometheus(work / "recent", config_yaml=remote_read_config(gw.base_url, True))
        default = start_prometheus(work / "default", config_yaml=remote_read_config(gw.base_url, None))
        started += [ref, recent, default]
        for s in started[1:]:
            s.wait_ready()
        end_ms = (int(time.time() * 1000) // STEP) * STEP - 60_000
        data = dataset(end_ms)
        body = codec.encode_v1(list(data.items()))
        for target in (gw, ref):
            status, text, _ = remote_write(target.base_url, body)
            assert status == 204, text
        yield {"gw": gw.base_url, "ref": ref.base_url, "recent": recent.base_url, "default": default.base_url,
               "end_ms": end_ms, "data": data}
    finally:
        for s in started:
            s.stop()


QUERIES = [
    "rr_size", "rr_special", "rr_irregular", "rr_other",
    '{__name__=~"rr_.*", job!="s120"}', 'rr_size{job!~"s1.*"}', 'rr_other{env=""}',
    "rate(rr_size[5m])", "sum by (job) (rr_size)", "count_over_time(rr_special[10m])",
    "last_over_time(rr_special[1m])", "max_over_time(rr_irregular[20m])", "changes(rr_size[1h])",
    "timestamp(rr_special)", "rr_size offset 10m", "increase(rr_irregular[10m])",
    "count_over_time(rr_size[2h])", "resets(rr_size[2h])", "sum_over_time(rr_other[1h])",
]
INSTANT_ONLY = ["rr_special[5m]", "rr_size[6m]"]  # matrices: raw samples, stale markers left out


def _instants(end_ms: int) -> list[float]:
    end = end_ms / 1000
    # the last sample, between samples, right after stale markers (10m and 5m before the end),
    # inside and beyond the lookback after the end, before the short series begin
    return [end, end - 7.5, end - 900 + 100 * 3 + 1.5, end - 300 + 0.5, end + 240, end + 400, end - 1800, end - 2990]


def _ranges(end_ms: int) -> list[tuple[float, float, str]]:
    end = end_ms / 1000
    return [(end - 3300, end + 120, "60"), (end - 1200, end, "17"), (end - 900, end - 300, "3")]


def _ask_all(servers: dict, path: str, params: dict) -> dict[str, dict]:
    out = {}
    for name in ("gw", "ref", "recent", "default"):
        status, body = api(servers[name], path, params, method="POST")
        assert status == 200 and body.get("status") == "success", (name, path, params, body)
        out[name] = body["data"]
    return out


def test_prometheus_through_remote_read_answers_as_metricsgw(servers):
    problems = []
    cases = [("/api/v1/query", {"query": q, "time": f"{t:.3f}"})
             for q in QUERIES + INSTANT_ONLY for t in _instants(servers["end_ms"])]
    cases += [("/api/v1/query_range", {"query": q, "start": f"{a:.3f}", "end": f"{b:.3f}", "step": s})
              for q in QUERIES for a, b, s in _ranges(servers["end_ms"])]
    non_empty = 0
    for path, params in cases:
        got = _ask_all(servers, path, params)
        non_empty += bool(got["gw"]["result"])
        for client in ("recent", "default"):
            for name in ("gw", "ref"):  # metricsgw's own PromQL, and Prometheus over its own TSDB
                problems += [f"{client} vs {name}: {path} {params}: {p}" for p in diff(got[client], got[name])]
    assert not problems, "\n".join(problems[:20])
    assert non_empty > len(cases) * 0.6  # about data, not empty answers (some cases are empty on purpose)


def test_series_api_through_remote_read(servers):
    """Prometheus's /api/v1/series asks remote read with hints.func == "series" (label sets only)."""
    end = servers["end_ms"] / 1000
    for match in ('{__name__=~"rr_.+"}', 'rr_size{job!="s120"}', "rr_other"):
        params = {"match[]": match, "start": f"{end - 3600:.3f}", "end": f"{end:.3f}"}
        answers = {}
        for name in ("gw", "ref", "recent", "default"):
            status, body = api(servers[name], "/api/v1/series", params)
            assert status == 200, (name, body)
            answers[name] = sorted(tuple(sorted(m.items())) for m in body["data"])
        assert answers["gw"], match
        assert answers["recent"] == answers["default"] == answers["gw"] == answers["ref"], match


def _requests(end_ms: int) -> list[dict]:
    everything = [("__name__", "=~", "rr_.+")]
    return [
        {"matchers": everything, "start": end_ms - 4 * 3600_000, "end": end_ms + 60_000},
        # a window that cuts chunks in the middle, by hints as Prometheus sends them
        {"matchers": everything, "start": end_ms - 3600_000, "end": end_ms,
         "hints": {"start_ms": end_ms - 1000 * 1000 - 1, "end_ms": end_ms - 200 * 1000 + 1, "step_ms": 17_000,
                   "func": "rate", "range_ms": 300_000}},
        {"matchers": [("__name__", "=", "rr_size"), ("job", "!~", "s12.")], "start": end_ms - 2_500_000,
         "end": end_ms - 100_000},
        {"matchers": [("job", "=", "floats"), ("env", "=", "")], "start": end_ms - 600_000, "end": end_ms},
        {"matchers": [("__name__", "=", "nothing_here")], "start": 0, "end": end_ms},
        # one sample per series: trimmed one-sample chunks (byte-aligned, with bstream's trailing empty byte)
        {"matchers": [("__name__", "=~", "rr_size|rr_special")], "start": end_ms - 30 * STEP,
         "end": end_ms - 30 * STEP},
    ]


@pytest.mark.parametrize("rtype", [pb.ReadRequest.STREAMED_XOR_CHUNKS, pb.ReadRequest.SAMPLES],
                         ids=["streamed", "samples"])
def test_same_series_and_bits_as_prometheus_serves(servers, rtype):
    queries = _requests(servers["end_ms"])
    body = build_request(queries, [rtype])
    answers = {}
    for name in ("ref", "gw"):
        status, headers, raw = post(servers[name] + "/api/v1/read", body)
        assert status == 200, (name, raw[:300])
        if rtype == pb.ReadRequest.SAMPLES:
            answers[name] = decode_samples(raw)
            if name == "ref":  # Prometheus's gogo-proto writer leaves out a value field == 0, so -0.0
                answers[name] = [_minus_zero_as_sent(r, servers["data"]) for r in answers[name]]  # reads back as +0.0
        else:
            assert headers["Content-Type"] == "application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse"
            answers[name] = decode_streamed(raw, len(queries))[0]
    for i, (want, got) in enumerate(zip(answers["ref"], answers["gw"])):
        if rtype == pb.ReadRequest.STREAMED_XOR_CHUNKS:
            assert list(got) == list(want), f"query {i}: series order"  # both stream in label order
        assert got == want, f"query {i}: {queries[i]}"
    assert sum(len(s) for r in answers["gw"] for s in r.values()) > 3000


MINUS_ZERO, PLUS_ZERO = 0x8000000000000000, 0


def _minus_zero_as_sent(result: dict, data: dict) -> dict:
    """Prometheus's SAMPLES answer with the -0.0 values it lost put back (metricsgw keeps them)."""
    out = {}
    for labels, samples in result.items():
        sent = {t: struct.unpack("<Q", struct.pack("<d", v))[0] for t, v in data[labels]}
        out[labels] = [(t, MINUS_ZERO if b == PLUS_ZERO and sent[t] == MINUS_ZERO else b) for t, b in samples]
    return out


def test_every_chunk_prometheus_sends_is_reencoded_byte_for_byte(servers):
    queries = _requests(servers["end_ms"])
    status, _, raw = post(servers["ref"] + "/api/v1/read",
                          build_request(queries, [pb.ReadRequest.STREAMED_XOR_CHUNKS]))
    assert status == 200
    _, frames = decode_streamed(raw, len(queries))
    chunks = [c for f in frames for c in f["chunks"]]
    sizes = set()
    for mint, maxt, data, _ in chunks:
        samples = decode_xor(data)
        t = np.array([s[0] for s in samples], np.int64)
        v = np.array([s[1] for s in samples], np.uint64).view(np.float64)
        assert encode_chunk(t, v) == data, f"chunk {mint}..{maxt} of {len(samples)} samples"
        sizes.add(len(samples))
    assert len(chunks) > 20 and max(sizes) >= 100 and 1 in sizes  # full, trimmed and one-sample chunks
    assert any(len(data) == 2 + 6 + 8 + 1 for _, _, data, _ in chunks)  # header, varint t, value, the empty byte


def test_frames_cut_and_serialised_as_prometheus_does(servers):
    """Given the chunks Prometheus chose, metricsgw's framing (frame size rule, protobuf bytes,
    CRC32C) produces Prometheus's frames byte for byte."""
    queries = _requests(servers["end_ms"])
    status, _, raw = post(servers["ref"] + "/api/v1/read", build_request(queries, [pb.ReadRequest.STREAMED_XOR_CHUNKS]))
    assert status == 200
    messages = read_frames(raw)
    _, frames = decode_streamed(raw, len(queries))
    by_series: dict[tuple, list[int]] = {}
    for k, f in enumerate(frames):
        by_series.setdefault((f["query"], f["labels"]), []).append(k)
    assert any(len(ks) > 2 for ks in by_series.values())  # series split over several frames
    for (query, labels), ks in by_series.items():
        chunks = [c for k in ks for c in frames[k]["chunks"]]
        ours = read_codec.series_frames(query, labels, chunks, FRAME_BYTES)
        assert ours == [read_codec.frame(messages[k]) for k in ks], labels


def test_a_refused_read_reaches_the_prometheus_user(tmp_path):
    """metricsgw's 400 for a read over --storage.remote.read-sample-limit reaches Prometheus's API
    user: remote storage is a secondary source, so Prometheus answers with its message as a warning."""
    gw = start_metricsgw(tmp_path / "gw", extra=["--storage.remote.read-sample-limit=50"])
    prom = None
    try:
        gw.wait_ready()
        prom = start_prometheus(tmp_path / "prom", config_yaml=remote_read_config(gw.base_url, True))
        prom.wait_ready()
        end_ms = (int(time.time() * 1000) // STEP) * STEP
        series = [([("__name__", "rr_limited"), ("i", str(i))], [(end_ms - STEP * k, 1.0) for k in range(40)][::-1])
                  for i in range(3)]
        assert remote_write(gw.base_url, codec.encode_v1(series))[0] == 204
        small = {"query": 'rr_limited{i="0"}', "time": f"{end_ms / 1000:.3f}"}
        status, body = api(prom.base_url, "/api/v1/query", small)
        assert status == 200 and len(body["data"]["result"]) == 1 and not body.get("warnings")
        status, body = api(prom.base_url, "/api/v1/query", {**small, "query": "count_over_time(rr_limited[5m])"})
        assert status == 200 and body["data"]["result"] == []
        assert any("400" in w and "exceeded sample limit (50)" in w for w in body.get("warnings", [])), body
    finally:
        if prom is not None:
            prom.stop()
        gw.stop()
