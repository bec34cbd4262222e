"""What the series and spans files say, held compactly so the archive (catalog/archive.py) reads only the series a
query needs: every series' span on disk (sid, first, last: 24 bytes a series), and for each series file its sids,
their rows and the metric each belongs to (16 bytes a series). Label sets stay on disk until a query selects them.

Why: the archive used to rebuild a catalog of every series on disk (labels split into Python objects) for each read
reaching back before the head window, and keep it only while it fit its share of ``--query.max-memory``. Under pod
churn at the seed's scale that is millions of series a dashboard panel, built for each panel (uncharged where only
spans were wanted): the query process went past 15 GB and the kernel killed it.

Side files never change once written (a merge or a purge writes new ones and retires the old), so each file is read
once: new files are merged into what is held, and only a retired file makes the spans be merged again from the files.
"""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ... import npsort
from ..files import parquet_io
from .sorted_search import search_sorted

_GENERATIONS = itertools.count()
_BATCH_ROWS = 1 << 16  # series keys read at a time when a file is first indexed: its memory stays ~16 MB
# Series keys are name\xfevalue\xff...: with the separators mapped to \x01 and \x02 they are UTF-8, and a regex
# finds the metric name in C++ for a batch at once.
_SEPARATORS = np.arange(256, dtype=np.uint8)
_SEPARATORS[0xFE], _SEPARATORS[0xFF] = 1, 2
_METRIC = r"(?:^|\x02)__name__\x01(?P<m>[^\x02]*)"


class SeriesFileIndex:
    """One series file: ``sids`` sorted, ``rows`` (each sid's row in the file), ``metric`` (a code into the index's
    names, -1 for a series with no name)."""

    __slots__ = ("path", "sids", "rows", "metric")

    def __init__(self, path: str, sids: np.ndarray, rows: np.ndarray, metric: np.ndarray) -> None:
        self.path, self.sids, self.rows, self.metric = path, sids, rows, metric

    @property
    def nbytes(self) -> int:
        return self.sids.nbytes + self.rows.nbytes + self.metric.nbytes


class RowCounts:
    """Rows of each series file, from its footer, remembered while the file is in use: what the index of the files
    would hold, known before it is read."""

    def __init__(self) -> None:
        self._rows: dict[str, int] = {}

    def total(self, paths: tuple[str, ...]) -> int:
        rows = {p: self._rows.get(p) for p in paths}
        for p, n in rows.items():
            if n is None:
                rows[p] = pq.ParquetFile(p).metadata.num_rows
        self._rows = rows  # (files no longer in use are forgotten)
        return sum(rows.values())


class SideIndex:
    """Not thread-safe: its owner (the archive) calls it under its lock."""

    def __init__(self) -> None:
        self.names: list[str] = []  # metric names, by code
        self._codes: dict[str, int] = {}
        self.series: dict[str, SeriesFileIndex] = {}
        self._spans_paths: frozenset[str] = frozenset()
        empty = np.empty(0, np.int64)
        self.spans: tuple[np.ndarray, np.ndarray, np.ndarray] = (empty, empty, empty)  # sorted sid, first, last
        self.generation = next(_GENERATIONS)  # changes whenever ``spans`` does (what callers derive from it is stale)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.spans) + sum(f.nbytes for f in self.series.values())

    def __len__(self) -> int:
        return len(self.spans[0])

    def update(self, series_paths: tuple[str, ...], spans_paths: tuple[str, ...]) -> None:
        """Hold what these files say (the snapshot's), reading only the files not read before."""
        wanted = set(series_paths)
        gone = [self.series.pop(p) for p in list(self.series) if p not in wanted]
        new = [p for p in series_paths if p not in self.series]
        # A merge writes again the series of the files it retires: their metrics are known by sid (a sid is its key's
        # hash), so the merged file's keys need not be read (at the seed's scale, millions of them every few minutes).
        known = _by_sid(gone) if new and gone else None
        for path in new:
            self.series[path] = self._index_series_file(path, known)
        now = frozenset(spans_paths)
        if now == self._spans_paths:
            return
        if self._spans_paths <= now:  # only new files: merge them into what is held
            self.spans = spans_of_files([p for p in spans_paths if p not in self._spans_paths], self.spans)
        else:  # a merge or a purge retired files: what they said may be gone (purged series)
            self.spans = spans_of_files(spans_paths)
        self._spans_paths = now
        self.generation = next(_GENERATIONS)

    def codes_of(self, names) -> np.ndarray:
        return np.array([self._codes[n] for n in names if n in self._codes], np.int32)

    def locate(self, sids: np.ndarray) -> list[tuple[SeriesFileIndex, np.ndarray, np.ndarray]]:
        """For sorted unique ``sids``: (file, positions into ``sids``, positions into the file's index) of each
        file holding some of them, each sid in the first file holding it."""
        out = []
        left = np.ones(len(sids), bool)
        for f in self.series.values():
            if not left.any():
                break
            at = np.flatnonzero(left)
            if not len(f.sids):
                continue
            pos = search_sorted(f.sids, sids[at])
            hit = f.sids[pos] == sids[at]
            if hit.any():
                out.append((f, at[hit], pos[hit]))
                left[at[hit]] = False
        return out

    def _index_series_file(self, path: str, known: tuple[np.ndarray, np.ndarray] | None) -> SeriesFileIndex:
        """``known``: (sorted sids, metric codes) of series already indexed, whose keys are then not read again."""
        pf = pq.ParquetFile(path)
        sids, metric = [], []
        if known is not None and len(known[0]):
            sid = parquet_io.read_series_sids(path)
            pos = search_sorted(known[0], sid)
            if (known[0][pos] == sid).all():
                order = np.argsort(sid, kind="stable")
                return SeriesFileIndex(path, sid[order], order.astype(np.int32), known[1][pos][order])
        if not _legacy(pf):
            for batch in pf.iter_batches(batch_size=_BATCH_ROWS, columns=["sid", "key"]):
                sids.append(batch.column(0).to_numpy())
                metric.append(self._metric_codes(metric_names(batch.column(1))))
        else:  # a file of an earlier version (labels as JSON): small, read whole
            s, keys = parquet_io.read_series([path])
            sids.append(s)
            metric.append(self._metric_codes(metric_names(pa.array(keys, pa.binary()))))
        sid = np.concatenate(sids) if sids else np.empty(0, np.int64)
        codes = np.concatenate(metric) if metric else np.empty(0, np.int32)
        order = np.argsort(sid, kind="stable")
        return SeriesFileIndex(path, sid[order], order.astype(np.int32), codes[order])

    def _metric_codes(self, names: pa.Array) -> np.ndarray:
        enc = pc.dictionary_encode(names)
        local = np.array([self._code(n) for n in enc.dictionary.to_pylist()] + [-1], np.int32)
        idx = enc.indices.fill_null(len(enc.dictionary)).to_numpy(zero_copy_only=False)
        return local[idx]

    def _code(self, name: str | None) -> int:
        if name is None:
            return -1
        code = self._codes.get(name)
        if code is None:
            code = self._codes[name] = len(self.names)
            self.names.append(name)
        return code


def _legacy(pf: pq.ParquetFile) -> bool:
    """A series file of an earlier version (labels as JSON, maybe beside keys): parquet_io.read_series reads it."""
    return "key" not in pf.schema_arrow.names or "labels" in pf.schema_arrow.names


def _by_sid(files: list[SeriesFileIndex]) -> tuple[np.ndarray, np.ndarray]:
    """(sorted sids, metric codes) over these files' indexes."""
    sid = np.concatenate([f.sids for f in files])
    order = np.argsort(sid, kind="stable")
    return sid[order], np.concatenate([f.metric for f in files])[order]


def metric_names(keys: pa.Array) -> pa.Array:
    """The metric name in each series key (null where a key has none), vectorised."""
    keys = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    if keys.type != pa.binary():
        keys = keys.cast(pa.binary())
    offsets = np.frombuffer(keys.buffers()[1], np.int32, len(keys) + 1, keys.offset * 4)
    data = keys.buffers()[2]
    lo, hi = int(offsets[0]), int(offsets[-1])
    mapped = _SEPARATORS[np.frombuffer(data, np.uint8, hi - lo, lo)] if data is not None and hi > lo else \
        np.empty(0, np.uint8)
    text = pa.Array.from_buffers(pa.utf8(), len(keys), [keys.buffers()[0], pa.py_buffer(offsets - lo),
                                                        pa.py_buffer(mapped)], keys.null_count)
    try:
        return pc.struct_field(pc.extract_regex(text, _METRIC), [0])
    except pa.ArrowInvalid:  # a key that is not UTF-8 (written by hand): the slow way, key by key
        return pa.array([_metric_of(k) for k in keys.to_pylist()], pa.utf8())


def _metric_of(key: bytes | None) -> str | None:
    for pair in (key or b"").split(b"\xff"):
        name, _, value = pair.partition(b"\xfe")
        if name == b"__name__":
            return value.decode("utf-8", "surrogateescape")
    return None


def read_keys(f: SeriesFileIndex, at: np.ndarray) -> list[bytes]:
    """The series keys at positions ``at`` of a file's index, reading only the row groups that hold them."""
    return read_rows(f.path, f.rows[at])


def unknown_series(lookup, path: str, among: np.ndarray | None = None) -> tuple[np.ndarray, list[bytes]]:
    """(sids, keys) of the series of a series file that ``lookup`` (``Catalog.lookup``) does not find (and, given
    ``among``, a sorted array, that are in it), the keys read for those rows alone."""
    sid = parquet_io.read_series_sids(path)
    want = lookup(sid) < 0
    if among is not None:
        want &= npsort.members(sid, among)
    rows = np.flatnonzero(want)
    return sid[rows], (read_rows(path, rows) if len(rows) else [])


def read_rows(path: str, rows: np.ndarray) -> list[bytes]:
    """The series keys at these rows of a series file, in their order, reading only the row groups that hold them."""
    rows = np.asarray(rows, np.int64)
    order = np.argsort(rows, kind="stable")
    rows_sorted = rows[order]
    pf = pq.ParquetFile(path)
    if _legacy(pf):
        _, keys = parquet_io.read_series([path])
        got = [keys[r] for r in rows_sorted.tolist()]
    else:
        meta = pf.metadata
        starts = np.cumsum([0] + [meta.row_group(i).num_rows for i in range(meta.num_row_groups)])[:-1]
        group = np.searchsorted(starts, rows_sorted, side="right") - 1
        got = []
        for g in npsort.unique(group).tolist():
            col = pf.read_row_group(g, columns=["key"]).column(0)
            got.extend(col.take(pa.array(rows_sorted[group == g] - starts[g])).to_pylist())
    out: list[bytes] = [b""] * len(rows)
    for i, k in zip(order.tolist(), got):
        out[i] = k
    return out


def spans(cols: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sorted sids, first sample, last sample) over spans files' columns (``parquet_io.read_spans``; a series has a
    row in each file it is in)."""
    if not cols:
        empty = np.empty(0, np.int64)
        return empty, empty, empty
    sid, lo, hi = (np.concatenate([c[i] for c in cols]).astype(np.int64) for i in range(3))
    order = np.argsort(sid, kind="stable")
    sid, lo, hi = sid[order], lo[order], hi[order]
    starts = npsort.run_starts(sid)
    return sid[starts], np.minimum.reduceat(lo, starts), np.maximum.reduceat(hi, starts)


def spans_of_files(paths, held: tuple | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``spans`` of these spans files (merged into ``held``), one file at a time: a flush's spans file names every
    series it wrote (millions at the seed's scale), and reading up to 16 of them at once took gigabytes."""
    out = held if held is not None else spans([])
    for path in paths:
        out = merge_spans(out, spans([parquet_io.read_spans(path)]))
    return out


def merge_spans(held: tuple, new: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two ``spans`` results as one: a series in both spans both. New arrays (readers may hold the old ones)."""
    sid, lo, hi = held
    nsid, nlo, nhi = new
    if not len(sid):
        return new
    if not len(nsid):
        return held
    pos = search_sorted(sid, nsid)
    old = sid[pos] == nsid
    lo, hi = lo.copy(), hi.copy()
    lo[pos[old]] = np.minimum(lo[pos[old]], nlo[old])
    hi[pos[old]] = np.maximum(hi[pos[old]], nhi[old])
    fresh = ~old
    at = np.searchsorted(sid, nsid[fresh])
    return np.insert(sid, at, nsid[fresh]), np.insert(lo, at, nlo[fresh]), np.insert(hi, at, nhi[fresh])
