"""When CPython's cycle collector runs, for a server whose requests allocate in bursts.

CPython collects its youngest generation every 700 net container allocations. A query's answer
or a remote-write request makes tens of thousands of short-lived containers (a matrix of 12k
points renders as 12k tuples) that reference counting frees at the end of the request anyway; at
700 the collector walked them about 15 times a request and moved the ones still alive into the
older generations, which it then walked again. Measured with a callback timing every collection:
0.63 ms a panel on average in a query process over the dashboard set (2.5% of its CPU; ~2 of
the ~17 ms of the 12k-point ``gpu util by node``), and 0.35 of ~7 CPU s in an ingest shard
taking 500 nodes x 8 scrapes (5%). At 50,000 a request's containers are freed before a
collection sees them: the query process then counted 0.03 s over the whole dashboard set.

Garbage in reference cycles then waits longer for a collection. A query process collects its young
generations before it hands memory back to the OS (malloc.py: after a query that held 32 MiB or
more, and when queries pause), so a cycle holding a big array (a refused query's traceback, say)
does not outlive the query that made it by more than that. Never a full collection there, nor in an
ingest shard after its flushes: a full collection walks every container the process holds (a
shard's series cache has an entry per series; a query process at 2.7M series took ~1 s a
collection, GIL held) while requests wait.
"""

from __future__ import annotations

import gc

GEN0_THRESHOLD = 50_000  # above the containers one request holds at once
OLDER_THRESHOLDS = (10, 10)  # CPython's own for generations 1 and 2


def tune() -> None:
    """Call once at start-up, in every process."""
    gc.set_threshold(GEN0_THRESHOLD, *OLDER_THRESHOLDS)
