"""Blocked query patterns (``--query.blocked``, repeatable): refuse known-bad queries up front.

Each rule is ``REGEX[;min_range=DUR][;min_step=DUR][;reason=TEXT]``:

- ``REGEX`` (RE2) must match the whole query text (anchored like a PromQL ``=~``; ``.`` matches
  newlines; surrounding whitespace of the query is ignored). Use ``.*`` for "contains".
- ``min_range=DUR``: the rule applies only to range queries spanning at least DUR
  (``end - start >= DUR``); instant queries count as a span of 0. Default 0 = any span.
- ``min_step=DUR``: the rule applies only to range queries whose step is *below* DUR, i.e. the
  pattern must be queried at a step of at least DUR. Instant queries have no step and are not
  affected. Default 0 = any step.
- ``reason=TEXT`` (always last; may contain ``;``): shown to the user.

A blocked query gets ExecError (422): ``query blocked by --query.blocked rule N: <reason>``,
N counting from 1 in the order the rules were given. Bad rules fail at start-up (ConfigError).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import re2

from ..config import ConfigError, parse_duration
from ..errors import ExecError

_OPTIONS = re2.Options()
_OPTIONS.dot_nl = True
_OPTIONS.log_errors = False
_KEYS = ("min_range", "min_step")


@dataclass(frozen=True)
class BlockedQuery:
    number: int  # 1-based, as the user counts the flags
    pattern: str
    min_range_s: float
    min_step_s: float
    reason: str
    rx: Any

    def blocks(self, query: str, range_s: float | None, step_s: float | None) -> bool:
        if self.min_range_s > 0 and (range_s or 0.0) < self.min_range_s:
            return False
        if self.min_step_s > 0 and (step_s is None or step_s >= self.min_step_s):
            return False
        return self.rx.fullmatch(query) is not None


def parse_rule(text: str, number: int) -> BlockedQuery:
    spec = str(text)
    reason = ""
    cut = spec.find(";reason=")
    if cut >= 0:
        spec, reason = spec[:cut], spec[cut + len(";reason="):]
    opts: dict[str, float] = {}
    parts = spec.split(";")
    while len(parts) > 1 and parts[-1].split("=", 1)[0].strip() in _KEYS and "=" in parts[-1]:
        key, val = parts.pop().split("=", 1)
        key = key.strip()
        if key in opts:
            raise ConfigError(f"--query.blocked rule {number} {text!r}: {key} given twice")
        try:
            opts[key] = parse_duration(val.strip())
        except ValueError as err:
            raise ConfigError(f"--query.blocked rule {number} {text!r}: {key}: {err}") from None
    pattern = ";".join(parts)
    if not pattern:
        raise ConfigError(f"--query.blocked rule {number} {text!r}: empty pattern")
    try:
        rx = re2.compile(pattern, _OPTIONS)
    except re2.error as err:
        why = err.args[0].decode(errors="replace") if err.args and isinstance(err.args[0], bytes) else str(err)
        raise ConfigError(f"--query.blocked rule {number}: invalid regex {pattern!r}: {why}") from None
    reason = reason.strip() or f"the query matches the blocked pattern {pattern!r}"
    return BlockedQuery(number, pattern, opts.get("min_range", 0.0), opts.get("min_step", 0.0), reason, rx)


class BlockedQueries:
    def __init__(self, rules: Sequence[str]) -> None:
        self.rules = tuple(parse_rule(text, i + 1) for i, text in enumerate(rules or ()))

    @classmethod
    def from_config(cls, cfg: Any) -> "BlockedQueries":
        return cls(cfg.query_blocked)

    def __len__(self) -> int:
        return len(self.rules)

    def check(self, query: str, range_s: float | None = None, step_s: float | None = None) -> None:
        """Raise ExecError if a rule blocks this query; range_s/step_s are None for instant queries."""
        if not self.rules:
            return
        q = query.strip()
        for rule in self.rules:
            if rule.blocks(q, range_s, step_s):
                raise ExecError(f"query blocked by --query.blocked rule {rule.number}: {rule.reason}")
