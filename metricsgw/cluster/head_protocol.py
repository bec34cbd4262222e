"""The head read: how a query asks a process holding recent samples for them (``?scope=head``).

A query process reads its gateway's ingest shards, and a gateway reads its ``--cluster.peers``, with the
ordinary read APIs plus ``?scope=head`` (remote read for samples and histograms, the exemplars and metadata
APIs as JSON; docs/cluster.md). Such a read is part of the asking user's query, never a query of its own:
- it carries the asking query's deadline (``X-Metricsgw-Deadline``, seconds left, relative so that clocks
  of two machines need not agree) and its memory reservation (``X-Metricsgw-Max-Bytes``, bytes the query may
  still hold), and the answering process bounds the read by exactly these;
- the limits meant for a user's query (--query.max-samples, --query.max-series, the remote-read sample and
  concurrency limits, a query slot) never refuse it: the asking query is judged once, where it is evaluated,
  with everything it reads counted there;
- its answer names the table version that holds what the process no longer has in memory
  (``X-Metricsgw-Table-Version``): the asking process reads the table at least that new.
This module is the one place that knows these names: the handlers that answer a head read, the clients that ask
(peers.py, gateway_head.py) and the front's router use its constants and functions, never the strings.
"""

from __future__ import annotations

import math

from ..errors import BadData, Unavailable
from ..limits.context import QueryContext

SCOPE_PARAM = "scope"
HEAD = "head"
TABLE_VERSION_HEADER = "X-Metricsgw-Table-Version"
DEADLINE_HEADER = "X-Metricsgw-Deadline"
MAX_BYTES_HEADER = "X-Metricsgw-Max-Bytes"
# The whole reservation a head read forwards: a query's samples on the wire are bounded by it as well.
MAX_RESPONSE_BYTES = 1 << 30


def asks_for_head(query) -> bool:
    """Whether a request's query parameters (a MultiDict) ask for the head read."""
    return query.get(SCOPE_PARAM, "") == HEAD


def check_scope(query) -> None:
    """A ``scope`` other than the head's is refused (remote read's: a reader asking for a part of the storage
    this process does not serve must not get the whole of it)."""
    scope = query.get(SCOPE_PARAM, "")
    if scope not in ("", HEAD):
        raise BadData(f'invalid parameter "scope": {scope!r} (supported: head)')


def refuse_until_ready(storage) -> None:
    """A head read of a process still replaying its WAL would lack acknowledged samples: 503, which the asking
    query reports as this part of the gateway being unavailable (policy.py)."""
    if storage.open_error is not None or not storage.ready:  # a WAL that cannot be written leaves the head whole
        raise Unavailable(f"not ready: {storage.not_ready_reason()}")


def request_headers(ctx: QueryContext | None, timeout_s: float) -> dict[str, str]:
    """What the asking query forwards with a head read: the time it allows the read, and what it may hold."""
    headers = {DEADLINE_HEADER: f"{max(timeout_s, 0.001):.3f}"}
    if ctx is not None:
        headers[MAX_BYTES_HEADER] = str(reservation(ctx))
    return headers


def reservation(ctx: QueryContext) -> int:
    """Bytes the query may still hold (what a head read's answer may take)."""
    return max(0, min(MAX_RESPONSE_BYTES, ctx.max_bytes - ctx.bytes))


def read_context(headers, max_timeout_s: float, default_max_bytes: int, pool=None) -> QueryContext:
    """The context of a head read answered here: the asker's deadline and reservation (within this process's
    own maximum deadline and, through ``pool``, its memory), and no user limit on samples or series."""
    timeout_s = max_timeout_s
    asked = _number(headers.get(DEADLINE_HEADER))
    if asked is not None and 0 < asked < max_timeout_s:
        timeout_s = asked
    max_bytes = default_max_bytes
    reserved = _number(headers.get(MAX_BYTES_HEADER))
    if reserved is not None and reserved >= 0:
        max_bytes = int(reserved)
    return QueryContext(timeout_s=timeout_s, timeout_setting="the asking query's deadline",
                        max_samples=1 << 62, max_series=1 << 62, max_bytes=max_bytes,
                        max_bytes_setting="--query.max-memory-per-query", pool=pool)


def table_version(headers) -> int | None:
    """The table version an answer's headers (case-insensitive: aiohttp's, unix_http's) name; None: none."""
    value = headers.get(TABLE_VERSION_HEADER)
    return int(value) if value and value.isdigit() else None


def _number(text: str | None) -> float | None:
    try:
        value = float(text) if text else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None
