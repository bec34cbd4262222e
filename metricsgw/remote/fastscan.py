"""A vectorised reader of v1 TimeSeries bytes: labels as raw keys, samples as numpy arrays.

upb parses a WriteRequest in ~1 ms, but turning it into Python objects (a bytes object
per label, floats per sample) costs several ms per 2,000 series. Here every series'
fields are tokenised at once with numpy: step k reads the k-th field of all series
together, so the Python loop runs once per field *position* (about a dozen steps for
typical series), not once per label or sample.

Only the layout real senders produce is handled: labels (field 1) first and contiguous,
then samples (field 2), exemplars (3), histograms (4) in any order; samples encoded as
[0x09 value][0x10 varint timestamp] with either field omitted when zero. Anything else
(unknown fields, repeated fields inside a sample, many samples per series) returns None
and the caller uses the generated-code path, which handles every valid encoding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

TAG_LABEL, TAG_SAMPLE, TAG_EXEMPLAR, TAG_HISTOGRAM = 0x0A, 0x12, 0x1A, 0x22
_KNOWN_TAGS = np.zeros(256, dtype=bool)
_KNOWN_TAGS[[TAG_LABEL, TAG_SAMPLE, TAG_EXEMPLAR, TAG_HISTOGRAM]] = True
MAX_STEPS = 64  # beyond this many fields per series the per-step overhead loses to upb
_PAD = bytes(16)
_SHIFTS = (np.arange(10, dtype=np.uint64) * np.uint64(7))


@dataclass
class ScannedSeries:
    keys: list[bytes]  # per series: its label records, exactly as sent
    counts: np.ndarray  # int64 samples per series
    t: np.ndarray  # int64 ms, series-major, sender order within a series
    v: np.ndarray  # float64, bit-exact
    exemplars: int
    histograms: int
    label_counts: np.ndarray | None = None  # int64 label records per series (lets callers split keys in bulk)


def varints(buf: np.ndarray, at: np.ndarray, max_len: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Decode one varint at each position: (values as uint64, encoded lengths)."""
    first = buf[at]
    if not (first & 0x80).any():  # the common case: every length fits one byte
        return first.astype(np.uint64), np.ones(len(at), np.int64)
    window = buf[at[:, None] + np.arange(max_len)]
    more = window >= 0x80
    ends = np.argmin(more, axis=1)  # first byte without the continuation bit
    if (more[np.arange(len(at)), ends]).any():
        return None  # longer than max_len
    keep = np.arange(max_len) <= ends[:, None]
    parts = (window & 0x7F).astype(np.uint64) << _SHIFTS[:max_len]
    return np.where(keep, parts, 0).sum(axis=1, dtype=np.uint64), ends + 1


class Flat(NamedTuple):
    """Series bytes laid end to end: series i is ``flat[starts[i]:ends[i]]``; ``buf`` views ``flat``."""

    flat: bytes
    buf: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    lengths: np.ndarray


def flatten(blobs: list[bytes]) -> Flat:
    lengths = np.fromiter(map(len, blobs), np.int64, len(blobs))
    ends = np.cumsum(lengths)
    flat = b"".join([*blobs, _PAD])  # the padding lets every field read a few bytes past its end
    return Flat(flat, np.frombuffer(flat, np.uint8), ends - lengths, ends, lengths)


def scan_series(blobs: list[bytes]) -> ScannedSeries | None:
    return scan_flat(flatten(blobs))


def scan_flat(series: Flat) -> ScannedSeries | None:
    flat, buf, starts, ends, lengths = series
    scanned = _labels_then_one_sample(flat, buf, starts, ends)
    return scanned if scanned is not None else _scan_fields(flat, buf, starts, ends, lengths)


def _labels_then_one_sample(flat: bytes, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> ScannedSeries | None:
    """The shape of a scrape's write (Prometheus sends each series with the one sample it scraped):
    every series is its labels, then exactly one sample running to the end of the series. The walk
    reads label fields only and a series leaves it at its first other field, so nothing per field is
    kept and no fields are sorted afterwards; about half the work of ``_scan_fields``, with the same
    result. None for any other shape (``_scan_fields`` then takes the request)."""
    n = len(starts)
    pos = starts.copy()
    n_labels = np.zeros(n, np.int64)
    active = np.flatnonzero(pos < ends)
    step = 0
    while len(active):
        if step >= MAX_STEPS or (step >= 16 and len(active) < 50):
            return None
        p = pos[active]
        is_label = buf[p] == TAG_LABEL
        if not is_label.all():
            active, p = active[is_label], p[is_label]
            if not len(active):
                break
        plen = buf[p + 1]
        if (plen & 0x80).any():  # a label over 127 bytes: its length takes more than one byte
            decoded = varints(buf, p + 1, 5)
            if decoded is None:
                return None
            nxt = p + 1 + decoded[1] + decoded[0].astype(np.int64)
        else:
            nxt = p + 2 + plen
        end = ends[active]
        if (nxt > end).any():
            return None
        pos[active] = nxt
        n_labels[active] += 1
        active = active[nxt < end]
        step += 1
    # What follows the labels: one sample field, [0x12][length < 128][Sample], ending the series.
    tag, length = buf[pos], buf[pos + 1].astype(np.int64)
    if not ((tag == TAG_SAMPLE) & (length < 0x80) & (pos + 2 + length == ends)).all():
        return None
    decoded = _samples(buf, pos + 2, length)
    if decoded is None:
        return None
    t, v = decoded
    keys = [flat[a:b] for a, b in zip(starts.tolist(), pos.tolist())]
    return ScannedSeries(keys=keys, counts=np.ones(n, np.int64), t=t, v=v, exemplars=0, histograms=0,
                         label_counts=n_labels)


# Sizes of a Sample message: [0x09 f64]? [0x10 varint of 1..10 bytes]?, so 0..20. Tried in this order: a value
# and a millisecond timestamp of this era (6 varint bytes) first, a zero value (omitted) next: most series of a
# scrape are settled by the first size tried.
_SAMPLE_SIZES = (16, 7, *(m for m in range(21) if m not in (16, 7)))


def guess_label_ends(series: Flat) -> np.ndarray | None:
    """Where each series' labels end if it is its labels, then exactly one sample field [0x12][m][Sample]
    ending it, found from the series' end without walking its labels (the first size m whose header is in
    place); None if some series has none.

    A guess only: bytes inside a label can look like such a header, so the bytes before it are not known to
    be label records. The caller must check them (codec._guess_known takes them only when each is a label
    key the full walk produced before) and read the Samples with ``last_samples``."""
    _, buf, starts, ends, _ = series
    label_end = np.empty(len(starts), np.int64)
    pending = np.arange(len(starts))
    for m in _SAMPLE_SIZES:
        end = ends[pending]
        head = end - 2 - m
        at = np.maximum(head, 0)  # a series shorter than the field: no negative index wraps round
        fits = (head >= starts[pending]) & (buf[at] == TAG_SAMPLE) & (buf[at + 1] == m)
        label_end[pending[fits]] = head[fits]
        pending = pending[~fits]
        if not len(pending):
            return label_end
    return None


def last_samples(series: Flat, label_ends: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(t, v) of the Sample in the field after each series' labels (``guess_label_ends``); None if one is not
    a Sample as ``_labels_then_one_sample`` reads it."""
    return _samples(series.buf, label_ends + 2, series.ends - label_ends - 2)


def _scan_fields(flat: bytes, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                 lengths: np.ndarray) -> ScannedSeries | None:
    """Any mix of labels (leading), samples, exemplars and histograms per series."""
    n = len(starts)
    pos = starts.copy()
    active = np.nonzero(lengths > 0)[0]
    rec_series, rec_tag, rec_start, rec_len, rec_step = [], [], [], [], []
    step = 0
    while len(active):
        if step >= MAX_STEPS or (step >= 16 and len(active) < 50):
            return None  # many fields on few series: the generated-code path is faster
        p = pos[active]
        tags = buf[p]
        if not _KNOWN_TAGS[tags].all():
            return None
        decoded = varints(buf, p + 1, 5)
        if decoded is None:
            return None
        plen, vlen = decoded
        pstart = p + 1 + vlen
        nxt = pstart + plen.astype(np.int64)
        if (nxt > ends[active]).any():
            return None  # truncated field: let the generated parser report it
        rec_series.append(active)
        rec_tag.append(tags)
        rec_start.append(pstart)
        rec_len.append(plen.astype(np.int64))
        rec_step.append(np.full(len(active), step, np.int64))
        pos[active] = nxt
        active = active[nxt < ends[active]]
        step += 1

    if not rec_series:
        return ScannedSeries([b""] * n, np.zeros(n, np.int64), np.empty(0, np.int64),
                             np.empty(0, np.float64), 0, 0, np.zeros(n, np.int64))
    ser = np.concatenate(rec_series)
    tag = np.concatenate(rec_tag)
    rstart = np.concatenate(rec_start)
    rlen = np.concatenate(rec_len)
    rstep = np.concatenate(rec_step)

    # Labels must be the leading, contiguous fields of each series: then the label bytes
    # are one slice, and that slice is the cache key.
    is_label = tag == TAG_LABEL
    n_labels = np.bincount(ser[is_label], minlength=n)
    if (rstep[is_label] >= n_labels[ser[is_label]]).any():
        return None
    label_end = starts.copy()
    last_label = is_label & (rstep == n_labels[ser] - 1)
    label_end[ser[last_label]] = rstart[last_label] + rlen[last_label]
    keys = [flat[a:b] for a, b in zip(starts.tolist(), label_end.tolist())]

    is_sample = tag == TAG_SAMPLE
    s_ser = ser[is_sample]
    order = np.argsort(s_ser, kind="stable")  # series-major, steps (= sender order) kept
    s_ser = s_ser[order]
    decoded = _samples(buf, rstart[is_sample][order], rlen[is_sample][order])
    if decoded is None:
        return None
    t, v = decoded
    return ScannedSeries(
        keys=keys,
        counts=np.bincount(s_ser, minlength=n).astype(np.int64),
        t=t, v=v,
        exemplars=int(np.count_nonzero(tag == TAG_EXEMPLAR)),
        histograms=int(np.count_nonzero(tag == TAG_HISTOGRAM)),
        label_counts=n_labels.astype(np.int64),
    )


def decode_sample_blobs(blobs: list[bytes]) -> tuple[np.ndarray, np.ndarray] | None:
    """Sample messages given as raw bytes -> (t, v) arrays, or None if laid out unusually."""
    lengths = np.fromiter(map(len, blobs), np.int64, len(blobs))
    starts = np.cumsum(lengths) - lengths
    buf = np.frombuffer(b"".join(blobs) + _PAD, np.uint8)
    return _samples(buf, starts, lengths)


def _unaligned_f64(buf: np.ndarray) -> np.ndarray:
    """A view of ``buf`` in which element i is the little-endian double in bytes i..i+7: one gather
    reads each value (a gather of its 8 bytes and a copy to regroup them cost three times as much)."""
    return np.ndarray((len(buf) - 7,), "<f8", buffer=buf, offset=0, strides=(1,))


def _samples(buf: np.ndarray, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Decode Sample messages laid out as [0x09 f64]? [0x10 varint]?."""
    m = len(start)
    if m == 0:
        return np.empty(0, np.int64), np.empty(0, np.float64)
    end = start + length
    has_v = (length >= 9) & (buf[start] == 0x09)
    tpos = start + 9 * has_v
    has_t = tpos < end
    if has_t.any() and (buf[tpos[has_t]] != 0x10).any():
        return None
    v = np.where(has_v, _unaligned_f64(buf)[start + 1], 0.0)
    # where() keeps bit patterns (it selects, never computes), so the stale NaN survives.
    t = np.zeros(m, np.int64)
    if has_t.any():
        at = tpos[has_t] + 1
        want = end[has_t] - at  # the varint must fill the rest of the message exactly
        if (want < 1).any() or (want > 10).any():
            return None
        width = int(want[0])
        # Timestamps of one scrape share their width: read just that many bytes of each.
        decoded = varints(buf, at, width if (want == width).all() else 10)
        if decoded is None:
            return None
        val, vlen = decoded
        if (vlen != want).any():
            return None
        t[has_t] = val.view(np.int64)  # two's complement: negative timestamps are 10 bytes
    return t, v


_LABEL_PAD = bytes(256)  # past a malformed record's end (or a record's fixed-width window), reads stay inside


class AsciiLabels(NamedTuple):
    """The label records of many series, laid end to end in ``flat`` (``buf`` views it; the first ``used`` bytes
    are the records, a pad follows): record i starts at ``rec[i]`` (series-major, sender order), its name is
    ``n[i]`` bytes at ``rec[i] + 4``, its value ``v[i]`` bytes at ``rec[i] + 6 + n[i]``."""

    flat: bytes
    buf: np.ndarray
    used: int
    rec: np.ndarray
    n: np.ndarray
    v: np.ndarray


def ascii_label_records(keys: list[bytes], counts: np.ndarray) -> AsciiLabels | None:
    """Where every label record of these series (``keys``: each series' label records as sent; ``counts``: how
    many each holds) sits, when every byte is below 0x80 (all text ASCII, so valid UTF-8 and one char per byte;
    every length one byte) and every label is [0x0A len][0x0A n name][0x12 v value], as Go's and Python's
    encoders write it. None otherwise: the caller parses with the generated code, which handles every layout
    and checks UTF-8."""
    total = int(counts.sum())
    flat = b"".join([*keys, _LABEL_PAD])
    buf = np.frombuffer(flat, np.uint8)
    used = len(flat) - len(_LABEL_PAD)
    if (buf[:used] >= 0x80).any():
        return None
    lengths = np.fromiter(map(len, keys), np.int64, len(keys))
    ends = np.cumsum(lengths)
    pos = ends - lengths
    first = np.cumsum(counts) - counts  # output index of each series' first label
    rec = np.empty(total, np.int64)  # where each label record starts
    for k in range(int(counts.max()) if len(counts) else 0):  # the k-th label of every series at once
        act = np.flatnonzero(counts > k)
        p = pos[act]
        if (p >= ends[act]).any():
            return None
        rec[first[act] + k] = p
        pos[act] = p + 2 + buf[p + 1]
    if not (pos == ends).all():
        return None  # the records must fill each series' label bytes exactly
    n = buf[rec + 3].astype(np.int64)
    v = buf[rec + 5 + n].astype(np.int64)
    ok = (buf[rec] == TAG_LABEL) & (buf[rec + 2] == 0x0A) & (buf[rec + 4 + n] == 0x12) & (buf[rec + 1] == 4 + n + v)
    if not ok.all():
        return None
    return AsciiLabels(flat, buf, used, rec, n, v)


def label_strings(keys: list[bytes], counts: np.ndarray) -> tuple[list[str], list[str]] | None:
    """Names and values of all labels of these series, in order, as ``str``, for the layout
    ``ascii_label_records`` takes (None otherwise); a parse of the generated code made a message object per
    label to read two strings from it (about 1 us a label)."""
    found = ascii_label_records(keys, counts)
    if found is None:
        return None
    flat, _, used, rec, n, v = found
    text = flat[:used].decode("ascii")
    name_at, value_at = rec + 4, rec + 6 + n
    names = list(map(text.__getitem__, map(slice, name_at.tolist(), (name_at + n).tolist())))
    values = list(map(text.__getitem__, map(slice, value_at.tolist(), (value_at + v).tolist())))
    return names, values
