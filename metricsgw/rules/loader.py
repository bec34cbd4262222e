"""Rule files: load, validate, and reload safely (a bad reload keeps the last good rules).

A rule file is a YAML list of Prometheus relabel configs, exactly what goes under
``metric_relabel_configs:`` / ``write_relabel_configs:`` in a Prometheus config. An empty file
is a file with no rules. Several files are applied in the order given (``--rules.file`` repeated).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Sequence

import yaml

from .relabel import RuleError, RuleSet

log = logging.getLogger(__name__)


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys, as Go's yaml.v2 does ("mapping key already defined")."""


def _no_duplicates(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"mapping key {key!r} already defined", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def parse_rule_text(text: str, source: str) -> RuleSet:
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as err:
        raise RuleError(source, None, f"yaml: {_one_line(err)}") from None
    if data is None:
        return RuleSet()
    if isinstance(data, dict) and "groups" in data:  # "rules" means two things; say which file this is
        raise RuleError(source, None, "this is a Prometheus rule file (alerting/recording rules under groups:), "
                        "which a ruler evaluates (vmalert, Prometheus): check it with `promtool check rules`. "
                        "metricsgw takes relabel rule files: a YAML list of relabel configs "
                        "(the items you would put under metric_relabel_configs)")
    if not isinstance(data, list):
        raise RuleError(source, None, "a rule file must be a YAML list of relabel configs "
                        "(the items you would put under metric_relabel_configs)")
    return RuleSet.from_configs(data, source=source)


def load_rule_file(path: str) -> RuleSet:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as err:
        raise RuleError(path, None, f"cannot read: {err}") from None
    return parse_rule_text(text, path)


def load_rule_files(paths: Sequence[str]) -> RuleSet:
    """All files' rules, in order; the first invalid file raises RuleError (file, index, reason)."""
    return RuleSet.concat([load_rule_file(p) for p in paths])


def _one_line(err: yaml.YAMLError) -> str:
    return " ".join(str(err).split())


class RuleHolder:
    """The rules in force. ``current`` is swapped atomically; readers never see a half-built set.

    ``generation`` bumps on every successful reload, so caches of relabel results
    (the ingest pipeline's per-series cache) know to start over.
    """

    def __init__(self, paths: Sequence[str], telemetry: Any = None) -> None:
        self.paths = list(paths)
        self.telemetry = telemetry
        self._lock = threading.Lock()  # one reload at a time (SIGHUP and POST /-/reload may race)
        self.current: RuleSet = load_rule_files(self.paths)  # at start-up a bad file is fatal
        self.generation = 0
        self._report(True)

    def reload(self) -> tuple[bool, str]:
        with self._lock:
            try:
                rules = load_rule_files(self.paths)
            except RuleError as err:
                log.error("rules reload failed, keeping the %d rules in force: %s", len(self.current), err)
                self._report(False)
                return False, f"rules reload failed, keeping the previous rules: {err}"
            self.current = rules
            self.generation += 1
            self._report(True)
            msg = f"loaded {len(rules)} relabel rules from {len(self.paths)} file(s)"
            log.info("rules reloaded: %s", msg)
            return True, msg

    def _report(self, ok: bool) -> None:
        self.last_ok, self.last_time = ok, time.time()  # the Status page's "last reload"
        if self.telemetry is None:
            return
        self.telemetry.rules_reload_success.set(1 if ok else 0)
        self.telemetry.rules_loaded.set(len(self.current))
