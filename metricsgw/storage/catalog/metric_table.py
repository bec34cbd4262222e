"""One metric's rows of the series table (``MetricTable``) and the numpy columns they are kept in.

Apart from catalog.py so the catalog's bulk loader (catalog_bulk.py) and its checkpoint build tables
without importing the catalog that calls them.
"""

from __future__ import annotations

import bisect
import threading
from operator import itemgetter
from typing import Iterable

import numpy as np
import pyarrow as pa

from ...model import METRIC_NAME, Labels, Matcher
from . import packed_values

_NAME, _VALUE = itemgetter(0), itemgetter(1)  # of a (name, value) pair
_UNPACK_LOCK = threading.Lock()


class Grow:
    """An appendable numpy column (amortised doubling); spare capacity holds ``fill``."""

    __slots__ = ("a", "n", "fill")

    def __init__(self, dtype, fill=0) -> None:
        self.a = np.full(64, fill, dtype=dtype)
        self.n = 0
        self.fill = fill

    @classmethod
    def of(cls, values: np.ndarray, dtype, fill=0) -> "Grow":
        """A column holding a copy of ``values`` (no spare capacity: the first append doubles it)."""
        g = cls.__new__(cls)
        g.a = np.array(values, dtype=dtype)
        g.n = len(g.a)
        g.fill = fill
        return g

    def _reserve(self, need: int) -> None:
        if need > len(self.a):
            grown = np.empty(max(need, 2 * len(self.a)), dtype=self.a.dtype)
            grown[: self.n] = self.a[: self.n]
            grown[self.n:] = self.fill  # the spare only (filling it all first was 0.19 s of a restart at 2.7M)
            self.a = grown

    def append(self, value, fill=0) -> None:
        self._reserve(self.n + 1)
        self.a[self.n] = value
        self.n += 1

    def extend(self, values) -> None:
        need = self.n + len(values)
        self._reserve(need)
        self.a[self.n: need] = values
        self.n = need  # after the values: a concurrent reader never sees unwritten rows

    def pad_to(self, n: int, fill=0) -> None:
        self._reserve(n)
        self.n = max(self.n, n)

    @property
    def view(self) -> np.ndarray:
        return self.a[: self.n]


class Column:
    """One label's distinct values in a metric table (code 0: absent) and each row's code.

    A loaded checkpoint's values stay as it packed them until used, then as Arrow (``codes_of_encoded``: the codes of
    values a restart brings, found without a Python string), and become a list of strings only when something reads
    them (``values``) or a write needs the value -> code dict (``index``)."""

    __slots__ = ("_values", "_packed", "_arrow", "_index", "codes", "__weakref__")  # (value_ids.py follows columns)

    def __init__(self, values: list[str] | None = None, index: dict[str, int] | None = None,
                 packed: bytes | None = None) -> None:
        self._values = None if packed is not None else [""] if values is None else values
        self._packed = packed  # the values as a checkpoint keeps them (packed_values.pack), until first read
        self._arrow: pa.BinaryArray | None = None  # the values as Arrow, while not yet strings
        self._index = {"": 0} if values is None and packed is None else index  # None: made at first use
        self.codes = Grow(np.int32)

    def _unpacked(self) -> pa.BinaryArray:
        """(Holding _UNPACK_LOCK, while the values are not strings.)"""
        if self._arrow is None:
            self._arrow, self._packed = packed_values.unpack(self._packed), None
        return self._arrow

    @property
    def values(self) -> list[str]:
        """The distinct values. A loaded checkpoint's become strings at first use: at 2.7M series parsing every
        column's was 0.5 s of a restart, and most columns wait for a query that names their metric."""
        v = self._values
        if v is None:
            with _UNPACK_LOCK:  # one unpacking: a writer appending to a list another thread then replaced loses it
                v = self._values
                if v is None:
                    v = self._values = packed_values.decode(self._unpacked())
                    self._packed = self._arrow = None
        return v

    def saved_form(self) -> bytes | pa.BinaryArray | None:
        """The values as a checkpoint takes them while they are not strings yet: packed, or as Arrow (neither
        changes in place, so the snapshot taken while appends wait needs no copy, and packing waits for the
        save); None once they are strings."""
        with _UNPACK_LOCK:
            if self._values is not None:
                return None
            return self._packed if self._packed is not None else self._arrow

    def value_bytes(self, per_value: int) -> int:
        """What the values take in memory, strings counted at ``per_value`` each beside their characters (not
        making them strings to count them)."""
        with _UNPACK_LOCK:
            if self._values is None:
                return len(self._packed) if self._packed is not None else self._arrow.nbytes
        values = self._values
        return sum(map(len, values)) + len(values) * per_value

    @property
    def index(self) -> dict[str, int]:
        """value -> code. A loaded checkpoint's is made at the first write that needs it (at 2.7M series, building
        every column's at load was 0.8 s of a restart); writes are serialised by the catalog, reads never use it."""
        if self._index is None:
            values = self.values
            self._index = dict(zip(values, range(len(values))))
        return self._index

    def codes_of_encoded(self, values: pa.BinaryArray) -> np.ndarray:
        """``codes_of`` for distinct values given as key bytes (keysplit.py): on values not yet strings, found and
        appended in Arrow."""
        with _UNPACK_LOCK:
            if self._values is None:
                held = self._unpacked()
                codes = packed_values.positions(values, held)
                new = np.flatnonzero(codes < 0)
                if len(new):
                    codes[new] = np.arange(len(held), len(held) + len(new))
                    self._arrow = pa.concat_arrays([held, values.take(pa.array(new))])
                return codes.astype(np.int32)
        return self.codes_of(packed_values.decode(values))

    def code_of(self, value: str) -> int:
        c = self.index.get(value)
        if c is None:
            c = len(self.values)
            self.values.append(value)
            self.index[value] = c
        return c

    def codes_of(self, values: list[str]) -> np.ndarray:
        """``code_of`` for many distinct values (C-level lookups; new values appended in order)."""
        index = self.index
        new = [v for v in values if v not in index]
        if new:
            index.update(zip(new, range(len(self.values), len(self.values) + len(new))))
            self.values.extend(new)
        return np.fromiter(map(index.__getitem__, values), np.int32, len(values))

    def match_mask(self, m: Matcher, nrows: int) -> np.ndarray:
        ok = np.fromiter((m.matches(v) for v in self.values), dtype=bool, count=len(self.values))
        codes = self.codes.view
        if len(codes) < nrows:  # rows added before this label name existed are absent ("")
            codes = np.concatenate([codes, np.zeros(nrows - len(codes), np.int32)])
        return ok[codes[:nrows]]


class MetricTable:
    """All series of one metric name."""

    def __init__(self, name: str, index: int) -> None:
        self.name = name
        self.index = index  # position in Catalog.tables
        self.gidx = Grow(np.int64)
        self.columns: dict[str, Column] = {}
        self._pair_lists: dict[str, list[tuple[str, str]]] = {}

    def __len__(self) -> int:
        return self.gidx.n

    def add(self, gidx: int, labels: Labels) -> None:
        row = self.gidx.n
        self.gidx.append(gidx)
        for n, v in labels:
            if n == METRIC_NAME:
                continue
            col = self.columns.get(n)
            if col is None:
                col = self.columns[n] = Column()
            col.codes.pad_to(row)
            col.codes.append(col.code_of(v))

    def add_many(self, gidx: np.ndarray, labels_list: list[Labels]) -> None:
        """``add`` for many series. Series of one metric nearly always share their label names,
        so labels are taken column by column (one label position of all series at once) and
        coded with C-level maps; per-label Python work is only for positions that differ."""
        row0 = self.gidx.n
        by_len: dict[int, list[int]] = {}
        for r, labels in enumerate(labels_list):
            by_len.setdefault(len(labels), []).append(r)
        # Codes first, then the row count: a concurrent reader sees either no row or a whole one.
        for rows in by_len.values():
            group = labels_list if len(by_len) == 1 else [labels_list[r] for r in rows]
            rows_abs = np.asarray(rows, np.int64) + row0
            for pairs in zip(*group):
                names = set(map(_NAME, pairs))  # C-level maps: this loop runs once per label
                if len(names) == 1:
                    self._set_codes(names.pop(), rows_abs, list(map(_VALUE, pairs)))
                    continue
                for name in names:
                    sel = [k for k, p in enumerate(pairs) if p[0] == name]
                    self._set_codes(name, rows_abs[sel], [pairs[k][1] for k in sel])
        self.gidx.extend(gidx)

    def _set_codes(self, name: str, rows: np.ndarray, values: list[str]) -> None:
        if name == METRIC_NAME:
            return
        col = self.columns.get(name)
        if col is None:
            col = self.columns[name] = Column()
        index = col.index
        for v in dict.fromkeys(values):  # new distinct values only get a Python step
            if v not in index:
                index[v] = len(col.values)
                col.values.append(v)
        codes = np.fromiter(map(index.__getitem__, values), np.int32, len(values))
        col.codes.pad_to(int(rows.max()) + 1)
        col.codes.a[rows] = codes

    def mask(self, matchers: Iterable[Matcher]) -> np.ndarray:
        n = len(self)
        mask = np.ones(n, dtype=bool)
        for m in matchers:
            if m.name == METRIC_NAME:
                continue
            col = self.columns.get(m.name)
            if col is None:
                if not m.matches(""):
                    return np.zeros(n, dtype=bool)
                continue
            mask &= col.match_mask(m, n)
            if not mask.any():
                break
        return mask

    def labels_many(self, rows: np.ndarray) -> list[Labels]:
        """The label sets of these rows, column by column: rows are grouped by which labels they
        have (nearly always one group), and each group's label tuples are zipped from per-column
        lists of shared (name, value) pairs -- C-level work per row, and one pair object per
        distinct value instead of one per row."""
        rows = np.asarray(rows, np.int64)
        if not len(rows):
            return []
        names = sorted(self.columns)
        codes = []
        for n in names:
            c = self.columns[n].codes.view
            codes.append(np.where(rows < len(c), c[np.minimum(rows, max(len(c) - 1, 0))], 0) if len(c)
                         else np.zeros(len(rows), np.int32))
        present = np.stack([c != 0 for c in codes], axis=1) if names else np.zeros((len(rows), 0), bool)
        patterns, which = np.unique(present, axis=0, return_inverse=True)
        which = which.reshape(-1)
        name_pair = (METRIC_NAME, self.name)
        out: list[Labels] = [()] * len(rows)
        for p, pattern in enumerate(patterns):
            sel = np.flatnonzero(which == p) if len(patterns) > 1 else np.arange(len(rows))
            cols = [list(map(self._pairs(n).__getitem__, codes[j][sel].tolist()))
                    for j, n in enumerate(names) if pattern[j]]
            kept = [n for j, n in enumerate(names) if pattern[j]]
            cols.insert(bisect.bisect_left(kept, METRIC_NAME), [name_pair] * len(sel))
            for i, lb in zip(sel.tolist(), zip(*cols)):
                out[i] = lb
        return out

    def _pairs(self, name: str) -> list[tuple[str, str]]:
        """(name, value) for each code of a column, built once per new value."""
        col = self.columns[name]
        cache = self._pair_lists.setdefault(name, [])
        if len(cache) < len(col.values):
            cache.extend((name, v) for v in col.values[len(cache):])
        return cache
