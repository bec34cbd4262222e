"""Asking every peer for its recent samples: remote read (SAMPLES) of ``POST /api/v1/read?scope=head``.

A query runs in a worker thread; the HTTP calls to other machines run on the event loop (aiohttp),
all peers at once, and the worker waits for them while it watches its ``QueryContext``: a client that
leaves or a deadline that passes cancels the calls still running. A ``unix:`` peer (a query process's
own shard) is read by the worker itself, watching its context the same way (unix_http.py): no thread
hop for the read every selection makes; and not at all when its extent board (extent_board.py) says it holds
nothing in memory in the window of a selection of samples. A peer's samples are charged to the query
(--query.max-samples, memory) the moment its answer is decoded, and its body is read no further
than the bytes the query may still hold.

A peer that cannot be reached, refuses, is slower than --cluster.peer-timeout or answers something
that is not a remote-read response is a ``PeerFailure``: the caller answers without that peer's
recent data and says so in a warning. Each call is counted in
``metricsgw_peer_requests_total{peer,result}``, and a peer's change of state is logged once.
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
from ..limits.context import QueryContext
from ..model import Matcher
from ..remote import read_client_codec
from ..remote.read_client_codec import PeerSeries
from ..storage.native_store import HISTOGRAM_BYTES
from . import extent_board, head_columns, unix_http

log = logging.getLogger(__name__)

TABLE_VERSION_HEADER = "X-Metricsgw-Table-Version"
# The worker looks at its QueryContext this often while peers answer (disconnect, deadline).
POLL_S = 0.05
# Peers get at most this share of what is left of the query's deadline, so that a query whose
# peer does not answer still answers in time, without it and with a warning, instead of timing out
# (a metadata call's deadline, --query.metadata-timeout, is as long as --cluster.peer-timeout).
DEADLINE_SHARE = 0.5
# A decoded sample is ~18 bytes on the wire; a query may hold SAMPLE_BYTES per sample. The body
# (compressed or not) is bounded by what the query has left, never more than this.
MAX_RESPONSE_BYTES = 1 << 30


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


@dataclass
class PeerFailure:
    peer: str
    result: str  # down | refused | timeout | garbage: the metric's label
    reason: str


class _TooBig(Exception):
    """The body is more than the query may still hold."""


class _Refused(Exception):
    """The peer answered, but not 200."""


class Peer:
    """One configured peer: its own HTTP session (a Unix-socket connector for ``unix:`` peers)."""

    def __init__(self, url: str) -> None:
        # credentials in the URL (http://user:password@host:port) authenticate; they never reach
        # a warning, a log line or a metric label
        self._auth: dict[str, str] = {}
        if url.startswith("unix:"):
            self.name = url
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
        self._url = self._base + "/api/v1/read?scope=head"
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

    def _request(self, limit: int | None, columns: bool) -> tuple[str, dict[str, str]]:
        headers = {"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy",
                   "X-Prometheus-Remote-Read-Version": "0.1.0", **self._auth}
        url = self._url + (f"&limit={limit}" if limit else "") + (f"&format={head_columns.FORMAT}" if columns else "")
        return url, headers

    async def read(self, body: bytes, timeout_s: float, max_bytes: int, limit: int | None = None,
                   columns: bool = False) -> PeerAnswer:
        """``limit``: at most that many series per query, the first in label order (a metadata call's cap).
        ``columns``: ask a ``unix:`` peer (a process of this machine: its arrays are not compressed) for the columnar
        answer (head_columns.py); a peer that does not give one (a front, which joins its shards' remote-read
        answers) answers remote read's format, decoded as usual."""
        url, headers = self._request(limit, columns and self._socket is not None)
        async with self._session_now().post(url, data=body, headers=headers,
                                            timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if resp.status != 200:
                text = (await resp.content.read(300)).decode("utf-8", "replace").strip()
                raise _Refused(f"HTTP {resp.status}: {text}")
            ctype = resp.headers.get("Content-Type", "")
            _check_type(ctype)
            data = bytearray()
            async for chunk in resp.content.iter_chunked(1 << 16):
                data += chunk
                if len(data) > max_bytes:
                    raise _TooBig()
            version = resp.headers.get(TABLE_VERSION_HEADER)
        if ctype == head_columns.CONTENT_TYPE:
            results = head_columns.decode_response(bytes(data))
        else:
            results = await asyncio.to_thread(read_client_codec.decode_response, bytes(data), max_bytes)
        return PeerAnswer(self.name, results, _version(version))

    def read_blocking(self, body: bytes, timeout_s: float, max_bytes: int, limit: int | None, columns: bool,
                      check) -> PeerAnswer:
        """``read`` of a ``unix:`` peer in the calling thread (unix_http.py); ``check`` may stop it."""
        url, headers = self._request(limit, columns)
        try:
            got = self.blocking.post(url[len(self._base):], body, headers, timeout_s, max_bytes, check)
        except unix_http.TooBig:
            raise _TooBig() from None
        except unix_http.BadAnswer as err:
            raise BadData(str(err)) from None
        if got.status != 200:
            raise _Refused(f"HTTP {got.status}: {got.body[:300].decode('utf-8', 'replace').strip()}")
        ctype = got.headers.get("content-type", "")
        _check_type(ctype)
        results = (head_columns.decode_response(got.body) if ctype == head_columns.CONTENT_TYPE
                   else read_client_codec.decode_response(got.body, max_bytes))
        return PeerAnswer(self.name, results, _version(got.headers.get(TABLE_VERSION_HEADER.lower())))

    def unneeded(self, queries: list[tuple[list[Matcher], int, int]]) -> PeerAnswer | None:
        """Its empty answer to a read of samples, without asking, when its extent board says it holds nothing in
        memory in any query's window (naming the table version that holds the rest); None: ask it."""
        extent = self.board.read() if self.board is not None else None
        if extent is None or not all(extent.misses(lo, hi) for _, lo, hi in queries):
            return None
        return PeerAnswer(self.name, [PeerSeries.empty() for _ in queries], extent.version)

    async def get_json(self, path: str, params: list[tuple[str, str]], timeout_s: float) -> PeerJson:
        """``GET path?scope=head&params``: the ``data`` of a success envelope (cluster/head_json.py)."""
        async with self._session_now().get(self._base + path, params=[("scope", "head"), *params], headers=self._auth,
                                           timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if resp.status != 200:
                text = (await resp.content.read(300)).decode("utf-8", "replace").strip()
                raise _Refused(f"HTTP {resp.status}: {text}")
            try:
                body = await resp.json(content_type=None)
                data = body["data"]
            except (ValueError, KeyError, TypeError) as err:
                raise BadData(f"not a success envelope ({err})") from None
            version = resp.headers.get(TABLE_VERSION_HEADER)
        return PeerJson(self.name, data, _version(version))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def _check_type(ctype: str) -> None:
    if ctype not in ("application/x-protobuf", head_columns.CONTENT_TYPE):
        raise BadData(f"unexpected Content-Type {ctype!r}")


def _version(header: str | None) -> int | None:
    return int(header) if header and header.isdigit() else None


class PeerFanout:
    """All peers of this gateway; ``read`` is called from query worker threads."""

    def __init__(self, urls: list[str], timeout_s: float, telemetry) -> None:
        self.peers = [Peer(u) for u in urls]
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

    def read(self, queries: list[tuple[list[Matcher], int, int]], series_only: bool,
             ctx: QueryContext, limit: int | None = None, columns: bool = False) -> list[PeerAnswer | PeerFailure]:
        """Every peer's answer to these queries, or why it has none; blocks the calling worker. ``columns``: ask
        for columnar answers (their ``labels`` hold None for series the caller knows by id: head_columns.py).

        Raises the query's own errors: QueryCanceled/QueryTimeout (the calls are cancelled) and
        LimitExceeded when a peer's samples cross the query's budgets."""
        if not self.peers:
            return []
        ctx.check("peer read")
        # Local peers whose extent board says they hold nothing in the windows (a series read is never skipped: it
        # wants every series in memory, whatever its samples' times); the request is encoded only for the others.
        skipped = {} if series_only else {p.name: a for p in self.peers
                                          if p.blocking is not None and (a := p.unneeded(queries)) is not None}
        body = read_client_codec.encode_request(queries, series_only) if len(skipped) < len(self.peers) else b""
        timeout = min(self.timeout_s, max(ctx.remaining() * DEADLINE_SHARE, 0.001))
        max_bytes = max(0, min(MAX_RESPONSE_BYTES, ctx.max_bytes - ctx.bytes))
        # Peers elsewhere are asked at once on the event loop; this machine's are then read right here, in turn
        # (each is a local process answering in about a millisecond), while the others answer.
        futures = {asyncio.run_coroutine_threadsafe(self._call(p, body, timeout, max_bytes, limit=limit,
                                                               columns=columns), self._loop): p
                   for p in self.peers if p.blocking is None}
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
                got = self._call_blocking(p, body, timeout, max_bytes, limit, columns, ctx)
                out[p.name] = self._charged(ctx, got)
            while pending:
                done, pending = concurrent.futures.wait(pending, timeout=POLL_S,
                                                        return_when=concurrent.futures.FIRST_COMPLETED)
                for fut in done:
                    out[futures[fut].name] = self._charged(ctx, fut.result())
                ctx.check("peer read")
        finally:
            for fut in pending:
                fut.cancel()
        return [out[p.name] for p in self.peers]

    @staticmethod
    def _charged(ctx: QueryContext, got: PeerAnswer | PeerFailure) -> PeerAnswer | PeerFailure:
        """A peer's samples are charged as its answer arrives, not after all peers have answered."""
        if isinstance(got, PeerAnswer):
            ctx.charge_samples(sum(len(r.block) for r in got.results), f"peer read ({got.peer})")
            ctx.charge_samples(sum(len(r.hists) for r in got.results), f"peer read ({got.peer})", HISTOGRAM_BYTES)
            ctx.charge_series(sum(len(r.labels) for r in got.results), f"peer read ({got.peer})")
        return got

    def _call_blocking(self, peer: Peer, body: bytes, timeout_s: float, max_bytes: int, limit: int | None,
                       columns: bool, ctx: QueryContext) -> PeerAnswer | PeerFailure:
        """``_call`` for a ``unix:`` peer, in the query's worker thread."""
        try:
            got: PeerAnswer | PeerFailure = peer.read_blocking(body, timeout_s, max_bytes, limit, columns,
                                                               lambda: ctx.check("peer read"))
        except (_TooBig, PayloadTooLarge):
            raise _too_big(peer) from None
        except (unix_http.Timeout, _Refused, BadData, OSError) as err:
            got = _failure(peer, err, timeout_s, unix_http.Timeout)
        self._observe(peer, got)
        return got

    async def get_json(self, path: str, params: list[tuple[str, str]],
                       remaining_s: float) -> list[PeerJson | PeerFailure]:
        """Every peer's ``?scope=head`` answer on a JSON API (exemplars, metadata), all at once, on the event
        loop; each bounded by --cluster.peer-timeout and half of what the call has left, as reads are."""
        timeout = min(self.timeout_s, max(remaining_s * DEADLINE_SHARE, 0.001))
        return list(await asyncio.gather(*(self._call(p, None, timeout, 0, (path, params)) for p in self.peers)))

    async def _call(self, peer: Peer, body: bytes | None, timeout_s: float, max_bytes: int,
                    json_get: tuple[str, list] | None = None, limit: int | None = None, columns: bool = False
                    ) -> PeerAnswer | PeerJson | PeerFailure:
        try:
            got: PeerAnswer | PeerJson | PeerFailure = (
                await peer.get_json(*json_get, timeout_s) if json_get
                else await peer.read(body, timeout_s, max_bytes, limit, columns))
        except (_TooBig, PayloadTooLarge):
            raise _too_big(peer) from None
        except (asyncio.TimeoutError, _Refused, BadData, aiohttp.ClientError, OSError) as err:
            got = _failure(peer, err, timeout_s, asyncio.TimeoutError)
        self._observe(peer, got)
        return got

    def _observe(self, peer: Peer, got: PeerAnswer | PeerFailure) -> None:
        result = got.result if isinstance(got, PeerFailure) else "ok"
        if self._tel is not None:
            self._tel.peer_requests.labels(peer.name, result).inc()
        with self._state_lock:
            before, peer.state = peer.state, result
        if before == result:
            return
        if result == "ok":
            log.info("peer %s answers again", peer.name)
        else:
            log.warning("peer %s: %s (%s); answers lack its recent samples until it is back",
                        peer.name, result, got.reason)


def _too_big(peer: Peer) -> LimitExceeded:
    return LimitExceeded(f"peer {peer.name}'s recent samples would hold more memory than the query may "
                         "(raise --query.max-memory-per-query or narrow the query)")


def _failure(peer: Peer, err: Exception, timeout_s: float, timeout: type) -> PeerFailure:
    """Why a call to ``peer`` has no answer; ``timeout``: the error its client raises at the deadline (checked
    first: asyncio's is an OSError too)."""
    if isinstance(err, timeout):
        return PeerFailure(peer.name, "timeout", f"no answer within {timeout_s:g}s (--cluster.peer-timeout)")
    if isinstance(err, _Refused):
        return PeerFailure(peer.name, "refused", str(err))
    if isinstance(err, BadData):
        return PeerFailure(peer.name, "garbage", str(err))
    return PeerFailure(peer.name, "down", f"{type(err).__name__}: {err}")
