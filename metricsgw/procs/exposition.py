"""The front's /metrics: every process's own figures in one Prometheus text exposition (pure).

Each child's samples keep their names and labels and gain ``process="shard-0"`` (``front`` for the front's
own), so nothing is summed away: a per-gateway figure is one aggregation in PromQL, e.g.
``sum without (process) (rate(metricsgw_samples_ingested_total[5m]))``, and a gauge such as active series or
memory in use stays readable per process. Families of the same name are written once, their samples
together, as the format requires.
"""

from __future__ import annotations

import re

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*")


def _labelled(line: str, process: str) -> str:
    name = _NAME.match(line)
    if name is None:
        return line
    end = name.end()
    label = f'process="{process}"'
    if line[end:end + 1] == "{":
        rest = line[end + 1:]
        return f"{line[:end]}{{{label}{'' if rest.startswith('}') else ','}{rest}"
    return f"{line[:end]}{{{label}}}{line[end:]}"


def merge(expositions: list[tuple[str, str]]) -> str:
    """``[(process, text exposition)]`` -> one exposition with a ``process`` label on every sample."""
    families: dict[str, tuple[list[str], list[str]]] = {}  # name -> (HELP/TYPE lines, samples)
    for process, text in expositions:
        current = None
        for line in text.splitlines():
            if not line:
                continue
            if line.startswith("#"):
                parts = line.split(" ", 3)
                if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                    current = families.setdefault(parts[2], ([], []))
                    if len(current[0]) < 2 and line not in current[0]:
                        current[0].append(line)
                continue
            if current is None:  # a sample before any HELP/TYPE: a family of its own
                current = families.setdefault(_NAME.match(line).group(0) if _NAME.match(line) else line, ([], []))
            current[1].append(_labelled(line, process))
    out = []
    for head, samples in families.values():
        out.extend(head)
        out.extend(samples)
    return "\n".join(out) + "\n"
