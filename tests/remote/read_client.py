"""A remote-read client for tests: builds ReadRequests, posts them (urllib), decodes both
response types into {labels: [(t_ms, value bits), ...]} with the reference XOR decoder."""

from __future__ import annotations

import struct
import urllib.error
import urllib.request

import snappy

from metricsgw.remote.proto import remote_read_pb2 as pb
from tests.remote.xor_reference import decode_xor, read_frames

_TYPES = {"=": pb.LabelMatcher.EQ, "!=": pb.LabelMatcher.NEQ, "=~": pb.LabelMatcher.RE, "!~": pb.LabelMatcher.NRE}
HEADERS = {"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy",
           "X-Prometheus-Remote-Read-Version": "0.1.0"}

Series = dict[tuple, list[tuple[int, int]]]


def build_request(queries: list[dict], accepted: list[int] | None = None) -> bytes:
    """queries: [{"matchers": [(name, op, value)], "start": ms, "end": ms, "hints": {...} or None}]."""
    req = pb.ReadRequest(accepted_response_types=accepted or [])
    for q in queries:
        pq = req.queries.add(start_timestamp_ms=q["start"], end_timestamp_ms=q["end"])
        for name, op, value in q["matchers"]:
            pq.matchers.add(type=_TYPES[op], name=name, value=value)
        if q.get("hints") is not None:
            pq.hints.CopyFrom(pb.ReadHints(**q["hints"]))
    return snappy.compress(req.SerializeToString())


def post(url: str, body: bytes, timeout: float = 60.0) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(url, data=body, headers=HEADERS, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def decode_samples(body: bytes) -> list[Series]:
    """A SAMPLES response: per query, {labels: [(t, value bits)]} in response order (dicts keep it)."""
    resp = pb.ReadResponse.FromString(snappy.uncompress(body))
    out = []
    for result in resp.results:
        series: Series = {}
        for ts in result.timeseries:
            labels = tuple((lb.name, lb.value) for lb in ts.labels)
            series[labels] = [(s.timestamp, _bits(s.value)) for s in ts.samples]
        out.append(series)
    return out


def decode_streamed(body: bytes, n_queries: int) -> tuple[list[Series], list[dict]]:
    """A STREAMED_XOR_CHUNKS response: per query the series (chunks decoded and concatenated),
    plus one record per frame ({"query", "labels", "chunks": [(min, max, bytes)]}) for checks of
    the framing itself."""
    out: list[Series] = [{} for _ in range(n_queries)]
    frames = []
    for msg in read_frames(body):
        resp = pb.ChunkedReadResponse.FromString(msg)
        assert len(resp.chunked_series) == 1, "one series per frame"
        cs = resp.chunked_series[0]
        labels = tuple((lb.name, lb.value) for lb in cs.labels)
        chunks = [(c.min_time_ms, c.max_time_ms, c.data) for c in cs.chunks]
        assert all(c.type == pb.Chunk.XOR for c in cs.chunks)
        frames.append({"query": resp.query_index, "labels": labels, "chunks": chunks})
        samples = out[resp.query_index].setdefault(labels, [])
        for mint, maxt, data in chunks:
            decoded = decode_xor(data)
            assert decoded[0][0] == mint and decoded[-1][0] == maxt, "chunk time range matches its samples"
            samples.extend(decoded)
    return out, frames


def _bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]
