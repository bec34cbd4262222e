"""Remote-write payloads: bytes <-> series. Pure (no aiohttp), bounded before any work.

``decode_request`` negotiates the protocol from Content-Type (Remote-Write 2.0 spec),
checks the snappy length preamble against a limit BEFORE decompressing, and parses the
protobuf into a ``DecodedWrite`` (decoded.py). ``encode_v1`` / ``encode_v2`` build payloads for tests
and the benchmark driver.
"""

from __future__ import annotations

from collections.abc import Sequence as SequenceABC
from typing import Callable, Iterable, Sequence

import numpy as np
import snappy
from google.protobuf.message import DecodeError

from ..errors import BadData, PayloadTooLarge, UnsupportedMediaType
from ..model import MetricMetadata
from . import native, native_scan, scrape_scan
from .decoded import DecodedWrite, RawPairs
from .fastscan import Flat, decode_sample_blobs, flatten, guess_label_ends, last_samples, scan_flat
from .proto import remote_v1_pb2 as v1pb
from .proto import remote_v2_pb2 as v2pb
from .series_keys import SEED, cache_keys, halves

PROTO_V1 = "prometheus.WriteRequest"
PROTO_V2 = "io.prometheus.write.v2.Request"

# MetricMetadata.type names, in enum order (v1 and v2 share the order).
METRIC_TYPES = ("unknown", "counter", "gauge", "histogram", "gaugehistogram", "summary", "info", "stateset")
_TYPE_NUMBER = {name: i for i, name in enumerate(METRIC_TYPES)}

Pairs = Iterable[tuple[str, str]]
# What the caller has resolved of v1 series keys (``series_keys.cache_keys`` of each series' label records as
# sent, given as their high and low 64-bit halves: ``series_keys.halves``): None unless every key is one it
# resolved before; else (per key its series id as int64, which series its relabel rules drop: a bool mask,
# None if none; a dropped series' id means nothing). The ingest pipeline's ``known_sids``.
KnownSids = Callable[[np.ndarray, np.ndarray], "tuple[np.ndarray, np.ndarray | None] | None"]
SeriesInput = Sequence[tuple[Pairs, Sequence[tuple[int, float]]]]


# ---------------------------------------------------------------- encoding


def encode_v1(series: SeriesInput, metadata: Sequence[MetricMetadata] | None = None,
              compress: bool = True) -> bytes:
    """A snappy-compressed ``prometheus.WriteRequest``.

    ``series`` is a list of (label pairs, [(ts_ms, value), ...]); labels are sent in the
    order given (sort them yourself to mimic Prometheus)."""
    req = v1pb.WriteRequest()
    for labels, samples in series:
        ts = req.timeseries.add()
        for name, value in labels:
            ts.labels.add(name=name, value=value)
        for t, v in samples:
            ts.samples.add(timestamp=int(t), value=float(v))
    for md in metadata or ():
        req.metadata.add(type=_TYPE_NUMBER.get(md.type, 0), metric_family_name=md.metric,
                         help=md.help, unit=md.unit)
    raw = req.SerializeToString()
    return snappy.compress(raw) if compress else raw


def encode_v2(series: SeriesInput, metadata: dict[str, MetricMetadata] | None = None,
              compress: bool = True) -> bytes:
    """A snappy-compressed ``io.prometheus.write.v2.Request``.

    ``metadata`` maps a metric name to its metadata; it is attached to every series of
    that metric (v2 carries metadata per series)."""
    symbols: dict[str, int] = {"": 0}

    def ref(s: str) -> int:
        r = symbols.get(s)
        if r is None:
            r = symbols[s] = len(symbols)
        return r

    req = v2pb.Request()
    for labels, samples in series:
        ts = req.timeseries.add()
        name = ""
        for n, v in labels:
            ts.labels_refs.extend((ref(n), ref(v)))
            if n == "__name__":
                name = v
        for t, v in samples:
            ts.samples.add(timestamp=int(t), value=float(v))
        md = (metadata or {}).get(name)
        if md is not None:
            ts.metadata.type = _TYPE_NUMBER.get(md.type, 0)
            ts.metadata.help_ref = ref(md.help)
            ts.metadata.unit_ref = ref(md.unit)
    req.symbols.extend(symbols)  # dicts keep insertion order == ref order
    raw = req.SerializeToString()
    return snappy.compress(raw) if compress else raw


# ---------------------------------------------------------------- negotiation and bounds


def negotiate(content_type: str | None, content_encoding: str | None) -> int:
    """Protocol version (1 or 2) from the headers, as Prometheus's write handler reads them."""
    enc = (content_encoding or "").strip().lower()
    if enc not in ("", "snappy"):  # no header: treat as snappy, as Prometheus does for 1.0 clients
        raise UnsupportedMediaType(f"unsupported Content-Encoding {content_encoding!r}; only snappy is accepted")
    ct = (content_type or "").strip()
    if not ct:
        return 1
    media, *params = ct.split(";")
    if media.strip().lower() != "application/x-protobuf":
        raise UnsupportedMediaType(f"unsupported Content-Type {content_type!r}; expected application/x-protobuf")
    for param in params:
        key, sep, val = param.partition("=")
        if not sep:
            raise UnsupportedMediaType(f"malformed Content-Type parameter {param.strip()!r} in {content_type!r}")
        if key.strip().lower() == "proto":
            proto = val.strip().strip('"')
            if proto == PROTO_V1:
                return 1
            if proto == PROTO_V2:
                return 2
            raise UnsupportedMediaType(
                f"unsupported remote-write protobuf message {proto!r}; accepted: {PROTO_V1}, {PROTO_V2}")
    return 1


def snappy_declared_length(body: bytes) -> int:
    """The decoded length a snappy block declares in its varint preamble (no decompression)."""
    result = shift = 0
    for i in range(min(len(body), 10)):
        byte = body[i]
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result
        shift += 7
    raise BadData("snappy: corrupt input (bad length preamble)")


def decompress(body: bytes, max_decoded_size: int, setting: str = "--remote-write.max-decoded-size") -> bytes:
    """Snappy block -> bytes, refusing over-limit payloads before allocating anything."""
    declared = snappy_declared_length(body)
    if declared > max_decoded_size:
        raise PayloadTooLarge(
            f"snappy payload declares {declared} decoded bytes, over the limit of {max_decoded_size} "
            f"({setting})")
    try:
        raw = snappy.uncompress(body)
    except Exception as err:  # python-snappy/cramjam raise several types for corrupt input
        raise BadData(f"snappy: corrupt input: {err}") from None
    if len(raw) != declared:
        raise BadData(f"snappy: corrupt input (declared {declared} bytes, got {len(raw)})")
    return raw


# ---------------------------------------------------------------- decoding

def decode_request(body: bytes, content_type: str | None, content_encoding: str | None,
                   max_decoded_size: int, known: KnownSids | None = None) -> DecodedWrite:
    version = negotiate(content_type, content_encoding)
    raw = decompress(body, max_decoded_size)
    return decode_v1(raw, known) if version == 1 else decode_v2(raw)


def _v1_label_records_pairs(key: bytes) -> RawPairs:
    # The fast scanner checks field framing only; a label's own bytes are parsed here,
    # so garbage inside one label fails that series (BadData), not the request.
    try:
        labels = map(v1pb.RawLabel.FromString, v1pb.RawTimeSeries.FromString(key).labels)
        return [(lbl.name, lbl.value) for lbl in labels]
    except DecodeError as err:
        raise BadData(f"cannot decode labels: {err}") from None


def uvarint(n: int) -> bytes:
    """Protobuf's base-128 varint of a non-negative int (also the length prefix of streamed frames)."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _v1_metadata(items) -> list[MetricMetadata]:
    return [MetricMetadata(m.metric_family_name, METRIC_TYPES[m.type] if 0 <= m.type < len(METRIC_TYPES) else "unknown",
                           m.help, m.unit) for m in items]


def _scan(raw: bytes) -> scrape_scan.ScrapeScan | None:
    """The request read in the compiled pass; None if it is not scrape-shaped, or while the kernel loads
    (compiled.py: at a writer's start, or at its first write)."""
    return scrape_scan.scan(raw, SEED)


def decode_v1(raw: bytes, known: KnownSids | None = None) -> DecodedWrite:
    """``known``: see ``KnownSids``; with it, a request of series all known is decoded without walking their
    labels (``_decode_v1_known``)."""
    try:
        blobs = v1pb.BlobWriteRequest.FromString(raw)
        scraped = _scan(raw) if known is not None else None
        if scraped is not None:  # read in the compiled pass
            decoded = _decode_v1_known(raw, blobs, scraped, known)
            if decoded is not None:
                return decoded
        series = flatten(list(blobs.timeseries))
        if known is not None and scraped is None:  # its kernel not loaded (or not a scrape): in numpy
            decoded = _guess_known(series, known, blobs.metadata)
            if decoded is not None:
                return decoded
        scanned = scan_flat(series)
        if scanned is None:
            return _decode_v1_generic(raw)
    except DecodeError as err:
        raise BadData(f"cannot decode remote-write 1.0 protobuf: {err}") from None
    parts = None
    if scanned.histograms or scanned.exemplars:  # rare: parse again, for each series' raw messages
        parts = _v1_native(v1pb.RawWriteRequest.FromString(raw).timeseries)
    return DecodedWrite(1, scanned.keys, scanned.counts, scanned.t, scanned.v, scanned.histograms,
                        scanned.exemplars, _v1_metadata(blobs.metadata), pairs=_KeyPairs(scanned.keys),
                        label_counts=scanned.label_counts, native=parts)


def _decode_v1_known(raw: bytes, blobs, scraped: scrape_scan.ScrapeScan,
                     known: KnownSids) -> DecodedWrite | None:
    """The steady state of a scrape's write: each series its labels, then its one sample (as ``scraped`` read
    it), and every series key known (a stored series, or one the relabel rules drop). None: not taken (no
    series, or a new or refused one), and the caller walks the request."""
    if not len(scraped.starts):
        return None
    resolved = known(scraped.hi, scraped.lo)
    if resolved is None:
        return None
    sids, dropped = resolved
    keys = _LabelSlices(raw, scraped.starts, scraped.label_ends)
    counts, t, v, parts = np.ones(len(keys), np.int64), scraped.t, scraped.v, None
    is_hist = scraped.hist_start >= 0
    if is_hist.any():  # a native histogram's series: its one histogram, checked in the compiled pass
        parts = _known_histograms(raw, scraped, is_hist)
        if parts is None:
            return None
        floats = ~is_hist
        counts, t, v = floats.astype(np.int64), t[floats], v[floats]
    return DecodedWrite(1, keys, counts, t, v, histograms=parts.histograms if parts else 0,
                        metadata=_v1_metadata(blobs.metadata) if scraped.has_metadata else None,
                        pairs=_KeyPairs(keys), native=parts, sids=sids, dropped=dropped)


def _known_histograms(raw: bytes, scraped: scrape_scan.ScrapeScan, is_hist: np.ndarray) -> native.NativeParts | None:
    """The histograms of a scrape-shaped request, one per series that has one; None unless the compiled check
    takes every one (the walk then parses them and words what is wrong)."""
    at = np.flatnonzero(is_hist)
    starts, ends = scraped.hist_start[at], scraped.hist_end[at]
    checked = native_scan.check_in(raw, starts, ends)
    if checked is None or not checked[0].all():
        return None
    n = len(is_hist)
    return native.NativeParts(is_hist.astype(np.int64), checked[1], list(map(raw.__getitem__, map(
        slice, starts.tolist(), ends.tolist()))), np.zeros(n, np.int64), np.zeros(0, np.int64),
        np.zeros(0, np.float64), [])


def _guess_known(series: Flat, known: KnownSids, metadata) -> DecodedWrite | None:
    """``_decode_v1_known`` in numpy, for when the compiled pass is not loaded (or the request is not a
    scrape's). The split is guessed from each series' end (``guess_label_ends``) and taken only if ``known``
    resolves every guessed key and a valid Sample follows each. That makes it exact: a known key was cut by
    the full walk (or rebuilt by the generated code) as a run of whole label records, so a series that is
    such a run followed by one sample field reads, field by field, as those labels and that sample and
    nothing else (no exemplar or histogram fits in it): the keys, times and values the walk would return. A
    wrong guess is a key never seen (barring an XXH3-128 collision), so it misses and the request takes the
    walk, as does any request with a new or refused series."""
    if not len(series.starts):
        return None
    label_ends = guess_label_ends(series)
    if label_ends is None:
        return None
    keys = list(map(series.flat.__getitem__, map(slice, series.starts.tolist(), label_ends.tolist())))
    resolved = known(*halves(cache_keys(keys)))
    if resolved is None:
        return None
    samples = last_samples(series, label_ends)
    if samples is None:
        return None
    sids, dropped = resolved
    t, v = samples
    return DecodedWrite(1, keys, np.ones(len(keys), np.int64), t, v, metadata=_v1_metadata(metadata),
                        pairs=_KeyPairs(keys), sids=sids, dropped=dropped)


class _LabelSlices(SequenceABC):
    """Series i's label key, ``raw[starts[i]:ends[i]]``, cut when asked: a request of known series needs none."""

    __slots__ = ("raw", "starts", "ends")

    def __init__(self, raw: bytes, starts: np.ndarray, ends: np.ndarray) -> None:
        self.raw, self.starts, self.ends = raw, starts, ends

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self.raw[self.starts[i]: self.ends[i]]


def _v1_native(series) -> "native.NativeParts":
    return native.collect([ts.histograms for ts in series], [ts.exemplars for ts in series], native.v1_exemplar)


class _KeyPairs:
    """label_pairs for v1: the key already holds the label records."""

    __slots__ = ("keys",)

    def __init__(self, keys: list[bytes]) -> None:
        self.keys = keys

    def __call__(self, i: int) -> RawPairs:
        return _v1_label_records_pairs(self.keys[i])


def _decode_v1_generic(raw: bytes) -> DecodedWrite:
    """Any valid encoding, via the generated code; keys match the fast path's."""
    try:
        req = v1pb.RawWriteRequest.FromString(raw)  # label bytes are checked per series later
    except DecodeError as err:
        raise BadData(f"cannot decode remote-write 1.0 protobuf: {err}") from None
    keys = [b"".join(b"\n" + uvarint(len(item)) + item for item in ts.labels) for ts in req.timeseries]
    label_counts = np.array([len(ts.labels) for ts in req.timeseries], np.int64)
    counts = [len(ts.samples) for ts in req.timeseries]
    merged = v1pb.MergedWriteRequest.FromString(raw).timeseries
    hist, exem = len(merged.histograms), len(merged.exemplars)
    # Samples of all series at once (series order), decoded with numpy when laid out as
    # usual; per sample in Python otherwise.
    columns = decode_sample_blobs(list(merged.samples))
    if columns is None:
        samples = [s for ts in req.timeseries for s in ts.samples]
        columns = (np.array([s.timestamp for s in samples], np.int64), np.array([s.value for s in samples], np.float64))
    t, v = columns
    return DecodedWrite(1, keys, np.array(counts, np.int64), t, v, hist, exem, _v1_metadata(req.metadata),
                        pairs=_KeyPairs(keys), label_counts=label_counts,
                        native=_v1_native(req.timeseries) if hist or exem else None)


def decode_v2(raw: bytes) -> DecodedWrite:
    try:
        req = v2pb.RawRequest.FromString(raw)
        merged = v2pb.MergedRequest.FromString(raw).timeseries
    except DecodeError as err:
        raise BadData(f"cannot decode remote-write 2.0 protobuf: {err}") from None
    symbols = list(req.symbols)  # the spec wants symbols[0] == ""; nothing here relies on it
    lookup = symbols.__getitem__
    series = req.timeseries
    keys: list = []
    counts_list: list[int] = []
    problems: dict[int, str] = {}
    add_key, add_count = keys.append, counts_list.append
    for i, ts in enumerate(series):  # the one per-series Python loop of v2
        try:
            key = tuple(map(lookup, ts.labels_refs))  # symbol bytes: name, value, name, value...
            if len(key) % 2:
                problems[i] = f"labels_refs has odd length {len(key)}"
                key = None
        except IndexError:
            key = None
            problems[i] = f"a label reference is out of range (symbols table has {len(symbols)} entries)"
        add_key(key)
        add_count(len(ts.samples))
    counts = np.array(counts_list, np.int64)
    columns = decode_sample_blobs(list(merged.samples))
    if columns is None:
        samples = [s for ts in series for s in ts.samples]
        columns = (np.array([s.timestamp for s in samples], np.int64), np.array([s.value for s in samples], np.float64))
    meta: dict[MetricMetadata, None] = {}
    if len(merged.metadata):  # only walk series for metadata when some series carries it
        for key, ts in zip(keys, series):
            if key is not None and ts.HasField("metadata"):
                md = _v2_metadata(ts.metadata, key, symbols)
                if md is not None:
                    meta[md] = None
    t, v = columns
    label_counts = np.array([len(k) // 2 if k is not None else 0 for k in keys], np.int64)
    parts = None
    if len(merged.histograms) or len(merged.exemplars):
        parts = native.collect([ts.histograms for ts in series], [ts.exemplars for ts in series],
                               native.v2_exemplar_decoder(symbols))
    return DecodedWrite(2, keys, counts, t, v, len(merged.histograms), len(merged.exemplars), list(meta),
                        problems, pairs=_TuplePairs(keys), label_counts=label_counts, native=parts)


def _v2_metadata(md, key: tuple, symbols: list[bytes]) -> MetricMetadata | None:
    nsym = len(symbols)
    if md.help_ref >= nsym or md.unit_ref >= nsym:
        return None
    help_, unit = symbols[md.help_ref], symbols[md.unit_ref]
    if not (md.type or help_ or unit):
        return None
    name = b""
    for j in range(0, len(key), 2):
        if key[j] == b"__name__":
            name = key[j + 1]
            break
    if not name:
        return None
    try:
        return MetricMetadata(name.decode(), METRIC_TYPES[md.type] if 0 <= md.type < len(METRIC_TYPES) else "unknown",
                              help_.decode(), unit.decode())
    except UnicodeDecodeError:
        return None


class _TuplePairs:
    __slots__ = ("keys",)

    def __init__(self, keys: list) -> None:
        self.keys = keys

    def __call__(self, i: int) -> RawPairs:
        key = self.keys[i]
        return list(zip(key[0::2], key[1::2]))
