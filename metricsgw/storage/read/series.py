"""Series reads: selections, label names and values, cardinality figures and metric metadata, all from the
catalog (storage/catalog/), never from samples.

Each call reads ``book.catalog`` once: retention may replace it with a smaller one while a query runs, and a
query must not mix the dense indexes of two catalogs. A call whose window reaches back before the series the head
window forgot (``book.forgotten_until``) reads the archive too (catalog/archive.py), each series once; cardinality
figures are the catalog's alone (the series of the head window, as Prometheus' head counts them) unless asked for a
window, which they then count across every partition, the archive's series too.
"""

from __future__ import annotations

import numpy as np

from ... import npsort
from ...limits.context import QueryContext
from ...model import METRIC_NAME, Matcher
from ..batch import SeriesSet
from ..catalog import stats
from ..catalog.archive import Archive
from ..catalog.book import CatalogBook


class SeriesQuerier:
    def __init__(self, book: CatalogBook, archive: Archive, metadata_by_metric: dict) -> None:
        self.book = book
        self.archive = archive
        self.metadata_by_metric = metadata_by_metric  # Storage's, filled by appends and replay

    def select_series(self, matchers: list[Matcher], start_ms: int | None, end_ms: int | None,
                      ctx: QueryContext | None = None, limit: int | None = None,
                      among: np.ndarray | None = None) -> SeriesSet:
        """``among`` (sorted sids): only these are selected, charged and given labels (a head read: the
        series held in memory, out of a catalog that may hold many more; the head window never forgets them)."""
        cat = self.book.catalog
        archive = None if among is not None else self.archive.catalog_for(start_ms, ctx, end_ms, matchers)
        if archive is not None:
            return self._select_both(cat, archive, matchers, start_ms, end_ms, ctx, limit)
        ids: list[np.ndarray] = []
        labels: list = []
        total = 0
        check = ctx.check if ctx else None
        selected = cat.select(matchers, start_ms, end_ms, check)
        if limit is not None:  # the first ``limit`` in label order (as Prometheus cuts): metrics by name
            selected = sorted(selected, key=lambda table_rows: table_rows[0].name)
        for table, rows in selected:
            if among is not None:
                rows = rows[npsort.members(cat.sids.a[table.gidx.view[rows]], among)]
                if not len(rows):
                    continue
            rows = rows[np.argsort(self._label_rank(cat, table)[rows], kind="stable")]  # label order
            if limit is not None and total + len(rows) > limit:
                rows = rows[: limit - total]
            if ctx is not None:
                ctx.charge_series(len(rows), "series selection")
            g = table.gidx.view[rows]
            ids.append(cat.sids.a[g])
            labels.extend(self._labels(cat, table, rows, g))
            total += len(rows)
            if limit is not None and total >= limit:
                break
        # each metric's series in label order, so one metric's (or none) are in label order
        return SeriesSet(np.concatenate(ids) if ids else np.empty(0, np.int64), labels, len(ids) <= 1)

    def _select_both(self, cat, archive, matchers: list[Matcher], start_ms: int | None, end_ms: int | None,
                     ctx: QueryContext | None, limit: int | None) -> SeriesSet:
        """``select_series`` over the catalog and the archive: a series both select comes from the catalog, and
        each metric's series come out in label order, as from the catalog alone."""
        check = ctx.check if ctx else None
        found: dict[str, list] = {}
        for c in (cat, archive):
            for table, rows in c.select(matchers, start_ms, end_ms, check):
                g = table.gidx.view[rows]
                found.setdefault(table.name, []).append((c, table, rows, c.sids.a[g], g))
        ids: list[np.ndarray] = []
        labels: list = []
        total = 0
        for name in (sorted(found) if limit is not None else found):  # as Prometheus cuts: metrics by name
            m_ids: list[np.ndarray] = []
            m_labels: list = []
            for c, table, rows, sids, g in found[name]:
                # the archive's (second): not those the catalog selected
                keep = ~npsort.members(sids, npsort.unique(m_ids[0])) if m_ids else np.ones(len(sids), bool)
                m_ids.append(sids[keep])
                # label sets are cached in the catalog only: the archive's bytes stay what its bound counted
                rows = rows[keep]
                m_labels.extend(self._labels(c, table, rows, g[keep]) if c is cat else table.labels_many(rows))
            order = sorted(range(len(m_labels)), key=m_labels.__getitem__)
            if limit is not None:
                order = order[: limit - total]
            if not order:
                continue
            if ctx is not None:
                ctx.charge_series(len(order), "series selection")
            ids.append(np.concatenate(m_ids)[np.asarray(order, np.int64)])
            labels.extend(map(m_labels.__getitem__, order))
            total += len(order)
            if limit is not None and total >= limit:
                break
        return SeriesSet(np.concatenate(ids) if ids else np.empty(0, np.int64), labels, len(ids) <= 1)

    def _catalogs(self, start_ms: int | None, ctx: QueryContext | None, end_ms: int | None = None,
                  matchers: list[Matcher] | None = None) -> list:
        """The catalog, and the archive (what a selection with ``matchers`` over the window may need) when a window
        starting at ``start_ms`` reaches back before memory."""
        archive = self.archive.catalog_for(start_ms, ctx, end_ms, matchers)
        return [self.book.catalog] if archive is None else [self.book.catalog, archive]

    def labels_of_ids(self, ids: np.ndarray) -> list:
        """The label set of each series id, None for an id the series table does not hold (a peer's columnar
        head answer names the series this process knows by id only: cluster/head_columns.py)."""
        cat = self.book.catalog
        g = cat.lookup(np.asarray(ids, np.int64))
        out: list = [None] * len(g)
        known = np.flatnonzero(g >= 0)
        for i, lb in zip(known.tolist(), cat.labels_at(g[known]) if len(known) else []):
            out[i] = lb
        return out

    def metric_series(self, name: str) -> int:
        """Series of metric ``name`` this process knows (0 for a metric it does not)."""
        table = self.book.catalog.metrics.get(name)
        return 0 if table is None else len(table)

    def holds_ids(self, ids: np.ndarray) -> bool:
        """Whether the series table holds every one of these series ids."""
        return bool((self.book.catalog.lookup(np.asarray(ids, np.int64)) >= 0).all()) if len(ids) else True

    def select_ids(self, matchers: list[Matcher], start_ms: int | None, end_ms: int | None,
                   ctx: QueryContext | None = None, among: np.ndarray | None = None) -> np.ndarray:
        """The ids ``select_series`` selects (charged the same), sorted by id, without their label sets."""
        ids: list[np.ndarray] = []
        cats = [self.book.catalog] if among is not None else self._catalogs(start_ms, ctx, end_ms, matchers)
        for cat in cats:
            for table, rows in cat.select(matchers, start_ms, end_ms, ctx.check if ctx else None):
                g = table.gidx.view[rows]
                if among is not None:
                    g = g[npsort.members(cat.sids.a[g], among)]
                if ctx is not None and len(cats) == 1:
                    ctx.charge_series(len(g), "series selection")
                ids.append(cat.sids.a[g])
        if len(cats) == 1:
            return np.sort(np.concatenate(ids)) if ids else np.empty(0, np.int64)
        out = npsort.unique(np.concatenate(ids)) if ids else np.empty(0, np.int64)  # a series in both: once
        if ctx is not None:
            ctx.charge_series(len(out), "series selection")
        return out

    @staticmethod
    def _labels(cat, table, rows: np.ndarray, g: np.ndarray) -> list:
        known = cat.labels_of
        out = list(map(known.get, g.tolist()))
        missing = [i for i, lb in enumerate(out) if lb is None]
        if missing:
            for i, lb in zip(missing, table.labels_many(rows[missing])):
                out[i] = known[int(g[i])] = lb
        return out

    def _label_rank(self, cat, table) -> np.ndarray:
        """Each row's position in its table in label order, recomputed only when the table grew:
        selections come out label-sorted per metric, so the engine's sort is nearly free."""
        n = len(table)
        got = cat.label_ranks.get(table.name)
        if got is not None and len(got) == n:
            return got
        rows = np.arange(n)
        lbls = self._labels(cat, table, rows, table.gidx.view[:n])
        rank = np.empty(n, np.int64)
        rank[np.array(sorted(range(n), key=lbls.__getitem__), dtype=np.int64)] = rows
        cat.label_ranks[table.name] = rank
        return rank

    def label_names(self, matchers: list[Matcher], start_ms: int | None, end_ms: int | None,
                    ctx: QueryContext | None = None, limit: int | None = None) -> list[str]:
        names: set[str] = set()
        check = ctx.check if ctx else None
        for cat in self._catalogs(start_ms, ctx, end_ms, matchers):
            for table, rows in cat.select(matchers, start_ms, end_ms, check):
                names.add(METRIC_NAME)
                for n, col in table.columns.items():
                    if n in names:
                        continue
                    codes = col.codes.view
                    r = rows[rows < len(codes)]
                    if len(r) and codes[r].any():
                        names.add(n)
        return sorted(names)[:limit] if limit else sorted(names)

    def label_values(self, name: str, matchers: list[Matcher], start_ms: int | None, end_ms: int | None,
                     ctx: QueryContext | None = None, limit: int | None = None) -> list[str]:
        values: set[str] = set()
        check = ctx.check if ctx else None
        for cat in self._catalogs(start_ms, ctx, end_ms, matchers):
            for table, rows in cat.select(matchers, start_ms, end_ms, check):
                if name == METRIC_NAME:
                    values.add(table.name)
                    continue
                col = table.columns.get(name)
                if col is None:
                    continue
                codes = col.codes.view
                r = rows[rows < len(codes)]
                for c in npsort.unique(codes[r]):
                    if c:
                        values.add(col.values[c])
        out = sorted(values)
        return out[:limit] if limit else out

    def tsdb_status(self, limit: int) -> dict:
        """Prometheus's /api/v1/status/tsdb over the series in memory: those written within the head window."""
        return stats.render([self.tsdb_counts()], limit)

    def tsdb_counts(self, start_ms: int | None = None, end_ms: int | None = None,
                    matchers: list[Matcher] | None = None, ctx: QueryContext | None = None) -> dict:
        """The figures of tsdb_status, whole, for adding up with other processes' (stats.counts). With a window:
        the series with a sample in it, those the head window forgot too (the archive, each series once); with
        ``matchers``: only the series they select."""
        cat = self.book.catalog
        if start_ms is None and not matchers:
            known = len(cat)
            min_t = int(cat.first_ms.view.min()) if known else None
            max_t = int(cat.last_ms.view.max()) if known else None
            return stats.counts(cat, min_t, max_t)
        check = ctx.check if ctx else None
        selected, seen, firsts, lasts = [], None, [], []
        for c in self._catalogs(start_ms, ctx, end_ms, matchers) if start_ms is not None else [cat]:
            for table, rows in c.select(matchers or [], start_ms, end_ms, check):
                g = table.gidx.view[rows]
                sids = c.sids.a[g]
                if seen is not None:  # the archive's: not the series the catalog counted
                    keep = ~npsort.members(sids, seen)
                    rows, g = rows[keep], g[keep]
                if len(rows):
                    selected.append((table, rows))
                    firsts.append(int(c.first_ms.a[g].min()))
                    lasts.append(int(c.last_ms.a[g].max()))
            if seen is None:
                seen = npsort.unique(np.concatenate([cat.sids.a[t.gidx.view[r]] for t, r in selected])
                                     if selected else np.empty(0, np.int64))
        lo = max(min(firsts), start_ms) if firsts and start_ms is not None else (min(firsts) if firsts else None)
        hi = min(max(lasts), end_ms) if lasts and end_ms is not None else (max(lasts) if lasts else None)
        return stats.counts_of(selected, None, lo, hi)

    def metadata(self, metric: str | None = None, limit: int | None = None) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        for name in sorted(self.metadata_by_metric):
            if metric is not None and name != metric:
                continue
            if limit is not None and limit > 0 and len(out) >= limit:
                break
            out[name] = [{"type": m.type, "help": m.help, "unit": m.unit} for m in self.metadata_by_metric[name]]
        return out
