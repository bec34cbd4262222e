"""What --query.max-samples counts for an aggregation's argument evaluated in batches (promql/batching.py):
Prometheus's count for the whole argument, replayed from what each batch recorded.

A batch is evaluated from a count of zero, beside its own series only, while Prometheus holds every series'
points at each node of the argument. So each batch records what its evaluation gave: at the bottom node (the
selector or range function) its own peak, what it left held and its points at each step; at each row-by-row
step above it (an instant function, an operator with a number) its points at each step. Summed over the
batches in order, these are what the whole evaluation has at those nodes, because every step above the bottom
maps one row to at most one row; ``Tally`` replays held.py's rules on the sums, node by node in Prometheus's
order of evaluation.
"""

from __future__ import annotations

import numpy as np
import promql_parser as pp

from . import held, parser


class Recorder:
    """One batch's evaluation, watched: installed as the batch engine's ``eval``."""

    def __init__(self, engine, bottom, step_nodes: set[int], steps: int) -> None:
        self._eval = type(engine).eval.__get__(engine)  # the engine's own, which recurses through this one
        self.bottom, self.step_nodes, self.steps = bottom, step_nodes, steps
        self.out: dict[int, np.ndarray] = {}
        self.bottom_peak = self.bottom_after = 0
        engine.eval = self

    def __call__(self, node, env):
        if node is self.bottom:
            ctx = env.ctx
            before = ctx.samples
            value = self._eval(node, env)
            # the bottom is the first node that holds more than a literal's points: the peak so far is its own
            self.bottom_peak, self.bottom_after = ctx.peak_samples - before, ctx.samples - before
            self.out[id(node)] = held.per_step(value, self.steps)
            return value
        value = self._eval(node, env)
        if id(node) in self.step_nodes:
            self.out[id(node)] = held.per_step(value, self.steps)
        return value


class Tally:
    """The whole argument's count, from the batches' records added in the query's order."""

    def __init__(self, expr, bottom, steps: int) -> None:
        self.expr, self.bottom, self.steps = expr, bottom, steps
        self.out: dict[int, np.ndarray] = {}
        # A range function's number arguments (quantile_over_time's 0.9) hold a point a step, once however many
        # series: every batch counted them, the whole holds them once, beside its series.
        literals = sum(isinstance(parser.unwrap(a), pp.NumberLiteral) for a in getattr(bottom, "args", ()))
        self.literal_points = literals * steps
        self.bottom_peak = 0  # the bottom node's series' peak over the batches so far, as one evaluation holds it
        self.bottom_after = 0

    def add(self, rec: Recorder) -> None:
        self.bottom_peak = max(self.bottom_peak, self.bottom_after + rec.bottom_peak - self.literal_points)
        self.bottom_after += rec.bottom_after - self.literal_points
        for key, per_step in rec.out.items():
            if key in self.out:
                self.out[key] = self.out[key] + per_step
            else:
                self.out[key] = per_step

    def count(self) -> tuple[int, int]:
        """(peak, held after), relative to what was held before the argument."""
        peak, after, _ = self._replay(self.expr, 0, [])
        return peak, after

    def first_over(self, limit: int) -> str | None:
        """The first node, in order of evaluation, whose count passes ``limit`` (None: none does)."""
        peaks: list[tuple[int, str]] = []
        self._replay(self.expr, 0, peaks)
        return next((stage for peak, stage in peaks if peak > limit), None)

    def _replay(self, node, now: int, peaks: list) -> tuple[int, int, np.ndarray]:
        """(peak, held after, points at each step) of ``node`` evaluated with ``now`` held."""
        node = parser.unwrap(node)
        zeros = np.zeros(self.steps, np.int64)
        if node is self.bottom:
            stage = f"{node.func.name}()" if isinstance(node, pp.Call) else "instant vector selection"
            now += self.literal_points
            peaks.append((now + self.bottom_peak, stage))
            return now + self.bottom_peak, now + self.bottom_after, self.out.get(id(node), zeros)
        if isinstance(node, pp.NumberLiteral):  # held.step_by_step over a scalar: one point a step, kept
            ones = np.ones(self.steps, np.int64)
            peaks.append((now + self.steps, "number literal"))
            return now + self.steps, now + self.steps, ones
        if isinstance(node, pp.StringLiteral):
            return now, now, zeros
        if isinstance(node, pp.UnaryExpr):  # the engine negates its argument's value in place of a step
            return self._replay(node.expr, now, peaks)
        base = now
        peak = now
        inputs = zeros.copy()
        args = [node.lhs, node.rhs] if isinstance(node, pp.BinaryExpr) else list(node.args)
        for arg in args:
            p, now, out = self._replay(arg, now, peaks)
            peak = max(peak, p)
            inputs += out
        res = self.out.get(id(node), zeros)
        stage = "binary operation" if isinstance(node, pp.BinaryExpr) else f"{node.func.name}()"
        done = np.cumsum(res)
        if not len(done):
            peaks.append((now, stage))
            return max(peak, now), base, res
        top = now + int((done + inputs).max())
        peaks.append((top, stage))
        return max(peak, top), base + int(done[-1]), res
