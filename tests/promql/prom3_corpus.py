"""A runner for Prometheus 3's promqltest scripts (tests/promql/testdata3/, taken from Prometheus 3.14):
the 2.42 DSL of promqltest.py plus native histograms in the notation of histogram_notation.py, in loads and
in expected values, and the ``expect`` lines of 3.x (``expect fail [msg|regex]:``, ``expect ordered``,
``expect range vector from A to B step S``, ``expect string "..."``, ``expect [no_]warn|info [msg|regex:]``:
the annotations are checked as promqltest does, only those an eval asks about).

``run(path, make_engine)`` gives each eval's script line and what is wrong with the engine's answer (None:
nothing). Results compare floats with test.go's almostEqual and histograms with compareNativeHistogram;
the order of an ``expect ordered`` result is not checked.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field

from metricsgw.errors import GatewayError
from metricsgw.model import STALE_NAN
from metricsgw.promql.memsource import MemSource
from metricsgw.promql.native import FloatHistogram
from metricsgw.promql.value import Matrix, Scalar, String, Vector
from tests.promql import histogram_notation as hn
from tests.promql import nhcb_load
from tests.promql.promqltest import (EngineEvaluator, Eval, _check_error, _fmt, _num, _parse_eval, almost_equal,
                                     parse_duration_ms, parse_series)

_ANNOTATION = re.compile(r"expect (no_)?(warn|info)(?:\s+(msg|regex):(.*))?$")
_LOAD = re.compile(r"load(_with_nhcb)?\s+(\S+)$")
_RANGE_VECTOR = re.compile(r"expect range vector from (\S+) to (\S+) step (\S+)$")


@dataclass
class Case:
    ev: Eval
    want: list[tuple[tuple, list]] = field(default_factory=list)  # (labels, values: float | NH | None)
    range_vector: tuple[int, int, int] | None = None  # an instant query answering a matrix: its steps
    string: str | None = None
    unparsed: str | None = None
    # "warn"/"info" -> the expectations of its annotations: True (some), False (none: no_warn), or
    # ("msg"|"regex", text) for each one that must be there
    annotations: dict = field(default_factory=dict)


def _load(source: MemSource, lines: list[str], interval: int, with_nhcb: bool) -> None:
    classic = []
    for line in lines:
        labels, rest = parse_series(line)
        if rest.startswith("@st"):  # a series' start timestamps (3.x): not kept (docs/promql-corpus.md)
            continue
        values = hn.expand(rest)
        hist = any(isinstance(v, hn.NH) for v in values)
        floats = [(k * interval, v) for k, v in enumerate(values) if isinstance(v, float) or (v == "stale" and not hist)]
        if floats:
            source.add(labels, [t for t, _ in floats], [STALE_NAN if v == "stale" else v for _, v in floats])
            classic.append((labels, [(t, v) for t, v in floats if v != "stale"]))
        marks = [(k * interval, v) for k, v in enumerate(values) if isinstance(v, hn.NH) or (v == "stale" and hist)]
        if marks:
            source.add_histograms(labels, [t for t, _ in marks],
                                  [hn.blob(hn.NH() if v == "stale" else v, t, v == "stale") for t, v in marks])
    for labels, points in nhcb_load.histograms(classic) if with_nhcb else ():
        source.add_histograms(labels, [t for t, _ in points], [hn.blob(h, t) for t, h in points])


def _go_unquote(literal: str) -> str:
    """Go's strconv.Unquote, as Prometheus' runner reads ``expect string``: a raw `...` string as written, a
    "..." string with its escapes."""
    if len(literal) >= 2 and literal[0] == literal[-1] == "`":
        return literal[1:-1]
    return json.loads(literal)


def _expect(case: Case, body: str) -> None:
    ev = case.ev
    if body.startswith("expect fail"):
        ev.fail = True
        kind, _, arg = body[len("expect fail"):].strip().partition(":")
        if kind in ("msg", "regex"):
            setattr(ev, "fail_" + kind, arg.strip())
    elif body == "expect ordered":
        ev.ordered = True
    elif _RANGE_VECTOR.match(body):
        case.range_vector = tuple(parse_duration_ms(x) for x in _RANGE_VECTOR.match(body).groups())
    elif body.startswith("expect string"):
        case.string = _go_unquote(body[len("expect string"):].strip())
    elif _ANNOTATION.match(body):
        no, kind, how, text = _ANNOTATION.match(body).groups()
        got = case.annotations.setdefault(kind, [])
        got.append(False if no else (how, text.strip()) if how else True)
    else:
        case.unparsed = body


def parse(path: str) -> list[tuple[MemSource, list[Case]]]:
    """The script's phases: the source its loads built (a later load adds to a copy of it, ``clear`` starts
    anew) and the evals that read it."""
    lines = open(path, encoding="utf-8").read().split("\n")
    phases: list[tuple[MemSource, list[Case]]] = [(MemSource(), [])]
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        at = i  # the line's number (1-based), whatever comments its body holds
        body = []
        while i < len(lines) and lines[i].strip() and (lines[i][:1] in " \t" or lines[i].startswith("expect")):
            if not lines[i].strip().startswith("#"):
                body.append(lines[i].strip())
            i += 1
        if not line or line.startswith("#"):
            continue
        if line == "clear":
            phases.append((MemSource(), []))
        elif _LOAD.match(line):
            # The evals after this load see it, those before it do not: they read the source as it was.
            phases.append((copy.deepcopy(phases[-1][0]), []))
            with_nhcb, interval = _LOAD.match(line).groups()
            _load(phases[-1][0], body, parse_duration_ms(interval), bool(with_nhcb))
        elif line.startswith("eval"):
            ev = _parse_eval(re.sub(r"^eval_(warn|info)\b", "eval", line), at)
            case = Case(ev or Eval(at, line, "instant"), unparsed=None if ev else line)
            for b in body:
                if b.startswith("expect"):
                    _expect(case, b)
                elif re.fullmatch(r"[-+]?[0-9.eE+]+|[-+]?Inf|NaN", b):
                    case.ev.scalar = _num(b)
                else:
                    labels, rest = parse_series(b)
                    case.want.append((labels, hn.expand(rest)))
            phases[-1][1].append(case)
        else:
            phases[-1][1].append(Case(Eval(at, line, "instant"), unparsed=line))
    return phases


def run(path: str, make_engine) -> dict[int, str | None]:
    """Each eval's line -> what is wrong (None: the answer is Prometheus 3's)."""
    out: dict[int, str | None] = {}
    for source, cases in parse(path):
        evaluator = EngineEvaluator(make_engine(source))
        for case in cases:
            out[case.ev.line] = _check(evaluator, case)
    return out


def _value(v):
    return hn.of(v) if isinstance(v, FloatHistogram) else float(v)


def _same(want, got) -> bool:
    if isinstance(want, hn.NH) or isinstance(got, hn.NH):
        return isinstance(want, hn.NH) and isinstance(got, hn.NH) and hn.equal(want, got)
    return almost_equal(got, want)


def _check(evaluator, case: Case) -> str | None:
    ev = case.ev
    if case.unparsed is not None:
        return f"not understood: {case.unparsed!r}"
    try:
        if ev.kind == "instant":
            got = evaluator.instant(ev.expr, ev.at_ms / 1000.0)
        else:
            got = evaluator.range(ev.expr, ev.start_ms / 1000.0, ev.end_ms / 1000.0, ev.step_ms / 1000.0)
    except GatewayError as err:
        return "; ".join(_check_error(ev, err)) or None if ev.fail else f"error {type(err).__name__}: {err}"
    except Exception as err:  # an engine bug: reported at its line, the run goes on
        return f"engine crashed: {type(err).__name__}: {err}"
    if ev.fail:
        return "got a result, want an error"
    problem = _check_annotations(case, evaluator.ctx)
    if problem:
        return problem
    if case.string is not None:
        return None if isinstance(got, String) and got.s == case.string else f"got {got}, want string {case.string!r}"
    if ev.scalar is not None:
        return None if isinstance(got, Scalar) and almost_equal(got.v, ev.scalar) else f"got {got}, want {ev.scalar}"
    if isinstance(got, Vector) and case.range_vector is None and ev.kind == "instant":
        have = {lb: [_value(v)] for lb, v in zip(got.labels + got.hist_labels, got.values.tolist() + got.hists)}
        want = {lb: vals[:1] for lb, vals in case.want}
        return _compare(have, want)
    if isinstance(got, Matrix):
        start, end, step = case.range_vector or (ev.start_ms, ev.end_ms, ev.step_ms)
        steps = list(range(start, end + 1, step)) if step else []
        have = {lb: dict(zip(got.points(k)[0].tolist(), map(_value, got.points(k)[1].tolist())))
                for k, lb in enumerate(got.labels)}
        for lb, t_ms, hists in got.hist_rows:
            have.setdefault(lb, {}).update(zip(t_ms.tolist(), map(_value, hists)))
        want = {lb: {steps[k]: v for k, v in enumerate(vals) if v is not None and k < len(steps)} for lb, vals in case.want}
        return _compare({lb: sorted(p.items()) for lb, p in have.items()}, {lb: sorted(p.items()) for lb, p in want.items()})
    return f"got a {type(got).__name__}, want {'a matrix' if case.range_vector else 'a vector'}"


def _check_annotations(case: Case, ctx) -> str | None:
    """checkAnnotations of promqltest: only what the eval's expect lines ask is checked."""
    for kind, got in (("warn", ctx.warnings), ("info", ctx.infos)):
        for want in case.annotations.get(kind, []):
            if want is True and not got:
                return f"expected {kind} annotations, got none"
            if want is False and got:
                return f"unexpected {kind} annotations: {got}"
            if isinstance(want, tuple):
                how, text = want
                if not any((a == text) if how == "msg" else re.search(text, a) for a in got):
                    return f"expected {kind} annotation {how} {text!r}, got {got}"
    return None


def _compare(have: dict, want: dict) -> str | None:
    problems = []
    for lb in sorted(set(have) | set(want)):
        h, w = have.get(lb), want.get(lb)
        if h is None or w is None:
            problems.append(f"{'missing' if h is None else 'unexpected'} {_fmt(lb)}")
            continue
        pairs = [(a, b) for a, b in zip(h, w)]
        if len(h) != len(w) or not all(_same(b[1] if isinstance(b, tuple) else b, a[1] if isinstance(a, tuple) else a)
                                       and (not isinstance(a, tuple) or a[0] == b[0]) for a, b in pairs):
            problems.append(f"{_fmt(lb)}: got {[hn.show(x) for x in h][:4]}, want {[hn.show(x) for x in w][:4]}")
    return "; ".join(problems[:3]) or None

