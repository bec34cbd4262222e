"""Validate the label sets of many new series at once.

``validate_labels`` (validate.py) is exact but costs Python work per label. Senders
(Prometheus, agents, exporters) almost always send label sets that are already sorted, unique,
non-empty and valid, so here every check runs once over the whole request with numpy, and once
per *distinct* label name or metric name (a few hundred) instead of once per label (millions).

A series that fails any check is simply not accepted here: the caller sends it through
``validate_labels``, which produces the exact rejection message (or, for e.g. unsorted
labels, the canonical label set). So this module only has to be right about what it accepts:
for an accepted series the result equals ``validate_labels(pairs)``.
"""

from __future__ import annotations


import numpy as np

from ..model import METRIC_NAME, Labels, is_label_name, is_metric_name
from ..remote.label_records import LabelRecords



def validate_many(names: list[str], values: list[str], counts: np.ndarray,
                  pair_pool: dict | None = None) -> list[Labels | None]:
    """Per series (``counts[i]`` consecutive labels of ``names``/``values``): its canonical
    Labels when it passes every check on the fast path, else None (use ``validate_labels``).

    ``pair_pool`` (optional, owned by the caller) de-duplicates the (name, value) tuples:
    ("job", "node") or ("gpu", "3") is then one object in every label set that has it."""
    out: list[Labels | None] = [None] * len(counts)
    checked = _checked(names, values, None, counts)
    if checked is None:
        return out
    ok, starts, ends = checked
    pairs = list(zip(names, values))
    if pair_pool is not None:
        pairs = list(map(pair_pool.setdefault, pairs, pairs))
    for i, a, b in zip(np.flatnonzero(ok).tolist(), starts[ok].tolist(), ends[ok].tolist()):
        out[i] = tuple(pairs[a:b])
    return out


def validate_records(recs: LabelRecords, pair_pool: dict) -> tuple[list[Labels | None], list[bytes | None]]:
    """``validate_many`` of series given as distinct label records (remote/label_records.py), with each
    accepted series' ``model.series_key`` too: the checks and the Python objects are made once per distinct
    record, and per series only its tuple of (shared) pairs and its key are joined."""
    n = len(recs.counts)
    labels_out: list[Labels | None] = [None] * n
    keys_out: list[bytes | None] = [None] * n
    checked = _checked(recs.names, recs.values, recs.uid, recs.counts)
    if checked is None:
        return labels_out, keys_out
    ok, starts, ends = checked
    uid = recs.uid
    pairs = [pair_pool.setdefault(p, p) for p in zip(recs.names, recs.values)]
    # object arrays (fromiter: a tuple is one element, not a row) gather every record's shared objects in C
    flat_pairs = np.fromiter(pairs, object, len(pairs))[uid].tolist()
    flat_pieces = np.fromiter(recs.pieces, object, len(recs.pieces))[uid].tolist()
    join = b"\xff".join
    for i, a, b in zip(np.flatnonzero(ok).tolist(), starts[ok].tolist(), ends[ok].tolist()):
        labels_out[i] = tuple(flat_pairs[a:b])
        keys_out[i] = join(flat_pieces[a:b])
    return labels_out, keys_out


def _checked(names: list[str], values: list[str], uid: np.ndarray | None,
             counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The checks of both entry points: (which series pass every check, starts, ends), or None when no label
    is ``__name__`` (none can pass). Series i's labels are ``uid[starts[i]:ends[i]]``, each an index into
    ``names``/``values`` (an entry per distinct record); ``uid`` None: the entries are the labels themselves.

    What depends on a label alone is checked once per entry (the regexes once per distinct name or metric
    name) and spread to the labels through ``uid``; only the order and __name__'s presence are per label."""

    def per_label(per_entry: np.ndarray) -> np.ndarray:
        return per_entry if uid is None else per_entry[uid]  # None: validate_many skips three per-label copies

    distinct = sorted(set(names))
    rank = {name: r for r, name in enumerate(distinct)}
    metric_code = rank.get(METRIC_NAME)
    if metric_code is None:
        return None
    n = len(counts)
    ends = np.cumsum(counts)
    starts = ends - counts
    series_of = np.repeat(np.arange(n), counts)
    ok = counts > 0

    name_rank = np.fromiter(map(rank.__getitem__, names), np.int64, len(names))
    bad_name = np.fromiter((nm != METRIC_NAME and not is_label_name(nm) for nm in distinct),
                           bool, len(distinct))
    bad_entry = np.zeros(len(names), bool)
    if bad_name.any():  # rare: the gather only when needed
        bad_entry |= bad_name[name_rank]
    # Empty values are dropped by validate_labels: leave such series to it.
    if "" in values:  # a C-level scan first, the per-entry mask only when needed
        bad_entry |= np.fromiter(map(len, values), np.int64, len(values)) == 0
    is_metric = name_rank == metric_code
    metric_at = np.flatnonzero(is_metric)
    metric_values = [values[j] for j in metric_at.tolist()]
    bad_metric = {m for m in set(metric_values) if not is_metric_name(m)}
    if bad_metric:
        bad_entry[metric_at[np.fromiter((m in bad_metric for m in metric_values), bool, len(metric_values))]] = True

    # Ranks follow str order, so "strictly increasing within a series" == sorted and no duplicate names.
    codes = per_label(name_rank)
    bad = np.diff(codes, prepend=codes[:1]) <= 0
    bad[starts[counts > 0]] = False  # a series' first label has nothing before it
    if bad_entry.any():
        bad |= per_label(bad_entry)
    if bad.any():
        ok &= np.bincount(series_of, weights=bad, minlength=n) == 0
    # __name__ present (exactly once: names are unique once ordered); its value was checked above.
    has_name = np.zeros(n, bool)
    has_name[series_of[per_label(is_metric)]] = True
    ok &= has_name
    return ok, starts, ends
