"""Many golden-script phases in one store: each phase's series carry a label naming the phase, and every
selector of its queries a matcher for that label; the label is taken off the answers again.

The scripts' timestamps are absolute (they start at 0 and ``time()``, ``timestamp()`` and ``@`` read them),
so phases cannot be told apart by time; and most phases load the same metric names (``http_requests``)
with other values, so without the label each would need a store of its own, i.e. gateways started anew.

``tag_selectors`` rewrites the query text rather than a parsed tree because promql_parser's rendering
does not round-trip (it unescapes strings, expands 1e-300). It is a small lexer: strings, numbers and
durations are skipped, a ``{...}`` is a selector's matchers, an identifier is a metric name unless it is a
keyword, a function or aggregation (followed by ``(``), a label of a ``by``/``on``/... list, or a label
inside braces. Whatever it gets wrong shows as a failed golden eval on the in-memory double, which
evaluates exactly the rewritten queries the gateways do.
"""

from __future__ import annotations

import re

LABEL = "conformance_phase"

_KEYWORDS = {"and", "or", "unless", "atan2", "bool", "offset", "by", "without", "on", "ignoring",
             "group_left", "group_right", "inf", "nan"}
_LISTS = {"by", "without", "on", "ignoring", "group_left", "group_right"}  # followed by a label list
_AGGREGATIONS = {"sum", "avg", "count", "min", "max", "stddev", "stdvar", "topk", "bottomk", "quantile",
                 "count_values", "group"}
_MODIFIER = re.compile(r"(?i)(by|without)\s*\(")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_NUMBER = re.compile(r"(?:0[xX][0-9a-fA-F]+|[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)(?:[a-zA-Z0-9]*)")


def tag_selectors(query: str, phase: str) -> str:
    """``query`` with ``LABEL="<phase>"`` added to every series selector."""
    matcher = f'{LABEL}="{phase}"'
    out: list[str] = []
    i, n = 0, len(query)
    pending_list = False  # the last identifier was by/on/...: a "(" now opens a label list
    while i < n:
        c = query[i]
        if c in "\"'`":
            m = _STRING.match(query, i)
            out.append(m.group(0))
            i = m.end()
            continue
        if c == "#":  # a comment runs to the end of the line
            j = query.find("\n", i)
            j = n if j < 0 else j
            out.append(query[i:j])
            i = j
            continue
        if c == "{":  # a selector without a metric name
            j = _closing_brace(query, i)
            out.append(_with_matcher(query[i:j + 1], matcher))
            i = j + 1
            continue
        if c == "(" and pending_list:
            j = query.index(")", i)
            out.append(query[i:j + 1])
            i = j + 1
            pending_list = False
            continue
        if c == "[":  # a range or subquery duration
            j = query.index("]", i)
            out.append(query[i:j + 1])
            i = j + 1
            continue
        if c.isdigit() or (c == "." and i + 1 < n and query[i + 1].isdigit()):
            m = _NUMBER.match(query, i)
            out.append(m.group(0))
            i = m.end()
            continue
        m = _IDENT.match(query, i)
        if m:
            word = m.group(0)
            i = m.end()
            pending_list = word.lower() in _LISTS
            rest = query[i:].lstrip()
            if word.lower() == "ignoring":  # the tag is one more label to ignore: a side without it still matches
                j = query.index(")", i)
                out.append(query[m.start():j].rstrip().rstrip(",") + (", " if query[i:j].strip(" (") else "")
                           + LABEL + ")")
                i = j + 1
                pending_list = False
            elif word.lower() in _KEYWORDS or rest.startswith("(") or (
                    word.lower() in _AGGREGATIONS and _MODIFIER.match(rest)):
                out.append(word)
            elif rest.startswith("{"):
                j = _closing_brace(query, query.index("{", i))
                out.append(word + _with_matcher(query[query.index("{", i):j + 1], matcher))
                i = j + 1
            else:
                out.append(f"{word}{{{matcher}}}")
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _closing_brace(query: str, i: int) -> int:
    j = i + 1
    while query[j] != "}":
        if query[j] in "\"'`":
            j = _STRING.match(query, j).end()
        else:
            j += 1
    return j


def _with_matcher(braces: str, matcher: str) -> str:
    inner = braces[1:-1].strip().rstrip(",")
    return "{" + (f"{inner}, {matcher}" if inner else matcher) + "}"


def untag(labels: tuple) -> tuple:
    return tuple(p for p in labels if p[0] != LABEL)
