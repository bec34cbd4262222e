"""Prometheus's success envelope, with ``warnings`` when a result was truncated."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web


def success(data: Any, warnings: list[str] | None = None, infos: list[str] | None = None) -> web.Response:
    body: dict[str, Any] = {"status": "success", "data": data}
    if warnings:
        body["warnings"] = warnings
    if infos:
        body["infos"] = infos
    return web.Response(body=json.dumps(body, separators=(",", ":"), allow_nan=False).encode(),
                        content_type="application/json")
