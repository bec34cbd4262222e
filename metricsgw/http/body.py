"""A request body read with a bound, so an oversized one is refused before it is held in memory."""

from __future__ import annotations

from aiohttp import web

from ..errors import PayloadTooLarge

_CHUNK = 256 * 1024


async def read_bounded(request: web.Request, limit: int, what: str = "remote-write body",
                       setting: str = "--remote-write.max-body-size") -> bytes:
    """The request body, refusing (413) as soon as it is known to exceed ``limit`` bytes."""
    too_large = PayloadTooLarge(f"{what} over {limit} bytes ({setting})")
    if request.content_length is not None and request.content_length > limit:
        raise too_large
    chunks, total = [], 0
    async for chunk in request.content.iter_chunked(_CHUNK):
        total += len(chunk)
        if total > limit:  # chunked or lying Content-Length: stop reading right here
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)
