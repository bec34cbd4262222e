"""Every route of the front but remote write and its own endpoints: passed to a query process, streamed.

The least busy query process gets the request (ties: the first). The body is read (bounded, as the child
would bound it) and sent on; the answer is streamed back chunk by chunk, status and headers as the child
set them, so errors keep Prometheus's envelope and remote read's frames go out as they are made. A client
that hangs up cancels this handler (``handler_cancellation``), which closes the connection to the child,
whose handler is cancelled in turn: the query stops there, as it stops in a single process.
"""

from __future__ import annotations

from typing import Callable

import aiohttp
from aiohttp import web
from yarl import URL

from ..http.body import read_bounded
from ..querylog.record import CLIENT_ADDRESS_HEADER
from .clients import ChildClient, least_busy
from .unavailable import refusal, why

# Hop-by-hop headers (RFC 9110 7.6.1), those the two connections set for themselves, and the client's address,
# which only the front may say (a client's own copy would let it pose as another in the query log).
_NOT_PASSED = frozenset(h.lower() for h in ("Connection", "Keep-Alive", "Proxy-Connection", "TE", "Trailer",
                                            "Transfer-Encoding", "Upgrade", "Host", "Content-Length",
                                            CLIENT_ADDRESS_HEADER))


def _passed(headers) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in _NOT_PASSED}


def _to_child(request: web.Request) -> dict[str, str]:
    """The request's headers for the child, with the client's address for its query log."""
    return {**_passed(request.headers), CLIENT_ADDRESS_HEADER: request.remote or ""}


class QueryProxy:
    """Passes requests to the least busy of ``targets``; ``answered(target name, status)`` counts them."""

    def __init__(self, cfg, targets: list[ChildClient], answered: Callable[[str, str], None]) -> None:
        self.cfg = cfg
        self.targets = targets
        self.answered = answered

    async def handle(self, request: web.Request, body: bytes | None = None,
                     target: ChildClient | None = None) -> web.StreamResponse:
        """``body``: the request's body when the caller has read it already; ``target``: the one of ``targets``
        the caller chose (None: the least busy)."""
        if body is None and request.body_exists:
            body = await read_bounded(request, self.cfg.remote_write_max_body_size, "request body")
        target = target or least_busy(self.targets)
        name = target.child.name
        target.in_flight += 1
        out: web.StreamResponse | None = None
        try:
            # The URL as the client encoded it: decoding and re-encoding it would change a query's bytes.
            url = URL(request.rel_url.raw_path_qs, encoded=True)
            async with target.session.request(request.method, url, data=body,
                                              headers=_to_child(request), allow_redirects=False) as resp:
                out = web.StreamResponse(status=resp.status, reason=resp.reason, headers=_passed(resp.headers))
                if resp.content_length is not None:
                    out.content_length = resp.content_length
                await out.prepare(request)
                async for chunk in resp.content.iter_any():
                    await out.write(chunk)
                await out.write_eof()
                self.answered(name, str(resp.status))
                return out
        except (aiohttp.ClientError, OSError) as err:
            self.answered(name, "503")
            if out is not None and out.prepared:  # the status is sent: dropping the connection is all we can say
                if request.transport is not None:
                    request.transport.close()
                return out
            raise refusal([why(target, err)]) from None
        finally:
            target.in_flight -= 1
