"""The hop: a query asking its gateway's ingest shards and its --cluster.peers for their recent samples.

Remote read (SAMPLES) of ``?scope=head`` (head_protocol.py). A query runs in a worker thread; the HTTP calls to
other machines run on the event loop (aiohttp), all peers at once, and the worker waits for them while it
watches its ``QueryContext``: a client that leaves or a deadline that passes cancels the calls still running. A
shard of this gateway (a Unix socket) is read by the worker itself, watching its context the same way
(unix_http.py): no thread hop for the read every selection makes; and not at all when its extent board
(extent_board.py) says it holds nothing in memory in the window of a selection of samples.

Each read is part of the asking query: it carries the query's deadline and memory reservation, and its
answer is charged to the query's memory the moment it is decoded (the body read no further than the bytes the
query may still hold). Its samples count against --query.max-samples only as the query's evaluation takes them
(source.py), as a one-process gateway counts its own head's: no user limit refuses the read itself.

So there are two transports behind one ``Peer``: the blocking unix_http.py for a shard's samples (in the worker
thread: a measured speed win), aiohttp on the event loop for everything else (peers, and every process's JSON
APIs). Whichever failed, why is said once (failures.py ``classify``) and what the query does about it once
(policy.py: a shard is a primary, a 503 naming it; a peer a secondary, a 503 or, with ``partial_response``, a
warning). The front reads its shards for a peer gateway with the same protocol, words and rule (gateway_head.py).
Every call is counted in ``metricsgw_peer_requests_total{peer,result}``; a change of state is logged once.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import logging
import threading
import urllib.parse
from dataclasses import dataclass

import aiohttp

from ..errors import BadData, LimitExceeded, PayloadTooLarge
from ..limits.context import SAMPLE_BYTES, SERIES_BYTES, QueryContext
from ..model import Matcher
from ..storage.native_store import histogram_bytes_each
from . import extent_board, head_columns, head_protocol, read_client_codec, unix_http
from .failures import CALL_ERRORS, REFUSAL_BYTES, Refused, classify
from .policy import PeerFailure, policy
from .read_client_codec import PeerSeries

log = logging.getLogger(__name__)

# The worker looks at its QueryContext this often while peers answer (disconnect, deadline).
POLL_S = 0.05
# With partial answers allowed, a peer gets at most this share of what is left of the query's deadline, so that
# a query whose peer does not answer still answers in time, without it and with a warning.
DEADLINE_SHARE = 0.5


@dataclass
class PeerAnswer:
    peer: str
    results: list[PeerSeries]  # one per query asked
    table_version: int | None  # the newest table version the peer had committed when it answered


@dataclass
class PeerJson:
    peer: str
    data: object  # the ``data`` of its ?scope=head answer
    table_version: int | None


class _TooBig(Exception):
    """The body is more than the query may still hold."""


class Peer:
    """One process asked for recent samples: an ingest shard of this gateway (``primary``, on its Unix socket) or
    a configured peer (its own HTTP session; a Unix-socket connector for ``unix:`` peers)."""

    def __init__(self, url: str, shard: int | None = None) -> None:
        # credentials in the URL (http://user:password@host:port) authenticate; they never reach
        # a warning, a log line or a metric label
        self._auth: dict[str, str] = {}
        self.primary = shard is not None
        if url.startswith("unix:"):
            self.name = url if shard is None else f"shard-{shard}"
            self._socket, self._base = url[len("unix:"):], "http://localhost"
        else:
            parts = urllib.parse.urlsplit(url)
            userinfo, _, hostport = parts.netloc.rpartition("@")
            if userinfo:
                user, _, password = userinfo.partition(":")
                login = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}".encode()
                self._auth = {"Authorization": "Basic " + base64.b64encode(login).decode()}
            self.name = urllib.parse.urlunsplit(parts._replace(netloc=hostport))
            self._socket, self._base = None, self.name
        # in a message a user reads: a shard by its number (never its socket), a peer by its address
        self.label = f"ingest shard {shard}" if self.primary else f"peer {self.name}"
        self._url = self._base + f"/api/v1/read?{head_protocol.SCOPE_PARAM}={head_protocol.HEAD}"
        # A process of this machine (a query process's own shard) is read by the worker thread itself
        self.blocking = unix_http.UnixHttpClient(self._socket) if self._socket else None
        # and, if it is an ingest shard, tells the span of what it holds in memory
        self.board = extent_board.BoardReader(extent_board.path_for(self._socket)) if self._socket else None
        self._session: aiohttp.ClientSession | None = None
        self.state = "ok"  # the last call's result, so a change is logged once

    def _session_now(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.UnixConnector(path=self._socket) if self._socket else aiohttp.TCPConnector()
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    def _request(self, limit: int | None, columns: bool, forwarded: dict[str, str]) -> tuple[str, dict[str, str]]:
        headers = {"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy",
                   "X-Prometheus-Remote-Read-Version": "0.1.0", **forwarded, **self._auth}
        url = self._url + (f"&limit={limit}" if limit else "") + (f"&format={head_columns.FORMAT}" if columns else "")
        return url, headers

    async def read(self, body: bytes, timeout_s: float, max_bytes: int, forwarded: dict[str, str],
                   limit: int | None = None, columns: bool = False) -> PeerAnswer:
        """``limit``: at most that many series per query, the first in label order (a metadata call's cap).
        ``columns``: ask a ``unix:`` peer (a process of this machine: its arrays are not compressed) for the columnar
        answer (head_columns.py); a peer that does not give one (a front, which joins its shards' remote-read
        answers) answers remote read's format, decoded as usual."""
        url, headers = self._request(limit, columns and self._socket is not None, forwarded)
        async with self._session_now().post(url, data=body, headers=headers,
                                            timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if resp.status != 200:
                raise Refused(resp.status, await resp.content.read(REFUSAL_BYTES))
            ctype = resp.headers.get("Content-Type", "")
            _check_type(ctype)
            data = bytearray()
            async for chunk in resp.content.iter_chunked(1 << 16):
                data += chunk
                if len(data) > max_bytes:
                    raise _TooBig()
            version = head_protocol.table_version(resp.headers)
        if ctype == head_columns.CONTENT_TYPE:
            results = head_columns.decode_response(bytes(data))
        else:
            results = await asyncio.to_thread(read_client_codec.decode_response, bytes(data), max_bytes)
        return PeerAnswer(self.name, results, version)

    def read_blocking(self, body: bytes, timeout_s: float, max_bytes: int, forwarded: dict[str, str],
                      limit: int | None, columns: bool, check) -> PeerAnswer:
        """``read`` of a ``unix:`` peer in the calling thread (unix_http.py); ``check`` may stop it."""
        url, headers = self._request(limit, columns, forwarded)
        try:
            got = self.blocking.post(url[len(self._base):], body, headers, timeout_s, max_bytes, check)
        except unix_http.TooBig:
            raise _TooBig() from None
        except unix_http.BadAnswer as err:
            raise BadData(str(err)) from None
        if got.status != 200:
            raise Refused(got.status, got.body[:REFUSAL_BYTES])
        ctype = got.headers.get("Content-Type", "")
        _check_type(ctype)
        results = (head_columns.decode_response(got.body) if ctype == head_columns.CONTENT_TYPE
                   else read_client_codec.decode_response(got.body, max_bytes))
        return PeerAnswer(self.name, results, head_protocol.table_version(got.headers))

    def unneeded(self, queries: list[tuple[list[Matcher], int, int]]) -> PeerAnswer | None:
        """Its empty answer to a read of samples, without asking, when its extent board says it holds nothing in
        memory in any query's window (naming the table version that holds the rest); None: ask it."""
        extent = self.board.read() if self.board is not None else None
        if extent is None or not all(extent.misses(lo, hi) for _, lo, hi in queries):
            return None
        return PeerAnswer(self.name, [PeerSeries.empty() for _ in queries], extent.version)

    async def get_json(self, path: str, params: list[tuple[str, str]], timeout_s: float,
                       forwarded: dict[str, str]) -> PeerJson:
        """``GET path?scope=head&params``: the ``data`` of a success envelope (cluster/head_json.py)."""
        async with self._session_now().get(self._base + path, params=[(head_protocol.SCOPE_PARAM, head_protocol.HEAD),
                                                                      *params],
                                           headers={**forwarded, **self._auth},
                                           timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if resp.status != 200:
                raise Refused(resp.status, await resp.content.read(REFUSAL_BYTES))
            try:
                body = await resp.json(content_type=None)
                data = body["data"]
            except (ValueError, KeyError, TypeError) as err:
                raise BadData(f"not a success envelope ({err})") from None
            version = head_protocol.table_version(resp.headers)
        return PeerJson(self.name, data, version)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def _check_type(ctype: str) -> None:
    if ctype not in ("application/x-protobuf", head_columns.CONTENT_TYPE):
        raise BadData(f"unexpected Content-Type {ctype!r}")


class PeerFanout:
    """This gateway's ingest shards (``shard_sockets``, a query process's) and its peers; ``read`` is called
    from query worker threads."""

    def __init__(self, urls: list[str], timeout_s: float, telemetry, shard_sockets: list[str] = ()) -> None:
        self.peers = [Peer(f"unix:{path}", shard=i) for i, path in enumerate(shard_sockets)] + [Peer(u) for u in urls]
        self.timeout_s = timeout_s
        self._tel = telemetry
        self._loop: asyncio.AbstractEventLoop | None = None
        self._state_lock = threading.Lock()

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The event loop the HTTP calls run on (the server's)."""
        self._loop = loop

    async def close(self) -> None:
        for p in self.peers:
            await p.close()

    def _timeout(self, peer: Peer, remaining_s: float, partial: bool) -> float:
        """How long ``peer`` may take: a shard, what is left of the query's deadline (it is part of the query);
        a peer, --cluster.peer-timeout, and with partial answers at most a share of what is left, so that the
        query still answers in time without it."""
        remaining_s = max(remaining_s, 0.001)
        if peer.primary:
            return remaining_s
        return min(self.timeout_s, remaining_s * DEADLINE_SHARE if partial else remaining_s)

    def read(self, queries: list[tuple[list[Matcher], int, int]], series_only: bool, ctx: QueryContext,
             limit: int | None = None, columns: bool = False, partial: bool = False) -> list[PeerAnswer | PeerFailure]:
        """Every process's answer to these queries, or (a peer, with ``partial``) why it has none; blocks the calling
        worker. ``columns``: ask for columnar answers (their ``labels`` hold None for series the caller knows by
        id: head_columns.py).

        Raises the query's own errors: QueryCanceled/QueryTimeout (the calls are cancelled), LimitExceeded when
        an answer crosses the query's memory, and Unavailable when a process whose answer is needed has none."""
        if not self.peers:
            return []
        ctx.check("reading recent samples")
        # Local peers whose extent board says they hold nothing in the windows (a series read is never skipped: it
        # wants every series in memory, whatever its samples' times); the request is encoded only for the others.
        skipped = {} if series_only else {p.name: a for p in self.peers
                                          if p.blocking is not None and (a := p.unneeded(queries)) is not None}
        body = read_client_codec.encode_request(queries, series_only) if len(skipped) < len(self.peers) else b""
        remaining = ctx.remaining()
        max_bytes = head_protocol.reservation(ctx)
        # Peers elsewhere are asked at once on the event loop; this machine's are then read right here, in turn
        # (each is a local process answering in about a millisecond), while the others answer.
        futures = {}
        for p in self.peers:
            if p.blocking is None:
                timeout = self._timeout(p, remaining, partial)
                call = self._call(p, body, timeout, max_bytes, head_protocol.request_headers(ctx, timeout),
                                  limit=limit, columns=columns)
                futures[asyncio.run_coroutine_threadsafe(call, self._loop)] = p
        out: dict[str, PeerAnswer | PeerFailure] = {}
        pending = set(futures)
        try:
            for p in self.peers:
                if p.blocking is None:
                    continue
                unneeded = skipped.get(p.name)
                if unneeded is not None:
                    out[p.name] = unneeded
                    if self._tel is not None:
                        self._tel.peer_reads_skipped.labels(p.name).inc()
                    continue
                got = self._call_blocking(p, body, self._timeout(p, ctx.remaining(), partial), limit, columns, ctx)
                out[p.name] = self._settled(p, got, ctx, partial)
            while pending:
                done, pending = concurrent.futures.wait(pending, timeout=POLL_S,
                                                        return_when=concurrent.futures.FIRST_COMPLETED)
                for fut in done:
                    out[futures[fut].name] = self._settled(futures[fut], fut.result(), ctx, partial)
                ctx.check("reading recent samples")
        finally:
            for fut in pending:
                fut.cancel()
        return [out[p.name] for p in self.peers]

    @staticmethod
    def _settled(peer: Peer, got: PeerAnswer | PeerFailure, ctx: QueryContext, partial: bool) -> PeerAnswer | PeerFailure:
        """An answer charged to the query's memory as it arrives; a failure the query cannot do without raised."""
        if isinstance(got, PeerFailure):
            return policy(peer, got, ctx, partial)
        held = sum(len(r.block) * SAMPLE_BYTES + len(r.hists) * histogram_bytes_each(r.hists)
                   + len(r.ids) * SERIES_BYTES for r in got.results)
        ctx.charge_bytes(held, f"reading the recent samples of {peer.label}")
        return got

    def _call_blocking(self, peer: Peer, body: bytes, timeout_s: float, limit: int | None, columns: bool,
                       ctx: QueryContext) -> PeerAnswer | PeerFailure:
        """``_call`` for a ``unix:`` peer, in the query's worker thread."""
        try:
            got: PeerAnswer | PeerFailure = peer.read_blocking(
                body, timeout_s, head_protocol.reservation(ctx), head_protocol.request_headers(ctx, timeout_s),
                limit, columns, lambda: ctx.check("reading recent samples"))
        except (_TooBig, PayloadTooLarge, *CALL_ERRORS) as err:
            got = _failed(peer, err, timeout_s)
        self._observe(peer, got)
        return got

    async def get_json(self, path: str, params: list[tuple[str, str]], ctx: QueryContext,
                       partial: bool = False) -> list[PeerJson | PeerFailure]:
        """Every process's ``?scope=head`` answer on a JSON API (exemplars, metadata), all at once, on the event
        loop; deadlines and failures as for ``read`` (a failure returned only when ``policy`` lets it be)."""
        remaining = ctx.remaining()
        calls = []
        for p in self.peers:
            timeout = self._timeout(p, remaining, partial)
            calls.append(self._call(p, None, timeout, 0, head_protocol.request_headers(ctx, timeout), (path, params)))
        got = await asyncio.gather(*calls)
        return [policy(p, g, ctx, partial) if isinstance(g, PeerFailure) else g for p, g in zip(self.peers, got)]

    def json_blocking(self, path: str, params: list[tuple[str, str]], ctx: QueryContext,
                      partial: bool = False) -> list[PeerJson | PeerFailure]:
        """``get_json`` from a query's worker thread: it waits while it watches its context (a client that leaves
        or a deadline that passes cancels the calls)."""
        fut = asyncio.run_coroutine_threadsafe(self.get_json(path, params, ctx, partial), self._loop)
        try:
            while True:
                try:
                    return fut.result(timeout=POLL_S)
                except concurrent.futures.TimeoutError:
                    ctx.check("reading recent series")
        finally:
            fut.cancel()

    async def _call(self, peer: Peer, body: bytes | None, timeout_s: float, max_bytes: int, forwarded: dict[str, str],
                    json_get: tuple[str, list] | None = None, limit: int | None = None, columns: bool = False
                    ) -> PeerAnswer | PeerJson | PeerFailure:
        try:
            got: PeerAnswer | PeerJson | PeerFailure = (
                await peer.get_json(*json_get, timeout_s, forwarded) if json_get
                else await peer.read(body, timeout_s, max_bytes, forwarded, limit, columns))
        except (_TooBig, PayloadTooLarge, *CALL_ERRORS) as err:
            got = _failed(peer, err, timeout_s)
        self._observe(peer, got)
        return got

    def _observe(self, peer: Peer, got: PeerAnswer | PeerFailure) -> None:
        result = got.failure.result if isinstance(got, PeerFailure) else "ok"
        if self._tel is not None:
            self._tel.peer_requests.labels(peer.name, result).inc()
        with self._state_lock:
            before, peer.state = peer.state, result
        if before == result:
            return
        if result == "ok":
            log.info("%s answers again", peer.label)
        else:
            log.warning("%s: %s (%s)", peer.label, result, got.failure.reason)


def _failed(peer: Peer, err: BaseException, timeout_s: float) -> PeerFailure:
    """A failed call's PeerFailure; an answer larger than the query may hold is the query's limit, not a failure."""
    if isinstance(err, (_TooBig, PayloadTooLarge)):
        raise LimitExceeded(f"the recent samples of {peer.label} would hold more memory than the query may "
                            "(raise --query.max-memory-per-query or narrow the query)") from None
    return PeerFailure(peer.name, classify(err, timeout_s))
