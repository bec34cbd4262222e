"""What the front answers for the whole gateway on the Status and Advisor pages (api/status.py and api/advise.py
answer the same for a single process):

- ``/api/v1/status/layout``: the front and each child with its health (its /-/ready, or why it cannot answer),
  the --cluster.peers as a query process last found them, and the storage directory's parts with their sizes;
- ``/api/v1/status/advise``: the advisor's run, with the series counts of every shard (as /api/v1/status/tsdb
  answers) and the listings of a query process (as /api/v1/series answers).
"""

from __future__ import annotations

import asyncio
import json
import os

import aiohttp
from aiohttp import web

from ..api import advise as advise_api
from ..api.status import storage_sizes
from ..http.params import read_params
from ..http.response import success
from .unavailable import part, why

ASK_TIMEOUT_S = 5.0  # a child's /-/ready or its view of the peers


class FrontSource:
    """The advisor's Source in the front: its calls run in a worker thread and are answered on the front's loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, front, timeout_s: float) -> None:  # noqa: ANN001
        self.loop, self.front, self.timeout_s = loop, front, timeout_s

    def _wait(self, coro):  # noqa: ANN001
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(self.timeout_s)

    def series_counts(self, limit: int) -> dict[str, int]:
        data = self._wait(self.front.gateway_head.tsdb_data({"limit": str(limit)}, {}))
        return {e["name"]: e["value"] for e in data["seriesCountByMetricName"]}

    def list_series(self, metric: str, limit: int) -> list[dict[str, str]] | None:
        return self._wait(self._series(metric, limit))

    async def _series(self, metric: str, limit: int) -> list[dict[str, str]] | None:
        target = await self.front.query_target()
        async with target.session.get("/api/v1/series", params=[("match[]", metric), ("limit", str(limit))],
                                       headers={"Accept-Encoding": "identity"},
                                       timeout=aiohttp.ClientTimeout(total=self.timeout_s)) as resp:
            body = json.loads(await resp.read())
        if body.get("status") != "success":
            raise OSError(f"{part(target.child)} could not list {metric}'s series: {body.get('error')}")
        return None if body.get("warnings") else body["data"]


async def advise(front, request: web.Request) -> web.Response:  # noqa: ANN001 (a Front)
    params = await read_params(request)
    cfg = front.cfg
    options = advise_api.options_of(params)
    source = FrontSource(asyncio.get_running_loop(), front, max(cfg.query_metadata_timeout, 60.0))
    advice = await asyncio.to_thread(advise_api.run, cfg, source, options)
    return advise_api.answer(advice, params, advise_api.usage_files(cfg))


async def layout(front, request: web.Request) -> web.Response:  # noqa: ANN001 (a Front)
    names = list(front.clients)
    answers = await asyncio.gather(*(front.ask(n, "GET", "/-/ready") for n in names))
    parts = [{"name": "front", "role": "front (listens, routes, owns the query log)", "pid": os.getpid(),
              "healthy": True, "status": "ready"}]
    for name, (status, text) in zip(names, answers):
        client = front.clients[name]
        proc = client.proc.proc if client.proc is not None else None
        healthy = status == 200 and client.started
        parts.append({"name": name, "role": part(client.child), "pid": proc.pid if proc is not None else 0,
                      "healthy": healthy, "restarts": client.proc.restarts if client.proc is not None else 0,
                      "status": "ready" if healthy else (text.strip().removeprefix("Service Unavailable: ")
                                                         if status else text) or why(client)})
    peers = await _peers(front)
    sizes = await asyncio.to_thread(storage_sizes, front.cfg.storage_path)
    return success({"singleProcess": False, "shards": front.layout.shards, "queryProcesses": front.layout.queriers,
                    "parts": parts, "peers": peers, "storage": {"path": front.cfg.storage_path, "parts": sizes}})


async def _peers(front) -> list[dict]:  # noqa: ANN001
    """The peers as the first query process that answers found them at its last read; unknown if none answers."""
    for client in front.proxy.targets:
        if not client.started:
            continue
        try:
            async with client.session.get("/api/v1/status/layout", headers={"Accept-Encoding": "identity"},
                                          timeout=aiohttp.ClientTimeout(total=ASK_TIMEOUT_S)) as resp:
                if resp.status == 200:
                    return json.loads(await resp.read())["data"]["peers"]
        except (aiohttp.ClientError, OSError, ValueError, KeyError):
            continue
    return [{"name": url, "state": "unknown (no query process answers)"} for url in front.cfg.cluster_peers]
