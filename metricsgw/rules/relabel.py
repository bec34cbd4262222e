"""Prometheus ``relabel_config`` semantics: compile once, apply as a pure function.

Follows ``model/relabel/relabel.go`` of Prometheus 2.42 (and is checked against the real
2.42 binary in tests/rules/test_prometheus_oracle.py): the same defaults (action replace,
separator ";", regex "(.*)", replacement "$1"), the same validation and messages, the same
actions, hashmod (md5, last 8 bytes big-endian), Go's one-rune case mapping for
lowercase/uppercase, and 2.42's quirk that an empty replace result deletes ``target_label`` as
written (a templated target then changes nothing). Replacement templates expand ``$1``,
``${1}``, ``$name``, ``${name}`` and ``$$`` exactly as Go's ``regexp.Expand``.

One deliberate difference: regexes are RE2 anchored as ``^(?s:...)$``, so ``.`` also matches a
newline (Prometheus 3 does this; 2.42 anchors as ``^(?:...)$``). Our PromQL matchers do the same.

``RuleSet.apply(labels)`` returns the relabelled canonical label set (sorted, empty values
removed) or None when a rule dropped the series or no label is left.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import re2

from ..model import Labels, is_label_name
from .gotext import compile_template, expand, go_lower, go_quote, go_upper

ACTIONS = ("replace", "keep", "drop", "keepequal", "dropequal", "hashmod", "labelmap",
           "labeldrop", "labelkeep", "lowercase", "uppercase")
FIELDS = ("source_labels", "separator", "regex", "modulus", "target_label", "replacement", "action")
DEFAULTS: dict[str, Any] = {"separator": ";", "regex": "(.*)", "modulus": 0, "target_label": "",
                            "replacement": "$1", "action": "replace"}

# relabelTarget in relabel.go: what a templated target_label / labelmap replacement may look like.
_RELABEL_TARGET = re2.compile(r"^(?:(?:[a-zA-Z_]|\$(?:\{\w+\}|\w+))+\w*)+$")
_MAX_UINT64 = (1 << 64) - 1
_CACHE_MAX = 8192  # memoised regex results per rule
_NO_CHANGE = object()  # a memoised "this input leaves the labels alone"
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # we report the error ourselves; RE2 would also print it to stderr


class InvalidRule(ValueError):
    """One relabel config is invalid; the message is Prometheus's where Prometheus has one."""


class RuleError(ValueError):
    """A rule file (or config list) is invalid: names the file, the rule's index and the reason."""

    def __init__(self, source: str, index: int | None, reason: str) -> None:
        where = f"{source}: rules[{index}]" if index is not None else source
        super().__init__(f"{where}: {reason}")
        self.source, self.index, self.reason = source, index, reason


def valid_label_name(name: str) -> bool:
    return is_label_name(name)


# --- one compiled rule --------------------------------------------------------------------------

def _as_string(value: Any, key: str) -> str:
    """yaml.v2 decodes any scalar into a string field (regex: 200 is the string "200")."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise InvalidRule(f"{key}: expected a string, got {type(value).__name__}")


@dataclass(frozen=True, eq=False)
class RelabelRule:
    source_labels: tuple[str, ...]
    separator: str
    regex: str
    modulus: int
    target_label: str
    replacement: str
    action: str
    regex_set: bool = False  # regex given explicitly (Prometheus compares with the default by identity)
    source_labels_set: bool = False
    _rx: Any = field(default=None, repr=False)
    _target_parts: tuple = field(default=(), repr=False)
    _replacement_parts: tuple = field(default=(), repr=False)
    _step: Callable[[dict[str, str]], bool] | None = field(default=None, repr=False)
    _cache: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_config(cls, cfg: Any) -> "RelabelRule":
        if not isinstance(cfg, dict):
            raise InvalidRule(f"a relabel config must be a mapping, got {type(cfg).__name__}")
        unknown = [k for k in cfg if k not in FIELDS]
        if unknown:
            raise InvalidRule(f"field {unknown[0]} not found in relabel config (known: {', '.join(FIELDS)})")
        src = cfg.get("source_labels")
        if src is None:
            src_t: tuple[str, ...] = ()
        elif isinstance(src, (list, tuple)):
            src_t = tuple(_as_string(s, "source_labels") for s in src)
        else:
            raise InvalidRule("source_labels: expected a list of label names")
        for name in src_t:
            if not valid_label_name(name):
                raise InvalidRule(f"{name!r} is not a valid label name")
        modulus = cfg.get("modulus", 0)
        if modulus is None:
            modulus = 0
        if isinstance(modulus, bool) or not isinstance(modulus, int) or not 0 <= modulus <= _MAX_UINT64:
            raise InvalidRule(f"modulus: expected an unsigned integer, got {modulus!r}")
        action = _as_string(cfg.get("action", "replace"), "action")
        if action and action.lower() not in ACTIONS:  # (a null action fails validate(): "cannot be empty")
            raise InvalidRule(f"unknown relabel action {action!r}")
        regex = _as_string(cfg["regex"], "regex") if "regex" in cfg else DEFAULTS["regex"]
        rule = cls(
            source_labels=src_t,
            separator=_as_string(cfg["separator"], "separator") if "separator" in cfg else ";",
            regex=regex,
            modulus=modulus,
            target_label=_as_string(cfg.get("target_label"), "target_label"),
            replacement=_as_string(cfg["replacement"], "replacement") if "replacement" in cfg else "$1",
            action=action.lower(),
            regex_set="regex" in cfg,
            source_labels_set=cfg.get("source_labels") is not None,
        )
        rule.validate()
        return rule._compiled()

    def validate(self) -> None:
        """Prometheus's Config.Validate, check for check, message for message."""
        a, t = self.action, self.target_label
        if not a:
            raise InvalidRule("relabel action cannot be empty")
        if self.modulus == 0 and a == "hashmod":
            raise InvalidRule("relabel configuration for hashmod requires non-zero modulus")
        if a in ("replace", "hashmod", "lowercase", "uppercase", "keepequal", "dropequal") and t == "":
            raise InvalidRule(f"relabel configuration for {a} action requires 'target_label' value")
        if a == "replace" and "$" not in t and not valid_label_name(t):
            raise InvalidRule(f"{go_quote(t)} is invalid 'target_label' for {a} action")
        if a == "replace" and "$" in t and not _RELABEL_TARGET.search(t):
            raise InvalidRule(f"{go_quote(t)} is invalid 'target_label' for {a} action")
        if a in ("lowercase", "uppercase", "keepequal", "dropequal") and not valid_label_name(t):
            raise InvalidRule(f"{go_quote(t)} is invalid 'target_label' for {a} action")
        if a in ("lowercase", "uppercase", "keepequal", "dropequal") and self.replacement != "$1":
            raise InvalidRule(f"'replacement' can not be set for {a} action")
        if a == "labelmap" and not _RELABEL_TARGET.search(self.replacement):
            raise InvalidRule(f"{go_quote(self.replacement)} is invalid 'replacement' for {a} action")
        if a == "hashmod" and not valid_label_name(t):
            raise InvalidRule(f"{go_quote(t)} is invalid 'target_label' for {a} action")
        if a in ("keepequal", "dropequal") and (
                self.regex_set or self.modulus != 0 or self.separator != ";" or self.replacement != "$1"):
            raise InvalidRule(f"{a} action requires only 'source_labels' and `target_label`, and no other fields")
        if a in ("labeldrop", "labelkeep") and (
                self.source_labels_set or t != "" or self.modulus != 0 or self.separator != ";"
                or self.replacement != "$1"):
            raise InvalidRule(f"{a} action requires only 'regex', and no other fields")

    def _compiled(self) -> "RelabelRule":
        try:
            # the same string concatenation as Prometheus, so odd patterns behave the same
            rx = re2.compile("^(?s:" + self.regex + ")$", _RE2_OPTIONS)
        except re2.error as err:
            why = err.args[0].decode(errors="replace") if err.args and isinstance(err.args[0], bytes) else str(err)
            raise InvalidRule(f"error parsing regexp {self.regex!r}: {why}") from None
        gi = dict(rx.groupindex)
        object.__setattr__(self, "_rx", rx)
        object.__setattr__(self, "_target_parts", compile_template(self.target_label, gi))
        object.__setattr__(self, "_replacement_parts", compile_template(self.replacement, gi))
        object.__setattr__(self, "_step", getattr(self, "_" + self.action))
        return self

    def to_config(self) -> dict[str, Any]:
        out: dict[str, Any] = {"action": self.action}
        if self.source_labels:
            out["source_labels"] = list(self.source_labels)
        for key in ("separator", "regex", "modulus", "target_label", "replacement"):
            if getattr(self, key) != DEFAULTS[key]:
                out[key] = getattr(self, key)
        return out

    # -- the actions; each mutates the working dict and returns False to drop the series ------
    def _value(self, lb: dict[str, str]) -> str:
        src = self.source_labels
        if len(src) == 1:
            return lb.get(src[0], "")
        return self.separator.join([lb.get(n, "") for n in src])

    # Regex results are memoised per rule: the inputs (metric names, label names, a few label
    # values) repeat across series, so most steps become a dict lookup. Bounded; cleared when full.
    def _matches(self, text: str) -> bool:
        cache = self._cache
        hit = cache.get(text)
        if hit is None:
            if len(cache) >= _CACHE_MAX:
                cache.clear()
            hit = cache[text] = self._rx.search(text) is not None
        return hit

    def _drop(self, lb: dict[str, str]) -> bool:
        return not self._matches(self._value(lb))

    def _keep(self, lb: dict[str, str]) -> bool:
        return self._matches(self._value(lb))

    def _dropequal(self, lb: dict[str, str]) -> bool:
        return lb.get(self.target_label, "") != self._value(lb)

    def _keepequal(self, lb: dict[str, str]) -> bool:
        return lb.get(self.target_label, "") == self._value(lb)

    def _replace(self, lb: dict[str, str]) -> bool:
        val = self._value(lb)
        cache = self._cache
        hit = cache.get(val)
        if hit is None:
            if len(cache) >= _CACHE_MAX:
                cache.clear()
            hit = cache[val] = self._replace_result(val)
        if hit is not _NO_CHANGE:
            _set(lb, hit[0], hit[1])
        return True

    def _replace_result(self, val: str) -> Any:
        m = self._rx.search(val)
        if m is None:  # no match: no replacement
            return _NO_CHANGE
        ng = self._rx.groups
        target = expand(self._target_parts, m, ng)
        if not valid_label_name(target):
            return (self.target_label, "")  # 2.42 deletes the *unexpanded* target_label
        res = expand(self._replacement_parts, m, ng)
        if not res:
            # Prometheus 2.42 deletes cfg.TargetLabel as written, not the expanded name (checked
            # against the real binary): a templated target with an empty result changes nothing.
            return (self.target_label, "")
        return (target, res)

    def _lowercase(self, lb: dict[str, str]) -> bool:
        _set(lb, self.target_label, go_lower(self._value(lb)))
        return True

    def _uppercase(self, lb: dict[str, str]) -> bool:
        _set(lb, self.target_label, go_upper(self._value(lb)))
        return True

    def _hashmod(self, lb: dict[str, str]) -> bool:
        digest = hashlib.md5(self._value(lb).encode("utf-8", "surrogateescape")).digest()
        _set(lb, self.target_label, str(int.from_bytes(digest[8:], "big") % self.modulus))
        return True

    def _labelmap(self, lb: dict[str, str]) -> bool:
        cache = self._cache
        for name, value in sorted(lb.items()):  # a snapshot, in label order, as Prometheus iterates
            new = cache.get(name)
            if new is None:
                if len(cache) >= _CACHE_MAX:
                    cache.clear()
                new = cache[name] = self._labelmap_name(name)
            if new is not _NO_CHANGE:
                _set(lb, new, value)
        return True

    def _labelmap_name(self, name: str) -> Any:
        m = self._rx.search(name)
        if m is None:
            return _NO_CHANGE
        # ReplaceAllString: the anchored pattern matches the whole name (once)
        return name[:m.start()] + expand(self._replacement_parts, m, self._rx.groups) + name[m.end():]

    def _labeldrop(self, lb: dict[str, str]) -> bool:
        for name in [n for n in lb if self._matches(n)]:
            del lb[name]
        return True

    def _labelkeep(self, lb: dict[str, str]) -> bool:
        for name in [n for n in lb if not self._matches(n)]:
            del lb[name]
        return True


def _set(lb: dict[str, str], name: str, value: str) -> None:
    """labels.Builder.Set: an empty value deletes the label."""
    if value:
        lb[name] = value
    else:
        lb.pop(name, None)


# --- an ordered list of compiled rules --------------------------------------------------------

@dataclass(frozen=True)
class RuleSet:
    rules: tuple[RelabelRule, ...] = ()
    sources: tuple[str, ...] = ()  # where each rule came from ("file.yml" per rule)

    @classmethod
    def from_configs(cls, configs: Sequence[Any], source: str = "<config>") -> "RuleSet":
        """Validate and compile a list of relabel config mappings; RuleError names source and index."""
        if configs is None:
            configs = []
        if not isinstance(configs, (list, tuple)):
            raise RuleError(source, None, "rules must be a list of relabel configs")
        rules = []
        for i, cfg in enumerate(configs):
            if cfg is None:
                raise RuleError(source, i, "empty or null relabeling rule")
            try:
                rules.append(RelabelRule.from_config(cfg))
            except InvalidRule as err:
                raise RuleError(source, i, str(err)) from None
        return cls(tuple(rules), (source,) * len(rules))

    @classmethod
    def concat(cls, sets: Sequence["RuleSet"]) -> "RuleSet":
        return cls(tuple(r for s in sets for r in s.rules), tuple(src for s in sets for src in s.sources))

    def __len__(self) -> int:
        return len(self.rules)

    def apply(self, labels: Labels) -> Labels | None:
        """The relabelled canonical label set, or None if dropped (or nothing is left)."""
        if not self.rules:
            return labels if labels else None
        lb = dict(labels)
        for rule in self.rules:
            if not rule._step(lb):
                return None
        out = tuple(sorted((n, v) for n, v in lb.items() if v))
        return out or None
