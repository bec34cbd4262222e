"""The front's Queries endpoints: the query log it owns (its records come from the query processes:
querylog/channel.py), and the running queries, which live in the query processes.

``/api/v1/status/running_queries`` asks every query process for its list and joins them, each query's id
prefixed with its process (``querier-0:7``) and a ``process`` field added; ``/api/v1/admin/cancel_query?id=
querier-0:7`` is passed to that process with its own id. A query process that cannot answer is named in a
warning (its queries are missing from the list), as a query process's list is no less true without another's.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
from aiohttp import web

from ..errors import BadData, ForwardedError
from ..http.params import read_params
from ..http.response import success
from .clients import ChildClient
from .unavailable import refusal, why

ASK_TIMEOUT_S = 5.0
PLAIN = {"Accept-Encoding": "identity"}  # the children's session passes answers through undecoded: ask for none


class FrontQueries:
    def __init__(self, queriers: list[ChildClient]) -> None:
        self.queriers = {c.child.name: c for c in queriers}

    async def running_queries(self, request: web.Request) -> web.Response:
        names = list(self.queriers)
        answers = await asyncio.gather(*(self._ask(self.queriers[n], "GET", "/api/v1/status/running_queries")
                                         for n in names))
        joined, warnings = [], []
        for name, (status, body) in zip(names, answers):
            if status != 200:
                warnings.append(f"{self.queriers[name].label}: {body}")
                continue
            for entry in json.loads(body)["data"]:
                joined.append({**entry, "id": f"{name}:{entry['id']}", "process": name})
        joined.sort(key=lambda e: -e["elapsedSeconds"])  # oldest first, as each process lists them
        return success(joined, warnings=warnings)

    async def cancel_query(self, request: web.Request) -> web.Response:
        params = await read_params(request)
        text = params.get("id", "")
        name, _, qid = text.rpartition(":")
        client = self.queriers.get(name)
        if client is None or not qid.isdigit():
            raise BadData(f'invalid parameter "id": {text!r} is not the id of a running query (see '
                          "/api/v1/status/running_queries)")
        status, body = await self._ask(client, "POST", f"/api/v1/admin/cancel_query?id={qid}")
        if status == 0:
            raise refusal([body])
        answer = json.loads(body)
        if status != 200:
            refused = ForwardedError(status, answer.get("error", body))
            refused.error_type = answer.get("errorType", refused.error_type)  # not_found: the query ended
            raise refused
        return success({**answer["data"], "id": text})

    async def _ask(self, client: ChildClient, method: str, path: str) -> tuple[int, str]:
        """(status, body), or (0, why it has no answer, in plain words)."""
        if not client.proc.running:
            return 0, why(client)
        try:
            async with client.session.request(method, path, headers=PLAIN,
                                              timeout=aiohttp.ClientTimeout(total=ASK_TIMEOUT_S)) as resp:
                return resp.status, await resp.text(errors="replace")
        except (aiohttp.ClientError, OSError) as err:
            return 0, why(client, err)
