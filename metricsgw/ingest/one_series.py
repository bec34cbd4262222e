"""The exact path for series the bulk checks could not settle: validate one series' labels, relabel them, and
name why one is refused. Its messages are the ones the bulk path (bulk.py) must match."""

from __future__ import annotations

from typing import Any

from ..errors import BadData
from ..model import Labels
from ..remote.decoded import DecodedWrite
from .series_cache import DROPPED, Refuse
from .validate import LabelProblem, validate_labels

RELABEL_INVALID = "relabel_invalid"
UNDECODABLE_LABELS = "invalid_labels"


def one_by_one(decoded: DecodedWrite, idx: list[int], fast: list, fast_keys: list, rules: Any,
               out: list) -> tuple[list[int], list[Labels], list[bytes | None]]:
    """The series the bulk checks left (validated one by one) and every series' relabelling: (positions
    admitted, their labels, their series keys where already known); a refusal goes into ``out``."""
    labels_at: list[int] = []
    labels_list: list[Labels] = []
    known_keys: list[bytes | None] = []
    for k, (i, labels, key) in enumerate(zip(idx, fast, fast_keys)):
        if labels is None:
            resolved = validate_one(decoded, i)
            if isinstance(resolved, Refuse):
                out[k] = resolved
                continue
            labels = resolved
        if rules is not None:
            relabelled = relabel(rules, labels)
            if isinstance(relabelled, Refuse):
                out[k] = relabelled
                continue
            if relabelled != labels:
                key = None
            labels = relabelled
        labels_at.append(k)
        labels_list.append(labels)
        known_keys.append(key)
    return labels_at, labels_list, known_keys


def validate_one(decoded: DecodedWrite, i: int) -> Labels | Refuse:
    problem = decoded.problems.get(i)
    if problem is not None:
        return Refuse(UNDECODABLE_LABELS, f"series #{i}: {problem}")
    try:
        return validate_labels(decoded.label_pairs(i))
    except LabelProblem as err:
        return Refuse(err.reason, err.message)
    except BadData as err:  # corrupt bytes inside this series' labels
        return Refuse(UNDECODABLE_LABELS, f"series #{i}: {err}")


def relabel(rules: Any, labels: Labels) -> Labels | Refuse:
    relabelled = rules.apply(labels)
    if relabelled is None:
        return DROPPED
    if relabelled != labels:
        try:
            relabelled = validate_labels(relabelled)
        except LabelProblem as err:
            return Refuse(RELABEL_INVALID, f"after relabelling: {err.message}")
    return relabelled
