"""Blocking HTTP/1.1 POSTs over a Unix socket, made by a query worker thread itself.

A query process reads its own shards' heads (``unix:`` peers) once per selection. Sent through the event
loop (a coroutine handed over with ``run_coroutine_threadsafe``, aiohttp's client, the answer handed back)
such a read cost ~2 ms of latency on a quiet machine where the shard's own work was ~0.5 ms: two thread hops
and the client's per-request Python. Here the worker writes the request and reads the answer on a socket it
keeps per thread, with no hop at all.

Only what a shard's answer to a head read needs: a POST with a body, an answer with Content-Length or chunked
(or read to the close). The socket waits at most ``POLL_S`` at a time, so the worker looks at its query
between reads (a client that left, a deadline) as it did waiting for the loop. A connection that fails or is
left mid-answer is closed, never reused; a kept-alive connection the server closed while idle is retried once
on a new one before anything was read (a head read changes nothing, so sending it again is safe).

This is the gateway's only blocking HTTP client, and only the query worker's shard reads use it (peers.Peer puts
it behind the same ``read`` as its aiohttp one). Everything on an event loop -- a query process's calls to peer
gateways, the front's calls to its children -- uses aiohttp; a failure of either is worded by one classifier
(failures.py): ``Timeout`` is a TimeoutError for that reason.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable

from multidict import CIMultiDict

POLL_S = 0.05
_MAX_HEAD = 64 * 1024  # status line and headers


class TooBig(Exception):
    """The answer's body is longer than the caller may hold."""


class Timeout(TimeoutError):
    """The deadline passed before the answer was read."""


class BadAnswer(Exception):
    """Not an HTTP/1.1 answer this client reads."""


@dataclass
class Answer:
    status: int
    headers: CIMultiDict  # names case-insensitive, as aiohttp's
    body: bytes


class _Closed(Exception):
    """The server closed the connection before answering anything."""


class UnixHttpClient:
    """One peer's socket path; a kept-alive connection per calling thread."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._local = threading.local()

    def post(self, target: str, body: bytes, headers: dict[str, str], timeout_s: float, max_bytes: int,
             check: Callable[[], None]) -> Answer:
        """POST ``target`` (path and query). ``check`` is called between waits and may raise (the query was
        cancelled): the connection is then closed. Raises Timeout, TooBig, BadAnswer or OSError."""
        deadline = time.monotonic() + timeout_s
        head = "".join([f"POST {target} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {len(body)}\r\n",
                        *(f"{k}: {v}\r\n" for k, v in headers.items()), "\r\n"]).encode("latin-1")
        for attempt in (0, 1):
            conn = getattr(self._local, "conn", None)
            reused = conn is not None
            try:
                if conn is None:
                    conn = self._local.conn = _Connection(self.path, deadline)
                try:
                    conn.sock.settimeout(max(deadline - time.monotonic(), 0.001))
                    conn.sock.sendall(head + body)
                    got = conn.answer(deadline, max_bytes, check)
                except (_Closed, BrokenPipeError, ConnectionResetError):
                    if reused and not attempt:  # closed by the server while idle: once more, on a new one
                        self.close()
                        continue
                    raise ConnectionResetError("the peer closed the connection without answering") from None
            except BaseException:
                self.close()
                raise
            if conn.must_close:
                self.close()
            return got
        raise AssertionError("unreachable")

    def close(self) -> None:
        """This thread's connection (other threads close theirs when they next fail or exit)."""
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.sock.close()


class _Connection:
    def __init__(self, path: str, deadline: float) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            self.sock.connect(path)
        except BaseException:
            self.sock.close()
            raise
        self.buf = bytearray()
        self.must_close = False

    def answer(self, deadline: float, max_bytes: int, check: Callable[[], None]) -> Answer:
        self.buf.clear()
        end = self._fill_until(lambda: self.buf.find(b"\r\n\r\n"), deadline, check, first=True)
        status_line, *lines = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
        del self.buf[:end + 4]
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise BadAnswer(f"not an HTTP/1.1 status line: {status_line[:80]!r}")
        headers = CIMultiDict()
        for line in lines:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip()] = value.strip()
        self.must_close = headers.get("connection", "").lower() == "close" or parts[0] == "HTTP/1.0"
        status = int(parts[1])
        if status in (204, 304) or status < 200:  # never a body (RFC 9112 6.3), whatever the headers say
            body = b""
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            body = self._chunked(deadline, max_bytes, check)
        elif "content-length" in headers:
            length = int(headers["content-length"])
            if length > max_bytes:
                raise TooBig()
            self._fill_until(lambda: 0 if len(self.buf) >= length else -1, deadline, check)
            body = bytes(self.buf[:length])
            del self.buf[:length]
        else:  # the body runs to the close
            self.must_close = True
            body = self._to_close(deadline, max_bytes, check)
        return Answer(status, headers, body)

    def _chunked(self, deadline: float, max_bytes: int, check) -> bytes:
        out = bytearray()
        while True:
            end = self._fill_until(lambda: self.buf.find(b"\r\n"), deadline, check)
            size = int(bytes(self.buf[:end]).split(b";", 1)[0], 16)
            del self.buf[:end + 2]
            if len(out) + size > max_bytes:
                raise TooBig()
            self._fill_until(lambda: 0 if len(self.buf) >= size + 2 else -1, deadline, check)
            if size == 0:  # no trailers from aiohttp: the last chunk's CRLF ends the body
                del self.buf[:2]
                return bytes(out)
            out += self.buf[:size]
            del self.buf[:size + 2]

    def _to_close(self, deadline: float, max_bytes: int, check) -> bytes:
        while self._recv(deadline, check):
            if len(self.buf) > max_bytes:
                raise TooBig()
        return bytes(self.buf)

    def _fill_until(self, found: Callable[[], int], deadline: float, check, first: bool = False) -> int:
        while (at := found()) < 0:
            if len(self.buf) > _MAX_HEAD and first:
                raise BadAnswer("no end of the answer's headers")
            if not self._recv(deadline, check):
                if first and not self.buf:
                    raise _Closed()
                raise ConnectionResetError("the peer closed the connection mid-answer")
        return at

    def _recv(self, deadline: float, check) -> int:
        """Read what is there (waiting at most POLL_S at a time): bytes read, 0 at the close."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Timeout()
            self.sock.settimeout(min(POLL_S, left))
            try:
                chunk = self.sock.recv(1 << 20)
            except (socket.timeout, BlockingIOError):
                check()
                continue
            self.buf += chunk
            return len(chunk)
