"""The golden ``.test`` scripts (tests/promql/testdata) as one load and one list of evals for any store.

Every phase of every script (the series a script holds at one point, and the evals reading them:
promqltest.parse_script) is written into the same store, its series tagged with the phase
(isolate.py), and each eval asked with its selectors tagged the same way and the tag taken off
the answer. So one set of gateways answers all the scripts; the expected values are the scripts'.
"""

from __future__ import annotations

import dataclasses
import glob
import os

from metricsgw.model import canonical
from metricsgw.promql.value import Matrix, Vector
from tests.conformance.isolate import LABEL, tag_selectors, untag
from tests.promql.promqltest import Phase, check_eval, parse_script

TESTDATA = os.path.join(os.path.dirname(__file__), "..", "promql", "testdata")
SCRIPTS = sorted(os.path.basename(p) for p in glob.glob(os.path.join(TESTDATA, "*.test")))


@dataclasses.dataclass
class TaggedPhase:
    script: str
    tag: str
    phase: Phase


def phases() -> tuple[list[TaggedPhase], dict[str, list[str]]]:
    """(every script's phases, each tagged; per script, the lines that cannot be parsed)."""
    out, unparsed = [], {}
    for script in SCRIPTS:
        got, unparsed[script] = parse_script(os.path.join(TESTDATA, script))
        out += [TaggedPhase(script, f"{script.removesuffix('.test')}/{k}", p) for k, p in enumerate(got)]
    return out, unparsed


def series(tagged: list[TaggedPhase]) -> list[tuple]:
    """Every phase's series, tagged: (labels, t_ms, values)."""
    return [(canonical([*labels, (LABEL, p.tag)]), t, v) for p in tagged for labels, t, v in p.phase.series]


class Tagged:
    """An evaluator asked with the phase's tag in every selector, answering without it."""

    def __init__(self, inner, tag: str) -> None:
        self.inner, self.tag = inner, tag

    def instant(self, expr: str, t_s: float):
        return _untagged(self.inner.instant(tag_selectors(expr, self.tag), t_s))

    def range(self, expr: str, start_s: float, end_s: float, step_s: float):
        return _untagged(self.inner.range(tag_selectors(expr, self.tag), start_s, end_s, step_s))


def _untagged(value):
    if isinstance(value, (Vector, Matrix)):
        return dataclasses.replace(value, labels=[untag(lb) for lb in value.labels])
    return value


def failures(evaluator, tagged: list[TaggedPhase]) -> dict[str, list[str]]:
    """Per script, what ``evaluator`` (over a store holding ``series(tagged)``) answers wrong; an evaluator
    with a ``warned`` list (http_eval.py) fails an eval whose answers came with warnings, too."""
    out: dict[str, list[str]] = {script: [] for script in SCRIPTS}
    warned = getattr(evaluator, "warned", [])
    for p in tagged:
        ask = Tagged(evaluator, p.tag)
        for ev in p.phase.evals:
            msgs = check_eval(ask, ev)
            if warned:
                msgs.append(f"{ev.expr}: answered with warnings: {warned}")
                warned.clear()
            out[p.script] += [f"{p.script}:{ev.line}: {msg}" for msg in msgs]
    return out
