"""A client's connection passed from the front to a query process, so its queries skip the front; and a sender's
to the one ingest shard, so its remote writes do.

A dashboard query through the front crosses it twice: the front parses the request, sends it to a query process
over its socket, and streams the answer back. That is about a millisecond of the front's CPU and two process
wake-ups per request, the largest part of a small panel's latency (docs/processes.md, "Connection hand-off").
So when a plain-HTTP client's connection asks a query route, the front passes the connection itself (its file
descriptor, SCM_RIGHTS over a Unix socket, with the request it has read) to the least busy query process, which
serves it from then on: that request and every later one on the connection, as a one-process gateway would.

- Only without ``--web.config.file``: TLS state cannot move between processes, and the front alone checks
  passwords. With one, every request keeps going through the front.
- A later request on the connection that the front answers (remote write, ``/metrics``, ``/-/ready``,
  ``/-/reload``, a peer gateway's head read, ``/api/v1/status/tsdb``, the query log's and running queries'
  endpoints) is relayed by the query process to the front's own socket, so every route answers as before,
  whichever process holds the connection.
- A request too large for one hand-off message, or a query process that cannot take one now (restarting, its
  socket full), is proxied as before: the hand-off is only ever an optimisation.
- Remote write, with one ingest shard (2 cores, the default there): the front passes a sender's connection to
  the shard at its first write, as it passes a query's. The front's parse and forward of every write was ~0.5 ms
  of CPU per 2,000-sample request on a machine whose two cores ingest fills, and a hop on every write's path.
  Any other request on that connection (a query, ``/metrics``) is relayed by the shard to the front's socket.
  With several shards every write is split by the front (distributor.py), so nothing is passed.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Callable

from aiohttp import web

from ..cluster import gateway_head
from .clients import ChildClient
from .layout import Child
from .proxy import QueryProxy

log = logging.getLogger(__name__)

# The routes the front answers itself (front.py); every other route is a query process's.
FRONT_PATHS = frozenset({"/api/v1/write", "/-/healthy", "/-/ready", "/-/reload", "/metrics", "/api/v1/status/tsdb",
                         "/api/v1/status/running_queries", "/api/v1/admin/cancel_query",
                         "/api/v1/status/recent_queries", "/api/v1/status/top_queries", "/api/v1/status/layout",
                         "/api/v1/status/advise"})
# A request larger than this (head and body) is proxied instead. A SOCK_SEQPACKET message must fit the socket's
# send buffer (net.core.wmem_default, 208 KiB on Linux by default): a bigger one fails with EMSGSIZE.
MAX_MESSAGE = 192 * 1024
MAX_BODY = 32 * 1024  # a query's form body is far smaller (a request with a larger one is proxied)
# A write's snappy body: 30-80 KiB for 2,000 samples of the bench's GPU-cluster series (the label sets of
# kube-apiserver's series are long); at 60 KiB, 8% of a run's writes waited for a small one to be passed.
MAX_WRITE_BODY = 176 * 1024
# Headers that describe how the front received the body, not what it is: the body is passed whole, with its length.
_FRAMING = frozenset({"content-length", "transfer-encoding", "expect"})


def front_answers(request: web.Request) -> bool:
    """Whether the front answers this request itself (not a query process)."""
    return request.path in FRONT_PATHS or gateway_head.answers(request)


def not_a_write(request: web.Request) -> bool:
    """Whether an ingest shard relays this request to the front (everything but the writes it takes)."""
    return not (request.method == "POST" and request.path == "/api/v1/write")


def handed_off(request: web.Request) -> bool:
    """Whether a query process got this request on a client's connection (TCP) rather than from the front."""
    sock = request.transport.get_extra_info("socket") if request.transport is not None else None
    return sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6)


def request_bytes(request: web.Request, body: bytes) -> bytes:
    """The request as HTTP/1.x bytes again, its body whole (as the front read it)."""
    lines = [f"{request.method} {request.raw_path} HTTP/{request.version.major}.{request.version.minor}".encode()]
    lines += [k + b": " + v for k, v in request.raw_headers if k.decode("latin-1").lower() not in _FRAMING]
    if body or request.method in ("POST", "PUT", "PATCH"):
        lines.append(b"Content-Length: " + str(len(body)).encode())
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def install_relay(app: web.Application, cfg, front_socket: str,
                  relayed: Callable[[web.Request], bool] = front_answers) -> None:
    """In a child: a request on a passed connection that is not this child's (``relayed``: a query process's
    ``front_answers``, a shard's ``not_a_write``) goes to the front's socket."""
    front = ChildClient(Child("front", 0, front_socket))
    relay = QueryProxy(cfg, [front], lambda name, code: None)

    @web.middleware
    async def relay_to_front(request: web.Request, handler) -> web.StreamResponse:  # noqa: ANN001
        if relayed(request) and handed_off(request):
            return await relay.handle(request)
        return await handler(request)

    async def close(app: web.Application) -> None:
        await front.close()

    app.middlewares.insert(0, relay_to_front)
    app.on_cleanup.append(close)


class HandoffSender:
    """The front's side: one SOCK_SEQPACKET connection per query process, made when first needed."""

    def __init__(self, paths: dict[str, str], on_passed: Callable[[str], None]) -> None:
        self.paths = paths  # query process name -> its hand-off socket
        self._socks: dict[str, socket.socket] = {}
        self._on_passed = on_passed

    def passable(self, request: web.Request, max_body: int = MAX_BODY) -> bool:
        """A plain-HTTP client's request with a small body of known length (or none), nothing read after it."""
        transport = request.transport
        small = request.content_length <= max_body if request.content_length is not None \
            else not request.body_exists  # a chunked body: its length is known only once read
        return (small and transport is not None and transport.get_extra_info("sslcontext") is None
                and handed_off(request)
                and not getattr(request.protocol, "_messages", None))  # a pipelined request is read already

    def pass_connection(self, request: web.Request, body: bytes, target: str) -> bool:
        """Pass the request's connection (``body``: its body, read) to ``target``; False (nothing changed: proxy
        the request) when it cannot take it now."""
        message = request_bytes(request, body)
        if len(message) > MAX_MESSAGE:  # headers of more than MAX_MESSAGE - MAX_BODY bytes
            return False
        fd = request.transport.get_extra_info("socket").fileno()
        try:
            sock = self._connected(target)
            socket.send_fds(sock, [message], [fd])
        except OSError as err:  # restarting, or its queue is full: proxy this one, reconnect next time
            log.debug("hand-off to %s failed (%s); proxying", target, err)
            self._drop(target)
            return False
        self._on_passed(target)
        # The query process holds its own descriptor of the connection: closing ours does not end it, and the
        # event loop reads nothing more from it (this runs without yielding between the send and the close).
        request.transport.abort()
        return True

    def _connected(self, target: str) -> socket.socket:
        sock = self._socks.get(target)
        if sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                sock.connect(self.paths[target])
            except OSError:
                sock.close()
                raise
            sock.setblocking(False)  # a full queue fails the send at once (BlockingIOError): then proxy
            self._socks[target] = sock
        return sock

    def _drop(self, target: str) -> None:
        sock = self._socks.pop(target, None)
        if sock is not None:
            sock.close()

    def close(self) -> None:
        for target in list(self._socks):
            self._drop(target)


class HandoffReceiver:
    """A query process's side: takes connections from the front and serves them with its own HTTP server."""

    def __init__(self, path: str, server: web.Server) -> None:
        self.path, self.server = path, server
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        listener.bind(self.path)
        listener.listen(8)
        listener.setblocking(False)
        self._listener = listener
        loop.add_reader(listener.fileno(), self._accept)

    def _accept(self) -> None:
        try:
            conn, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        conn.setblocking(False)
        self._conns.add(conn)
        asyncio.get_running_loop().add_reader(conn.fileno(), self._receive, conn)

    def _receive(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            message, fds, flags, _ = socket.recv_fds(conn, MAX_MESSAGE + 1, 4)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            message, fds, flags = b"", [], 0
        if not message and not fds:  # the front closed its side (it stopped or restarted)
            loop.remove_reader(conn.fileno())
            self._conns.discard(conn)
            conn.close()
            return
        for fd in fds:
            client = socket.socket(fileno=fd)
            if flags & socket.MSG_TRUNC or len(fds) != 1:  # not a message the front sends: drop the connection
                client.close()
                continue
            client.setblocking(False)
            loop.create_task(self._adopt(client, message))

    async def _adopt(self, client: socket.socket, message: bytes) -> None:
        try:
            _, protocol = await asyncio.get_running_loop().connect_accepted_socket(self.server, client)
        except OSError:
            client.close()
            return
        protocol.data_received(message)  # the request the front read, as if it had just arrived

    def close(self) -> None:
        loop = asyncio.get_running_loop()
        for sock in [self._listener, *self._conns]:
            if sock is not None:
                loop.remove_reader(sock.fileno())
                sock.close()
        self._conns.clear()
        self._listener = None
