"""A ruler's /api/v1/rules answer -> exactly what Prometheus's /api/v1/rules would say. Pure.

Rules are evaluated by an existing ruler (vmalert, or a Prometheus); metricsgw only shows what
that ruler reports, so Grafana's rule browser and alert list work against metricsgw as they do
against Prometheus. vmalert speaks nearly Prometheus's format but adds fields (ids,
datasourceType, lastSamples, source...), leaves some out (limit, keepFiringFor, a group's
evaluationTime), reports an empty ``state`` for recording rules and plain alert values ("1"
where Prometheus says "1e+00"). Every group, rule and alert is rebuilt here field by field in
the order of Prometheus's structs (web/api/v1/api.go: RuleGroup, AlertingRule, RecordingRule,
Alert), so the answer is the same whichever ruler runs.

Filters follow Prometheus: ``type`` (alert|record), ``rule_name[]``, ``rule_group[]``, ``file[]``,
``match[]`` (on the rules' labels), ``exclude_alerts`` and ``group_limit``/``group_next_token``
paging; groups left without rules are omitted (Prometheus >= 2.45; 2.42 kept them).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

from ..errors import BadData
from ..model import Matcher

ZERO_TIME = "0001-01-01T00:00:00Z"  # Go's zero time.Time, what Prometheus shows before a first evaluation
HEALTH = ("ok", "err", "unknown")
ACTIVE_STATES = ("pending", "firing")  # Prometheus lists active alerts only, never resolved ones


class RulerAnswerError(ValueError):
    """The ruler answered, but not with rule groups in Prometheus's (or vmalert's) format."""


@dataclass(frozen=True)
class RuleFilter:
    types: frozenset[str] = frozenset({"alerting", "recording"})
    rule_names: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    files: frozenset[str] = frozenset()
    matcher_sets: list[list[Matcher]] = field(default_factory=list)
    exclude_alerts: bool = False
    group_limit: int = 0
    next_token: str = ""


def parse_filter(query: Any, form: Any, matcher_sets: list[list[Matcher]]) -> RuleFilter:
    """``query``: the URL's parameters (Prometheus reads type, exclude_alerts and paging there only);
    ``form``: URL and body together (rule_name[], rule_group[], file[])."""
    typ = (query.get("type") or "").lower()
    if typ not in ("", "alert", "record"):
        raise BadData(f'invalid parameter "type": not supported value "{typ}"')
    types = {"": {"alerting", "recording"}, "alert": {"alerting"}, "record": {"recording"}}[typ]
    exclude = (query.get("exclude_alerts") or "").lower()
    if exclude not in ("", "1", "t", "true", "0", "f", "false"):  # Go's strconv.ParseBool
        raise BadData(f'invalid parameter "exclude_alerts": error converting exclude_alerts: '
                      f'strconv.ParseBool: parsing "{exclude}": invalid syntax')
    limit_text, token = query.get("group_limit") or "", query.get("group_next_token") or ""
    if token and not limit_text:
        raise BadData('invalid parameter "group_next_token": group_limit needs to be present in order '
                      "to paginate over the groups")
    limit = 0
    if limit_text:
        try:
            limit = int(limit_text)
        except ValueError:
            raise BadData('invalid parameter "group_limit": group_limit needs to be a valid number') from None
        if limit <= 0:
            raise BadData('invalid parameter "group_limit": group_limit needs to be greater than 0')
    return RuleFilter(frozenset(types), frozenset(form.getall("rule_name[]", [])),
                      frozenset(form.getall("rule_group[]", [])), frozenset(form.getall("file[]", [])),
                      matcher_sets, exclude in ("1", "t", "true"), limit, token)


def group_token(file: str, name: str) -> str:
    """Prometheus's group_next_token: sha256 of "file;name", hex."""
    return hashlib.sha256(f"{file};{name}".encode()).hexdigest()


# ------------------------------------------------------------------ normalising the ruler's answer

def groups_of(answer: Any) -> list[dict]:
    """The ruler's JSON answer (envelope included) -> groups in Prometheus's exact shape."""
    if not isinstance(answer, dict) or answer.get("status") != "success":
        raise RulerAnswerError(f"not a success envelope: {_cut(answer)}")
    data = answer.get("data")
    groups = data.get("groups") if isinstance(data, dict) else None
    if not isinstance(groups, list):
        raise RulerAnswerError("no data.groups list in the answer")
    # Prometheus 2.42 lists groups by file, then name (rules/manager.go RuleGroups); vmalert may not.
    return sorted((_group(g) for g in groups), key=lambda g: (g["file"], g["name"]))


def _group(g: Any) -> dict:
    if not isinstance(g, dict):
        raise RulerAnswerError(f"a group is not an object: {_cut(g)}")
    rules = [_rule(r) for r in g.get("rules") or []]
    evaluation_time = g.get("evaluationTime")
    if not isinstance(evaluation_time, (int, float)):
        # vmalert does not report the group's own duration; its rules run one after the other
        # (concurrency 1 by default), so their sum is the group's evaluation time.
        evaluation_time = sum(r["evaluationTime"] for r in rules)
    return {"name": str(g.get("name", "")), "file": str(g.get("file", "")), "rules": rules,
            "interval": _float(g.get("interval")), "limit": int(_float(g.get("limit"))),
            "evaluationTime": _float(evaluation_time), "lastEvaluation": _time(g.get("lastEvaluation"))}


def _rule(r: Any) -> dict:
    if not isinstance(r, dict):
        raise RulerAnswerError(f"a rule is not an object: {_cut(r)}")
    kind = r.get("type")
    common_tail = {"health": r.get("health") if r.get("health") in HEALTH else "unknown"}
    if r.get("lastError"):
        common_tail["lastError"] = str(r["lastError"])
    common_tail |= {"evaluationTime": _float(r.get("evaluationTime")), "lastEvaluation": _time(r.get("lastEvaluation")),
                    "type": kind}
    if kind == "recording":
        out: dict[str, Any] = {"name": str(r.get("name", "")), "query": str(r.get("query", ""))}
        labels = _labels(r.get("labels"))
        if labels:  # `json:"labels,omitempty"` on RecordingRule
            out["labels"] = labels
        return out | common_tail
    if kind == "alerting":
        alerts = [_alert(a) for a in r.get("alerts") or []]
        alerts = [a for a in alerts if a["state"] in ACTIVE_STATES]
        return {"state": _rule_state(r.get("state"), alerts), "name": str(r.get("name", "")),
                "query": str(r.get("query", "")), "duration": _float(r.get("duration")),
                "keepFiringFor": _float(r.get("keepFiringFor")), "labels": _labels(r.get("labels")),
                "annotations": _labels(r.get("annotations")), "alerts": alerts} | common_tail
    raise RulerAnswerError(f"rule {r.get('name')!r} has an unknown type {kind!r}")


def _alert(a: Any) -> dict:
    if not isinstance(a, dict):
        raise RulerAnswerError(f"an alert is not an object: {_cut(a)}")
    out: dict[str, Any] = {"labels": _labels(a.get("labels")), "annotations": _labels(a.get("annotations")),
                           "state": str(a.get("state", ""))}
    if a.get("activeAt"):
        out["activeAt"] = _time(a["activeAt"])
    if a.get("keepFiringSince") and _time(a["keepFiringSince"]) != ZERO_TIME:
        out["keepFiringSince"] = _time(a["keepFiringSince"])
    out["value"] = go_float(a.get("value"))
    return out


def _rule_state(state: Any, alerts: list[dict]) -> str:
    if state in ("inactive", "pending", "firing"):
        return state
    states = {a["state"] for a in alerts}  # the rule's state is its most advanced alert's
    return "firing" if "firing" in states else "pending" if "pending" in states else "inactive"


def go_float(value: Any) -> str:
    """An alert value as Prometheus writes it: strconv.FormatFloat(v, 'e', -1, 64), e.g. "1e+00"."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return np.format_float_scientific(v, unique=True, trim="-", exp_digits=2)


def _labels(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): str(value[k]) for k in sorted(value)}  # labels.Labels marshal sorted by name


def _float(value: Any) -> float | int:
    """A Go float64 as encoding/json writes it: whole numbers without ".0" (1, not 1.0)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return 0
    if not math.isfinite(v):
        return 0
    return int(v) if v.is_integer() and abs(v) < 1e21 else v


def _time(value: Any) -> str:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, (int, float)) and value > 0:  # unix seconds from an odd ruler
        return datetime.fromtimestamp(value, timezone.utc).isoformat().replace("+00:00", "Z")
    return ZERO_TIME


def _cut(value: Any, n: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= n else text[:n] + "..."


# ------------------------------------------------------------------ filtering, as Prometheus does

def select(groups: list[dict], flt: RuleFilter) -> dict:
    """The /api/v1/rules ``data`` for these groups under the filter (groupNextToken when paging)."""
    out: list[dict] = []
    found_token = False
    next_token = ""
    for g in groups:
        if flt.group_limit and flt.next_token and not found_token:
            if flt.next_token != group_token(g["file"], g["name"]):
                continue
            found_token = True
        if (flt.groups and g["name"] not in flt.groups) or (flt.files and g["file"] not in flt.files):
            continue
        rules = [_without_alerts(r) if flt.exclude_alerts else r for r in g["rules"] if _wanted(r, flt)]
        if not rules:
            continue
        if flt.group_limit and len(out) == flt.group_limit:
            next_token = group_token(g["file"], g["name"])
            break
        out.append(g | {"rules": rules})
    if flt.group_limit and flt.next_token and not found_token:
        raise BadData(f"invalid parameter \"group_next_token\": invalid group_next_token '{flt.next_token}'. "
                      "were rule groups changed?")
    data: dict[str, Any] = {"groups": out}
    if next_token:
        data["groupNextToken"] = next_token
    return data


def _wanted(rule: dict, flt: RuleFilter) -> bool:
    if rule["type"] not in flt.types or (flt.rule_names and rule["name"] not in flt.rule_names):
        return False
    if not flt.matcher_sets:
        return True
    labels = rule.get("labels", {})
    return any(all(m.matches(labels.get(m.name, "")) for m in ms) for ms in flt.matcher_sets)


def _without_alerts(rule: dict) -> dict:
    return rule | {"alerts": None} if rule["type"] == "alerting" else rule  # Go: a nil slice -> null


def active_alerts(groups: list[dict]) -> list[dict]:
    """/api/v1/alerts: every active alert of every alerting rule, in rule order."""
    return [a for g in groups for r in g["rules"] if r["type"] == "alerting" for a in r["alerts"]]
