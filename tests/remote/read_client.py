"""A remote-read client for tests: builds ReadRequests, posts them (urllib), decodes both
response types into {labels: [(t_ms, value bits), ...]} with the reference XOR decoder."""

from __future__ import annotations

import struct
import urllib.error
import urllib.request

import snappy

from metricsgw.remote.proto import remote_read_pb2 as pb
from metricsgw.remote.proto import remote_v1_pb2 as v1pb
from tests.remote import histogram_chunk_reference
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
        chunks = [(c.min_time_ms, c.max_time_ms, c.data, c.type) for c in cs.chunks]
        frames.append({"query": resp.query_index, "labels": labels, "chunks": chunks})
        samples = out[resp.query_index].setdefault(labels, [])
        for mint, maxt, data, encoding in chunks:
            if encoding != pb.Chunk.XOR:
                continue  # native histograms: decode_streamed_histograms
            decoded = decode_xor(data)
            assert decoded[0][0] == mint and decoded[-1][0] == maxt, "chunk time range matches its samples"
            samples.extend(decoded)
    return out, frames


def decode_samples_histograms(body: bytes) -> list[dict[tuple, list]]:
    """A SAMPLES response's native histograms: per query, {labels: [prometheus.Histogram message]}."""
    resp = pb.ReadResponse.FromString(snappy.uncompress(body))
    return [{tuple((lb.name, lb.value) for lb in ts.labels): [v1pb.Histogram.FromString(h) for h in ts.histograms]
             for ts in result.timeseries if ts.histograms} for result in resp.results]


def decode_streamed_histograms(body: bytes, n_queries: int) -> list[dict[tuple, list[tuple[int, dict]]]]:
    """A STREAMED_XOR_CHUNKS response's histogram chunks decoded by the reference decoder: per query,
    {labels: [(counter reset header, sample dict), ...]} (the header of the chunk a sample opens, else None)."""
    out: list[dict] = [{} for _ in range(n_queries)]
    for msg in read_frames(body):
        resp = pb.ChunkedReadResponse.FromString(msg)
        for cs in resp.chunked_series:
            labels = tuple((lb.name, lb.value) for lb in cs.labels)
            for c in cs.chunks:
                if c.type == pb.Chunk.XOR:
                    continue
                header, samples = histogram_chunk_reference.decode(c.data, c.type)
                assert samples[0]["t"] == c.min_time_ms and samples[-1]["t"] == c.max_time_ms
                out[resp.query_index].setdefault(labels, []).extend(
                    (header if k == 0 else None, s) for k, s in enumerate(samples))
    return out


def _bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]
