"""Which Prometheus' PromQL a query is answered as (``--query.promql-compat``): 3, the default, or 2.

Where Prometheus 2.42 and 3.x answer the same query differently (docs/endpoints.md, "Prometheus 2 or 3"):
- windows: 3.x range selectors, subquery ranges and the lookback delta are left-open, ``(t - range, t]``: a
  sample exactly at the lower limit is out. 2.x windows are closed, ``[t - range, t]``.
- regular expressions: in 3.x ``.`` matches a newline too (``^(?s:re)$``), in label matchers and in
  ``label_replace``; in 2.x it does not (``^(?:re)$``).
- durations: 3.x takes a number as seconds (``foo[90]``, ``offset 5``); 2.x wants a unit.
- native histograms' ``histogram_quantile`` and ``histogram_fraction`` interpolate exponentially within
  exponential buckets in 3.x (native_quantile3.py), linearly in 2.x; 3.x's ``histogram_fraction`` takes
  classic histograms too (2.x answers nothing for them).
- the histogram trim operators ``</`` and ``>/`` are 3.x's (2.x: a parse error).
- ``holt_winters`` is called ``double_exponential_smoothing`` in 3.x; each version knows only its own name.
- ``limitk`` and ``limit_ratio`` (limits.py) are 3.x's aggregations; 2.42 reads them as unknown functions.
- rate/increase: 3.x shortens a start far from the first sample to half a sample gap before stopping it at
  the counter's zero point (by the count for histograms); 2.42 the other way round, and not for histograms.
- sum/avg add with Kahan compensation in 3.x; stddev/stdvar of a group with a NaN or an infinity is NaN;
  topk/bottomk fail on a NaN k; a quantile outside [0, 1] is warned of.
- ``atan2`` drops the metric name in 3.x; one-to-one matching fails on two matches on one side even where
  a filtering comparison drops them.
- native histograms: 3.x's answers where 2.42's were wrong or missing (irate, resets, comparisons, histograms
  meeting floats, Kahan sums...), with 3.x's annotations (``warnings``/``infos`` of the answer); under 2.x
  those stay refused. Where 2.42 is right the two agree.
"""

from __future__ import annotations

import re

import promql_parser as pp

from ..errors import BadData
from ..model import Matcher
from . import parser

PROMETHEUS_2, PROMETHEUS_3 = 2, 3
VERSIONS = (PROMETHEUS_2, PROMETHEUS_3)

# A function only the other version has: unknown, as that version's parser says.
_OTHER_VERSIONS_FUNCTIONS = {
    PROMETHEUS_2: {"double_exponential_smoothing", "first_over_time", "mad_over_time", "ts_of_first_over_time",
                   "ts_of_last_over_time", "ts_of_min_over_time", "ts_of_max_over_time", "sort_by_label",
                   "sort_by_label_desc"},
    PROMETHEUS_3: {"holt_winters"},
}
# Aggregations 2.42 does not know. Its lexer makes their name an identifier: followed by "(" it is an unknown
# function, followed by by/without (written before the arguments) that keyword is unexpected.
_LATER_AGGREGATIONS = ("limitk", "limit_ratio")
_LATER_AGGREGATION_TEXT = re.compile(r"\b(limitk|limit_ratio)\s*(\(|by\b|without\b)?", re.IGNORECASE)


def prometheus_3(version: int) -> bool:
    return version >= PROMETHEUS_3


def left_open(version: int) -> bool:
    return version >= PROMETHEUS_3


def dot_matches_newline(version: int) -> bool:
    return version >= PROMETHEUS_3


def matchers(ms: list[Matcher], version: int) -> list[Matcher]:
    """A selector's matchers as ``version`` reads their regexes. Matchers are compiled with ``.`` matching
    newlines (model.Matcher, as 3.x); for 2.x each regex goes in a group that clears the flag. The pattern
    itself is rewritten, rather than a flag carried beside it, because matchers travel to the ingest shards
    and peers in remote-read requests, which have no room for one."""
    if dot_matches_newline(version):
        return ms
    return [Matcher(m.name, m.op, f"(?-s:{m.value})") if m.op in ("=~", "!~") else m for m in ms]


def parse(query: str, version: int):
    """``query`` parsed as ``version``'s parser reads it: the tree, and its trim operators (parser.py; 3.x's)."""
    if version >= PROMETHEUS_3:
        node, trims = parser.parse_with_trims(query)
    else:
        node, trims = parser.parse(query, unitless_durations=False), {}
        _check_aggregations(node, query)
    _check_functions(node, version)
    return node, trims


def _check_aggregations(node, query: str) -> None:
    """Refuse under 2.x an aggregation only 3.x has, as 2.42's parser does (without the position it adds)."""
    later = [parser.op_name(n).lower() for n in _nodes(node)
             if isinstance(n, pp.AggregateExpr) and parser.op_name(n).lower() in _LATER_AGGREGATIONS]
    if not later:
        return
    text = parser.STRINGS.sub(lambda m: " " * len(m.group(0)), query)  # not a name inside a string
    for m in _LATER_AGGREGATION_TEXT.finditer(text):
        if m.group(2) == "(":
            raise BadData(f'invalid parameter "query": parse error: unknown function with name "{m.group(1)}"')
        if m.group(2):
            raise BadData(f'invalid parameter "query": parse error: unexpected <{m.group(2).lower()}>')
    raise BadData(f'invalid parameter "query": parse error: unknown function with name "{later[0]}"')


def _nodes(node):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(parser.children(n))


def _check_functions(node, version: int) -> None:
    """Refuse a function this version does not know, in the words of its parser."""
    unknown = _OTHER_VERSIONS_FUNCTIONS[version]
    for n in _nodes(node):
        if isinstance(n, pp.Call) and n.func.name in unknown:
            raise BadData(f'invalid parameter "query": parse error: unknown function with name "{n.func.name}"')
