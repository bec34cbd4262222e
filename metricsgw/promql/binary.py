"""Binary operators: arithmetic, comparisons and set operators, with Prometheus's vector
matching (on/ignoring, group_left/group_right), over whole (series x step) matrices.

Label signatures are matched once; each result row then takes its partner's values
for all steps in one numpy expression."""

from __future__ import annotations

import numpy as np

from .. import npsort
from ..errors import ExecError
from ..model import METRIC_NAME, Labels
from .aggregations import group_ids, group_keys, grouper
from .value import ScalarSteps, Series, drop_names, pick

ARITH = {"+", "-", "*", "/", "%", "^", "atan2"}
# Arithmetic whose result drops the metric name. Not atan2: Prometheus 2.42's
# shouldDropMetricName leaves it out, so `a atan2 b` keeps a's name.
DROPS_NAME = ARITH - {"atan2"}
COMPARE = {"==", "!=", ">", "<", ">=", "<="}
SETOPS = {"and", "or", "unless"}


def apply(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op == "/":
            return a / b
        if op == "%":
            return np.fmod(a, b)
        if op == "^":
            return np.power(a, b)
        if op == "atan2":
            return np.arctan2(a, b)
        if op == "==":
            return a == b
        if op == "!=":
            return a != b
        if op == ">":
            return a > b
        if op == "<":
            return a < b
        if op == ">=":
            return a >= b
        if op == "<=":
            return a <= b
    raise ExecError(f"unknown operator {op}")


def scalar_scalar(op: str, a: ScalarSteps, b: ScalarSteps) -> ScalarSteps:
    r = apply(op, a.values, b.values)
    return ScalarSteps(r.astype(np.float64))


def vector_scalar(op: str, vec: Series, sc: ScalarSteps, vec_on_left: bool, return_bool: bool) -> Series:
    s = sc.values[None, :]
    lhs, rhs = (vec.values, s) if vec_on_left else (s, vec.values)
    res = apply(op, lhs, rhs)
    if op in COMPARE:
        if return_bool:
            vals, mask = res.astype(np.float64), vec.mask
        else:
            vals, mask = vec.values, vec.mask & res  # the vector's value is kept either side
    else:
        vals, mask = res, vec.mask
    labels = vec.labels
    if op in DROPS_NAME or return_bool:
        labels = drop_names(labels)
    return dedupe(Series(labels, np.where(mask, vals, 0.0), mask).compact())


def _signature(labels: Labels, on: bool, names: list[str]) -> Labels:
    return grouper(not on, names)(labels)


def _fmt(labels: Labels) -> str:
    return "{" + ", ".join(f'{n}="{v}"' for n, v in labels) + "}"


def _index_one_side(s: Series, on: bool, names: list[str], side: str):
    """For each signature, the row present at each step: (sigs, row[n_sigs, steps], has)."""
    sig_ids: dict[Labels, int] = {}
    sig_of = group_ids(s.labels, not on, names, sig_ids)  # on (x): the labels x; ignoring (x): all but x and the name
    steps = s.mask.shape[1]
    rr, kk = np.nonzero(s.mask)
    cnt = np.bincount(sig_of[rr] * steps + kk, minlength=len(sig_ids) * steps).reshape(len(sig_ids), steps)
    if (cnt > 1).any():
        g, k = np.argwhere(cnt > 1)[0]
        rows = [i for i in np.flatnonzero(sig_of == g) if s.mask[i, k]][:2]
        sig = list(sig_ids)[g]
        raise ExecError(
            f"found duplicate series for the match group {_fmt(sig)} on the {side} hand-side of the operation: "
            f"[{_fmt(s.labels[rows[0]])}, {_fmt(s.labels[rows[1]])}];"
            "many-to-many matching not allowed: matching labels must be unique on one side"
        )
    row = np.full((len(sig_ids), steps), -1, np.int64)
    row[sig_of[rr], kk] = rr
    return sig_ids, row


def vector_vector(op: str, lhs: Series, rhs: Series, on: bool, names: list[str], card: str,
                  include: list[str], return_bool: bool, strict: bool = False) -> Series:
    """``strict``: one-to-one matching fails on a duplicate match whether or not a filtering comparison
    keeps it (Prometheus 3); else only on one that survives (2.42)."""
    if op in SETOPS:
        return _set_op(op, lhs, rhs, on, names)
    swap = card == "one-to-many"
    many, one = (rhs, lhs) if swap else (lhs, rhs)
    sigs, row = _index_one_side(one, on, names, "left" if swap else "right")
    if not include:
        return _match_rows(op, many, one, sigs, row, on, names, card, swap, return_bool, strict)
    return _match_each(op, many, one, sigs, row, on, names, card, include, swap, return_bool)


def _match_each(op: str, many: Series, one: Series, sigs: dict[Labels, int], row: np.ndarray, on: bool,
                names: list[str], card: str, include: list[str], swap: bool, return_bool: bool) -> Series:
    """``vector_vector`` row by row: with group_x labels to include, a row's result labels come
    from its partner at each step, which may change between steps."""
    steps = many.mask.shape[1]
    out_labels: list[Labels] = []
    out_vals, out_mask = [], []
    matched = np.zeros((len(sigs), steps), np.int64)
    for i, l in enumerate(many.labels):
        g = sigs.get(_signature(l, on, names))
        if g is None:
            continue
        r = row[g]
        ok = (r >= 0) & many.mask[i]
        if not ok.any():
            continue
        partner = one.values[np.maximum(r, 0), np.arange(steps)]
        vals, ok = _operate(op, partner, many.values[i], swap, ok, return_bool)
        if not ok.any():  # a filtering comparison can drop every point of the pair
            continue
        matched[g] += ok
        vals = np.where(ok, vals, 0.0)
        if not include:
            out_labels.append(_result_labels(l, None, op, on, names, card, include, return_bool))
            out_vals.append(vals)
            out_mask.append(ok)
            continue
        # Included labels come from the partner at each step; it may differ between steps
        # (series churn on the "one" side), so emit one row per distinct partner.
        for p in npsort.unique(r[ok]).tolist():
            pm = ok & (r == p)
            out_labels.append(_result_labels(l, one.labels[p], op, on, names, card, include, return_bool))
            out_vals.append(np.where(pm, vals, 0.0))
            out_mask.append(pm)
    if card == "one-to-one" and (matched > 1).any():
        raise ExecError("multiple matches for labels: many-to-one matching must be explicit (group_left/group_right)")
    if not out_labels:
        return Series.empty(steps)
    res_s = Series(out_labels, np.array(out_vals), np.array(out_mask)).compact()
    if card != "one-to-one":
        return dedupe(res_s, "multiple matches for labels: grouping labels must ensure unique matches")
    return dedupe(res_s)


def _match_rows(op: str, many: Series, one: Series, sigs: dict[Labels, int], row: np.ndarray, on: bool,
                names: list[str], card: str, swap: bool, return_bool: bool, strict: bool) -> Series:
    """``vector_vector`` without group_x labels to include: every row of the "many" side with its
    partner at each step, as whole (rows x steps) matrices -- the same element-wise operations
    the row-by-row loop does, so the same bits."""
    steps = many.mask.shape[1]
    keys = list(group_keys(many.labels, not on, names))
    g = np.fromiter((sigs.get(k, -1) for k in keys), np.int64, len(many))
    rows = np.flatnonzero(g >= 0)
    g = g[rows]
    r = row[g]  # the partner's row at each step, -1 where it has none
    ok = (r >= 0) & many.mask[rows]
    paired = ok
    partner = one.values[np.maximum(r, 0), np.arange(steps)[None, :]]
    vals, ok = _operate(op, partner, many.values[rows], swap, ok, return_bool)
    if card == "one-to-one" and len(rows):
        gg, kk = np.nonzero(paired if strict else ok)
        matched = np.bincount(g[gg] * steps + kk, minlength=len(sigs) * steps)
        if (matched > 1).any():
            raise ExecError("multiple matches for labels: many-to-one matching must be explicit (group_left/group_right)")
    keep = np.flatnonzero(ok.any(axis=1))
    if not len(keep):
        return Series.empty(steps)
    if card == "one-to-one" and not on and not names:
        # the signature is the label set without its name (``ignoring ()``)
        labels = pick(keys if op in DROPS_NAME or return_bool else many.labels, rows[keep])
    else:
        labels = [_result_labels(many.labels[i], None, op, on, names, card, [], return_bool)
                  for i in rows[keep].tolist()]
    ok = ok[keep]
    res_s = Series(labels, np.where(ok, vals[keep], 0.0), ok)
    if card != "one-to-one":
        return dedupe(res_s, "multiple matches for labels: grouping labels must ensure unique matches")
    return dedupe(res_s)


def _operate(op: str, partner: np.ndarray, mine: np.ndarray, swap: bool, ok: np.ndarray,
             return_bool: bool) -> tuple[np.ndarray, np.ndarray]:
    """``op`` between the "many" side's values and their partners' (a row or whole matrices): the
    values, and where there is a point (a filtering comparison drops where it is false)."""
    a, b = (partner, mine) if swap else (mine, partner)
    res = apply(op, a, b)
    if op not in COMPARE:
        return res, ok
    if return_bool:
        return res.astype(np.float64), ok
    return a, ok & res  # comparisons keep the left-hand value


def _result_labels(l: Labels, partner: Labels | None, op, on, names, card, include, return_bool) -> Labels:
    d = dict(l)
    if op in DROPS_NAME or return_bool:
        d.pop(METRIC_NAME, None)
    if card == "one-to-one":
        if on:
            d = {k: v for k, v in d.items() if k in set(names)}
        else:
            for n in names:
                d.pop(n, None)
    if include:
        other = dict(partner)
        for n in include:
            if other.get(n, ""):
                d[n] = other[n]
            else:
                d.pop(n, None)
    return tuple(sorted(d.items()))


def _set_op(op: str, lhs: Series, rhs: Series, on: bool, names: list[str]) -> Series:
    steps = lhs.mask.shape[1]

    def presence(s: Series) -> dict[Labels, np.ndarray]:
        got: dict[Labels, np.ndarray] = {}
        for i, l in enumerate(s.labels):
            sig = _signature(l, on, names)
            got[sig] = got.get(sig, np.zeros(steps, bool)) | s.mask[i]
        return got

    if op in ("and", "unless"):
        rp = presence(rhs)
        none = np.zeros(steps, bool)
        masks = []
        for i, l in enumerate(lhs.labels):
            has = rp.get(_signature(l, on, names), none)
            masks.append(lhs.mask[i] & (has if op == "and" else ~has))
        mask = np.array(masks, dtype=bool).reshape(len(lhs), steps)
        return Series(list(lhs.labels), np.where(mask, lhs.values, 0.0), mask).compact()
    lp = presence(lhs)
    none = np.zeros(steps, bool)
    rmask = np.array([rhs.mask[i] & ~lp.get(_signature(l, on, names), none) for i, l in enumerate(rhs.labels)], dtype=bool)
    rmask = rmask.reshape(len(rhs), steps)
    labels = list(lhs.labels) + list(rhs.labels)
    values = np.concatenate([lhs.values, np.where(rmask, rhs.values, 0.0)])
    mask = np.concatenate([lhs.mask, rmask])
    # A right-hand row with the same labels as a left-hand one (`sum(x) or vector(0)`) fills
    # the steps where the left is absent: one series in the result, as Prometheus's range eval.
    return dedupe(Series(labels, values, mask).compact())


def dedupe(s: Series, msg: str = "vector cannot contain metrics with the same labelset") -> Series:
    """Merge rows whose label sets became equal (e.g. after dropping __name__); two of them
    with a point at the same step is Prometheus's 'same labelset' error."""
    if len(set(s.labels)) == len(s.labels):
        return s
    where: dict[Labels, int] = {}
    labels, vals, masks = [], [], []
    for i, l in enumerate(s.labels):
        j = where.get(l)
        if j is None:
            where[l] = len(labels)
            labels.append(l)
            vals.append(s.values[i].copy())
            masks.append(s.mask[i].copy())
            continue
        if (masks[j] & s.mask[i]).any():
            raise ExecError(msg)
        vals[j] = np.where(s.mask[i], s.values[i], vals[j])
        masks[j] |= s.mask[i]
    return Series(labels, np.array(vals), np.array(masks))
