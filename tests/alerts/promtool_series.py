"""promtool's test-file notation, read back: series values ('0+5x10 _ stale 3x2') and durations ('10m')."""

from __future__ import annotations

import re

from metricsgw.model import STALE_NAN

_ITEM = re.compile(r"^(?P<a>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)(?:(?P<op>[-+])(?P<b>(?:\d+\.?\d*|\.\d+)"
                   r"(?:[eE][-+]?\d+)?))?(?:x(?P<n>\d+))?$")
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000,
            "y": 31_536_000_000}


def expand_values(text: str) -> list[float | None]:
    """One entry per interval: a float (STALE_NAN for 'stale') or None for a missing sample ('_', '_xN')."""
    out: list[float | None] = []
    for item in text.split():
        if item == "stale":
            out.append(STALE_NAN)
        elif item == "_":
            out.append(None)
        elif item.startswith("_x"):
            out += [None] * int(item[2:])
        else:
            m = _ITEM.match(item)
            if not m:
                raise ValueError(f"cannot read promtool series value {item!r}")
            a, n = float(m["a"]), int(m["n"] or 0)
            b = float(m["b"] or 0) * (-1 if m["op"] == "-" else 1)
            out += [a + i * b for i in range(n + 1)]
    return out


def duration_ms(text: str | int | None) -> int:
    if not text:
        return 0
    parts = _DURATION.findall(str(text))
    if not parts or "".join(n + u for n, u in parts) != str(text):
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return sum(int(n) * _UNIT_MS[u] for n, u in parts)
