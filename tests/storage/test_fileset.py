"""The file set (storage/fileset.py): a flush's cut stays in every view until its commit drops it."""

from __future__ import annotations

import numpy as np

from metricsgw.storage.fileset import FileSet
from metricsgw.storage.files.table import Table

def _samples(view) -> int:
    return sum(len(h) for h in view.heads)


def test_a_cut_stays_in_views_until_committed(tmp_path):
    table = Table(str(tmp_path))
    table.open()
    files = FileSet(table)
    try:
        with files.atomically():
            files.append(np.array([1, 2], np.int64), np.array([10, 20], np.int64), np.array([1.0, 2.0]))
            cut = files.cut()
            files.append(np.array([1], np.int64), np.array([30], np.int64), np.array([3.0]))
            view = files.view()
        view.pin.release()
        assert [len(h) for h in cut.heads] == [2] and _samples(view) == 3
        assert files.pending() and files.flushing() == 1 and files.held() == 3 and files.in_head() == 1
        assert files.min_t() == 10 and files.holding(np.array([1, 2, 3], np.int64)).tolist() == [True, True, False]
        with files.atomically():
            files.committed(cut)
            view = files.view()
        view.pin.release()
        assert _samples(view) == 1 and files.flushing() == 0 and files.span() == (30, 30)
    finally:
        table.close()

