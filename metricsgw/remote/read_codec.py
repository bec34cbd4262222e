"""Remote-read payloads: request bytes -> queries, series -> response bytes. Pure (no aiohttp).

As Prometheus 2.42's storage/remote/codec.go, read_handler.go and chunked.go:
- the request is a snappy-compressed ``prometheus.ReadRequest``; its declared decoded size is
  checked before anything is decompressed;
- the response type is the first of ``accepted_response_types`` we implement (none = SAMPLES);
- SAMPLES answers one snappy-compressed ``ReadResponse``, native histograms in each series'
  ``histograms`` (as Prometheus 3 answers; 2.42 left them out); STREAMED_XOR_CHUNKS answers frames of
  one ``ChunkedReadResponse`` each (one series, or part of one; native histograms as HISTOGRAM and
  FLOAT_HISTOGRAM chunks, histogram_chunks.py), every frame a uvarint size,
  a big-endian CRC32C of the message and the message, cut as ``StreamChunkedReadResponses`` cuts
  them by --storage.remote.read-max-bytes-in-frame.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass

import crc32c
import numpy as np
import snappy
from google.protobuf.message import DecodeError

from ..errors import BadData
from ..model import Labels, Matcher, SampleBlock
from . import histogram_chunks, xor
from .codec import decompress, uvarint
from .proto import remote_read_pb2 as pb

SAMPLES = pb.ReadRequest.SAMPLES
STREAMED_XOR_CHUNKS = pb.ReadRequest.STREAMED_XOR_CHUNKS
XOR = pb.Chunk.XOR
SUPPORTED = (SAMPLES, STREAMED_XOR_CHUNKS)

SAMPLES_CONTENT_TYPE = "application/x-protobuf"
STREAMED_CONTENT_TYPE = "application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse"

# Prometheus reads at most 32 MiB of a read request (decodeReadLimit); we also refuse a snappy
# block that declares more than that before decompressing it.
MAX_REQUEST_BYTES = 32 * 1024 * 1024

HISTOGRAMS_FIELD = 4  # prompb.TimeSeries.histograms (repeated Histogram)

_OPS = {pb.LabelMatcher.EQ: "=", pb.LabelMatcher.NEQ: "!=", pb.LabelMatcher.RE: "=~", pb.LabelMatcher.NRE: "!~"}


@dataclass(frozen=True)
class ReadQuery:
    """One query of a read request: matchers and the window to read, hints applied."""

    matchers: tuple[Matcher, ...]
    start_ms: int
    end_ms: int
    # hints.func == "series": the client wants label sets only (Prometheus then reads no samples)
    series_only: bool = False


def decode_request(body: bytes) -> tuple[list[ReadQuery], int]:
    """(queries, negotiated response type) of a snappy ``ReadRequest``; BadData if it is not one."""
    raw = decompress(body, MAX_REQUEST_BYTES, setting="remote read's 32 MiB request limit")
    try:
        req = pb.ReadRequest.FromString(raw)
    except DecodeError as err:
        raise BadData(f"cannot decode remote-read request: {err}") from None
    return [_query(q) for q in req.queries], negotiate(list(req.accepted_response_types))


def negotiate(accepted: list[int]) -> int:
    """The first accepted response type we implement; SAMPLES when the client lists none."""
    for rtype in accepted or [SAMPLES]:
        if rtype in SUPPORTED:
            return rtype
    raise BadData(f"server does not support any of the requested response types: {accepted}; "
                  f"supported: SAMPLES (0), STREAMED_XOR_CHUNKS (1)")


def _query(q) -> ReadQuery:
    matchers = []
    for m in q.matchers:
        op = _OPS.get(m.type)
        if op is None:
            raise BadData(f"invalid matcher type {m.type} for label {m.name!r}")
        matcher = Matcher(m.name, op, m.value)
        if op in ("=~", "!~"):
            try:
                matcher.compiled()
            except Exception as err:  # re2.error: the regex does not compile
                raise BadData(f"invalid regular expression {m.value!r} for label {m.name!r}: {err}") from None
        matchers.append(matcher)
    start, end = q.start_timestamp_ms, q.end_timestamp_ms
    series_only = False
    if q.HasField("hints"):
        # Prometheus's TSDB reads hints.start..hints.end within the query's blocks; a client sends
        # hints inside its query range, so the intersection is the same window and never more.
        start, end = max(start, q.hints.start_ms), min(end, q.hints.end_ms)
        series_only = q.hints.func == "series"
    return ReadQuery(tuple(matchers), start, end, series_only)


# ---------------------------------------------------------------- SAMPLES


# Each distinct (name, value) pair's encoded ``labels`` field, made once: a head read of 100k series encodes
# the same few thousand pairs again and again, and building them label by label was most of a shard's
# work in bench.soak's writes-under-queries. Bounded: past the bound it starts again (high-cardinality
# values then cost what they did before).
_LABEL_FIELDS: dict[tuple[str, str], bytes] = {}
_LABEL_FIELDS_MAX = 200_000


def _label_field(pair: tuple[str, str]) -> bytes:
    """One ReadLabel {name = 1, value = 2} as a ``labels`` field (1), written directly (a protobuf object per
    label costs more than its bytes); the same bytes the generated code writes, which leaves empty strings out."""
    msg = b"".join(_len_field(k, text.encode()) for k, text in zip((1, 2), pair) if text)
    out = _len_field(1, msg)
    if len(_LABEL_FIELDS) >= _LABEL_FIELDS_MAX:
        _LABEL_FIELDS.clear()
    _LABEL_FIELDS[pair] = out
    return out


def _label_records(labels: Labels) -> bytes:
    """The ``labels`` fields of a series."""
    get = _LABEL_FIELDS.get
    return b"".join([get(pair) or _label_field(pair) for pair in labels])


def _len_field(field: int, payload: bytes) -> bytes:
    return uvarint((field << 3) | 2) + uvarint(len(payload)) + payload


def sample_records(t: np.ndarray, v: np.ndarray) -> tuple[bytes, np.ndarray]:
    """Every sample as a ``samples`` field of a TimeSeries (tag, length, Sample message), encoded
    at once with numpy; returns the bytes and each record's start offset (length n+1).

    Both fields are always written (a proto3 writer may leave out zeros; parsers accept both)."""
    n = len(t)
    tu = t.astype(np.int64).view(np.uint64)
    nbytes = np.ones(n, np.int64)  # uvarint length of each timestamp (two's complement, 1..10 bytes)
    for k in range(1, 10):
        nbytes += tu >= np.uint64(1 << (7 * k))
    rec_len = 2 + 1 + 8 + 1 + nbytes  # tag+len of the Sample field, then 0x09 double, 0x10 varint
    grid = np.zeros((n, 22), np.uint8)
    grid[:, 0] = 0x12  # TimeSeries.samples = 2, length-delimited
    grid[:, 1] = (rec_len - 2).astype(np.uint8)  # at most 19: one byte
    grid[:, 2] = 0x09  # Sample.value = 1, fixed64
    grid[:, 3:11] = np.ascontiguousarray(v, "<f8").view(np.uint8).reshape(n, 8)
    grid[:, 11] = 0x10  # Sample.timestamp = 2, varint
    for k in range(10):
        byte = (tu >> np.uint64(7 * k)) & np.uint64(0x7F)
        more = nbytes > k + 1
        grid[:, 12 + k] = (byte | np.where(more, np.uint64(0x80), np.uint64(0))).astype(np.uint8)
    keep = np.arange(22)[None, :] < rec_len[:, None]
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(rec_len, out=offsets[1:])
    return grid[keep].tobytes(), offsets


def encode_query_result(labels: list[Labels], block: SampleBlock, ids: np.ndarray, hists=None) -> bytes:
    """A ``QueryResult`` of the series ``ids`` (in that order, labels alike) with their samples
    from ``block`` (sorted by (sid, t)); series without samples are left out, as Prometheus does.

    ``hists`` (a HistogramBlock sorted by (sid, t), the stored remote-write ``Histogram`` bytes): each
    series' native histograms as ``histograms`` fields (field 4 of prompb.TimeSeries in Prometheus 2.42's
    types.proto), written right after its labels, where read_client_codec looks for them."""
    data, offsets = sample_records(block.t, block.v)
    lo = np.searchsorted(block.sid, ids, "left")
    hi = np.searchsorted(block.sid, ids, "right")
    if hists is not None and len(hists):
        h_lo = np.searchsorted(hists.sid, ids, "left").tolist()
        h_hi = np.searchsorted(hists.sid, ids, "right").tolist()
        blobs = _blobs(hists)
    else:
        h_lo = h_hi = [0] * len(ids)
        blobs = []
    parts = []
    for lbls, a, b, ha, hb in zip(labels, lo.tolist(), hi.tolist(), h_lo, h_hi):
        if a == b and ha == hb:
            continue
        histograms = b"".join(_len_field(HISTOGRAMS_FIELD, blob) for blob in blobs[ha:hb])
        parts.append(_len_field(1, _label_records(lbls) + histograms + data[offsets[a]:offsets[b]]))
    return b"".join(parts)


def _blobs(hists) -> list[bytes]:
    """A HistogramBlock's stored histograms as a list (an Arrow array when read from files, a list from a head)."""
    return hists.blob.to_pylist() if hasattr(hists.blob, "to_pylist") else list(hists.blob)


def encode_series_only(labels: list[Labels]) -> bytes:
    """A ``QueryResult`` of label sets without samples (hints.func == "series")."""
    return b"".join(_len_field(1, _label_records(lbls)) for lbls in labels)


def encode_samples_response(results: list[bytes]) -> bytes:
    """The snappy ``ReadResponse`` of the encoded ``QueryResult`` messages, in query order."""
    return snappy.compress(b"".join(_len_field(1, r) for r in results))


# ---------------------------------------------------------------- STREAMED_XOR_CHUNKS


def frame(message: bytes) -> bytes:
    """uvarint size, big-endian CRC32C, message (Prometheus's ChunkedWriter.Write)."""
    return uvarint(len(message)) + struct.pack(">I", crc32c.crc32c(message)) + message


Chunk = tuple[int, int, bytes, int]  # (min_time_ms, max_time_ms, data, prompb.Chunk.Encoding)


def block_chunks(block: SampleBlock, per_chunk: int = xor.SAMPLES_PER_CHUNK) -> dict[int, list[Chunk]]:
    """The XOR chunks of every series in a sample block, encoded in one go: sid -> [chunk], each
    series cut every ``per_chunk`` samples (Prometheus's head cuts at 120)."""
    if not len(block):
        return {}
    run_starts = np.flatnonzero(np.r_[True, block.sid[1:] != block.sid[:-1]])
    run_ends = np.append(run_starts[1:], len(block))
    per_run = (run_ends - run_starts + per_chunk - 1) // per_chunk
    first_chunk = np.repeat(run_starts, per_run)
    k = np.arange(len(first_chunk)) - np.repeat(np.cumsum(per_run) - per_run, per_run)
    starts = first_chunk + k * per_chunk
    ends = np.minimum(starts + per_chunk, np.repeat(run_ends, per_run)) - 1
    data = xor.encode_chunks(block.t, block.v, starts)
    out: dict[int, list[Chunk]] = {}
    sids, mins, maxs = block.sid[starts].tolist(), block.t[starts].tolist(), block.t[ends].tolist()
    for sid, lo, hi, chunk in zip(sids, mins, maxs, data):
        out.setdefault(sid, []).append((lo, hi, chunk, XOR))
    return out


def series_chunks(block: SampleBlock, hists) -> dict[int, list[Chunk]]:
    """Every series' chunks in time order: XOR chunks of its float samples, histogram chunks of its native
    histograms (``hists``: a HistogramBlock sorted by (sid, t), or None). A series holding both is cut where
    the kind of sample changes, as Prometheus's head cuts it, so no two of its chunks overlap in time."""
    out = block_chunks(block)
    if hists is None or not len(hists):
        return out
    blobs = _blobs(hists)
    starts = np.flatnonzero(np.r_[True, hists.sid[1:] != hists.sid[:-1]]).tolist()
    for a, b in zip(starts, starts[1:] + [len(hists)]):
        sid = int(hists.sid[a])
        ht = hists.t[a:b].tolist()
        if out.pop(sid, None) is None:
            out[sid] = _histogram_chunks(ht, blobs[a:b])
            continue
        lo, hi = np.searchsorted(block.sid, [sid, sid + 1]).tolist()
        out[sid] = _interleaved(block.t[lo:hi], block.v[lo:hi], ht, blobs[a:b])
    return out


def _histogram_chunks(t: list[int], blobs: list[bytes]) -> list[Chunk]:
    return [(lo, hi, data, enc) for lo, hi, enc, data in histogram_chunks.chunks(t, blobs)]


def _interleaved(t: np.ndarray, v: np.ndarray, ht: list[int], blobs: list[bytes]) -> list[Chunk]:
    """The chunks of a series with float samples at ``t`` and histograms at ``ht``: one run of chunks per stretch
    of one kind (rare: a series changes kind when its exporter changes how it exposes a histogram)."""
    out: list[Chunk] = []
    f, h = 0, 0
    while f < len(t) or h < len(ht):
        if h == len(ht) or (f < len(t) and t[f] < ht[h]):  # floats up to the next histogram
            end = len(t) if h == len(ht) else int(np.searchsorted(t, ht[h], "left"))
            out += [(lo, hi, data, XOR) for lo, hi, data in xor.chunks(t[f:end], v[f:end])]
            f = end
        else:  # histograms up to the next float sample
            end = len(ht) if f == len(t) else bisect.bisect_right(ht, int(t[f]))
            out += _histogram_chunks(ht[h:end], blobs[h:end])
            h = end
    return out


def series_frames(query_index: int, labels: Labels, chunks: list[Chunk], max_bytes_in_frame: int) -> list[bytes]:
    """The frames of one series' chunks: a frame is cut once the labels and its chunks reach
    ``max_bytes_in_frame`` (it may overshoot by up to one chunk, as in Prometheus)."""
    label_msgs = [pb.ReadLabel(name=n, value=val) for n, val in labels]
    budget = max_bytes_in_frame - sum(m.ByteSize() for m in label_msgs)
    frames: list[bytes] = []
    pending: list = []
    left = budget
    for k, (mint, maxt, data, encoding) in enumerate(chunks):
        chunk = pb.Chunk(min_time_ms=mint, max_time_ms=maxt, type=encoding, data=data)
        pending.append(chunk)
        left -= chunk.ByteSize()
        if left > 0 and k + 1 < len(chunks):
            continue
        resp = pb.ChunkedReadResponse(query_index=query_index)
        resp.chunked_series.add(labels=label_msgs, chunks=pending)
        frames.append(frame(resp.SerializeToString()))
        pending, left = [], budget
    return frames
