"""What a query reads from: the storage, or (with --cluster.peers) the storage and the peers' recent data."""

from __future__ import annotations

from aiohttp import web

from ..appkeys import PEERS
from ..cluster.source import ClusterSource


def read_source(request: web.Request, local, samples: bool = True) -> tuple[object, list[str]]:
    """(the source for one query over ``local``, the warnings it leaves: filled while the query runs).

    ``samples``: PromQL reads samples; the metadata APIs want series and labels only."""
    fanout = request.app[PEERS]
    if fanout is None:
        return local, []
    source = ClusterSource(local, fanout, samples)
    return source, source.warnings
