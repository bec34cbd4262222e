"""The series table: labels rebuilt column by column equal the labels that went in."""

import numpy as np

from metricsgw.model import canonical, series_id
from metricsgw.storage.catalog import Catalog


def test_labels_many_equals_the_input():
    cat = Catalog()
    series = []
    for i in range(50):
        pairs = [("__name__", "m"), ("i", str(i % 7))]
        if i % 3:
            pairs.append(("a_first", "x"))  # sorts after __name__
        if i % 5 == 0:
            pairs.append(("ZZ", f"z{i}"))  # sorts before __name__
        if i >= 30:
            pairs.append(("late", "y"))  # a label name that appears only after rows exist
        lb = canonical(pairs)
        series.append((series_id(lb), lb))
    cat.add_many(series[:30])
    cat.add_many(series[30:])
    table = cat.metrics["m"]
    rows = np.arange(len(table))
    many = table.labels_many(rows)
    by_row = {int(g): lb for g, lb in zip(table.gidx.view, many)}
    assert [by_row[cat.by_sid[sid]] for sid, _ in series] == [lb for _, lb in series]
    assert [cat.labels(sid) for sid, _ in series] == [lb for _, lb in series]
    assert table.labels_many(np.array([7, 3, 7])) == [many[7], many[3], many[7]]
    assert table.labels_many(np.empty(0, np.int64)) == []
