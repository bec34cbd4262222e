"""A native histogram's counter reset hint (FloatHistogram.reset_hint) through Prometheus 3's arithmetic
(model/histogram/float_histogram.go of 3.14): what adding histograms makes of their hints, and when Prometheus
warns of conflicting counter resets.

The hints reach an answer only through its annotations (an answer's histograms do not show them): sum, avg,
sum_over_time and avg_over_time warn when their inputs hold both a counter reset and a not-reset (aggregation,
aggregationK... in engine.go and functions.go: a set of the hints seen, whatever their order), and ``+``/``-``
when its two sides do. Results carry the hint Prometheus gives them, so a later aggregation sees it.
"""

from __future__ import annotations

from collections.abc import Iterable

UNKNOWN, RESET, NOT_RESET, GAUGE = 0, 1, 2, 3  # the remote-write protocol's Histogram.ResetHint


def conflict(hints: Iterable[int]) -> bool:
    """Both a counter reset and a not-reset among ``hints``: Prometheus' "conflicting counter resets"."""
    seen = set(hints)
    return RESET in seen and NOT_RESET in seen


def combined(hints: Iterable[int]) -> int:
    """The hint of a sum of histograms, adjustCounterReset applied one after the other (the order does not
    change it): a gauge if any is one, else unknown if any is unknown or a reset meets a not-reset, else the
    hint they share."""
    seen = set(hints)
    if GAUGE in seen:
        return GAUGE
    if UNKNOWN in seen or len(seen) != 1:
        return UNKNOWN
    return seen.pop()
