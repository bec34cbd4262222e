"""A runner for Prometheus's promqltest DSL (the ``.test`` golden scripts).

Supported: ``load <interval>`` with ``a+bxN`` / ``a-bxN`` / ``axN`` / ``_`` / ``_xN`` / ``stale``,
``clear``, ``eval[_ordered|_fail] instant at <dur> <expr>``, ``eval[_fail] range from <t> to <t>
step <s> <expr>``, an ``expect fail`` line under an eval (optionally ``expect fail msg: <text>``,
``expect fail regex: <re>``, and our ``expect fail type: <errorType>``), and expected series lines.
As Prometheus's own test.go, every instant eval is also re-run as a range query around the
same time and the middle step must agree.

Any engine works: ``run_script(path, make_engine)`` with ``make_engine(source) -> engine``. Anything else
that answers PromQL (a server over HTTP: tests/conformance) is checked the same way: ``parse_script`` gives
the script's phases (the series loaded at that point, the evals reading them) and ``check_eval(evaluator,
ev)`` the failures of one eval, ``evaluator`` having ``instant(expr, t_s)`` and ``range(expr, start_s, end_s,
step_s)``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from metricsgw.errors import GatewayError
from metricsgw.limits.context import QueryContext
from metricsgw.model import STALE_NAN, canonical
from metricsgw.promql.memsource import MemSource
from metricsgw.promql.value import Matrix, Scalar, String, Vector

_DUR = re.compile(r"(\d+)(ms|y|w|d|h|m|s)")
_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000, "y": 31_536_000_000}


def parse_duration_ms(s: str) -> int:
    s = s.strip()
    if re.fullmatch(r"-?\d+(\.\d+)?", s):
        return int(round(float(s) * 1000))
    pos, total = 0, 0
    for m in _DUR.finditer(s):
        if m.start() != pos:
            break
        total += int(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(s) or not s:
        raise ValueError(f"bad duration {s!r}")
    return total


_SERIES = re.compile(r'^\s*([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*(\{.*?\})?\s*(.*)$')
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def parse_series(text: str) -> tuple[tuple, str]:
    """'name{a="b"} rest' -> (labels, rest)."""
    text = text.strip()
    name, labels, pos = None, [], 0
    m = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", text)
    if m:
        name, pos = m.group(0), m.end()
    if pos < len(text) and text[pos] == "{":
        end = pos + 1
        while True:
            lm = _LABEL.match(text, end)
            if not lm:
                break
            val = bytes(lm.group(2), "utf-8").decode("unicode_escape")
            labels.append((lm.group(1), val))
            end = lm.end()
        end = text.index("}", end)
        pos = end + 1
    if name:
        labels.append(("__name__", name))
    return canonical(labels), text[pos:].strip()


def _num(s: str) -> float:
    low = s.lower()
    if low in ("nan",):
        return math.nan
    if low in ("inf", "+inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    if low.startswith(("0x", "-0x")):
        return float(int(s, 16))
    return float(s)


def expand_values(text: str) -> list[float | None]:
    """'1+2x3 _ stale 5' -> [1, 3, 5, 7, None, STALE_NAN, 5]; None is a skipped slot."""
    out: list[float | None] = []
    for tok in text.split():
        if tok == "_":
            out.append(None)
            continue
        if tok == "stale":
            out.append(STALE_NAN)
            continue
        m = re.fullmatch(r"_x(\d+)", tok)
        if m:
            out.extend([None] * int(m.group(1)))
            continue
        m = re.fullmatch(r"(-?[0-9.eE+]+|[-+]?Inf|NaN)([+-])([0-9.eE+]+)x(\d+)", tok)
        if m:
            start, sign, step, n = _num(m.group(1)), m.group(2), _num(m.group(3)), int(m.group(4))
            d = step if sign == "+" else -step
            out.extend(start + d * i for i in range(n + 1))
            continue
        m = re.fullmatch(r"(-?[0-9.eE+]+|[-+]?Inf|NaN)x(\d+)", tok)
        if m:
            out.extend([_num(m.group(1))] * (int(m.group(2)) + 1))
            continue
        out.append(_num(tok))
    return out


def almost_equal(a: float, b: float) -> bool:
    """Prometheus test.go's almostEqual (epsilon 1e-6)."""
    if math.isnan(a) and math.isnan(b):
        return True
    if a == b:
        return True
    diff = abs(a - b)
    min_normal = 2.2250738585072014e-308
    if a == 0 or b == 0 or diff < min_normal:
        return diff < 1e-6 * min_normal
    return diff / (abs(a) + abs(b)) < 1e-6


@dataclass
class Eval:
    line: int
    expr: str
    kind: str  # "instant" | "range"
    at_ms: int = 0
    start_ms: int = 0
    end_ms: int = 0
    step_ms: int = 0
    fail: bool = False
    fail_msg: str | None = None  # `expect fail msg: <exact error text>`
    fail_regex: str | None = None  # `expect fail regex: <RE matched against the error text>`
    fail_type: str | None = None  # `expect fail type: <errorType>` (ours: execution, bad_data, ...)
    ordered: bool = False
    expected: list[tuple[int, tuple, list[float]]] = field(default_factory=list)
    scalar: float | None = None


def _fmt(labels) -> str:
    return "{" + ", ".join(f'{n}="{v}"' for n, v in labels) + "}"


_EVAL_INSTANT = re.compile(r"^eval(_fail|_ordered)?\s+instant\s+at\s+(\S+)\s+(.+)$")
_EVAL_RANGE = re.compile(r"^eval(_fail|_ordered)?\s+range\s+from\s+(\S+)\s+to\s+(\S+)\s+step\s+(\S+)\s+(.+)$")


@dataclass
class Phase:
    """The series a script holds at one point (loaded since its last ``clear``; a later sample at the
    same t replaces the earlier one) and the evals that read them, up to the next ``load`` or ``clear``."""

    series: list[tuple[tuple, np.ndarray, np.ndarray]]  # (labels, t_ms, values), sorted by t, one per t
    evals: list[Eval]


def parse_script(path: str) -> tuple[list[Phase], list[str]]:
    """(the script's phases in order, a message per line that cannot be parsed)."""
    name = path.rsplit("/", 1)[-1]
    lines = open(path, encoding="utf-8").read().split("\n")
    loaded = MemSource()
    phases: list[Phase] = []
    failures: list[str] = []
    current: Phase | None = None  # the phase evals join; a load or clear ends it
    i = 0
    while i < len(lines):
        raw = lines[i]
        line = raw.strip()
        i += 1
        if not line or line.startswith("#"):
            continue
        if line == "clear":
            loaded.clear()
            current = None
            continue
        if line.startswith("load "):
            interval = parse_duration_ms(line.split(None, 1)[1])
            while i < len(lines) and lines[i].strip() and not lines[i].strip().startswith("#") and lines[i][:1] in " \t":
                labels, rest = parse_series(lines[i])
                vals = expand_values(rest)
                ts = [k * interval for k, v in enumerate(vals) if v is not None]
                vs = [v for v in vals if v is not None]
                if ts:
                    loaded.add(labels, np.array(ts, np.int64), np.array(vs, np.float64))
                i += 1
            current = None
            continue
        ev = _parse_eval(line, i)
        if ev is None:
            failures.append(f"{name}:{i}: cannot parse line: {line!r}")
            continue
        while i < len(lines) and lines[i].strip() and lines[i][:1] in " \t" or (
            i < len(lines) and lines[i].strip().startswith("expect ")
        ):
            body = lines[i].strip()
            i += 1
            if body.startswith("#"):
                continue
            if body.startswith("expect fail"):
                ev.fail = True
                kind, _, arg = body[len("expect fail"):].strip().partition(":")
                if kind in ("msg", "regex", "type"):
                    setattr(ev, "fail_" + kind, arg.strip())
                continue
            if body.startswith("expect ordered"):
                ev.ordered = True
                continue
            if re.fullmatch(r"[-+]?[0-9.eE+]+|[-+]?Inf|NaN", body):
                ev.scalar = _num(body)
                continue
            labels, rest = parse_series(body)
            ev.expected.append((i, labels, expand_values(rest)))
        if current is None:
            current = Phase(loaded.items(), [])
            phases.append(current)
        current.evals.append(ev)
    return phases, failures


def run_script(path: str, make_engine) -> tuple[int, list[str]]:
    """Run one .test file; returns (number of evals, list of failure messages)."""
    name = path.rsplit("/", 1)[-1]
    phases, failures = parse_script(path)
    n_evals = 0
    for phase in phases:
        source = MemSource()
        for labels, t, v in phase.series:
            source.add(labels, t, v)
        evaluator = EngineEvaluator(make_engine(source))
        for ev in phase.evals:
            n_evals += 1
            failures.extend(f"{name}:{ev.line}: {msg}" for msg in check_eval(evaluator, ev))
    return n_evals, failures


class EngineEvaluator:
    """What ``check_eval`` asks (``instant``, ``range``, seconds in, a Value out or a GatewayError raised),
    answered by an engine in this process, each query with a fresh QueryContext."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.ctx = QueryContext()  # the last query's: its annotations

    def instant(self, expr: str, t_s: float):
        self.ctx = QueryContext()
        return self.engine.instant(expr, t_s, self.ctx)

    def range(self, expr: str, start_s: float, end_s: float, step_s: float):
        self.ctx = QueryContext()
        return self.engine.range(expr, start_s, end_s, step_s, self.ctx)


def _parse_eval(line: str, lineno: int) -> Eval | None:
    m = _EVAL_INSTANT.match(line)
    if m:
        mod = m.group(1) or ""
        return Eval(lineno, m.group(3), "instant", at_ms=parse_duration_ms(m.group(2)),
                    fail=mod == "_fail", ordered=mod == "_ordered")
    m = _EVAL_RANGE.match(line)
    if m:
        mod = m.group(1) or ""
        return Eval(lineno, m.group(5), "range", start_ms=parse_duration_ms(m.group(2)),
                    end_ms=parse_duration_ms(m.group(3)), step_ms=parse_duration_ms(m.group(4)),
                    fail=mod == "_fail", ordered=mod == "_ordered")
    return None


def _run(evaluator, ev: Eval):
    if ev.kind == "instant":
        return evaluator.instant(ev.expr, ev.at_ms / 1000.0)
    return evaluator.range(ev.expr, ev.start_ms / 1000.0, ev.end_ms / 1000.0, ev.step_ms / 1000.0)


def _check_error(ev: Eval, err: GatewayError) -> list[str]:
    errs = []
    if ev.fail_type is not None and err.error_type != ev.fail_type:
        errs.append(f"{ev.expr}: got errorType {err.error_type} ({err}), want {ev.fail_type}")
    if ev.fail_msg is not None and str(err) != ev.fail_msg:
        errs.append(f"{ev.expr}: got error {str(err)!r}, want {ev.fail_msg!r}")
    if ev.fail_regex is not None and not re.search(ev.fail_regex, str(err)):
        errs.append(f"{ev.expr}: got error {str(err)!r}, want one matching {ev.fail_regex!r}")
    return errs


def check_eval(evaluator, ev: Eval) -> list[str]:
    """What is wrong with ``evaluator``'s answer to ``ev`` (nothing: an empty list)."""
    try:
        got = _run(evaluator, ev)
    except GatewayError as err:
        if ev.fail:
            return _check_error(ev, err)
        return [f"{ev.expr}: got error {type(err).__name__}: {err}, want a result"]
    except Exception as err:  # an engine bug: report it at the script line, keep going
        return [f"{ev.expr}: engine crashed: {type(err).__name__}: {err}"]
    if ev.fail:
        return [f"{ev.expr}: got a result, want an error"]
    if ev.kind == "range":
        return _check_matrix(ev, got)
    errs = _check_instant(ev, got)
    if not errs and isinstance(got, (Vector, Scalar)):
        errs = _check_as_range(evaluator, ev, got)
    return errs


def _check_instant(ev: Eval, got) -> list[str]:
    if ev.scalar is not None:
        if not isinstance(got, Scalar):
            return [f"{ev.expr}: got {type(got).__name__}, want scalar {ev.scalar}"]
        if not almost_equal(got.v, ev.scalar):
            return [f"{ev.expr}: got scalar {got.v}, want {ev.scalar}"]
        return []
    if isinstance(got, Scalar):
        return [f"{ev.expr}: got scalar {got.v}, want a vector"]
    if isinstance(got, String):
        return [f"{ev.expr}: got string {got.s!r}, want a vector"]
    if isinstance(got, Matrix):
        got_pairs = [(l, got.points(k)[1].tolist()) for k, l in enumerate(got.labels)]
        want = {l: v for _, l, v in ev.expected}
        errs = []
        for l, vals in got_pairs:
            if l not in want:
                errs.append(f"{ev.expr}: unexpected series {_fmt(l)} {vals}")
            elif len(vals) != len(want[l]) or not all(almost_equal(a, b) for a, b in zip(vals, want[l])):
                errs.append(f"{ev.expr}: series {_fmt(l)}: got {vals}, want {want[l]}")
        for l in set(want) - {l for l, _ in got_pairs}:
            errs.append(f"{ev.expr}: missing series {_fmt(l)}")
        return errs
    want = [(l, v[0]) for _, l, v in ev.expected]
    got_pairs = list(zip(got.labels, got.values.tolist()))
    errs = []
    wd = dict(want)
    gd = dict(got_pairs)
    if len(gd) != len(got_pairs):
        errs.append(f"{ev.expr}: result has duplicate label sets")
    for l, v in got_pairs:
        if l not in wd:
            errs.append(f"{ev.expr}: unexpected series {_fmt(l)} {v}")
        elif not almost_equal(v, wd[l]):
            errs.append(f"{ev.expr}: series {_fmt(l)}: got {v}, want {wd[l]}")
    for l, v in want:
        if l not in gd:
            errs.append(f"{ev.expr}: missing series {_fmt(l)} {v}")
    if not errs and ev.ordered and [l for l, _ in got_pairs] != [l for l, _ in want]:
        errs.append(f"{ev.expr}: got order {[_fmt(l) for l, _ in got_pairs]}, want {[_fmt(l) for l, _ in want]}")
    return errs


def _check_as_range(evaluator, ev: Eval, got) -> list[str]:
    """The same query as a range query around the instant must agree at the middle step."""
    t = ev.at_ms / 1000.0
    try:
        rng = evaluator.range(ev.expr, t - 60, t + 60, 60)
    except GatewayError as err:
        return [f"{ev.expr}: instant ok but as a range query: {type(err).__name__}: {err}"]
    mid = {}
    for k, l in enumerate(rng.labels):
        ts, vs = rng.points(k)
        hit = np.flatnonzero(ts == ev.at_ms)
        if len(hit):
            mid[l] = float(vs[hit[0]])
    if isinstance(got, Scalar):
        inst = {(): got.v}
    else:
        inst = dict(zip(got.labels, got.values.tolist()))
    if set(mid) != set(inst) or not all(almost_equal(mid[l], inst[l]) for l in inst):
        return [f"{ev.expr}: range query at the same time: got {mid}, instant gave {inst}"]
    return []


def _check_matrix(ev: Eval, got) -> list[str]:
    if not isinstance(got, Matrix):
        return [f"{ev.expr}: got {type(got).__name__}, want a matrix"]
    steps = list(range(ev.start_ms, ev.end_ms + 1, ev.step_ms))
    want = {}
    for _, l, vals in ev.expected:
        want[l] = {steps[k]: v for k, v in enumerate(vals) if v is not None and k < len(steps)}
    errs = []
    for k, l in enumerate(got.labels):
        ts, vs = got.points(k)
        pts = dict(zip(ts.tolist(), vs.tolist()))
        if l not in want:
            errs.append(f"{ev.expr}: unexpected series {_fmt(l)} {pts}")
            continue
        w = want[l]
        if set(pts) != set(w) or not all(almost_equal(pts[t], w[t]) for t in w):
            errs.append(f"{ev.expr}: series {_fmt(l)}: got {pts}, want {w}")
    for l in set(want) - set(got.labels):
        errs.append(f"{ev.expr}: missing series {_fmt(l)}")
    return errs
