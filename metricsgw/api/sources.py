"""What a query reads from: the storage, or (with --cluster.peers) the storage and the peers' recent data."""

from __future__ import annotations

import asyncio

from aiohttp import web

from ..appkeys import PEERS, STORAGE
from ..cluster.peers import PeerFailure
from ..cluster.source import ClusterSource
from ..storage.seam import MetadataReader, SampleReader
from ..storage.store import Storage


def read_source(request: web.Request, local: Storage, samples: bool = True) -> tuple[SampleReader | MetadataReader,
                                                                                  list[str]]:
    """(the source for one query over ``local``, the warnings it leaves: filled while the query runs).

    ``samples``: PromQL reads samples; the metadata APIs want series and labels only."""
    fanout = request.app[PEERS]
    if fanout is None:
        return local, []
    source = ClusterSource(local, fanout, samples)
    return source, source.warnings


async def peers_head_json(request: web.Request, path: str, params: list[tuple[str, str]],
                          remaining_s: float, what: str) -> tuple[list, list[str]]:
    """(each answering peer's ``?scope=head`` data on ``path``, a warning per peer that did not answer).

    Asked before the local read, which then reads a table at least as new as any peer named (so what a peer
    flushed meanwhile is read locally): the same order as ClusterSource's (docs/cluster.md)."""
    fanout = request.app[PEERS]
    if fanout is None:
        return [], []
    parts, warnings, newest = [], [], -1
    for got in await fanout.get_json(path, params, remaining_s):
        if isinstance(got, PeerFailure):
            warnings.append(f"partial answer: peer {got.peer} did not answer ({got.result}: {got.reason}); "
                            f"its recent {what}, not yet in the shared table, are missing")
            continue
        parts.append(got.data)
        if got.table_version is not None:
            newest = max(newest, got.table_version)
    storage = request.app[STORAGE]
    if newest >= 0:
        await asyncio.to_thread(storage.ensure_version, newest)
    if warnings:  # what a silent peer committed before it went away is in the table as it is now
        await asyncio.to_thread(storage.follow)
    return parts, warnings
