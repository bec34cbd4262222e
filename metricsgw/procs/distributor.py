"""POST /api/v1/write on the front: split the request by series over the ingest shards, forward each part to
its shard's own /api/v1/write, and answer the sender with what they decided together.

With one shard the body goes on untouched (nothing decoded). With several, ``remote/split.py`` cuts it
(1.0 and 2.0 alike, by series hash) and every part is sent at once. The combined answer keeps Prometheus's
retry semantics (``combine``): 204 only when every part was stored; any 5xx -> 5xx and any 429 -> 429 (the
sender retries the whole request; a part stored twice is harmless: a series holds one sample per timestamp,
the first written); otherwise a 4xx carries every shard's message (the valid rest was stored, no retry).
Remote-Write 2.0's written counts are the sum of the shards' counts, which are exact each.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import aiohttp
import snappy
from aiohttp import web

from ..errors import ForwardedError, GatewayError
from ..http.body import read_bounded
from ..remote import codec, split
from ..remote.written import H_EXEMPLARS, H_HISTOGRAMS, H_SAMPLES
from .clients import ChildClient
from .readiness import wait_started
from .unavailable import part, refusal_text, why

log = logging.getLogger(__name__)

WRITTEN_HEADERS = (H_SAMPLES, H_HISTOGRAMS, H_EXEMPLARS)
_PASSED_HEADERS = ("Content-Type", "Content-Encoding", "X-Prometheus-Remote-Write-Version", "User-Agent")


@dataclass(frozen=True)
class PartAnswer:
    status: int
    text: str  # what the sender is told of this part when it failed, naming the shard
    headers: dict[str, str]


def combine(answers: list[PartAnswer], version: int) -> tuple[int, str, dict[str, str]]:
    """(status, message, headers) for the sender, from the answers to each part."""
    headers: dict[str, str] = {}
    if version == 2:
        for h in WRITTEN_HEADERS:
            headers[h] = str(sum(int(a.headers.get(h, 0) or 0) for a in answers))
    failed = [a for a in answers if a.status >= 300]
    if not failed:
        return 204, "", headers
    server = [a for a in failed if a.status >= 500]
    throttled = [a for a in failed if a.status == 429]
    chosen = server or throttled or failed
    status = chosen[0].status if all(a.status == chosen[0].status for a in chosen) else (
        503 if server else 429 if throttled else 400)
    if status == 429 or status == 503:
        retry = max((int(a.headers["Retry-After"]) for a in chosen if a.headers.get("Retry-After", "").isdigit()),
                    default=1)
        headers["Retry-After"] = str(retry)
    message = "\n".join(a.text for a in failed)
    return status, message, headers


class Distributor:
    def __init__(self, cfg, shards: list[ChildClient], telemetry) -> None:
        self.cfg = cfg
        self.shards = shards
        self.tel = telemetry

    async def handle(self, request: web.Request, body: bytes | None = None) -> web.Response:
        """``body``: read already (a connection the front meant to pass to the shard, which could not take it)."""
        ctype, cenc = request.headers.get("Content-Type"), request.headers.get("Content-Encoding")
        try:
            version = codec.negotiate(ctype, cenc)  # 415 before reading anything
            if body is None:
                body = await read_bounded(request, self.cfg.remote_write_max_body_size)
            headers = {h: request.headers[h] for h in _PASSED_HEADERS if h in request.headers}
            parts = self._parts(body, version)
            answers = await asyncio.gather(*(self._forward(self.shards[i], piece, headers)
                                             for i, piece in enumerate(parts) if piece is not None))
            status, message, out_headers = combine(list(answers), version)
        except GatewayError as err:  # 413/415/400 of the whole request, before any part is sent
            self.tel.write_requests.labels(str(err.status)).inc()
            raise
        self.tel.write_requests.labels(str(status)).inc()
        if status != 204:
            raise ForwardedError(status, message, out_headers)
        return web.Response(status=204, headers=out_headers)

    def _parts(self, body: bytes, version: int) -> list[bytes | None]:
        """The compressed body for each shard (None: nothing for it)."""
        n = len(self.shards)
        if n == 1:
            return [body]
        raw = codec.decompress(body, self.cfg.remote_write_max_decoded_size)
        cut = split.split_v1(raw, n) if version == 1 else split.split_v2(raw, n)
        parts = [snappy.compress(p) if p else None for p in cut]
        if all(p is None for p in parts):  # an empty request: one shard answers it as a single process would
            parts[0] = body
        return parts

    async def _forward(self, shard: ChildClient, body: bytes, headers: dict[str, str]) -> PartAnswer:
        answer = await self._answer(shard, body, headers)
        self.tel.shard_forwards.labels(shard.child.name, str(answer.status)).inc()
        return answer

    async def _answer(self, shard: ChildClient, body: bytes, headers: dict[str, str]) -> PartAnswer:
        if await wait_started([shard]):  # starting or restarting, and not back within the hold: the sender retries
            return PartAnswer(503, refusal_text([why(shard)]), {"Retry-After": "1"})
        shard.in_flight += 1
        try:
            async with shard.session.post("/api/v1/write", data=body, headers=headers) as resp:
                text = await resp.text(errors="replace")
                return PartAnswer(resp.status, f"{part(shard.child)}: {text.strip()}", dict(resp.headers))
        except (aiohttp.ClientError, OSError) as err:  # it ended a moment ago: the sender retries
            return PartAnswer(503, refusal_text([why(shard, err)]), {"Retry-After": "1"})
        finally:
            shard.in_flight -= 1
