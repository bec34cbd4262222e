"""Ingest's rules for a series' label set, and the names of the reasons a series is refused for.

Input is the raw (name, value) bytes in sender order; output is canonical ``Labels`` or
a message that names the series and the problem. UTF-8 is decoded strictly here, so bad
bytes reject one series rather than the whole request.
"""

from __future__ import annotations

from ..model import METRIC_NAME, Labels, is_label_name, is_metric_name


# reason names, shared with the pipeline's rejections and discard counters
INVALID_LABELS = "invalid_labels"
DUPLICATE_LABEL_NAMES = "duplicate_label_names"
MISSING_METRIC_NAME = "missing_metric_name"
INVALID_METRIC_NAME = "invalid_metric_name"
INVALID_UTF8 = "invalid_utf8"
EMPTY_LABELS = "empty_labels"
INVALID_HISTOGRAM = "invalid_histogram"  # remote/native.py names what is wrong with it


class LabelProblem(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def render(pairs) -> str:
    """``{__name__="x", a="b"}``; raw bytes are shown with invalid UTF-8 replaced."""
    parts = []
    for n, v in pairs:
        if isinstance(n, bytes):
            n = n.decode("utf-8", "replace")
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        parts.append(f"{n}={_quote(v)}")
    return "{" + ", ".join(parts) + "}"


def validate_labels(raw_pairs) -> Labels:
    """Raw (name, value) pairs -> canonical Labels, or raise LabelProblem.

    Checks, in Prometheus's spirit: non-empty set, strict UTF-8, valid label names,
    __name__ present and a valid metric name, no duplicate names. Unsorted input is
    accepted and sorted. Labels with empty values are dropped (Prometheus treats an
    empty value as an absent label)."""
    if not raw_pairs:
        raise LabelProblem(EMPTY_LABELS, "series has no labels")
    pairs = []
    for n, v in raw_pairs:
        try:
            name = n.decode("utf-8", "strict") if isinstance(n, bytes) else n
            value = v.decode("utf-8", "strict") if isinstance(v, bytes) else v
        except UnicodeDecodeError:
            raise LabelProblem(INVALID_UTF8, f"series {render(raw_pairs)}: label {render([(n, v)])} "
                                             f"is not valid UTF-8") from None
        pairs.append((name, value))
    pairs.sort()
    shown = render(pairs)
    metric = None
    previous = None
    for name, value in pairs:
        if name == "":
            raise LabelProblem(INVALID_LABELS, f"series {shown}: empty label name")
        if name == previous:
            raise LabelProblem(DUPLICATE_LABEL_NAMES, f"series {shown}: duplicate label name {name!r}")
        previous = name
        if name == METRIC_NAME:
            metric = value
        elif not is_label_name(name):
            raise LabelProblem(INVALID_LABELS, f"series {shown}: invalid label name {name!r}")
    if not metric:
        raise LabelProblem(MISSING_METRIC_NAME, f"series {shown}: missing metric name (__name__ label)")
    if not is_metric_name(metric):
        raise LabelProblem(INVALID_METRIC_NAME, f"series {shown}: invalid metric name {metric!r}")
    return tuple((n, v) for n, v in pairs if v != "")
