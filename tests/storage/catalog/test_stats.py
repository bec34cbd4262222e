"""Cardinality figures (stats.counts): each figure worked out again from the label sets, one series at a time."""

from collections import Counter

import numpy as np

from metricsgw.model import canonical, series_id
from metricsgw.storage.catalog import stats, value_ids
from metricsgw.storage.catalog.catalog import Catalog


def _label_sets() -> list:
    rng = np.random.default_rng(7)
    out = []
    for i in range(3000):
        metric = f"m{rng.integers(0, 6)}"
        pairs = [("__name__", metric), ("host", f"h{rng.integers(0, 40)}"), ("i", str(i))]
        if i % 3:
            pairs.append(("gpu", str(rng.integers(0, 8))))  # in some series of a metric only
        if metric in ("m1", "m2"):
            pairs.append(("uuid", f"u{rng.integers(0, 500)}"))  # shared by two metrics' columns
        out.append(canonical(pairs))
    return list(dict.fromkeys(out))


def test_counts_equal_the_label_sets_counted_one_by_one():
    sets = _label_sets()
    cat = Catalog()
    cat.add_many([(series_id(lb), lb) for lb in sets])
    got = stats.counts(cat, None, None)
    pairs, memory, values = Counter(), Counter(), {}
    for lb in sets:
        for name, value in lb:
            pairs[f"{name}={value}"] += 1
            memory[name] += len(value)
            values.setdefault(name, set()).add(value)
    assert got["numSeries"] == len(sets)
    assert got["seriesByMetric"] == dict(Counter(dict(lb)["__name__"] for lb in sets))
    assert got["pairs"] == dict(pairs) and got["memory"] == dict(memory)
    assert got["valuesByName"] == {k: sorted(v) for k, v in values.items()}
    # a subset of rows of each table counts those series only
    tables = [(t, np.arange(0, len(t), 2)) for t in cat.metrics.values()]
    half = [lb for t in cat.metrics.values() for lb in t.labels_many(np.arange(0, len(t), 2))]
    part = stats.counts_of(tables, None, None, None)
    assert part["numSeries"] == len(half)
    assert part["pairs"] == dict(Counter(f"{n}={v}" for lb in half for n, v in lb))
    rendered = stats.render([got, got], 3, "host")
    assert rendered["headStats"]["numSeries"] == 2 * len(sets)
    assert rendered["seriesCountByLabelValuePair"][0]["value"] == 2 * max(pairs.values())


def _expected_pairs(sets) -> dict:
    return dict(Counter(f"{n}={v}" for lb in sets for n, v in lb))


def test_counts_stay_right_as_columns_grow_and_the_ids_are_rebuilt(monkeypatch):
    """The value ids are kept between counts: new values of a column, new metrics, a new catalog, and a dict
    dropped for holding values no longer in use all count as a first count would."""
    monkeypatch.setattr(value_ids, "_SLACK", 0)
    sets = _label_sets()
    cat = Catalog()
    cat.add_many([(series_id(lb), lb) for lb in sets[:1000]])
    assert stats.counts(cat, None, None)["pairs"] == _expected_pairs(sets[:1000])
    cat.add_many([(series_id(lb), lb) for lb in sets[1000:]])  # new hosts, uuids, i values, maybe metrics
    assert stats.counts(cat, None, None)["pairs"] == _expected_pairs(sets)
    small = Catalog()  # a catalog with few values: the dicts hold far more than it uses, and are rebuilt
    few = [canonical([("__name__", "m1"), ("i", "x"), ("uuid", "u1")])]
    small.add_many([(series_id(lb), lb) for lb in few])
    assert stats.counts(small, None, None)["pairs"] == _expected_pairs(few)
    assert len(stats._IDS.space("i").values) <= len(sets)  # not grown past the values ever seen
    assert stats.counts(cat, None, None)["pairs"] == _expected_pairs(sets)
    assert stats.counts(small, None, None)["pairs"] == _expected_pairs(few)
    assert stats._IDS.nbytes() > 0
