"""gzip or deflate for the HTTP API's answers when the client asks, as Prometheus's API does.

Grafana's backend (Go's HTTP transport) sends ``Accept-Encoding: gzip`` on every call and Prometheus
answers gzipped (util/httputil/compression.go): the first of ``gzip`` / ``deflate`` listed wins,
q-values are not read. Grafana 12's editor start-up asks /series for up to 40,000 series: 7.4 MB of
JSON at our 30,000-series cap, 0.5 MB gzipped (bench/RESULTS.md, bench/attack.py). aiohttp compresses bodies over
4 KiB in an executor thread, off the event loop. Remote write and read bodies are protobuf with snappy
already and are left alone.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.web import ContentCoding

_API_PREFIX = "/api/v1/"
_PROTOBUF_PATHS = ("/api/v1/write", "/api/v1/read")


def negotiated(accept_encoding: str) -> ContentCoding | None:
    """The coding Prometheus picks for this Accept-Encoding header, or None."""
    for token in accept_encoding.split(","):
        token = token.strip()
        if token == "gzip":
            return ContentCoding.gzip
        if token == "deflate":
            return ContentCoding.deflate
    return None


@web.middleware
async def compress_api_answers(request: web.Request, handler) -> web.StreamResponse:
    resp = await handler(request)
    if (isinstance(resp, web.Response) and request.path.startswith(_API_PREFIX)
            and request.path not in _PROTOBUF_PATHS):
        coding = negotiated(request.headers.get("Accept-Encoding", ""))
        if coding is not None:
            resp.enable_compression(coding)
    return resp
