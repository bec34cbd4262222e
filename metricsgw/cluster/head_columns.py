"""The columnar answer to ``POST /api/v1/read?scope=head&format=columns``: a process's recent samples as arrays,
with label sets only for the series the shared table does not hold yet. Pure (bytes in, bytes out).

A query process reads its gateway's ingest shards (and other gateways) on every query. In remote read's own
format a shard sorts the selected series by labels and encodes every label set and sample as protobuf fields,
and the reader decodes them again: for 110,000 series that was ~0.7 s of the shard's CPU and GIL per read, time
its writes waited. The reader already holds every committed series' labels (it follows the table), so this
answer sends the samples as raw little-endian arrays and a label set only for a series that is not committed
in the table version the answer names (``X-Metricsgw-Table-Version``): new since the writer's last flush, or in
the flush committing as the answer was taken. A reader that reads the table at that version or newer knows
every other series by its id (cluster/source.py checks, and asks again in remote read's format if it does
not).

Layout: ``MAGIC``, u32 queries, then per query a u64 length and its payload: u64 counts (series, labelled
series, samples, histograms, key bytes, histogram bytes), then ids (i64 per series, ascending), the positions
of the labelled series (i64), their ``model.series_key`` lengths (u32) and bytes, the samples' sid, t (i64)
and v (f64, bit-exact), the histograms' sid, t (i64), their remote-write Histogram message lengths (u32) and
bytes.
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa

from ..errors import BadData
from ..model import SampleBlock, labels_from_key
from ..storage.batch import HistogramBlock
from .read_client_codec import PeerSeries

CONTENT_TYPE = "application/x-metricsgw-head-columns"
FORMAT = "columns"  # the request's ?format=
MAGIC = b"MGWHC1"
_COUNTS = struct.Struct("<6Q")
_LEN = struct.Struct("<Q")
_QUERIES = struct.Struct("<I")


def encode_result(ids: np.ndarray, labelled: np.ndarray, keys: list[bytes], block: SampleBlock,
                  hists: HistogramBlock | None) -> bytes:
    """One query's payload: ``ids`` the selected series (ascending), ``labelled`` the positions in ``ids`` of
    the series whose label sets go along, ``keys`` their series keys in that order."""
    key_lengths = np.fromiter(map(len, keys), np.uint32, len(keys))
    key_bytes = b"".join(keys)
    if hists is None or not len(hists):
        h_sid = h_t = np.empty(0, np.int64)
        h_lengths, h_bytes = np.empty(0, np.uint32), b""
    else:
        h_sid, h_t = hists.sid, hists.t
        blobs = hists.blob.to_pylist() if isinstance(hists.blob, (pa.Array, pa.ChunkedArray)) else list(hists.blob)
        h_lengths = np.fromiter(map(len, blobs), np.uint32, len(blobs))
        h_bytes = b"".join(blobs)
    head = _COUNTS.pack(len(ids), len(labelled), len(block), len(h_sid), len(key_bytes), len(h_bytes))
    return b"".join([head, _i64(ids), _i64(labelled), key_lengths.tobytes(), key_bytes,
                     _i64(block.sid), _i64(block.t), np.ascontiguousarray(block.v, "<f8").tobytes(),
                     _i64(h_sid), _i64(h_t), h_lengths.tobytes(), h_bytes])


def encode_response(payloads: list[bytes]) -> bytes:
    parts = [MAGIC, _QUERIES.pack(len(payloads))]
    for p in payloads:
        parts += [_LEN.pack(len(p)), p]
    return b"".join(parts)


def decode_response(body: bytes) -> list[PeerSeries]:
    """One PeerSeries per query; ``labels[i]`` is None for a series the reader must know by its id. BadData if
    the body is not such an answer. The arrays are read-only views of ``body``."""
    if not body.startswith(MAGIC):
        raise BadData("not a columnar head answer")
    pos = len(MAGIC)
    (n,), pos = _read(_QUERIES, body, pos)
    out = []
    for _ in range(n):
        (size,), pos = _read(_LEN, body, pos)
        if pos + size > len(body):
            raise BadData("truncated columnar head answer")
        out.append(_decode_result(memoryview(body)[pos:pos + size]))
        pos += size
    if pos != len(body):
        raise BadData("trailing bytes after a columnar head answer")
    return out


def _decode_result(buf: memoryview) -> PeerSeries:
    (n_series, n_labelled, n_samples, n_hists, key_bytes, hist_bytes), pos = _read(_COUNTS, buf, 0)
    reader = _Reader(buf, pos)
    ids = reader.array(np.int64, n_series)
    labelled = reader.array(np.int64, n_labelled)
    key_lengths = reader.array(np.uint32, n_labelled)
    keys = reader.blobs(key_lengths, key_bytes)
    sid, t, v = reader.array(np.int64, n_samples), reader.array(np.int64, n_samples), reader.array(np.float64, n_samples)
    h_sid, h_t = reader.array(np.int64, n_hists), reader.array(np.int64, n_hists)
    h_blobs = reader.blobs(reader.array(np.uint32, n_hists), hist_bytes)
    if reader.pos != len(buf):
        raise BadData("columnar head answer: sizes do not add up")
    if len(labelled) and (labelled.min() < 0 or labelled.max() >= n_series):
        raise BadData("columnar head answer: a labelled position is out of range")
    labels: list = [None] * n_series
    try:
        for i, key in zip(labelled.tolist(), keys):
            labels[i] = labels_from_key(key)
    except (UnicodeDecodeError, ValueError) as err:
        raise BadData(f"columnar head answer: bad series key ({err})") from None
    return PeerSeries(labels, ids, SampleBlock(sid, t, v), HistogramBlock(h_sid, h_t, pa.array(h_blobs, pa.binary())))


class _Reader:
    def __init__(self, buf: memoryview, pos: int) -> None:
        self.buf, self.pos = buf, pos

    def array(self, dtype, n: int) -> np.ndarray:
        size = np.dtype(dtype).itemsize * n
        if self.pos + size > len(self.buf):
            raise BadData("truncated columnar head answer")
        out = np.frombuffer(self.buf, np.dtype(dtype).newbyteorder("<"), n, self.pos)
        self.pos += size
        return out

    def blobs(self, lengths: np.ndarray, total: int) -> list[bytes]:
        if int(lengths.sum(dtype=np.int64)) != total or self.pos + total > len(self.buf):
            raise BadData("columnar head answer: byte counts do not add up")
        data = bytes(self.buf[self.pos:self.pos + total])
        self.pos += total
        ends = np.cumsum(lengths, dtype=np.int64).tolist()
        return [data[a:b] for a, b in zip([0, *ends[:-1]], ends)]


def _read(fmt: struct.Struct, buf, pos: int) -> tuple[tuple, int]:
    if pos + fmt.size > len(buf):
        raise BadData("truncated columnar head answer")
    return fmt.unpack_from(buf, pos), pos + fmt.size


def _i64(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a, "<i8").tobytes()
