"""Functions of instant vectors and scalars (the table the engine dispatches to).

Range-vector functions live in rangefuncs.py; histogram_quantile in histograms.py."""

from __future__ import annotations

import functools
import re

import numpy as np
import re2

from ..errors import ExecError
from ..model import METRIC_NAME, Labels, is_label_name
from .binary import dedupe
from .value import ScalarSteps, Series, drop_names


def _map(s: Series, fn) -> Series:
    with np.errstate(all="ignore"):
        vals = fn(s.values)
    return dedupe(Series(drop_names(s.labels), np.where(s.mask, vals, 0.0), s.mask))


def _round(x: np.ndarray, to_nearest: np.ndarray) -> np.ndarray:
    inv = 1.0 / to_nearest[None, :]
    return np.floor(x * inv + 0.5) / inv


MATH = {
    "abs": np.abs,
    "ceil": np.ceil,
    "floor": np.floor,
    "exp": np.exp,
    "sqrt": np.sqrt,
    "ln": np.log,
    "log2": np.log2,
    "log10": np.log10,
    "sgn": np.sign,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "deg": np.degrees,
    "rad": np.radians,
}


def math_fn(name: str, s: Series) -> Series:
    return _map(s, MATH[name])


def round_fn(s: Series, to_nearest: ScalarSteps | None) -> Series:
    tn = np.ones(s.values.shape[1]) if to_nearest is None else to_nearest.values
    return _map(s, lambda x: _round(x, tn))


def clamp(s: Series, lo: np.ndarray | None, hi: np.ndarray | None) -> Series:
    steps = s.values.shape[1]
    lo = np.full(steps, -np.inf) if lo is None else lo
    hi = np.full(steps, np.inf) if hi is None else hi
    out = _map(s, lambda x: np.maximum(lo[None, :], np.minimum(hi[None, :], x)))
    if len(out):
        bad = (hi < lo)[None, :]  # Prometheus returns nothing when max < min
        out = Series(out.labels, out.values, out.mask & ~bad).compact()
    return out


def timestamp(s: Series, steps_ms: np.ndarray) -> Series:
    t = s.sample_t if s.sample_t is not None else np.broadcast_to(steps_ms[None, :], s.mask.shape)
    return dedupe(Series(drop_names(s.labels), np.where(s.mask, t / 1000.0, 0.0), s.mask))


def vector(sc: ScalarSteps) -> Series:
    n = len(sc.values)
    return Series([()], sc.values[None, :].copy(), np.ones((1, n), bool))


def scalar(s: Series) -> ScalarSteps:
    n = s.mask.shape[1]
    if len(s) == 0:
        return ScalarSteps(np.full(n, np.nan))
    cnt = s.mask.sum(axis=0)
    first = np.argmax(s.mask, axis=0)
    vals = s.values[first, np.arange(n)]
    return ScalarSteps(np.where(cnt == 1, vals, np.nan))


def sort(s: Series, desc: bool) -> Series:
    if len(s) == 0 or s.values.shape[1] != 1:
        return s  # ordering only means something for an instant result
    v = s.values[:, 0]
    nan = np.isnan(v)
    order = np.lexsort((-v if desc else v, nan))  # NaN last in both directions, as Prometheus 2.42
    return Series([s.labels[i] for i in order], s.values[order], s.mask[order])


def absent_labels(matchers) -> Labels:
    """Prometheus's createLabelsForAbsentFunction: a label set by the first equality matcher
    on its name, and removed again by any later matcher on the same name (of any kind)."""
    out: dict[str, str] = {}
    has: set[str] = set()
    for m in matchers:
        if m.name == METRIC_NAME:
            continue
        if m.op == "=" and m.name not in has:
            out[m.name] = m.value
            has.add(m.name)
        else:
            out.pop(m.name, None)
    return tuple(sorted((k, v) for k, v in out.items() if v != ""))


def absent(present_any: np.ndarray, labels: Labels) -> Series:
    mask = ~present_any
    return Series([labels], np.ones((1, len(mask))), mask[None, :]).compact()




def _go_expand(template: str, m) -> str:
    """Go regexp.Expand: $1, ${1}, $name, ${name}, $$; unknown groups expand to ''."""

    def group(name: str) -> str:
        try:
            g = m.group(int(name)) if name.isdigit() else m.group(name)
        except (IndexError, KeyError, re2.error):
            return ""
        return g or ""

    def sub(mo: "re.Match[str]") -> str:
        if mo.group(0) == "$$":
            return "$"
        name = mo.group(1) or mo.group(2)
        return group(name)

    return re.sub(r"\$\$|\$\{([^}]*)\}|\$([a-zA-Z0-9_]+)", sub, template)


def label_replace(s: Series, dst: str, repl: str, src: str, regex: str, dot_nl: bool) -> Series:
    """``dot_nl``: ``.`` matches a newline (Prometheus 3; compat.py)."""
    try:
        opts = re2.Options()
        opts.dot_nl = dot_nl
        rx = re2.compile(f"^(?:{regex})$", opts)
    except re2.error:
        # Prometheus compiles the regex at evaluation time: an execution error (422), not bad_data.
        raise ExecError(f'invalid regular expression in label_replace(): {regex}') from None
    if not is_label_name(dst):
        raise ExecError(f'invalid destination label name in label_replace(): {dst}')
    out = []
    for l in s.labels:
        d = dict(l)
        m = rx.search(d.get(src, ""))
        if m is not None:
            val = _go_expand(repl, m)
            if val:
                d[dst] = val
            else:
                d.pop(dst, None)
        out.append(tuple(sorted(d.items())))
    return dedupe(Series(out, s.values, s.mask))


def label_join(s: Series, dst: str, sep: str, srcs: list[str]) -> Series:
    if not is_label_name(dst):
        raise ExecError(f'invalid destination label name in label_join(): {dst}')
    for n in srcs:
        if not is_label_name(n):
            raise ExecError(f'invalid source label name in label_join(): {n}')
    out = []
    for l in s.labels:
        d = dict(l)
        val = sep.join(d.get(n, "") for n in srcs)
        if val:
            d[dst] = val
        else:
            d.pop(dst, None)
        out.append(tuple(sorted(d.items())))
    return dedupe(Series(out, s.values, s.mask))


def _dates(x: np.ndarray) -> np.ndarray:
    secs = np.where(np.isfinite(x), x, 0).astype(np.int64)
    return secs.astype("datetime64[s]")


def date_fn(name: str, s: Series) -> Series:
    def fn(x: np.ndarray) -> np.ndarray:
        d = _dates(x)
        y = d.astype("datetime64[Y]")
        mo = d.astype("datetime64[M]")
        day = d.astype("datetime64[D]")
        if name == "year":
            return (y.astype(np.int64) + 1970).astype(np.float64)
        if name == "month":
            return (mo.astype(np.int64) % 12 + 1).astype(np.float64)
        if name == "day_of_month":
            return ((day - mo.astype("datetime64[D]")).astype(np.int64) + 1).astype(np.float64)
        if name == "day_of_year":
            return ((day - y.astype("datetime64[D]")).astype(np.int64) + 1).astype(np.float64)
        if name == "day_of_week":
            return ((day.astype(np.int64) + 4) % 7).astype(np.float64)
        if name == "days_in_month":
            nxt = (mo + 1).astype("datetime64[D]")
            return (nxt - mo.astype("datetime64[D]")).astype(np.int64).astype(np.float64)
        if name == "hour":
            return ((d - day).astype(np.int64) // 3600).astype(np.float64)
        if name == "minute":
            return ((d - day).astype(np.int64) % 3600 // 60).astype(np.float64)
        raise ExecError(name)

    return _map(s, fn)


DATE_FUNCS = {"year", "month", "day_of_month", "day_of_year", "day_of_week", "days_in_month", "hour", "minute"}


def natural_less(a: str, b: str) -> bool:
    """Whether ``a`` sorts before ``b`` in natural order as Prometheus 3's sort_by_label compares label values
    (the facette/natsort package): runs of digits compare as numbers (leading zeros skipped, a longer run is
    larger), everything else byte by byte."""
    x, y = a.encode(), b.encode()
    i = j = 0
    while True:
        if i >= len(x):
            return j < len(y)
        if j >= len(y):
            return False
        cx, cy = x[i], y[j]
        if 48 <= cx <= 57 and 48 <= cy <= 57:
            i, nx = _digit_run(x, i)
            j, ny = _digit_run(y, j)
            if nx != ny:
                return nx < ny
            if x[i:i + nx] != y[j:j + ny]:
                return x[i:i + nx] < y[j:j + ny]
            i, j = i + nx, j + ny
            continue
        if cx != cy:
            return cx < cy
        i, j = i + 1, j + 1


def _digit_run(s: bytes, i: int) -> tuple[int, int]:
    """Where the run of digits at ``i`` starts once its leading zeros are skipped, and its length, as natsort
    counts them (a zero is skipped whenever anything follows it, even a non-digit)."""
    n = 1
    while i + n < len(s):
        if s[i] == 48:
            i += 1
            continue
        if 48 <= s[i + n] <= 57:
            n += 1
        else:
            break
    return i, n


def sort_by_label(s: Series, names: list[str], desc: bool) -> Series:
    """Prometheus 3's sort_by_label(_desc): by the named labels' values in natural order, then by the whole
    label set; only an instant result has an order."""
    if len(s) == 0 or s.values.shape[1] != 1:
        return s

    def compare(i: int, k: int) -> int:
        a, b = dict(s.labels[i]), dict(s.labels[k])
        for name in names:
            va, vb = a.get(name, ""), b.get(name, "")
            if va != vb:
                return -1 if natural_less(va, vb) else 1
        return (s.labels[i] > s.labels[k]) - (s.labels[i] < s.labels[k])

    order = sorted(range(len(s)), key=functools.cmp_to_key(compare), reverse=desc)
    return Series([s.labels[i] for i in order], s.values[order], s.mask[order])
