"""Validate the label sets of many new series at once.

``validate_labels`` (remote/validate.py) is exact but costs Python work per label. Senders
(Prometheus, agents, exporters) almost always send label sets that are already sorted, unique,
non-empty and valid, so here every check runs once over the whole request with numpy, and once
per *distinct* label name or metric name (a few hundred) instead of once per label (millions).

A series that fails any check is simply not accepted here: the caller sends it through
``validate_labels``, which produces the exact rejection message (or, for e.g. unsorted
labels, the canonical label set). So this module only has to be right about what it accepts:
for an accepted series the result equals ``validate_labels(pairs)``.
"""

from __future__ import annotations

import re

import numpy as np

from ..model import METRIC_NAME, Labels
from ..remote.label_records import LabelRecords

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def validate_many(names: list[str], values: list[str], counts: np.ndarray,
                  pair_pool: dict | None = None) -> list[Labels | None]:
    """Per series (``counts[i]`` consecutive labels of ``names``/``values``): its canonical
    Labels when it passes every check on the fast path, else None (use ``validate_labels``).

    ``pair_pool`` (optional, owned by the caller) de-duplicates the (name, value) tuples:
    ("job", "node") or ("gpu", "3") is then one object in every label set that has it."""
    n = len(counts)
    total = len(names)
    out: list[Labels | None] = [None] * n
    if n == 0:
        return out
    ends = np.cumsum(counts)
    starts = ends - counts
    series_of = np.repeat(np.arange(n), counts)
    ok = counts > 0

    # Label names: check each distinct name once, then broadcast through its rank. Ranks follow
    # str order, so "strictly increasing within a series" == sorted and no duplicate names.
    distinct = sorted(set(names))
    rank = {name: r for r, name in enumerate(distinct)}
    codes = np.fromiter(map(rank.__getitem__, names), np.int64, total)
    bad_name = np.fromiter((nm != METRIC_NAME and _LABEL_NAME.fullmatch(nm) is None for nm in distinct),
                           bool, len(distinct))
    if bad_name.any():
        ok &= np.bincount(series_of, weights=bad_name[codes], minlength=n) == 0
    if total > 1:
        first = np.zeros(total, bool)
        first[starts[counts > 0]] = True
        unordered = (np.diff(codes, prepend=codes[0]) <= 0) & ~first
        if unordered.any():
            ok &= np.bincount(series_of, weights=unordered, minlength=n) == 0

    # Empty values are dropped by validate_labels: leave such series to it.
    if "" in values:  # rare: a C-level scan first, the per-label mask only when needed
        empty = np.fromiter(map(len, values), np.int64, total) == 0
        ok &= np.bincount(series_of, weights=empty, minlength=n) == 0

    # __name__ present (exactly once: names are unique once ordered) and a valid metric name.
    name_code = rank.get(METRIC_NAME)
    if name_code is None:
        return out
    at_name = np.flatnonzero(codes == name_code)
    has_name = np.zeros(n, bool)
    has_name[series_of[at_name]] = True
    ok &= has_name
    metric_values = [values[j] for j in at_name.tolist()]
    bad_metric = {m for m in set(metric_values) if _METRIC_NAME.fullmatch(m) is None}
    if bad_metric:
        bad_rows = np.fromiter((m in bad_metric for m in metric_values), bool, len(metric_values))
        ok[series_of[at_name[bad_rows]]] = False

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
    counts = recs.counts
    n = len(counts)
    labels_out: list[Labels | None] = [None] * n
    keys_out: list[bytes | None] = [None] * n
    ends = np.cumsum(counts)
    starts = ends - counts
    series_of = np.repeat(np.arange(n), counts)
    ok = counts > 0
    uid = recs.uid
    distinct = sorted(set(recs.names))
    rank = {name: r for r, name in enumerate(distinct)}
    name_rank = np.fromiter(map(rank.__getitem__, recs.names), np.int64, len(recs.names))
    bad_name = np.fromiter((nm != METRIC_NAME and _LABEL_NAME.fullmatch(nm) is None for nm in distinct),
                           bool, len(distinct))
    codes = name_rank[uid]
    per_record_bad = bad_name[codes]
    empty = np.fromiter((v == "" for v in recs.values), bool, len(recs.values))[uid]
    metric_code = rank.get(METRIC_NAME)
    if metric_code is None:
        return labels_out, keys_out
    bad_metric = np.fromiter((nm == METRIC_NAME and _METRIC_NAME.fullmatch(v) is None
                              for nm, v in zip(recs.names, recs.values)), bool, len(recs.names))[uid]
    unordered = np.zeros(len(codes), bool)
    if len(codes) > 1:
        unordered[1:] = np.diff(codes) <= 0
        unordered[starts[counts > 0]] = False  # a series' first label has nothing before it
    bad = per_record_bad | empty | bad_metric | unordered
    if bad.any():
        ok &= np.bincount(series_of, weights=bad, minlength=n) == 0
    has_name = np.zeros(n, bool)
    has_name[series_of[codes == metric_code]] = True
    ok &= has_name
    pairs = [pair_pool.setdefault(p, p) for p in zip(recs.names, recs.values)]
    # object arrays (fromiter: a tuple is one element, not a row) gather every record's shared objects in C
    flat_pairs = np.fromiter(pairs, object, len(pairs))[uid].tolist()
    flat_pieces = np.fromiter(recs.pieces, object, len(recs.pieces))[uid].tolist()
    join = b"\xff".join
    for i, a, b in zip(np.flatnonzero(ok).tolist(), starts[ok].tolist(), ends[ok].tolist()):
        labels_out[i] = tuple(flat_pairs[a:b])
        keys_out[i] = join(flat_pieces[a:b])
    return labels_out, keys_out
