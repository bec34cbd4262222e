"""Named points where a test can make the server die as if by ``kill -9``.

The crash tests need to stop the process at an exact step of a flush, a compaction or a
retention pass, which a timer cannot hit reliably. ``METRICSGW_CRASH_AT=NAME:N`` makes the N-th
arrival at point NAME send SIGKILL to this process (no clean-up runs, as with ``kill -9``).
Unset (always, outside those tests), ``reached`` is one dict lookup.
"""

from __future__ import annotations

import os
import signal

ENV = "METRICSGW_CRASH_AT"
POINTS = ("flush.cut", "flush.files", "flush.marker", "compaction.merged", "compaction.swapped",
          "retention.removed")
# Steps of the one-time migration of an old data directory (storage/files/migrate.py): reached only at a start
# that finds the old layout, so kept apart from the points a running server passes again and again.
MIGRATION_POINTS = ("migrate.linked", "migrate.committed", "migrate.moved")


def _armed() -> dict[str, int]:
    spec = os.environ.get(ENV, "")
    if not spec:
        return {}
    name, _, nth = spec.partition(":")
    if name not in POINTS + MIGRATION_POINTS:
        raise ValueError(f"{ENV}: unknown crash point {name!r} (known: {', '.join(POINTS + MIGRATION_POINTS)})")
    return {name: int(nth or 1)}


_remaining = _armed()


def reached(name: str) -> None:
    left = _remaining.get(name)
    if left is None:
        return
    if left > 1:
        _remaining[name] = left - 1
        return
    os.kill(os.getpid(), signal.SIGKILL)
