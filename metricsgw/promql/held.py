"""What --query.max-samples counts in a PromQL query: Prometheus 2.42's ``currentSamples``.

Prometheus's engine (promql/engine.go) counts the points its evaluation holds at once, not the
raw samples it reads: an instant selector holds one point per series per step it finds a
sample for; a range function holds one series' window at a time plus the output points made
so far; operators, aggregations and other functions hold, step by step, that step's input
points beside their arguments' results and their own output. A query is refused the moment
that count would pass the limit. Its peak is worked out here per node, vectorised, from what
the engine has computed anyway (masks, window bounds), and handed to ``ctx.count_held``, whose
``samples`` follows ``currentSamples`` from node to node in Prometheus's order of evaluation
(arguments left to right, each leaving its result held). Raw samples are still charged, in
bytes, by the storage as they load (limits/context.py).
"""

from __future__ import annotations

import numpy as np

from .value import Ranges, ScalarSteps, Series

# Range functions that give a point only for windows of at least two samples (2.42's
# extrapolatedRate, instantValue, deriv, predict_linear, holt_winters return nothing below).
TWO_SAMPLE_FUNCS = {"rate", "increase", "delta", "irate", "idelta", "deriv", "predict_linear", "holt_winters",
                    "double_exponential_smoothing"}


def per_step(value, steps: int) -> np.ndarray:
    """Points a value holds at each step: an instant vector's present ones, a scalar's one."""
    if isinstance(value, Series):
        return value.mask.sum(axis=0, dtype=np.int64)
    if isinstance(value, ScalarSteps):
        return np.ones(steps, np.int64)
    return np.zeros(steps, np.int64)


def selected(ctx, s: Series, stage: str) -> None:
    """A vector selector: every point found is counted as it is taken, and all stay held."""
    found = int(s.mask.sum())
    ctx.count_held(ctx.samples + found, ctx.samples + found, stage)


def windows(ctx, r: Ranges, stage: str) -> None:
    """A matrix selector evaluated as such (an instant query of ``x[5m]``): all its windows' samples."""
    inside = int((r.hi - r.lo).sum())
    ctx.count_held(ctx.samples + inside, ctx.samples + inside, stage)


def step_by_step(ctx, base: int, inputs: np.ndarray, result, stage: str, held: int | None = None) -> None:
    """2.42's rangeEval. ``base``: held before the node's arguments; ``held`` (default: now) with
    their results. At step k it holds, on top of ``held``, step k's input points (``inputs[k]``)
    and the output of steps 0..k; afterwards only the node's output is held beside ``base``."""
    held = ctx.samples if held is None else held
    done = np.cumsum(per_step(result, len(inputs)))
    if not len(done):
        ctx.count_held(held, base, stage)
        return
    ctx.count_held(held + int((done + inputs).max()), base + int(done[-1]), stage)


def series_by_series(ctx, name: str, r: Ranges, stage: str) -> None:
    """A range function (2.42's Call with a matrix argument) over ``r``, with its other arguments'
    results held already: series by series, in order, it holds the series' current window beside
    the output of the series before; a series' last window is still held when its output points
    are added. Afterwards its output stays held and a subquery's result (``r.held``) goes."""
    w = r.hi - r.lo  # [series, steps]: every window's samples
    if not w.size:
        ctx.count_held(ctx.samples, ctx.samples - r.held, stage)
        return
    out = (w >= (2 if name in TWO_SAMPLE_FUNCS else 1)).sum(axis=1)
    before = np.cumsum(out) - out
    own = np.maximum(w.max(axis=1), w[:, -1] + out)
    ctx.count_held(ctx.samples + int((before + own).max()), ctx.samples - r.held + int(out.sum()), stage)


def fold_part(ctx, part, stage: str) -> None:
    """A part of the query evaluated from a count of zero (a batch of series, promql/batching.py),
    taken in the query's order: its peak and what it leaves held, on top of what is held now."""
    ctx.count_held(ctx.samples + part.peak_samples, ctx.samples + part.samples, stage)
