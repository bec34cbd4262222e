"""The one place where errors become HTTP responses, and where every request is counted."""

from __future__ import annotations

import json
import logging
import time

from aiohttp import web

from ..appkeys import TELEMETRY
from ..errors import GatewayError

log = logging.getLogger(__name__)


def error_response(err: GatewayError) -> web.Response:
    return _error_json(err.status, err.error_type, str(err), err.headers)


def _error_json(status: int, error_type: str, message: str, headers=None) -> web.Response:
    """Prometheus's error envelope, with its Content-Type exactly (``application/json``, no charset)."""
    body = json.dumps({"status": "error", "errorType": error_type, "error": message}).encode()
    return web.Response(body=body, status=status, headers=headers, content_type="application/json")


def _handler_name(request: web.Request) -> str:
    info = request.match_info.route.resource
    return info.canonical if info is not None else "unmatched"


@web.middleware
async def prometheus_errors(request: web.Request, handler) -> web.StreamResponse:
    t0 = time.perf_counter()
    code = 500
    try:
        resp = await handler(request)
        code = resp.status
        return resp
    except GatewayError as err:
        code = err.status
        if request.path in ("/api/v1/write", "/api/v1/read"):  # remote write/read clients read plain text bodies
            return web.Response(status=err.status, text=str(err) + "\n", headers=err.headers)
        return error_response(err)
    except web.HTTPException as exc:
        code = exc.status
        raise
    except Exception:
        log.exception("unhandled error on %s", request.path)
        return _error_json(500, "internal", "internal error")
    finally:
        tel = request.app.get(TELEMETRY)
        if tel is not None:
            name = _handler_name(request)
            tel.http_requests.labels(name, str(code)).inc()
            tel.http_duration.labels(name).observe(time.perf_counter() - t0)
