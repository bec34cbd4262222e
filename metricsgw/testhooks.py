"""Test-only hook: hold a query at a named stage until the test releases it.

Tests of the guard (disconnect, deadlines, queueing, ingest under query load) need a query that is
still running when they act. A query that is merely "heavy" is heavy on a busy machine and quick
on a quiet one, so those tests held only by luck. Instead:

* The hook is off unless the environment variable ``METRICSGW_TEST_HOLD_DIR`` names a directory
  when the server starts. Off, ``hold`` returns after one comparison.
* On, a query whose text contains ``metricsgw_test_hold`` (put it in a PromQL comment:
  ``count(up) # metricsgw_test_hold``) stops at the stage ``hold`` is called with and stays there
  while the file ``<dir>/hold`` exists. ``metricsgw_test_hold_busy`` does the same while keeping a
  core busy with numpy and Python work, as evaluation does.
* It calls ``ctx.check`` every few milliseconds, like every evaluation stage: a client that hangs
  up or a deadline stops it exactly as they stop real work.
* It appends ``reached <stage> <id>`` and then ``left <stage> <id> <released|canceled|timeout>``
  lines to ``<dir>/events``, so a test can wait for a query to be held and see how it ended.
* ``hold_start``: a child of the front (procs/child.py) named ``<process>`` waits before it opens anything
  or listens while ``<dir>/hold-start-<process>`` exists (event ``start-held <process>``), so that a test sees
  the gateway while that process restarts for as long as it needs, however quick a start is.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from pathlib import Path

import numpy as np

from .errors import QueryCanceled, QueryTimeout

HOLD_DIR = os.environ.get("METRICSGW_TEST_HOLD_DIR") or None
MARKER = "metricsgw_test_hold"
BUSY_MARKER = "metricsgw_test_hold_busy"
POLL_S = 0.005

_ids = itertools.count(1)
_events_lock = threading.Lock()


def hold(stage: str, query: str, ctx) -> None:
    if HOLD_DIR is None or MARKER not in query:
        return
    _hold(Path(HOLD_DIR), stage, BUSY_MARKER in query, ctx)


def _hold(root: Path, stage: str, busy: bool, ctx) -> None:
    ident = next(_ids)
    _event(root, f"reached {stage} {ident}")
    how = "released"
    rng = np.random.default_rng(ident)
    try:
        while (root / "hold").exists():
            ctx.check(f"test hold at {stage}")
            if busy:
                np.sort(rng.random(50_000))
                sum(range(20_000))
            else:
                time.sleep(POLL_S)
    except QueryCanceled:
        how = "canceled"
        raise
    except QueryTimeout:
        how = "timeout"
        raise
    finally:
        _event(root, f"left {stage} {ident} {how}")


def _event(root: Path, line: str) -> None:
    with _events_lock, open(root / "events", "a", encoding="utf-8") as fh:
        fh.write(line + "\n")


def hold_start(process: str) -> None:
    if HOLD_DIR is None:
        return
    root = Path(HOLD_DIR)
    path = root / f"hold-start-{process}"
    if path.exists():
        _event(root, f"start-held {process}")
    while path.exists():
        time.sleep(POLL_S)
