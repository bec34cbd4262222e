"""The front's answers that are the sum of its shards' JSON (cluster/head_json.py, docs/cluster.md).

- ``?scope=head`` on ``/api/v1/query_exemplars`` and ``/api/v1/metadata``: what a gateway on another machine
  asks (its query processes merge it with the table); every shard's answer, merged. A shard that cannot
  answer makes it 503 naming the shard, as the front's ``/api/v1/read?scope=head`` does (head_read.py): the
  asking gateway then warns rather than taking a partial answer for a whole one.
- ``/api/v1/status/tsdb``: the gateway's series are its shards' (each holds its own: the distributor splits
  by series hash), so the front adds up each shard's whole counts (``?scope=head``) and cuts the top lists.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
from aiohttp import web

from ..api.params import parse_limit, read_params
from ..api.response import success
from ..cluster import head_json
from ..cluster.peers import TABLE_VERSION_HEADER
from ..errors import ForwardedError, Unavailable
from ..storage.catalog import stats
from .clients import ChildClient
from .readiness import hold_within, wait_started
from .unavailable import part, refusal_text, why

MERGES = {"/api/v1/query_exemplars": head_json.merge_exemplars, "/api/v1/metadata": head_json.merge_metadata,
          "/api/v1/labels": head_json.merge_names}


def merge_for(path: str):
    """How the shards' ``?scope=head`` answers on ``path`` are merged; None: not a JSON API a head read asks."""
    if path.startswith("/api/v1/label/") and path.endswith("/values"):
        return head_json.merge_names
    return MERGES.get(path)


class HeadJson:
    def __init__(self, shards: list[ChildClient], timeout_s: float) -> None:
        self.shards = shards
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.hold_s = hold_within(timeout_s)

    async def scoped(self, request: web.Request) -> web.Response:
        """``?scope=head`` of the exemplars or metadata API: the shards' answers merged."""
        params = await read_params(request)
        answers = await self._ask_all(request.path, list(params.items()))
        resp = success(merge_for(request.path)([data for data, _ in answers]))
        versions = [v for _, v in answers if v is not None]
        if versions:
            resp.headers[TABLE_VERSION_HEADER] = str(max(versions))
        return resp

    async def tsdb_status(self, request: web.Request) -> web.Response:
        params = await read_params(request)
        limit = parse_limit(params.get("limit")) or 10  # as a single process answers (api/metadata.py)
        asked = [(k, v) for k, v in params.items() if k not in ("scope", "limit")] + [("scope", "head")]
        answers = await self._ask_all(request.path, asked)
        return success(stats.render([data for data, _ in answers], limit))

    async def _ask_all(self, path: str, params: list[tuple[str, str]]) -> list[tuple[object, int | None]]:
        got = await asyncio.gather(*(self._ask(s, path, params) for s in self.shards), return_exceptions=True)
        refused = [a for a in got if isinstance(a, ForwardedError)]
        if refused and len(refused) == len(got):  # a request no shard takes (bad parameters): as they said
            raise refused[0]
        failed = [str(a) if isinstance(a, _ShardFailed) else f"{part(s.child)}: {a}"
                  for s, a in zip(self.shards, got) if isinstance(a, BaseException)]
        if failed:
            raise Unavailable("this gateway's shards did not all answer: " + refusal_text(failed))
        return got

    async def _ask(self, shard: ChildClient, path: str, params: list[tuple[str, str]]) -> tuple[object, int | None]:
        name = part(shard.child)
        if await wait_started([shard], self.hold_s):  # what it holds is not whole before it started
            raise _ShardFailed(why(shard))
        shard.in_flight += 1
        try:
            # identity: the children's session passes bodies through undecoded (clients.py), and this one is read
            async with shard.session.get(path, params=params, headers={"Accept-Encoding": "identity"},
                                         timeout=self.timeout) as resp:
                body = await resp.read()
                if 400 <= resp.status < 500 and resp.status != 429:
                    raise ForwardedError(resp.status, _error_text(body))
                if resp.status != 200:
                    raise _ShardFailed(f"{name} answered {resp.status}: {_error_text(body[:300])}")
                version = resp.headers.get(TABLE_VERSION_HEADER, "")
                return json.loads(body)["data"], int(version) if version.isdigit() else None
        except asyncio.TimeoutError:
            raise _ShardFailed(f"{name} did not answer within --cluster.peer-timeout ({self.timeout.total:g}s)") \
                from None
        except (aiohttp.ClientError, OSError, ValueError, KeyError) as err:
            raise _ShardFailed(why(shard, err)) from None
        finally:
            shard.in_flight -= 1


class _ShardFailed(Exception):
    """A shard's answer is missing; its message names the shard."""


def _error_text(body: bytes) -> str:
    try:
        return json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return body.decode("utf-8", "replace").strip()
