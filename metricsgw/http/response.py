"""Prometheus's success envelope, with ``warnings`` when a result was truncated or PromQL warns, and
``infos`` (Prometheus 3's info annotations)."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from ..errors import LimitExceeded


def success(data: Any, warnings: list[str] | None = None, infos: list[str] | None = None,
            max_bytes: int | None = None) -> web.Response:
    body: dict[str, Any] = {"status": "success", "data": data}
    if warnings:
        body["warnings"] = warnings
    if infos:
        body["infos"] = infos
    encoded = json.dumps(body, separators=(",", ":"), allow_nan=False).encode()
    return _respond(encoded, max_bytes)


def success_json(data_json: bytes, max_bytes: int | None = None, warnings: list[str] | None = None,
                 infos: list[str] | None = None) -> web.Response:
    """The envelope around a ``data`` object that is already JSON (rendered by promql.render_json)."""
    extra = b',"warnings":' + json.dumps(warnings).encode() if warnings else b""
    if infos:
        extra += b',"infos":' + json.dumps(infos).encode()
    return _respond(b'{"status":"success","data":' + data_json + extra + b"}", max_bytes)


def _respond(encoded: bytes, max_bytes: int | None) -> web.Response:
    if max_bytes is not None and len(encoded) > max_bytes:
        raise LimitExceeded(f"query result is {len(encoded):,} bytes, more than the {max_bytes:,} allowed "
                            "(raise --query.max-response-bytes, or aggregate, filter or use a coarser step)")
    return web.Response(body=encoded, content_type="application/json")
