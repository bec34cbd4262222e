"""The one place where errors become HTTP responses, and where every request is counted."""

from __future__ import annotations

import logging
import time

from aiohttp import web

from ..appkeys import TELEMETRY
from ..errors import GatewayError

log = logging.getLogger(__name__)


def error_response(err: GatewayError) -> web.Response:
    body = {"status": "error", "errorType": err.error_type, "error": str(err)}
    return web.json_response(body, status=err.status, headers=err.headers)


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
        return web.json_response({"status": "error", "errorType": "internal", "error": "internal error"}, status=500)
    finally:
        tel = request.app.get(TELEMETRY)
        if tel is not None:
            name = _handler_name(request)
            tel.http_requests.labels(name, str(code)).inc()
            tel.http_duration.labels(name).observe(time.perf_counter() - t0)
