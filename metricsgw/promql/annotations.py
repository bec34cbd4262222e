"""The words of Prometheus 3's annotations (util/annotations/annotations.go of 3.14), which an answer carries
in ``warnings`` and ``infos`` (QueryContext.annotate). Prometheus ends each with the position of the
expression in the query, ``(1:6)``; metricsgw has no positions from its parser and leaves them out."""

from __future__ import annotations

import math


def _g(v: float) -> str:
    """Go's %g of a float (for the values annotations quote)."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    text = repr(v)
    return text[:-2] if text.endswith(".0") else text


def _for_metric(text: str, name: str) -> str:
    return f'{text} for metric name "{name}"' if name else text


def invalid_quantile(q: float) -> str:
    return f"PromQL warning: quantile value should be between 0 and 1, got {_g(q)}"


def invalid_ratio(r: float, capped_to: float) -> str:
    return f"PromQL warning: ratio value should be between -1 and 1, got {_g(r)}, capping to {_g(capped_to)}"


def bad_bucket_label(name: str, value: str) -> str:
    return _for_metric(f'PromQL warning: bucket label "le" is missing or has a malformed value of "{value}"', name)


def mixed_floats_histograms(name: str) -> str:
    return f'PromQL warning: encountered a mix of histograms and floats for metric name "{name}"'


def mixed_classic_native(name: str) -> str:
    return _for_metric("PromQL warning: vector contains a mix of classic and native histograms", name)


def not_counter(name: str) -> str:
    return f'PromQL warning: this native histogram metric is not a counter: "{name}"'


def not_gauge(name: str) -> str:
    return f'PromQL warning: this native histogram metric is not a gauge: "{name}"'


def mixed_exponential_custom(name: str) -> str:
    return ("PromQL warning: vector contains a mix of histograms with exponential and custom buckets schemas "
            f'for metric name "{name}"')


def incompatible_types(lhs: str, op: str, rhs: str) -> str:
    return f'PromQL info: incompatible sample types encountered for binary operator "{op}": {lhs} {op} {rhs}'


def histogram_ignored(aggregation: str) -> str:
    return f"PromQL info: ignored histogram in {aggregation} aggregation"


SORT_IN_RANGE_QUERY = "PromQL warning: sort is ineffective for range queries since results are always ordered by labels"
MIXED_FLOATS_HISTOGRAMS_AGGREGATION = "PromQL warning: encountered a mix of histograms and floats for aggregation"


def counter_reset_collision(operation: str) -> str:
    """``operation``: aggregation, addition or subtraction."""
    return f"PromQL warning: conflicting counter resets during histogram {operation}"


def mismatched_custom_buckets(operation: str) -> str:
    """``operation``: aggregation, addition or subtraction."""
    return f"PromQL info: mismatched custom buckets were reconciled during {operation}"


def quantile_nan_result(name: str) -> str:
    return _for_metric("PromQL info: input to histogram_quantile has NaN observations, result is NaN", name)


def quantile_nan_skew(name: str) -> str:
    return _for_metric("PromQL info: input to histogram_quantile has NaN observations, result is skewed higher", name)


def fraction_nans(name: str) -> str:
    return _for_metric("PromQL info: input to histogram_fraction has NaN observations, which are excluded from all "
                       "fractions", name)


def forced_monotonicity(name: str) -> str:
    return _for_metric("PromQL info: input to histogram_quantile needed to be fixed for monotonicity (see "
                       "https://prometheus.io/docs/prometheus/latest/querying/functions/#histogram_quantile)", name)


def histogram_ignored_in_mixed_range(name: str) -> str:
    return ('PromQL info: ignored histograms in a range containing both floats and histograms for metric name '
            f'"{name}"')
