"""rate/increase/delta over stored native histograms that share a bucket layout, as rows of a matrix.

A series' histograms nearly always share one layout (a latency histogram gains a bucket rarely), and
histogramRate over a window of same-layout histograms is, bucket by bucket, the last histogram minus the first,
plus the one before each counter reset. native_math does that on a dict of buckets per histogram, which made
decoding each stored histogram into dicts most of a histogram rate's time (bench/RESULTS.md, native
histograms). Here each layout's histograms are rows of a float64 matrix (zero count, count, sum, then each
bucket's absolute count, positive then negative), a window's increase is numpy on its rows, and the result
becomes a FloatHistogram only at the end.

Bit for bit native_math's answer: the same IEEE operations in the same order (``a + (-c)``, what its subtraction
does, equals ``a - c``; resets are added back in time order), and the same reset test (a smaller count, zero
count or bucket). Only layouts native_math treats as plain bucket-by-bucket arithmetic take this path: an
exponential layout with no bucket at or inside the zero threshold (``add`` leaves such buckets of the subtrahend
out, and ``detect_reset`` skips them), or custom buckets with no negative side (``add`` leaves their zero count
alone, and it is never shown nor counted). A window across a layout change, or over histograms computed by the
query (a binary operator's, a sum's), keeps native_math's path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import histogram_scalars
from .native import CUSTOM_BUCKETS_SCHEMA, GAUGE, Decoded, FloatHistogram, bound, bucket_indexes, spans_of

ZERO, COUNT, SUM = 0, 1, 2  # the columns before the buckets
BUCKETS = 3


@dataclass(frozen=True)
class Layout:
    schema: int
    zero_threshold: float
    pos_spans: tuple[tuple[int, int], ...]
    neg_spans: tuple[tuple[int, int], ...]
    custom_values: tuple[float, ...]

    @property
    def custom(self) -> bool:
        return self.schema == CUSTOM_BUCKETS_SCHEMA

    def plain(self) -> bool:
        """Whether native_math's arithmetic on this layout is plain bucket-by-bucket arithmetic (module docstring)."""
        if self.custom:
            return not self.neg_spans
        return all(bound(i, self.schema) > self.zero_threshold
                   for i in bucket_indexes(list(self.pos_spans)) + bucket_indexes(list(self.neg_spans)))


class _Rows:
    """One layout's histograms as matrix rows (filled message by message, then made one array)."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.n_pos = sum(length for _, length in layout.pos_spans)
        self.scalars: list[tuple[float, float, float]] = []
        self.int_rows: list[int] = []  # rows whose buckets are integer deltas (summed up below)
        self.int_deltas: list[list[int]] = []
        self.float_rows: list[int] = []
        self.float_counts: list[list[float]] = []
        self.matrix: np.ndarray | None = None
        self.pos_idx = np.asarray(bucket_indexes(list(layout.pos_spans)), np.int64)
        self.neg_idx = np.asarray(bucket_indexes(list(layout.neg_spans)), np.int64)

    def add(self, m) -> int:
        row = len(self.scalars)
        is_float = m.WhichOneof("count") == "count_float"
        zero = m.zero_count_float if m.WhichOneof("zero_count") == "zero_count_float" else float(m.zero_count_int)
        self.scalars.append((zero, m.count_float if is_float else float(m.count_int), m.sum))
        if len(m.positive_counts) or len(m.negative_counts):
            self.float_rows.append(row)
            self.float_counts.append([*m.positive_counts, *m.negative_counts])
        else:
            self.int_rows.append(row)
            self.int_deltas.append([*m.positive_deltas, *m.negative_deltas])
        return row

    def finish(self) -> None:
        width = BUCKETS + len(self.pos_idx) + len(self.neg_idx)
        out = np.empty((len(self.scalars), width), np.float64)
        out[:, :BUCKETS] = self.scalars
        if self.int_rows:
            # Go's ToFloat: each bucket's count the running sum of its side's int64 deltas, then made a float64
            deltas = np.asarray(self.int_deltas, np.int64).reshape(len(self.int_rows), -1)
            absolute = np.empty(deltas.shape, np.int64)
            np.cumsum(deltas[:, :self.n_pos], axis=1, out=absolute[:, :self.n_pos])
            np.cumsum(deltas[:, self.n_pos:], axis=1, out=absolute[:, self.n_pos:])
            out[np.asarray(self.int_rows), BUCKETS:] = absolute
        if self.float_rows:
            out[np.asarray(self.float_rows), BUCKETS:] = np.asarray(self.float_counts, np.float64).reshape(
                len(self.float_rows), -1)
        self.matrix = out
        self.scalars = self.int_deltas = self.float_counts = []  # type: ignore[assignment]


class WindowRates:
    """The stored histograms a range vector's samples index (``hists``, positions' values ``v``), by layout."""

    def __init__(self, hists: Decoded, v: np.ndarray) -> None:
        js = v.astype(np.int64)
        needed = np.unique(js)
        self.layout_of = np.full(len(hists), -1, np.int64)  # per histogram: its layout's number (-1: not plain)
        self.row_of = np.zeros(len(hists), np.int64)  # per histogram: its row in its layout's matrix
        self.layouts: list[_Rows] = []
        self._numbers: dict[Layout, int] = {}  # -1: not plain
        got = histogram_scalars.rows(*hists.stored(), needed) if isinstance(hists, Decoded) else None
        if got is not None:
            self._from_columns(got, needed)
        else:
            self._from_messages(hists, needed.tolist())
        self.pos_layout = self.layout_of[js]  # per sample position
        self.pos_row = self.row_of[js]
        # a change of layout between positions p - 1 and p (or a layout not plain), counted: a window [lo, hi)
        # is uniform when none falls in (lo, hi) and its first position's layout is plain
        change = np.ones(len(js), np.int64)
        change[1:] = (self.pos_layout[1:] != self.pos_layout[:-1]) | (self.pos_layout[1:] < 0)
        self._changes = np.cumsum(change)
        self._resets: np.ndarray | None = None

    def _number(self, layout: Layout) -> int:
        """The layout's number (-1: not plain), a new one the first time it is seen."""
        number = self._numbers.get(layout)
        if number is None:
            number = self._numbers[layout] = len(self.layouts) if layout.plain() else -1
            if number >= 0:
                self.layouts.append(_Rows(layout))
        return number

    def _from_messages(self, hists: Decoded, needed: list[int]) -> None:
        """Each histogram parsed (until the compiled kernel has loaded)."""
        messages = hists.messages
        for j in needed:
            m = messages[j]
            number = self._number(Layout(m.schema, m.zero_threshold,
                                         tuple((s.offset, s.length) for s in m.positive_spans),
                                         tuple((s.offset, s.length) for s in m.negative_spans), tuple(m.custom_values)))
            if number >= 0:
                self.layout_of[j] = number
                self.row_of[j] = self.layouts[number].add(m)
        for rows in self.layouts:
            rows.finish()

    def _from_columns(self, c: "histogram_scalars.Rows", needed: np.ndarray) -> None:
        """The histograms read by the compiled pass: a layout worked out once per run of histograms sharing it
        (``c.same``), each layout's matrix gathered from the flat values. One the pass could not read (an
        encoding other than the usual one) counts as not plain: its windows take native_math's path, which parses
        it."""
        heads = np.flatnonzero(~c.same)
        number_of_run = np.full(len(heads), -1, np.int64)
        for r, i in enumerate(heads.tolist()):
            if not c.ok[i]:
                continue
            s0, n_pos, n_neg = int(c.starts[i, 0]), int(c.sizes[i, 0]), int(c.sizes[i, 1])
            offs, lens = c.span_offset[s0:s0 + n_pos + n_neg].tolist(), c.span_length[s0:s0 + n_pos + n_neg].tolist()
            v0 = int(c.starts[i, 2])
            number_of_run[r] = self._number(Layout(int(c.schema[i]), float(c.zero_threshold[i]),
                                                   tuple(zip(offs[:n_pos], lens[:n_pos])),
                                                   tuple(zip(offs[n_pos:], lens[n_pos:])),
                                                   tuple(c.custom_values[v0:v0 + int(c.sizes[i, 4])].tolist())))
        number = number_of_run[np.cumsum(~c.same) - 1] if len(needed) else np.zeros(0, np.int64)
        number[~c.ok] = -1
        for k, rows in enumerate(self.layouts):
            members = np.flatnonzero(number == k)
            width = len(rows.pos_idx) + len(rows.neg_idx)
            matrix = np.empty((len(members), BUCKETS + width), np.float64)
            matrix[:, ZERO], matrix[:, COUNT], matrix[:, SUM] = (c.zero_count[members], c.count[members],
                                                                 c.sum[members])
            matrix[:, BUCKETS:] = c.values[c.starts[members, 1][:, None] + np.arange(width)]
            rows.matrix = matrix
            self.layout_of[needed[members]] = k
            self.row_of[needed[members]] = np.arange(len(members))

    def uniform(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Which windows [lo, hi) (of 2 samples or more) hold histograms of one plain layout."""
        if not len(lo):
            return np.zeros(0, bool)
        return (self._changes[hi - 1] == self._changes[lo]) & (self.pos_layout[lo] >= 0)

    def _reset_at(self) -> np.ndarray:
        """Per position p: a counter reset between the histograms at p - 1 and p (both of one plain layout)."""
        if self._resets is None:
            out = np.zeros(len(self.pos_layout), bool)
            for number, rows in enumerate(self.layouts):
                at = np.flatnonzero(self.pos_layout[1:] == number) + 1
                at = at[self.pos_layout[at - 1] == number]
                if not len(at):
                    continue
                cols = np.arange(0 if not rows.layout.custom else COUNT, rows.matrix.shape[1])
                cols = cols[cols != SUM]
                curr, prev = rows.matrix[self.pos_row[at]][:, cols], rows.matrix[self.pos_row[at - 1]][:, cols]
                out[at] = (curr < prev).any(axis=1)
            self._resets = out
        return self._resets

    def increase(self, lo: np.ndarray, hi: np.ndarray, is_counter: bool, null_first_reset: bool
                 ) -> list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        """histogramRate of each uniform window [lo, hi), not yet extrapolated: per layout that has any,
        (its number, which of the windows, their increases as rows, the first histogram's count of each)."""
        layout = self.pos_layout[lo]
        resets = self._reset_at() if is_counter else None
        reset_count = np.concatenate([[0], np.cumsum(resets)]) if resets is not None else None
        out = []
        for number, rows in enumerate(self.layouts):
            which = np.flatnonzero(layout == number)
            if not len(which):
                continue
            m = rows.matrix
            first, last = self.pos_row[lo[which]], self.pos_row[hi[which] - 1]
            result = m[last] - m[first]
            if reset_count is not None:
                w_lo, w_hi = lo[which], hi[which]
                # resets at positions lo + 1 .. hi - 1
                with_resets = np.flatnonzero(reset_count[w_hi] - reset_count[w_lo + 1] > 0)
                for w in with_resets.tolist():
                    a, b = int(w_lo[w]), int(w_hi[w])
                    positions = (np.flatnonzero(resets[a + 1:b]) + a + 1).tolist()
                    if null_first_reset and positions[0] == a + 1:
                        # Prometheus 3 counts from an empty histogram: nothing taken from the last
                        acc = m[self.pos_row[b - 1]].copy()
                        positions = positions[1:]
                    else:
                        acc = result[w]
                    for p in positions:
                        acc += m[self.pos_row[p - 1]]
                    result[w] = acc
            out.append((number, which, result, m[first, COUNT]))
        return out

    def histograms(self, number: int, increases: np.ndarray, factor: np.ndarray) -> list[FloatHistogram]:
        """Each increase of layout ``number`` scaled by its factor, as rate's FloatHistogram (empty buckets
        dropped before scaling, as ``compact`` then ``scale``; a gauge, as histogramRate makes it)."""
        rows = self.layouts[number]
        layout, n_pos = rows.layout, len(rows.pos_idx)
        kept = increases[:, BUCKETS:] != 0
        scaled = increases * factor[:, None]
        shapes: dict[bytes, tuple] = {}  # kept buckets -> (positive spans, their columns, negative spans, columns)
        out = []
        for values, keep in zip(scaled.tolist(), kept):
            key = keep.tobytes()
            shape = shapes.get(key)
            if shape is None:
                cols = np.flatnonzero(keep)
                pos, neg = cols[cols < n_pos], cols[cols >= n_pos]
                shape = shapes[key] = (spans_of(rows.pos_idx[pos].tolist()), (pos + BUCKETS).tolist(),
                                       spans_of(rows.neg_idx[neg - n_pos].tolist()), (neg + BUCKETS).tolist())
            pos_spans, pos_cols, neg_spans, neg_cols = shape
            out.append(FloatHistogram(layout.schema, layout.zero_threshold, values[ZERO], values[COUNT], values[SUM],
                                      list(pos_spans), [values[c] for c in pos_cols], list(neg_spans),
                                      [values[c] for c in neg_cols], layout.custom_values, GAUGE))
        return out

