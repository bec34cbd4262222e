"""Native histograms and exemplars of a remote-write request, per series. Pure (no aiohttp).

A histogram is kept as the exact protobuf bytes the sender wrote (``prometheus.Histogram`` in 1.0,
``io.prometheus.write.v2.Histogram`` in 2.0: the two messages share every field number and wire
type, so one parser reads both). Keeping the bytes is what makes storage bit-exact: spans, deltas
or counts, zero bucket, schema, custom values and the reset hint come back as they were sent.
Only the timestamp is read here (storage orders by it); PromQL decodes the rest where it needs it
(promql/native.py).

Exemplars are decoded to (t, value, labels) with the labels as a ``model.series_key`` of their
sorted pairs (2.0's symbol references resolved), so both protocols store the same thing.

Integer histograms are checked and their timestamps read in one compiled pass (native_scan.py); the others
(float histograms, and any the pass does not take) are parsed with protobuf and judged here, one by one, as
are exemplars. All of it runs only for requests that carry them (a float-only request costs one ``if``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from google.protobuf.message import DecodeError

from ..errors import BadData
from ..model import canonical, series_key
from . import native_scan
from .proto import remote_v1_pb2 as v1pb
from .proto import remote_v2_pb2 as v2pb


@dataclass
class NativeParts:
    """Histograms and exemplars of one request, series-major (series i's come after series i-1's)."""

    hist_counts: np.ndarray  # int64 per series: valid histograms kept
    hist_t: np.ndarray  # int64 ms
    hist_blobs: list[bytes]  # the Histogram message bytes as sent
    ex_counts: np.ndarray  # int64 per series
    ex_t: np.ndarray
    ex_v: np.ndarray  # float64
    ex_labels: list[bytes]  # model.series_key of the exemplar's sorted labels
    invalid: dict[int, tuple[int, str]] = field(default_factory=dict)  # series -> (histograms refused, why)

    @property
    def histograms(self) -> int:
        return len(self.hist_blobs)

    @property
    def exemplars(self) -> int:
        return len(self.ex_labels)

    def take(self, series: np.ndarray) -> "NativeParts":
        """Only the series at these indexes (int array, ascending), in that order."""
        hist_rows = _rows(self.hist_counts, series)
        ex_rows = _rows(self.ex_counts, series)
        at = {int(i): k for k, i in enumerate(series.tolist())}
        return NativeParts(self.hist_counts[series], self.hist_t[hist_rows], [self.hist_blobs[i] for i in hist_rows],
                           self.ex_counts[series], self.ex_t[ex_rows], self.ex_v[ex_rows],
                           [self.ex_labels[i] for i in ex_rows],
                           {at[i]: p for i, p in self.invalid.items() if i in at})


    def keep(self, hist_rows: np.ndarray, ex_rows: np.ndarray) -> "NativeParts":
        """Only the histograms and exemplars where these (bool, per row) are True."""
        n = len(self.hist_counts)
        hist_series = np.repeat(np.arange(n), self.hist_counts)[hist_rows]
        ex_series = np.repeat(np.arange(n), self.ex_counts)[ex_rows]
        return NativeParts(np.bincount(hist_series, minlength=n).astype(np.int64), self.hist_t[hist_rows],
                           [b for b, k in zip(self.hist_blobs, hist_rows.tolist()) if k],
                           np.bincount(ex_series, minlength=n).astype(np.int64), self.ex_t[ex_rows],
                           self.ex_v[ex_rows], [lb for lb, k in zip(self.ex_labels, ex_rows.tolist()) if k],
                           self.invalid)


def _rows(counts: np.ndarray, series: np.ndarray) -> np.ndarray:
    starts = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=starts[1:])
    n = counts[series]
    return np.repeat(starts[series] - np.cumsum(n) + n, n) + np.arange(int(n.sum()))


def histogram_problem(h: v1pb.Histogram) -> str | None:
    """Why Prometheus's appender would refuse this histogram (ValidateHistogram), or None."""
    in_buckets = 0.0
    for side, spans, deltas, counts in (("positive", h.positive_spans, h.positive_deltas, h.positive_counts),
                                        ("negative", h.negative_spans, h.negative_deltas, h.negative_counts)):
        if len(deltas) and len(counts):
            return f"{side} side: buckets given both as deltas and as counts"
        for n, span in enumerate(spans):
            if n > 0 and span.offset < 0:
                return f"{side} side: span number {n + 1} with offset {span.offset}"
        want = sum(s.length for s in spans)
        got = len(deltas) + len(counts)
        if want != got:
            return f"{side} side: spans need {want} buckets, have {got} buckets"
        absolute = np.cumsum(np.array(deltas, np.int64)) if len(deltas) else np.array(counts, np.float64)
        if len(absolute) and absolute.min() < 0:
            at = int(np.argmax(absolute < 0))
            return f"{side} side: bucket number {at + 1} has observation count of {absolute[at]}"
        in_buckets += float(absolute.sum())
    count = h.count_int if h.WhichOneof("count") != "count_float" else h.count_float
    if in_buckets > count:
        return f"{in_buckets:g} observations found in buckets, but the Count field is {count:g}"
    if h.schema == -53:
        if h.negative_spans or h.zero_count_int or h.zero_count_float:
            return "custom-bucket histograms (schema -53) have no negative or zero buckets"
    elif not -4 <= h.schema <= 8:
        return f"schema {h.schema} is not one of -4..8 or -53 (custom buckets)"
    return None


def collect(per_series_histograms, per_series_exemplars, exemplar_labels) -> NativeParts:
    """Build the parts from each series' raw histogram and exemplar messages.

    ``exemplar_labels(i, raw) -> (t, value, label pairs)`` decodes one exemplar of series i (the
    protocols differ only there). Raises BadData for bytes that are not a message at all."""
    hist_counts, hist_t, blobs, invalid = _histograms(per_series_histograms)
    ex_counts, ex_t, ex_v, ex_labels = [], [], [], []
    for i, raws in enumerate(per_series_exemplars):
        kept = 0
        for raw in raws:
            t, v, pairs = exemplar_labels(i, raw)
            if pairs is None:  # undecodable labels: dropped, as Prometheus drops a bad exemplar
                continue
            ex_t.append(t)
            ex_v.append(v)
            ex_labels.append(series_key(canonical(pairs)))
            kept += 1
        ex_counts.append(kept)
    return NativeParts(hist_counts, hist_t, blobs,
                       np.array(ex_counts, np.int64), np.array(ex_t, np.int64), np.array(ex_v, np.float64),
                       ex_labels, invalid)


def _histograms(per_series) -> tuple[np.ndarray, np.ndarray, list[bytes], dict[int, tuple[int, str]]]:
    """Each series' valid histograms: their count per series, timestamps and bytes, and the refused ones per
    series. The compiled pass (native_scan.py) takes the integer histograms it finds valid; every other one is
    parsed and judged here (histogram_problem), in order."""
    per_series = [list(raws) for raws in per_series]
    counts = np.fromiter(map(len, per_series), np.int64, len(per_series))
    raws = [raw for series in per_series for raw in series]
    checked = native_scan.check(raws) if raws else None
    if checked is None:
        keep, t = np.zeros(len(raws), bool), np.zeros(len(raws), np.int64)
    else:
        keep, t = checked
    invalid: dict[int, tuple[int, str]] = {}
    if not keep.all():
        series_of = np.repeat(np.arange(len(per_series)), counts)
        for j in np.flatnonzero(~keep).tolist():
            i = int(series_of[j])
            try:
                h = v1pb.Histogram.FromString(raws[j])
            except DecodeError as err:
                raise BadData(f"series #{i}: cannot decode a native histogram: {err}") from None
            problem = histogram_problem(h)
            if problem is not None:
                refused, _ = invalid.get(i, (0, problem))
                invalid[i] = (refused + 1, problem)
                continue
            keep[j], t[j] = True, h.timestamp
        if not keep.all():
            counts = np.bincount(series_of[keep], minlength=len(per_series)).astype(np.int64)
            raws = [raw for raw, k in zip(raws, keep.tolist()) if k]
            t = t[keep]
    return counts, t, raws, invalid


def v1_exemplar(i: int, raw: bytes):
    try:
        e = v1pb.Exemplar.FromString(raw)
    except DecodeError:
        return 0, 0.0, None
    return e.timestamp, e.value, [(lb.name, lb.value) for lb in e.labels]


def v2_exemplar_decoder(symbols: list[bytes]):
    def decode(i: int, raw: bytes):
        try:
            e = v2pb.Exemplar.FromString(raw)
            refs = list(e.labels_refs)
            if len(refs) % 2:
                return 0, 0.0, None
            strings = [symbols[r].decode("utf-8") for r in refs]
        except (DecodeError, IndexError, UnicodeDecodeError):
            return 0, 0.0, None
        return e.timestamp, e.value, list(zip(strings[0::2], strings[1::2]))
    return decode
