"""What a query reads from: the storage, or the storage and the recent data of the gateway's shards and peers."""

from __future__ import annotations

import asyncio

from aiohttp import web

from ..appkeys import CONFIG, PEERS, STORAGE
from ..cluster.policy import PeerFailure, warning
from ..cluster.source import ClusterSource
from ..http.params import parse_partial_response
from ..limits.context import QueryContext
from ..storage.seam import MetadataReader, SampleReader
from ..storage.store import Storage


def partial_response(request: web.Request, params) -> bool:
    """The request's ``partial_response``, or --query.partial-response."""
    return parse_partial_response(params.get("partial_response"), request.app[CONFIG].query_partial_response)


def read_source(request: web.Request, local: Storage, params, samples: bool = True
                ) -> tuple[SampleReader | MetadataReader, list[str]]:
    """(the source for one query over ``local``, the warnings it leaves: filled while the query runs).

    ``samples``: PromQL reads samples; the metadata APIs want series and labels only."""
    fanout = request.app[PEERS]
    partial = partial_response(request, params)  # checked even without peers: a bad value is a 400 everywhere
    if fanout is None:
        return local, []
    source = ClusterSource(local, fanout, samples, partial)
    return source, source.warnings


async def peers_head_json(request: web.Request, params, path: str, asked: list[tuple[str, str]],
                          ctx: QueryContext, what: str) -> tuple[list, list[str]]:
    """(each answering process's head-read data on ``path``, a warning per peer left out).

    Asked before the local read, which then reads a table at least as new as any process named (so what one
    flushed meanwhile is read locally): the same order as ClusterSource's (docs/cluster.md)."""
    fanout = request.app[PEERS]
    partial = partial_response(request, params)
    if fanout is None:
        return [], []
    parts, warnings, newest = [], [], -1
    for got in await fanout.get_json(path, asked, ctx, partial):
        if isinstance(got, PeerFailure):
            warnings.append(warning(got, what))
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
