"""Histogram selections: the histograms an instant or range selector selects, kept as their stored bytes
(native.Decoded) and indexed by the float selection machinery (selectors.instant / selectors.ranges) as values;
a stale histogram carries the stale marker. native_eval.py evaluates everything above them.

An instant selector's histograms are needed by both its float evaluation (a series' newest sample may be a
histogram: ``newest_only``) and its histogram one, so they are made once per selector, source and env
(``Env.histogram_selections``).
"""

from __future__ import annotations

import numpy as np
import promql_parser as pp

from ..model import METRIC_NAME, STALE_NAN
from . import native, parser, selectors, stats_decoding
from .native_values import HistRanges, HistSeries
from .value import Series


def _load(engine, ms, start: int, end: int, env) -> tuple[selectors.Loaded, native.Decoded] | None:
    source = engine.source
    if not hasattr(source, "histogram_metrics"):
        return None
    names = [m for m in ms if m.name == METRIC_NAME]
    # A source over peers knows their histogram metrics only once asked for this selection.
    held = (source.histogram_metrics_in(ms, start, end, env.ctx) if hasattr(source, "histogram_metrics_in")
            else source.histogram_metrics())
    if not any(all(m.matches(name) for m in names) for name in held):
        return None  # no metric of the selector has histograms: no second series selection for floats
    ss = source.select_series(ms, start, end, env.ctx)
    if not len(ss):
        return None
    block = source.read_histograms(ss.ids, start, end, env.ctx)
    if not len(block):
        return None
    hists = native.Decoded(block.blob, env.ctx)
    values = np.arange(len(hists), dtype=np.float64)
    values[hists.stale()] = STALE_NAN
    starts = np.concatenate([[0], np.flatnonzero(block.sid[1:] != block.sid[:-1]) + 1])
    offsets = np.concatenate([starts, [len(block)]]).astype(np.int64)
    by_sid = np.argsort(ss.ids, kind="stable")
    pos = by_sid[np.searchsorted(ss.ids, block.sid[starts], sorter=by_sid)]
    return selectors.Loaded([ss.labels[i] for i in pos.tolist()], block.t, values, offsets,
                            np.argsort(pos, kind="stable")), hists


def select(engine, node: "pp.VectorSelector", env) -> HistSeries | None:
    """Histograms of the selector at every step, or None when the source holds none there; a step whose
    newest sample of a series is a float has no histogram."""
    hists = histogram_selection(engine, node, env)
    if hists is None:
        return None
    series = newest_only(hists.series, engine.float_selection(node, env))
    return HistSeries(series, hists.hists) if series.mask.any() else None


def newest_only(s: Series, other: Series) -> Series:
    """``s`` without the points where ``other`` (the same selector's samples of the other kind) holds a
    newer sample of the series: an instant selector answers each series' newest sample, float or histogram."""
    rows = {lb: i for i, lb in enumerate(other.labels)}
    mine = [(i, rows[lb]) for i, lb in enumerate(s.labels) if lb in rows]
    if not mine:
        return s
    a, b = (np.array(x, np.int64) for x in zip(*mine))
    newer = other.mask[b] & (other.sample_t[b] > s.sample_t[a])
    if not newer.any():
        return s
    mask = s.mask.copy()
    mask[a] &= ~newer
    return Series(s.labels, np.where(mask, s.values, 0.0), mask, np.where(mask, s.sample_t, 0)).compact()


def histogram_selection(engine, node: "pp.VectorSelector", env) -> HistSeries | None:
    """Each series' newest histogram sample within the lookback, whatever float samples it has (made once per
    selector, source and env: ``Env.histogram_selections``)."""
    key = (id(node), id(engine.source))
    made = env.histogram_selections.get(key)
    if made is not None and made[0] is node and made[1] is engine.source:
        return made[2]
    out = _histogram_selection(engine, node, env)
    env.histogram_selections[key] = (node, engine.source, out)
    return out


def _histogram_selection(engine, node: "pp.VectorSelector", env) -> HistSeries | None:
    ref = engine.ref_times(node, env)
    ms, start, end = engine.selector_window(node, env)
    got = _load(engine, ms, start, end, env)
    if got is None:
        return None
    loaded, hists = got
    env.ctx.charge_points(max(0, len(loaded.labels) * len(ref) - len(loaded.t)), "histogram selection")
    if id(node) in env.stats:
        hists = stats_decoding.instant_hints(loaded, hists, ref, engine.lookback_ms, engine.left_open)
    series = selectors.instant(loaded, ref, engine.lookback_ms, engine.left_open)
    return HistSeries(series, hists) if len(series) else None


def select_ranges(engine, node: "pp.MatrixSelector", env) -> HistRanges | None:
    """The histograms in each step's window (stale markers left out), or None when there are none."""
    ms, start, end = engine.selector_window(node, env)
    got = _load(engine, ms, start, end, env)
    if got is None:
        return None
    loaded, hists = got
    ref, rng = engine.ref_times(node.vector_selector, env), parser.duration_ms(node.range)
    if id(node.vector_selector) in env.stats:
        hists = stats_decoding.range_hints(loaded, hists, ref, rng, engine.left_open)
    r = selectors.ranges(loaded, ref, rng, engine.left_open)
    return HistRanges(r, hists) if (r.hi > r.lo).any() else None
