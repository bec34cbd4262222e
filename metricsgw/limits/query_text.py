"""Bound a PromQL string before the parser sees it.

The parser (promql-parser, Rust) recurses once per level of the syntax tree and has no limit of
its own: ``((((...1...))))`` 10,000 deep or ``1+1+...`` with 20,000 terms overflow its stack and
the whole process dies with SIGSEGV (measured: ~5,000 levels with an 8 MiB thread stack). The
evaluator recurses over the same tree in Python. A cheap lexical scan bounds all of it: length
(VictoriaMetrics's -search.maxQueryLen), bracket nesting, and terms (operands joined by binary or
unary operators: ``a+b+c...`` is a left-leaning tree as deep as it has terms). The tree is never
deeper than nesting + terms, so both limits together bound every recursion that follows.

The scan ignores string literals and comments, so a long regex of pod names costs length only.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

import numpy as np

from ..errors import BadData

# String literals ("..." and '...' with escapes, `...` raw; an unclosed one runs to the end) and comments.
_SKIPPED = re.compile(r'"(?:[^"\\]|\\.)*"?|\'(?:[^\'\\]|\\.)*\'?|`[^`]*`?|#[^\n]*', re.S)
# Label matchers inside {...}: their = != =~ !~ are not operators (braces do not nest in PromQL).
_MATCHERS = re.compile(r"\{[^{}]*\}?")
_OPERATORS = re.compile(r"==|!=|>=|<=|[-+*/%^<>]|\b(?:and|or|unless|atan2)\b", re.I)
_OPEN = np.zeros(256, np.int8)
_OPEN[[ord(c) for c in "([{"]] = 1
_OPEN[[ord(c) for c in ")]}"]] = -1

# Python frames the evaluator uses per level of the syntax tree (measured: 5 for nested calls).
EVAL_FRAMES_PER_LEVEL = 5


@dataclass(frozen=True)
class QueryTextLimits:
    max_length: int = 64 * 1024
    max_depth: int = 128
    max_terms: int = 1000

    @classmethod
    def from_config(cls, cfg) -> "QueryTextLimits":
        return cls(cfg.query_max_length, cfg.query_max_depth, cfg.query_max_terms)

    def check(self, text: str, param: str = "query") -> None:
        """Raise BadData naming the limit and its flag if ``text`` breaks one."""
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > self.max_length:
            raise BadData(f'invalid parameter "{param}": the query is {size:,} bytes long, over the limit of '
                          f"{self.max_length:,} (--query.max-length)")
        code = _SKIPPED.sub(" ", text)
        depth = nesting_depth(code)
        if depth > self.max_depth:
            raise BadData(f'invalid parameter "{param}": the query nests brackets {depth:,} deep, over the limit '
                          f"of {self.max_depth:,} (--query.max-depth)")
        terms = len(_OPERATORS.findall(_MATCHERS.sub(" ", code))) + 1
        if terms > self.max_terms:
            raise BadData(f'invalid parameter "{param}": the query has {terms:,} terms, over the limit of '
                          f"{self.max_terms:,} (--query.max-terms)")

    def recursion_needed(self) -> int:
        """Python recursion limit under which any query these limits admit can be evaluated."""
        return EVAL_FRAMES_PER_LEVEL * (self.max_depth + self.max_terms) + 1000


def nesting_depth(code: str) -> int:
    """Deepest bracket nesting ( [ { of text with strings and comments already blanked."""
    raw = np.frombuffer(code.encode("utf-8", "surrogatepass"), np.uint8)
    if len(raw) == 0:
        return 0
    return max(0, int(np.cumsum(_OPEN[raw], dtype=np.int64).max()))


def ensure_recursion_headroom(limits: QueryTextLimits) -> None:
    """Raise the interpreter's recursion limit (never lower it) so admitted queries evaluate.

    Python 3.11 runs Python-to-Python calls without growing the C stack, so the evaluator's
    frames cost heap, not thread stack; the engine still turns a RecursionError into a 400."""
    need = limits.recursion_needed()
    if sys.getrecursionlimit() < need:
        sys.setrecursionlimit(need)
