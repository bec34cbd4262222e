"""The series table: labels rebuilt column by column equal the labels that went in."""

import numpy as np

from metricsgw.model import canonical, series_id
from metricsgw.storage.catalog.catalog import Catalog


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
    assert [by_row[cat.index_of(sid)] for sid, _ in series] == [lb for _, lb in series]
    assert [cat.labels(sid) for sid, _ in series] == [lb for _, lb in series]
    assert table.labels_many(np.array([7, 3, 7])) == [many[7], many[3], many[7]]
    assert table.labels_many(np.empty(0, np.int64)) == []


def label_rank(table) -> np.ndarray:
    """Each row's position in label order (what the reader caches per metric)."""
    lbls = table.labels_many(np.arange(len(table)))
    rank = np.empty(len(table), np.int64)
    rank[np.array(sorted(range(len(table)), key=lbls.__getitem__))] = np.arange(len(table))
    return rank


def test_without_then_catch_up_keeps_what_changed_meanwhile_and_drops_unused_values():
    def series(i, metric="m"):
        lb = canonical([("__name__", metric), ("pod", f"p{i}"), ("zone", "a" if i % 2 else "b")])
        return series_id(lb), lb

    cat = Catalog()
    first = [series(i) for i in range(10)] + [series(i, "gone") for i in range(3)]
    cat.add_many(first)
    sids = np.array([s for s, _ in first], np.int64)
    cat.touch(sids, np.arange(len(sids), dtype=np.int64))
    for s, _ in first[:4]:  # a query filled the label cache for a few
        g = cat.index_of(s)
        cat.labels_of[g] = cat.labels(s)
    cat.label_ranks["m"] = label_rank(cat.metrics["m"])
    drop = np.zeros(len(cat), bool)
    drop[[cat.index_of(s) for s, _ in first[:3] + first[10:]]] = True  # p0..p2 of m, and all of "gone"

    new = cat.without(drop)
    late = [series(i) for i in range(10, 12)]  # appends while the new catalog was built
    cat.add_many(late)
    cat.touch(np.array([s for s, _ in late] + [first[5][0]], np.int64), np.array([100, 101, 102]))
    cat.catch_up(new)

    kept = first[3:10] + late
    assert [int(s) for s in new.sids.view] == [s for s, _ in kept]
    assert [new.labels(s) for s, _ in kept] == [lb for _, lb in kept]
    assert not any(s in new for s, _ in first[:3] + first[10:])
    assert set(new.metrics) == {"m"}
    assert new.metrics["m"].columns["pod"].values[1:] == [f"p{i}" for i in range(3, 12)]  # p0..p2 went
    assert new.last_ms.a[new.index_of(first[5][0])] == 102 and new.first_ms.a[new.index_of(late[1][0])] == 101
    assert new.labels_of == {new.index_of(first[3][0]): first[3][1]}
    kept_rank = np.argsort(np.argsort(label_rank(new.metrics["m"])[:7]))  # rows kept, among themselves
    assert np.array_equal(new.label_ranks["m"], kept_rank)  # carried over; the reader redoes it for the late rows
    g = new.dense(np.array([s for s, _ in kept], np.int64))
    assert np.array_equal(new.sids.a[g], [s for s, _ in kept])


def test_lookup_index_merged_batch_by_batch_matches_the_dict():
    # Series arrive in batches; the sorted index is extended by merges as they cross its threshold. Every
    # lookup (sids in any order, repeats, unknown ones) must equal a dict's answer at every step, and the
    # catalog's own dict holds only the series the index does not cover yet.
    rng = np.random.default_rng(7)
    cat = Catalog()
    ref: dict[int, int] = {}  # sid -> dense index, in order of registration
    for batch in range(40):
        sids = rng.integers(-2**63, 2**63 - 1, int(rng.integers(1, 3000)), dtype=np.int64)
        sids[: len(sids) // 10] = rng.choice(np.array(list(ref) or [1]), len(sids) // 10)  # some known already
        cat.add_many([(int(s), (("__name__", f"m{batch % 3}"), ("i", str(int(s))))) for s in sids])
        for s in sids.tolist():
            ref.setdefault(s, len(ref))
        ask = np.concatenate([rng.choice(np.array(list(ref)), 500), rng.integers(-2**63, 2**63 - 1, 20, dtype=np.int64)])
        want = [ref.get(s, -1) for s in ask.tolist()]
        assert cat.lookup(ask).tolist() == want
        assert [cat.index_of(s) for s in ask[:50].tolist()] == want[:50]
        assert len(cat) == len(ref)
    assert len(cat._index[0]) > 0  # the index was built (and extended) along the way
    assert len(cat._tail) < len(cat) // 4  # trimmed as the index grew
    idx_sids, idx_g = cat._index
    assert (np.diff(idx_sids) > 0).all() and cat.sids.a[idx_g].tolist() == idx_sids.tolist()
