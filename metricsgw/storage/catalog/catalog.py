"""The series table in memory: every known series, its labels and its time span.

Labels are dictionary-encoded per metric: for each (metric, label name) an int32 code column
over a small list of distinct values (code 0 = label absent = ""). A matcher is evaluated once
per distinct value and broadcast to all rows through the codes, so selecting series costs
numpy work per row, never Python work per row. This also keeps memory near 40-60 bytes per
series instead of Python tuples of strings (kilobytes).
"""

from __future__ import annotations

import itertools
import threading
from typing import Iterator

import numpy as np

from ... import npsort
from ...model import METRIC_NAME, Labels, Matcher
from .catalog_bulk import add_keys
from .metric_table import Column, Grow, MetricTable
from .sorted_search import search_sorted

# CPython's sizes, for nbytes: a dict entry with its int key and value; a str and its index entry beside its
# characters; a cached label set (a tuple of shared pairs)
_DICT_ENTRY_BYTES = 100
_VALUE_BYTES = 120
_LABELS_BYTES = 120


class Catalog:
    """sid -> dense index -> (metric table, row); time span per series for windowed metadata calls."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # sid -> dense index of the series the sorted index below does not cover yet (it may also hold some it does
        # cover, until trimmed). No dict of every series: at 2.7M series one took ~270 MB in each process and 1 s to
        # build after a restart.
        self._tail: dict[int, int] = {}
        self.sids = Grow(np.int64)
        self.first_ms = Grow(np.int64, np.iinfo(np.int64).max)
        self.last_ms = Grow(np.int64, np.iinfo(np.int64).min)
        self.metric_idx = Grow(np.int32)  # dense index -> index into self.tables
        self.tables: list[MetricTable] = []
        self.metrics: dict[str, MetricTable] = {}
        # A sorted copy of sids -> dense index for vectorised lookups, covering the first dense indexes;
        # series added since are found through the tail dict (one C-level pass) until they are a few percent,
        # then merged in (``_extend_index``: a linear merge, where sorting every sid again made a first
        # scrape of 200k new series re-sort them all every second request).
        # One tuple, replaced whole: query threads, the event loop and the flusher all read it, and a
        # reader must never pair the sids of one build with the indexes of another. A reader takes the tail
        # before the index: the index only grows, and a trimmed tail keeps every series the index then lacked.
        self._index: tuple[np.ndarray, np.ndarray] = (np.empty(0, np.int64), np.empty(0, np.int64))
        # Caches the reader fills, tied to this catalog's dense indexes (a rebuilt catalog starts empty):
        self.labels_of: dict[int, Labels] = {}  # dense index -> Labels (series labels never change)
        self.label_ranks: dict[str, np.ndarray] = {}  # metric -> label rank of each table row
        self._source: tuple[int, np.ndarray] | None = None  # made by without(): (rows read, their old indexes)

    def __len__(self) -> int:
        return self.sids.n

    def adopt_order(self, order: np.ndarray) -> bool:
        """The sorted index from ``order`` (the dense indexes in sid order, as a checkpoint saved it), so the first
        lookup does not sort every sid (0.6 s at 2.7M series, on a restart's way to ready). Refused (False) unless
        it orders every sid strictly: a wrong index would find wrong series."""
        n = self.sids.n
        if len(order) != n or (n and (order.min() < 0 or order.max() >= n)):
            return False
        order = order.astype(np.int64)
        sids = self.sids.a[:n][order]
        if n > 1 and not (sids[1:] > sids[:-1]).all():
            return False
        self._index = (sids, order)
        return True

    def index_loaded(self) -> None:
        """(A catalog loaded whole, before anyone reads it: a rebuild.) Index every series now."""
        self._index = self._extend_index(np.empty(0, np.int64), np.empty(0, np.int64), self.sids.n)

    def note_added(self, sids: np.ndarray, g0: int) -> None:
        """(Holding the lock, before the series' rows are filled in.) Series registered at dense indexes g0...: into
        the tail dict, which is trimmed of the series the index came to cover once they are most of it."""
        tail = self._tail
        tail.update(zip(sids.tolist(), range(g0, g0 + len(sids))))
        covered = len(self._index[0])
        if len(tail) > 2 * (g0 + len(sids) - covered) + 1024:  # a new dict: a reader holding the old one still finds
            self._tail = {sid: g for sid, g in tail.items() if g >= covered}

    def index_of(self, sid: int) -> int:
        """The dense index of one sid, -1 if this catalog does not hold it."""
        return int(self.lookup(np.array([sid], np.int64))[0])

    def __contains__(self, sid: int) -> bool:
        return self.index_of(sid) >= 0

    def add(self, sid: int, labels: Labels) -> bool:
        """Register a series; False if it was known already."""
        with self._lock:
            if self.index_of(sid) >= 0:
                return False
            g = self.sids.n
            self.sids.append(sid)
            self.note_added(np.array([sid], np.int64), g)
            self.first_ms.append(np.iinfo(np.int64).max, np.iinfo(np.int64).max)
            self.last_ms.append(np.iinfo(np.int64).min, np.iinfo(np.int64).min)
            name = dict(labels).get(METRIC_NAME, "")
            table = self.metrics.get(name)
            if table is None:
                table = self.metrics[name] = MetricTable(name, len(self.tables))
                self.tables.append(table)
            table.add(g, labels)
            self.metric_idx.append(table.index)
            return True

    def add_many(self, series: list[tuple[int, Labels]]) -> list[tuple[int, Labels]]:
        """Register many series at once; returns the ones that were not known (first occurrence)."""
        with self._lock:
            known = self.lookup(np.fromiter((sid for sid, _ in series), np.int64, len(series))) >= 0
            fresh = list({sid: (sid, labels) for (sid, labels), k in zip(series, known.tolist()) if not k}.values())
            n = len(fresh)
            if not n:
                return fresh
            g0 = self.sids.n
            sids = np.fromiter((sid for sid, _ in fresh), np.int64, n)
            groups: dict[str, list[int]] = {}
            for k, (_, labels) in enumerate(fresh):
                name = labels[0][1] if labels and labels[0][0] == METRIC_NAME else dict(labels).get(METRIC_NAME, "")
                groups.setdefault(name, []).append(k)
            table_of = np.empty(n, np.int32)
            for name, ks in groups.items():
                table = self.metrics.get(name)
                if table is None:
                    table = self.metrics[name] = MetricTable(name, len(self.tables))
                    self.tables.append(table)
                table_of[ks] = table.index
            # Same order as add(): span columns and the dict, then the tables, then metric_idx.
            self.sids.extend(sids)
            self.first_ms.extend(np.full(n, np.iinfo(np.int64).max, np.int64))
            self.last_ms.extend(np.full(n, np.iinfo(np.int64).min, np.int64))
            self.note_added(sids, g0)
            for name, ks in groups.items():
                self.metrics[name].add_many(np.asarray(ks, np.int64) + g0, [fresh[k][1] for k in ks])
            self.metric_idx.extend(table_of)
            return fresh

    def add_keys(self, sids: np.ndarray, keys: list[bytes]) -> np.ndarray:
        """Register many series given as ``model.series_key`` bytes, with no Python work per series
        (start-up: the series table and the WAL's new series, a million at once). Same result as
        ``add_many``; returns the positions (into ``sids``) of the series that were not known."""
        with self._lock:
            return add_keys(self, np.asarray(sids, np.int64), keys)

    def known(self, sids: np.ndarray) -> np.ndarray:
        """Which of these sids are registered."""
        return self.lookup(sids) >= 0

    def dense(self, sids: np.ndarray) -> np.ndarray:
        """Dense indexes of known sids (vectorised); KeyError for an unknown one."""
        g = self.lookup(sids)
        if len(g) and g.min() < 0:
            raise KeyError(int(np.asarray(sids)[np.flatnonzero(g < 0)[0]]))
        return g

    def lookup(self, sids: np.ndarray) -> np.ndarray:
        """Dense indexes of sids, -1 for a sid this catalog does not hold (vectorised; series added since
        the sorted index was built are looked up in the dict, in one C-level pass)."""
        sids = np.asarray(sids, np.int64)
        tail = self._tail  # before the index (see _index)
        idx_sids, idx_g = self._index
        n = self.sids.n
        if n - len(idx_sids) > max(1024, n // 32):
            idx_sids, idx_g = self._index = self._extend_index(idx_sids, idx_g, n)
        if len(idx_sids):
            pos = search_sorted(idx_sids, sids)
            found = idx_sids[pos] == sids
            g = np.where(found, idx_g[pos], -1)
        else:
            found, g = np.zeros(len(sids), bool), np.full(len(sids), -1, np.int64)
        if not found.all() and len(idx_sids) < n:  # a sid the index does not cover may be one added since
            miss = np.flatnonzero(~found)
            g[miss] = np.fromiter(map(tail.get, sids[miss].tolist(), itertools.repeat(-1)), np.int64, len(miss))
        return g

    def _extend_index(self, idx_sids: np.ndarray, idx_g: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The index with dense indexes len(idx_sids)..n-1 merged in: the new ones sorted, then the two
        sorted runs merged (a stable sort finds both runs and merges them in one linear pass)."""
        m = len(idx_sids)
        added = self.sids.a[m:n]
        order = np.argsort(added)
        sids = np.concatenate([idx_sids, added[order]])
        g = np.concatenate([idx_g, order.astype(np.int64) + m])
        merged = np.argsort(sids, kind="stable")
        return sids[merged], g[merged]

    def touch(self, sids: np.ndarray, t: np.ndarray) -> None:
        """Extend each series' time span to cover these samples."""
        if len(sids):
            self.touch_dense(self.dense(sids), t)

    def touch_dense(self, g: np.ndarray, t: np.ndarray) -> None:
        np.minimum.at(self.first_ms.a, g, t)
        np.maximum.at(self.last_ms.a, g, t)

    def touch_spans(self, sid: np.ndarray, min_t: np.ndarray, max_t: np.ndarray) -> None:
        """A spans file's (parquet_io.read_spans) into the time spans of the series this catalog holds. A flush
        writes each series once, sorted: then plain indexing does what ``ufunc.at`` does, at a quarter of its time
        (0.11 against 0.45 s for 2M series), and the lookup needs no sort."""
        g = self.lookup(sid)
        known = g >= 0
        g, min_t, max_t = g[known], min_t[known], max_t[known]
        if (sid[1:] > sid[:-1]).all():
            self.first_ms.a[g] = np.minimum(self.first_ms.a[g], min_t)
            self.last_ms.a[g] = np.maximum(self.last_ms.a[g], max_t)
        else:
            np.minimum.at(self.first_ms.a, g, min_t)
            np.maximum.at(self.last_ms.a, g, max_t)

    def labels(self, sid: int) -> Labels:
        g = self.index_of(sid)
        if g < 0:
            raise KeyError(sid)
        table = self.tables[self.metric_idx.a[g]]
        row = int(np.searchsorted(table.gidx.view, g))
        return table.labels_many(np.array([row]))[0]

    def metric_tables(self, matchers: list[Matcher]) -> Iterator[MetricTable]:
        names = [m for m in matchers if m.name == METRIC_NAME]
        if names and names[0].op == "=" and len(names) == 1:
            t = self.metrics.get(names[0].value)
            if t is not None:
                yield t
            return
        for name, table in list(self.metrics.items()):
            if all(m.matches(name) for m in names):
                yield table

    def select(self, matchers: list[Matcher], start_ms: int | None = None, end_ms: int | None = None,
               check=None) -> Iterator[tuple[MetricTable, np.ndarray]]:
        """Yield (table, rows) of series matching all matchers and overlapping [start, end]."""
        for table in self.metric_tables(matchers):
            if check is not None:
                check("series selection")
            n = len(table)
            mask = table.mask(matchers)
            if start_ms is not None and end_ms is not None:
                g = table.gidx.view[:n]
                mask &= (self.last_ms.a[g] >= start_ms) & (self.first_ms.a[g] <= end_ms)
            rows = np.flatnonzero(mask)
            if len(rows):
                yield table, rows

    def metric_rank_codes(self, g: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """Per dense index, the rank of its metric name among all names (int32), and the sorted names:
        sorting by the code sorts by metric name, and (codes, names) is an Arrow dictionary array."""
        names = [t.name for t in self.tables]
        order = sorted(range(len(names)), key=names.__getitem__)
        rank = np.empty(len(names), np.int32)
        rank[order] = np.arange(len(names), dtype=np.int32)
        return rank[self.metric_idx.a[g]], [names[i] for i in order]

    def active_count(self, since_ms: int, table: MetricTable | None = None) -> int:
        if table is None:
            return int(np.count_nonzero(self.last_ms.view >= since_ms))
        return int(np.count_nonzero(self.last_ms.a[table.gidx.view] >= since_ms))

    def nbytes(self) -> int:
        """About the bytes the catalog holds: its columns, the sid index and tail dict, and label values at CPython's sizes, and
        the label sets and ranks readers cached (what /metrics shows and the archive's bound counts)."""
        n = len(self)
        size = sum(c.a.nbytes for c in (self.sids, self.first_ms, self.last_ms, self.metric_idx))
        size += sum(a.nbytes for a in self._index) + len(self._tail) * _DICT_ENTRY_BYTES
        for table in list(self.tables):
            size += table.gidx.a.nbytes
            for col in list(table.columns.values()):
                size += col.codes.a.nbytes + col.value_bytes(_VALUE_BYTES)
        size += len(self.labels_of) * _LABELS_BYTES + sum(r.nbytes for r in list(self.label_ranks.values()))
        return size

    def without(self, drop: np.ndarray) -> "Catalog":
        """A new catalog of the series not in ``drop`` (a mask over the first ``len(drop)`` dense
        indexes), in the same order, with each label column's values cut to those still used: memory
        follows the series kept (pods that are gone take their label values with them). Numpy work
        per series, and safe while appends go on: it reads only those first rows. Series added and
        spans moved meanwhile are brought over by ``catch_up``, under the writers' lock."""
        n = len(drop)
        keep = ~np.asarray(drop, bool)
        src = np.flatnonzero(keep)  # old dense index of each new one
        new = Catalog()
        new._source = (n, src)
        remap = np.full(n, -1, np.int64)
        remap[src] = np.arange(len(src))
        new.sids.extend(self.sids.a[src])
        new.first_ms.extend(self.first_ms.a[src])
        new.last_ms.extend(self.last_ms.a[src])
        new.index_loaded()
        table_remap = np.full(max(len(self.tables), 1), -1, np.int32)
        for table in list(self.tables):
            g = table.gidx.view
            g = g[: int(np.searchsorted(g, n))]  # its rows among the first n series (gidx ascends)
            rows = np.flatnonzero(keep[g])
            if not len(rows):
                continue
            kept = new.metrics[table.name] = MetricTable(table.name, len(new.tables))
            new.tables.append(kept)
            table_remap[table.index] = kept.index
            for name, col in list(table.columns.items()):
                _keep_column(kept, name, col, rows, len(g))
            kept.gidx.extend(remap[g[rows]])
            rank = self.label_ranks.get(table.name)
            if rank is not None and len(rank) == len(g):  # label order of the rows kept is unchanged
                new.label_ranks[table.name] = np.argsort(np.argsort(rank[rows], kind="stable")).astype(np.int64)
        new.metric_idx.extend(table_remap[self.metric_idx.a[src]])
        new.labels_of = {int(remap[g]): lb for g, lb in list(self.labels_of.items()) if g < n and remap[g] >= 0}
        return new

    def catch_up(self, new: "Catalog") -> None:
        """Bring ``new`` (made by ``without`` while appends went on) up to date; call it under the lock
        appends take, then swap. Series added since are added, every span copied again."""
        n, src = new._source
        late = self.sids.n
        if late > n:
            new.add_many([(int(self.sids.a[g]), lb) for g, lb in zip(range(n, late), self.labels_at(range(n, late)))])
        src = np.concatenate([src, np.arange(n, late)])
        new.first_ms.a[: len(src)] = self.first_ms.a[src]
        new.last_ms.a[: len(src)] = self.last_ms.a[src]

    def labels_at(self, gs) -> list[Labels]:
        """The label sets of these dense indexes."""
        gs = np.asarray(list(gs), np.int64)
        out: list = [None] * len(gs)
        tidx = self.metric_idx.a[gs]
        for ti in npsort.unique(tidx).tolist():
            at = np.flatnonzero(tidx == ti)
            table = self.tables[ti]
            for i, lb in zip(at.tolist(), table.labels_many(np.searchsorted(table.gidx.view, gs[at]))):
                out[i] = lb
        return out


def _keep_column(kept: MetricTable, name: str, col: Column, rows: np.ndarray, n_rows: int) -> None:
    """The codes of ``rows`` of a column, into a column of ``kept`` holding only the values they use."""
    codes = np.zeros(n_rows, np.int32)
    have = min(col.codes.n, n_rows)
    codes[:have] = col.codes.a[:have]
    codes = codes[rows]
    present = np.zeros(len(col.values), bool)
    present[codes] = True
    present[0] = False
    used = np.flatnonzero(present)
    if not len(used):
        return  # no series kept has this label
    if len(used) == len(col.values) - 1:  # every value still used: share them (both only ever append)
        kept.columns[name] = Column(col.values, col.index)
        kept.columns[name].codes.extend(codes)
        return
    values = [""] + list(map(col.values.__getitem__, used.tolist()))
    fresh = kept.columns[name] = Column(values)
    to_new = np.zeros(len(col.values), np.int32)
    to_new[used] = np.arange(1, len(used) + 1, dtype=np.int32)
    fresh.codes.extend(to_new[codes])
