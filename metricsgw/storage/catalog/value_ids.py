"""One id per distinct value of a label name across every metric's column, kept between cardinality counts.

Each metric's column codes its values on its own, so the same ``Hostname`` is a different code in each of 40
metrics. Summing a label's series by value across metrics needs one id per value: mapping every column's values
through a dict took ~0.7 s of a 2.7M-series count. Columns only ever append values (a code never changes
meaning), so the ids of a column's values are kept here and only its new values are mapped at the next count.

Bounded: a label's dict keeps values whose columns are gone (a forgotten series' table is rebuilt without
them), so once it holds more than twice the values in use at its last count (plus some slack), it is dropped and
built again at the next count. ``nbytes()`` is its size, reported in ``metricsgw_memory_bytes{part}``.
"""

from __future__ import annotations

import sys
import threading
import weakref

import numpy as np

from .metric_table import Column

_SLACK = 10_000  # values a label's dict may hold beyond twice those in use before it is rebuilt


class _Label:
    __slots__ = ("index", "values", "generation")

    def __init__(self, generation: int) -> None:
        self.index: dict[str, int] = {}
        self.values: list[str] = []
        self.generation = generation


class ValueIds:
    def __init__(self) -> None:
        self._labels: dict[str, _Label] = {}
        # id(column) -> (label generation, values mapped, id of each of them); dropped when the column dies (a
        # column is a dataclass compared by value, so it cannot be a weak key itself)
        self._columns: dict[int, tuple[int, int, np.ndarray]] = {}
        self._generation = 0
        self._lock = threading.Lock()  # two counts at once (the head's and a window's) share the dicts

    def space(self, label: str) -> _Label:
        """``label``'s ids: one count maps all of its columns into the same one, even if another count drops it
        from here meanwhile."""
        with self._lock:
            entry = self._labels.get(label)
            if entry is None:
                self._generation += 1
                entry = self._labels[label] = _Label(self._generation)
            return entry

    def ids(self, space: _Label, col: Column) -> np.ndarray:
        """The id of each of ``col``'s values (indexed by its codes) in ``space``."""
        with self._lock:
            n = len(col.values)
            cached = self._columns.get(id(col))
            same = cached is not None and cached[0] == space.generation
            if same and cached[1] == n:
                return cached[2]
            start, old = (cached[1], cached[2]) if same else (0, None)
            new = col.values[start:n]
            index = space.index
            unseen = [v for v in dict.fromkeys(new) if v not in index]
            if unseen:
                index.update(zip(unseen, range(len(space.values), len(space.values) + len(unseen))))
                space.values.extend(unseen)
            fresh = np.fromiter(map(index.__getitem__, new), np.int64, len(new))
            ids = fresh if old is None else np.concatenate([old, fresh])
            if cached is None:
                weakref.finalize(col, self._columns.pop, id(col), None)
            self._columns[id(col)] = (space.generation, n, ids)
            return ids

    def settle(self, label: str, space: _Label, in_use: int) -> None:
        """After a count: drop ``label``'s ids when they hold far more values than are in use."""
        with self._lock:
            if self._labels.get(label) is space and len(space.values) > 2 * in_use + _SLACK:
                del self._labels[label]  # its columns' ids name the old generation: mapped again next time

    def nbytes(self) -> int:
        """About what the dicts and id arrays hold (the value strings belong to the columns)."""
        with self._lock:
            held = sum(sys.getsizeof(e.index) + sys.getsizeof(e.values) for e in self._labels.values())
            return held + sum(c[2].nbytes for c in list(self._columns.values()))
