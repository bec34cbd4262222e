"""The client side of remote read (SAMPLES): queries -> request bytes, response bytes -> series. Pure.

What a querier sends its peers (peers.py), and how it reads their answers. It lives in cluster/, not
remote/, because it builds storage's blocks with storage's merge (remote/ stays below storage). The samples of a ``ReadTimeSeries`` are decoded
with numpy, not one protobuf object per sample: each series' ``samples`` fields are cut into
records of one length (a run of timestamps of the same varint width) and checked byte by byte
against the layout ``remote/read_codec.sample_records`` writes (tag, length, value fixed64, timestamp
varint). Any series not laid out that way (another writer may omit zero fields or order them
differently) is decoded by the generated protobuf code instead, so every valid response decodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import snappy
from google.protobuf.message import DecodeError

from .. import npsort
from ..errors import BadData
from ..model import Labels, Matcher, SampleBlock, series_keys_and_ids
from ..remote.codec import decompress
from ..remote.proto import remote_read_pb2 as pb
from ..storage.batch import HistogramBlock
from ..storage.read.merge import is_sorted_strict, sort_block
from ..storage.memory.native_head import empty_histograms, merge_histograms

_TYPES = {"=": pb.LabelMatcher.EQ, "!=": pb.LabelMatcher.NEQ, "=~": pb.LabelMatcher.RE, "!~": pb.LabelMatcher.NRE}
_TAG_SERIES, _TAG_LABEL, _TAG_SAMPLE = 0x0A, 0x0A, 0x12  # QueryResult.timeseries, .labels, .samples
_TAG_HISTOGRAM = 0x22  # TimeSeries.histograms (field 4): the remote-write Histogram bytes, kept as they are


@dataclass
class PeerSeries:
    """One query's answer: label sets, their ids, their samples and native histograms sorted by (sid, t)."""

    labels: list[Labels]
    ids: np.ndarray
    block: SampleBlock
    hists: HistogramBlock

    @classmethod
    def empty(cls) -> "PeerSeries":
        return cls([], np.empty(0, np.int64), SampleBlock.empty(), empty_histograms())


def encode_request(queries: list[tuple[list[Matcher], int, int]], series_only: bool = False) -> bytes:
    """A snappy ``ReadRequest`` of (matchers, start_ms, end_ms) queries asking for SAMPLES; with
    ``series_only`` the hints ask for label sets without samples (func "series")."""
    req = pb.ReadRequest(accepted_response_types=[pb.ReadRequest.SAMPLES])
    for matchers, start_ms, end_ms in queries:
        q = req.queries.add(start_timestamp_ms=start_ms, end_timestamp_ms=end_ms)
        for m in matchers:
            q.matchers.add(type=_TYPES[m.op], name=m.name, value=m.value)
        if series_only:
            q.hints.func, q.hints.start_ms, q.hints.end_ms = "series", start_ms, end_ms
    return snappy.compress(req.SerializeToString())


def decode_response(body: bytes, max_decoded_bytes: int) -> list[PeerSeries]:
    """The results of a snappy ``ReadResponse``, one per query; BadData if it is not one."""
    raw = decompress(body, max_decoded_bytes, setting="the peer response limit")
    buf = np.frombuffer(raw, np.uint8)
    try:
        return [_query_result(raw, buf, lo, hi) for lo, hi in _fields(raw, 0, len(raw), 0x0A)]
    except (IndexError, ValueError, DecodeError, UnicodeDecodeError) as err:
        raise BadData(f"cannot decode remote-read response: {err}") from None


def _varint(raw: bytes, i: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        b = raw[i]
        n |= (b & 0x7F) << shift
        i += 1
        if b < 0x80:
            return n, i
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(raw: bytes, lo: int, hi: int, tag: int) -> list[tuple[int, int]]:
    """Byte ranges of the length-delimited fields with this one-byte tag in raw[lo:hi] (a message
    whose fields are all length-delimited, as ReadResponse and QueryResult are)."""
    out = []
    i = lo
    while i < hi:
        t, i = _varint(raw, i)
        if t & 7 != 2:
            raise ValueError(f"unexpected wire type {t & 7}")
        n, i = _varint(raw, i)
        if i + n > hi:
            raise ValueError("field runs past its message")
        if t == tag:
            out.append((i, i + n))
        i += n
    return out


def _query_result(raw: bytes, buf: np.ndarray, lo: int, hi: int) -> PeerSeries:
    labels: list[Labels] = []
    series_lo, samples_lo, series_hi = [], [], []  # per series: its start, its samples' start, its end
    hist_of: list[list[bytes]] = []  # per series: its histograms
    for s_lo, s_hi in _fields(raw, lo, hi, _TAG_SERIES):
        i = s_lo
        while i < s_hi and raw[i] == _TAG_LABEL:  # the labels come first in what we write
            n, j = _varint(raw, i + 1)
            i = j + n
        ts = pb.ReadTimeSeries.FromString(raw[s_lo:i])
        labels.append(tuple(sorted((lb.name, lb.value) for lb in ts.labels)))
        blobs = []
        while i < s_hi and raw[i] == _TAG_HISTOGRAM:  # then the histograms (read_codec.encode_query_result)
            n, j = _varint(raw, i + 1)
            blobs.append(raw[j:j + n])
            i = j + n
        hist_of.append(blobs)
        series_lo.append(s_lo)
        samples_lo.append(i)
        series_hi.append(s_hi)
    if not labels:
        return PeerSeries([], np.empty(0, np.int64), SampleBlock.empty(), empty_histograms())
    counts, places = _uniform_records(buf, np.array(samples_lo, np.int64), np.array(series_hi, np.int64))
    others: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for k in np.flatnonzero(counts < 0).tolist():  # not one record length: series by series
        got = _samples_fast(buf, samples_lo[k], series_hi[k])
        if got is None:  # not our layout: the generic decoder (one object per sample, but correct)
            labels[k], *got = samples_by_protobuf(raw[series_lo[k]:series_hi[k]])
            # every field of a TimeSeries is length-delimited: its histograms wherever the writer put them
            hist_of[k] = [raw[a:b] for a, b in _fields(raw, series_lo[k], series_hi[k], _TAG_HISTOGRAM)]
        others[k] = got
        counts[k] = len(got[0])
    offsets = np.cumsum(counts) - counts
    t, v = np.empty(int(counts.sum()), np.int64), np.empty(int(counts.sum()), np.float64)
    for series, within, rt, rv in places:
        t[offsets[series] + within], v[offsets[series] + within] = rt, rv
    for k, (ot, ov) in others.items():
        t[offsets[k]:offsets[k] + counts[k]], v[offsets[k]:offsets[k] + counts[k]] = ot, ov
    _, ids = series_keys_and_ids(labels)
    return PeerSeries(labels, ids, _by_sid(ids, counts, offsets, t, v), _histograms(ids, hist_of))


def _histograms(ids: np.ndarray, hist_of: list[list[bytes]]) -> HistogramBlock:
    """The series' histograms as one block sorted by (sid, t), one per (sid, t). The timestamp is read from
    each Histogram message (field 15, int64 varint), the bytes kept as they came (bit-exact, as stored)."""
    counts = np.array([len(b) for b in hist_of], np.int64)
    if not counts.sum():
        return empty_histograms()
    blobs = [blob for b in hist_of for blob in b]
    t = np.array([_histogram_timestamp(blob) for blob in blobs], np.int64)
    return merge_histograms([HistogramBlock(np.repeat(ids, counts), t, pa.array(blobs, pa.binary()))])


def _histogram_timestamp(blob: bytes) -> int:
    """Field 15 (timestamp, varint) of a prompb.Histogram; the fields before it are skipped by wire type."""
    i, end = 0, len(blob)
    while i < end:
        tag, i = _varint(blob, i)
        wire = tag & 7
        if tag >> 3 == 15 and wire == 0:
            n, _ = _varint(blob, i)
            return n - (1 << 64) if n >= 1 << 63 else n
        if wire == 0:
            _, i = _varint(blob, i)
        elif wire == 1:
            i += 8
        elif wire == 2:
            n, i = _varint(blob, i)
            i += n
        elif wire == 5:
            i += 4
        else:
            raise ValueError(f"unexpected wire type {wire} in a histogram")
    return 0  # proto3 leaves a zero timestamp out


def _uniform_records(buf: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, list]:
    """The samples of every series whose ``samples`` fields in buf[lo:hi] all have one record length
    and read_codec's layout, decoded together: (records per series, -1 where not; and per record length
    met, (series index, index within the series, t, v) of its records)."""
    length = hi - lo
    size = np.zeros(len(lo), np.int64)
    has = length >= 2
    size[has] = buf[lo[has] + 1].astype(np.int64) + 2
    uniform = has & (size >= 13) & (size <= 22) & (buf[np.minimum(lo, len(buf) - 1)] == _TAG_SAMPLE)
    uniform &= length % np.maximum(size, 1) == 0
    counts = np.where(uniform, length // np.maximum(size, 1), np.where(length == 0, 0, -1))
    places = []
    for rec in npsort.unique(size[uniform]).tolist():
        regs = np.flatnonzero(uniform & (size == rec))
        c = counts[regs]
        within = np.arange(int(c.sum())) - np.repeat(np.cumsum(c) - c, c)
        # each series' records are contiguous: a (records x length) view of each, copied once
        grid = np.concatenate([buf[a:b].reshape(-1, rec) for a, b in zip(lo[regs].tolist(), hi[regs].tolist())])
        varint = grid[:, 12:]
        good = ((grid[:, 0] == _TAG_SAMPLE) & (grid[:, 1] == rec - 2) & (grid[:, 2] == 0x09)
                & (grid[:, 11] == 0x10) & (varint[:, -1] < 0x80))
        for k in range(rec - 13):  # column by column: cheaper than a row-wise all() here
            good &= varint[:, k] >= 0x80
        owner = np.repeat(np.arange(len(regs)), c)
        bad = npsort.unique(owner[~good])
        if len(bad):  # those series go the slow way; the rest stay
            counts[regs[bad]] = -1
            keep = ~npsort.isin(owner, bad)
            grid, varint, owner, within = grid[keep], varint[keep], owner[keep], within[keep]
        t = np.zeros(len(grid), np.uint64)
        for k in range(rec - 12):
            t |= (varint[:, k] & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        v = np.ascontiguousarray(grid[:, 3:11]).view("<f8").reshape(len(grid))
        places.append((regs[owner], within, t.view(np.int64), v))
    return counts, places


def _by_sid(ids: np.ndarray, counts: np.ndarray, offsets: np.ndarray, t: np.ndarray, v: np.ndarray) -> SampleBlock:
    """The series' samples (each series' run at its offset) as one block sorted by (sid, t): the runs
    reordered by sid, no sort of the samples, when each run is in time order and sids are distinct."""
    order = np.argsort(ids, kind="stable")
    c = counts[order]
    perm = np.repeat(offsets[order] - (np.cumsum(c) - c), c) + np.arange(int(c.sum()))
    block = SampleBlock(np.repeat(ids[order], c), t[perm], v[perm])
    if is_sorted_strict(block.sid, block.t):
        return block
    return _dedup(sort_block(block))


def samples_by_protobuf(series: bytes) -> tuple[Labels, np.ndarray, np.ndarray]:
    """(labels, t, v) of one encoded ``ReadTimeSeries``, whatever its layout."""
    whole = pb.ReadTimeSeries.FromString(series)
    return (tuple(sorted((lb.name, lb.value) for lb in whole.labels)),
            np.array([s.timestamp for s in whole.samples], np.int64),
            np.array([s.value for s in whole.samples], np.float64))


def _samples_fast(buf: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(t, v) of the ``samples`` fields in buf[lo:hi] when laid out as read_codec writes them:
    runs of equal-length records; None otherwise."""
    ts, vs = [], []
    i = lo
    while i < hi:
        if len(ts) > 10:  # timestamps of ten varint widths in one series: not our layout
            return None
        if buf[i] != _TAG_SAMPLE or i + 1 >= hi:
            return None
        size = int(buf[i + 1]) + 2
        if size < 13 or size > 22:
            return None
        m = (hi - i) // size
        grid = buf[i:i + m * size].reshape(m, size)
        same = (grid[:, 0] == _TAG_SAMPLE) & (grid[:, 1] == size - 2)
        m = int(np.argmin(same)) if not same.all() else m  # the run of this record length
        if m == 0:
            return None
        grid = grid[:m]
        width = size - 12  # timestamp varint bytes
        varint = grid[:, 12:]
        if not ((grid[:, 2] == 0x09).all() and (grid[:, 11] == 0x10).all()
                and (varint[:, :-1] >= 0x80).all() and (varint[:, -1] < 0x80).all()):
            return None
        t = np.zeros(m, np.uint64)
        for k in range(width):
            t |= (varint[:, k] & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        ts.append(t.view(np.int64))
        vs.append(np.ascontiguousarray(grid[:, 3:11]).view("<f8").reshape(m).astype(np.float64))
        i += m * size
    if not ts:
        return np.empty(0, np.int64), np.empty(0, np.float64)
    return np.concatenate(ts), np.concatenate(vs)


def _dedup(b: SampleBlock) -> SampleBlock:
    """One sample per (sid, t), as the read seam promises (a peer answers each once; a malformed
    answer must not break the merge's invariants)."""
    if len(b) < 2:
        return b
    keep = np.r_[True, (b.sid[1:] != b.sid[:-1]) | (b.t[1:] != b.t[:-1])]
    if keep.all():
        return b
    return SampleBlock(b.sid[keep], b.t[keep], b.v[keep])
