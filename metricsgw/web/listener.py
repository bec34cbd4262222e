"""The TLS listener: plain HTTP on it gets Go's 400 answer, TLS goes on to asyncio's SSL protocol.

Prometheus (Go's net/http) answers a plain-HTTP request on its TLS port with
``400 Client sent an HTTP request to an HTTPS server.`` instead of dropping the connection, so a
misconfigured sender or scraper sees why. asyncio's TLS server can only drop it. So each new
connection first reads five bytes: if they start an HTTP request (Go's own test) it gets that
answer, otherwise the connection is handed, bytes included, to asyncio's SSLProtocol exactly as
``create_server(ssl=...)`` would have done.
"""

from __future__ import annotations

import asyncio
import ssl
from asyncio import sslproto
from typing import Callable

from aiohttp import web

HANDSHAKE_TIMEOUT_S = 60.0  # asyncio's default ssl_handshake_timeout; also bounds the first five bytes
PLAIN_HTTP_ANSWER = b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
_HTTP_STARTS = frozenset({b"GET /", b"HEAD ", b"POST ", b"PUT /", b"OPTIO"})  # net/http's tlsRecordHeaderLooksLikeHTTP


class _FirstBytes(asyncio.Protocol):
    def __init__(self, make_protocol: Callable[[], asyncio.BaseProtocol], context: ssl.SSLContext) -> None:
        self._make_protocol = make_protocol
        self._context = context
        self._head = b""
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._timer = asyncio.get_running_loop().call_later(HANDSHAKE_TIMEOUT_S, transport.abort)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        self._head += data
        if len(self._head) < 5:
            return
        assert self._transport is not None and self._timer is not None
        self._timer.cancel()
        if self._head[:5] in _HTTP_STARTS:
            self._transport.write(PLAIN_HTTP_ANSWER)
            self._transport.close()
            return
        tls = sslproto.SSLProtocol(asyncio.get_running_loop(), self._make_protocol(), self._context, None,
                                   server_side=True, ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S)
        self._transport.set_protocol(tls)
        tls.connection_made(self._transport)
        head, self._head = self._head, b""
        while head:  # SSLProtocol is a BufferedProtocol: copy what we read into its buffer
            buf = tls.get_buffer(len(head))
            n = min(len(buf), len(head))
            buf[:n] = head[:n]
            tls.buffer_updated(n)
            head = head[n:]

    def eof_received(self) -> bool:
        return False  # closed before five bytes: nothing to answer

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()


class TLSSite(web.TCPSite):
    """aiohttp's TCPSite, with the five-byte look in front of the TLS handshake."""

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server, context = self._runner.server, self._ssl_context
        assert server is not None and context is not None
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _FirstBytes(server, context), self._host, self._port, backlog=self._backlog,
            reuse_address=self._reuse_address, reuse_port=self._reuse_port)
        self._bound_port = self._server.sockets[0].getsockname()[1] if self._server.sockets else self._port
