"""POST /api/v1/read?scope=head on the front: the whole gateway's recent samples, for peers on other machines.

A gateway's recent samples (not yet in the shared table) are in its ingest shards' heads, each shard holding
its own series (the distributor splits by series hash). The front sends the same request to every shard's
``?scope=head`` at once and answers the concatenation: the series of query i are shard 0's, then shard 1's...
(no series is in two shards, so nothing is merged). ``X-Metricsgw-Table-Version`` is the largest of the
shards' versions: the asking querier reads the table at least that new, which holds everything each shard's
answer leaves out. A shard that cannot answer makes the whole answer 503: a partial answer here would look
complete to the asking gateway, which instead answers without this gateway's recent data and warns.

The shards' answers are SAMPLES ``ReadResponse`` messages (remote_read.proto); they are cut and joined at the
wire level (field 1 of ReadResponse is the QueryResult of each query; QueryResult is its repeated field 1,
the series, so joining two QueryResults' bytes joins their series), never decoded sample by sample.
"""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from ..cluster import head_protocol
from ..cluster.head_protocol import MAX_RESPONSE_BYTES, TABLE_VERSION_HEADER
from ..errors import BadData, ForwardedError, PayloadTooLarge, Unavailable
from ..remote import read_codec
from ..remote.codec import decompress
from ..remote.write_handler import read_bounded
from .clients import ChildClient
from .readiness import hold_within, wait_started
from .unavailable import part, refusal_text, why

# The asking query's deadline and memory reservation go on to every shard (head_protocol.py).
_PASSED_HEADERS = ("Content-Type", "Content-Encoding", "X-Prometheus-Remote-Read-Version", "User-Agent",
                   head_protocol.DEADLINE_HEADER, head_protocol.MAX_BYTES_HEADER)


class _ShardFailed(Exception):
    pass


def query_results(response: bytes) -> list[bytes]:
    """The QueryResult payloads of a decoded ReadResponse, in query order."""
    out, pos, end = [], 0, len(response)
    while pos < end:
        tag, pos = _varint(response, pos)
        if tag != (1 << 3 | 2):  # field 1, length-delimited: the only field of ReadResponse
            raise BadData(f"unexpected field tag {tag} in a remote-read response")
        size, pos = _varint(response, pos)
        if pos + size > end:
            raise BadData("truncated remote-read response")
        out.append(response[pos:pos + size])
        pos += size
    return out


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while pos < len(data):
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise BadData("truncated varint in a remote-read response")


def join(answers: list[bytes]) -> bytes:
    """One snappy ReadResponse of decoded ReadResponses, query by query."""
    per_shard = [query_results(a) for a in answers]
    queries = max((len(r) for r in per_shard), default=0)
    if any(len(r) != queries for r in per_shard):
        raise BadData("shards answered different numbers of queries")
    return read_codec.encode_samples_response([b"".join(r[i] for r in per_shard) for i in range(queries)])


class HeadRead:
    def __init__(self, shards: list[ChildClient], timeout_s: float) -> None:
        """``timeout_s``: --cluster.peer-timeout, the wait when the asker named no deadline of its own; a shard
        that is alive but does not answer (stopped, swapping) is a 503 by then, not a request left open."""
        self.shards = shards
        self.timeout_s = timeout_s
        self.hold_s = hold_within(timeout_s)

    async def handle(self, request: web.Request) -> web.Response:
        body = await read_bounded(request, read_codec.MAX_REQUEST_BYTES, "remote-read request",
                                  "Prometheus's 32 MiB read request limit")
        headers = {h: request.headers[h] for h in _PASSED_HEADERS if h in request.headers}
        # Remote read's format from every shard, whatever the asker asked: their answers are joined at the wire
        # level here (a columnar answer, cluster/head_columns.py, is for a process reading one shard).
        path_qs = str(request.rel_url.without_query_params("format"))
        timeout = aiohttp.ClientTimeout(total=head_protocol.read_context(request.headers, self.timeout_s, 0).timeout_s)
        answers = await asyncio.gather(*(self._ask(s, path_qs, body, headers, timeout)
                                         for s in self.shards), return_exceptions=True)
        failed = [str(a) if isinstance(a, _ShardFailed) else f"{part(s.child)}: {a}"
                  for s, a in zip(self.shards, answers) if isinstance(a, BaseException)]
        refused = [a for a in answers if isinstance(a, ForwardedError)]
        if refused and len(refused) == len(answers):  # a request no shard takes (bad request): as they said
            raise refused[0]
        if failed:
            raise Unavailable("recent samples of this gateway are incomplete: " + refusal_text(failed))
        versions = [v for v, _ in answers]
        try:
            merged = await asyncio.to_thread(join, [raw for _, raw in answers])
        except BadData as err:
            raise Unavailable(f"a shard's recent samples could not be joined: {err}") from None
        return web.Response(body=merged, headers={
            "Content-Type": read_codec.SAMPLES_CONTENT_TYPE, "Content-Encoding": "snappy",
            TABLE_VERSION_HEADER: str(max(versions))})

    async def _ask(self, shard: ChildClient, path_qs: str, body: bytes, headers: dict[str, str],
                   timeout: aiohttp.ClientTimeout) -> tuple[int, bytes]:
        """(table version, decoded ReadResponse) of one shard."""
        name = part(shard.child)
        if await wait_started([shard], self.hold_s):  # its head is not whole before it started
            raise _ShardFailed(why(shard))
        shard.in_flight += 1
        try:
            async with shard.session.post(path_qs, data=body, headers=headers, timeout=timeout) as resp:
                data = await resp.read()
                if 400 <= resp.status < 500 and resp.status != 429:
                    raise ForwardedError(resp.status, data.decode("utf-8", "replace").strip())
                if resp.status != 200:
                    raise _ShardFailed(f"{name} answered {resp.status}: "
                                       f"{data[:300].decode('utf-8', 'replace').strip()}")
                version = resp.headers.get(TABLE_VERSION_HEADER, "")
                if resp.headers.get("Content-Type") != read_codec.SAMPLES_CONTENT_TYPE or not version.isdigit():
                    raise _ShardFailed(f"{name} did not answer with ?scope=head samples (Content-Type "
                                       f"{resp.headers.get('Content-Type')!r})")
        except asyncio.TimeoutError:
            raise _ShardFailed(f"{name} did not answer within {timeout.total:g}s") from None
        except (aiohttp.ClientError, OSError) as err:
            raise _ShardFailed(why(shard, err)) from None
        finally:
            shard.in_flight -= 1
        try:
            raw = await asyncio.to_thread(decompress, data, MAX_RESPONSE_BYTES, "the front's 1 GiB head-read bound")
        except (BadData, PayloadTooLarge) as err:
            raise _ShardFailed(f"{name}: {err}") from None
        return int(version), raw
