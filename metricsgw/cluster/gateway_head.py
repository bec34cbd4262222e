"""The front's answer to a head read (``?scope=head``) for its whole gateway: every shard asked at once.

A gateway on another machine asks the front once (peers.py); the recent samples are in the ingest shards' heads,
each shard holding its own series (the distributor splits by series hash). So the front asks each shard the same:
- ``POST /api/v1/read?scope=head``: their remote-read answers joined at the wire level (head_join.py);
- ``?scope=head`` of the exemplars, metadata and label APIs: their JSON merged as a query process merges it
  (head_json.py);
- ``/api/v1/status/tsdb`` (every call, not a head read): each shard's whole counts (``?scope=head``) added up
  and the top lists cut (storage/catalog/stats.py).
An answer names the largest of the shards' table versions (``X-Metricsgw-Table-Version``): the asking query reads
the table at least that new, which holds everything each shard's answer leaves out.

The shards are primaries (policy.py ``primaries``): a shard that cannot answer makes the whole answer 503 naming
it -- a partial answer here would look complete to the asking gateway, which instead answers without this
gateway's recent data and warns -- and why it failed is worded by the classifier every caller uses
(failures.py). The front runs on its event loop, so it asks with aiohttp (a query process's worker reads shards
with the blocking unix_http.py instead); the shards come in as ``Shard``s, so this module needs nothing of the
process management in procs/ (procs' ChildClient is one).
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Protocol, TypeVar

import aiohttp
import orjson
from aiohttp import web

from ..errors import BadData, PayloadTooLarge, Unavailable
from ..http.body import read_bounded
from ..http.params import parse_tsdb_top, parse_tsdb_window, read_params
from ..http.response import success
from ..remote import read_codec
from ..remote.codec import decompress
from ..storage.catalog import stats
from . import head_json, head_protocol
from .failures import CALL_ERRORS, Failure, Refused, classify
from .head_join import join
from .policy import primaries

T = TypeVar("T")

# The asking query's deadline and memory reservation go on to every shard (head_protocol.py).
_PASSED_HEADERS = ("Content-Type", "Content-Encoding", "X-Prometheus-Remote-Read-Version", "User-Agent",
                   head_protocol.DEADLINE_HEADER, head_protocol.MAX_BYTES_HEADER)
_MERGES = {"/api/v1/query_exemplars": head_json.merge_exemplars, "/api/v1/metadata": head_json.merge_metadata,
           "/api/v1/labels": head_json.merge_names}


class Shard(Protocol):
    """An ingest shard as the front reaches it."""

    @property
    def label(self) -> str:
        """It in plain words, for a message a user reads: "ingest shard 0"."""

    @property
    def session(self) -> aiohttp.ClientSession:
        """A session over its socket, its base URL set; bodies passed through undecoded."""

    async def until_started(self, hold_s: float) -> str | None:
        """Waits at most ``hold_s`` for it to have started (what it holds is not whole before); None once it
        has, else why not, as a phrase following its label ("is restarting (killed by SIGKILL)")."""


def answers(request: web.Request) -> bool:
    """Whether the front answers ``request`` itself, from its shards: a head read of a peer gateway."""
    if not head_protocol.asks_for_head(request.rel_url.query):
        return False
    if request.path == "/api/v1/read":
        return request.method == "POST"
    return _merge_for(request.path) is not None


def _merge_for(path: str):
    """How the shards' ``?scope=head`` answers on ``path`` are merged; None: not a JSON API a head read asks."""
    if path.startswith("/api/v1/label/") and path.endswith("/values"):
        return head_json.merge_names
    return _MERGES.get(path)


class GatewayHead:
    def __init__(self, shards: list[Shard], timeout_s: float, hold_s: float) -> None:
        """``timeout_s``: --cluster.peer-timeout, the wait when the asker named no deadline of its own; a shard
        that is alive but does not answer (stopped, swapping) is a 503 by then, not a request left open.
        ``hold_s``: the wait for a shard that has not started (within ``timeout_s``, so the asker still gets the
        refusal that says why)."""
        self.shards = shards
        self.timeout_s = timeout_s
        self.hold_s = hold_s

    async def handle(self, request: web.Request) -> web.Response:
        """A request ``answers`` says is the front's."""
        if request.path == "/api/v1/read":
            return await self.read(request)
        return await self.scoped_json(request)

    async def read(self, request: web.Request) -> web.Response:
        body = await read_bounded(request, read_codec.MAX_REQUEST_BYTES, "remote-read request",
                                  "Prometheus's 32 MiB read request limit")
        headers = {h: request.headers[h] for h in _PASSED_HEADERS if h in request.headers}
        # Remote read's format from every shard, whatever the asker asked: their answers are joined at the wire
        # level here (a columnar answer, head_columns.py, is for a process reading one shard).
        path_qs = str(request.rel_url.without_query_params("format"))
        timeout_s = head_protocol.read_context(request.headers, self.timeout_s, 0).timeout_s

        async def ask(shard: Shard) -> tuple[int, bytes]:
            async with shard.session.post(path_qs, data=body, headers=headers,
                                          timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
                data = await resp.read()
                if resp.status != 200:
                    raise Refused(resp.status, data)
                ctype, version = resp.headers.get("Content-Type"), head_protocol.table_version(resp.headers)
                if ctype != read_codec.SAMPLES_CONTENT_TYPE or version is None:
                    raise BadData(f"not a head read's samples (Content-Type {ctype!r})")
            try:
                return version, await asyncio.to_thread(decompress, data, head_protocol.MAX_RESPONSE_BYTES,
                                                        "the front's 1 GiB head-read bound")
            except PayloadTooLarge as err:
                raise BadData(str(err)) from None

        answers = await self._ask_all(ask, timeout_s)
        try:
            merged = await asyncio.to_thread(join, [raw for _, raw in answers])
        except BadData as err:
            raise Unavailable(f"a shard's recent samples could not be joined: {err}") from None
        return web.Response(body=merged, headers={
            "Content-Type": read_codec.SAMPLES_CONTENT_TYPE, "Content-Encoding": "snappy",
            head_protocol.TABLE_VERSION_HEADER: str(max(v for v, _ in answers))})

    async def scoped_json(self, request: web.Request) -> web.Response:
        """``?scope=head`` of the exemplars, metadata or label APIs: the shards' answers merged."""
        params = await read_params(request)
        answers = await self._ask_json(request.path, list(params.items()), request.headers)
        resp = success(_merge_for(request.path)([data for data, _ in answers]))
        versions = [v for _, v in answers if v is not None]
        if versions:
            resp.headers[head_protocol.TABLE_VERSION_HEADER] = str(max(versions))
        return resp

    async def tsdb_status(self, request: web.Request) -> web.Response:
        params = await read_params(request)
        return success(await self.tsdb_data(params, request.headers))

    async def tsdb_data(self, params, headers) -> dict:
        """The gateway's /api/v1/status/tsdb answer for ``params``: every shard's whole counts added up."""
        limit, focus = parse_tsdb_top(params)  # as a single process answers (api/metadata.py)
        parse_tsdb_window(params)  # a bad window is refused here, in the words a single process uses
        asked = [(k, v) for k, v in params.items()
                 if k not in (head_protocol.SCOPE_PARAM, "limit", "topN", "focusLabel")]
        answers = await self._ask_json("/api/v1/status/tsdb", asked + [(head_protocol.SCOPE_PARAM, head_protocol.HEAD)],
                                       headers)
        return stats.render([data for data, _ in answers], limit, focus)

    async def _ask_json(self, path: str, params: list[tuple[str, str]], asked) -> list[tuple[object, int | None]]:
        """Every shard's ``data`` on ``path`` and the table version it named; the asker's deadline and reservation
        (``asked``: its request's headers) go on to every shard, as for the remote read above."""
        timeout_s = head_protocol.read_context(asked, self.timeout_s, 0).timeout_s
        headers = {"Accept-Encoding": "identity",  # the children's session passes bodies through undecoded
                   **{h: asked[h] for h in (head_protocol.DEADLINE_HEADER, head_protocol.MAX_BYTES_HEADER) if h in asked}}

        async def ask(shard: Shard) -> tuple[object, int | None]:
            async with shard.session.get(path, params=params, headers=headers,
                                         timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
                body = await resp.read()
                if resp.status != 200:
                    raise Refused(resp.status, body)
                return orjson.loads(body)["data"], head_protocol.table_version(resp.headers)

        return await self._ask_all(ask, timeout_s)

    async def _ask_all(self, ask: Callable[[Shard], Awaitable[T]], timeout_s: float) -> list[T]:
        got = await asyncio.gather(*(self._ask(s, ask, timeout_s) for s in self.shards))
        return primaries([(s.label, g) for s, g in zip(self.shards, got)])

    async def _ask(self, shard: Shard, ask: Callable[[Shard], Awaitable[T]], timeout_s: float) -> T | Failure:
        not_started = await shard.until_started(self.hold_s)
        if not_started:
            return Failure("down", not_started)
        try:
            return await ask(shard)
        except CALL_ERRORS as err:
            # its own state (it ended meanwhile: "is restarting") says more than how the call failed
            not_started = await shard.until_started(0)
            return Failure("down", not_started) if not_started else classify(err, timeout_s)
