"""Who may do what, for every route of the app: one aiohttp middleware, so new routes are covered.

In order, as Prometheus (exporter-toolkit's handler around its router) does it:
1. the web config is looked at again (500 while it is broken);
2. with basic_auth_users, a request without valid credentials gets 401 + WWW-Authenticate: Basic;
3. our addition: users listed in --web.write-only-users may only remote-write, users in
   --web.read-only-users may not write nor use admin endpoints (403);
4. lifecycle endpoints answer 403 "Lifecycle API is not enabled." without --web.enable-lifecycle.
The configured http_server_config.headers go on every response, errors included.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web
from prometheus_client import Counter, Gauge

from .auth import PasswordChecker, parse_basic_auth
from .watch import WebConfigWatcher

WRITE_PATHS = frozenset({"/api/v1/write"})
# State-changing admin endpoints, behind --web.enable-lifecycle (Prometheus: /-/reload, /-/quit), and cancelling
# someone's query (api/query_status.py).
LIFECYCLE_PATHS = frozenset({"/-/reload", "/api/v1/admin/cancel_query"})
LIFECYCLE_METHODS = frozenset({"POST", "PUT"})


@dataclass(frozen=True)
class Roles:
    write_only: frozenset[str] = frozenset()
    read_only: frozenset[str] = frozenset()

    def allows(self, user: str, path: str) -> bool:
        if user in self.write_only:
            return path in WRITE_PATHS
        if user in self.read_only:
            return path not in WRITE_PATHS and path not in LIFECYCLE_PATHS
        return True


def _route(request: web.Request) -> str:
    """The path of the route that will answer rather than the URL as sent: what is allowed is
    decided per endpoint, whatever spelling of the URL reached it."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else request.path


def _go_http_error(status: int, text: str, headers: dict[str, str] | None = None) -> web.Response:
    """net/http's http.Error: the status text, a newline, plain text, nosniff."""
    return web.Response(status=status, text=text + "\n", content_type="text/plain", charset="utf-8",
                        headers={"X-Content-Type-Options": "nosniff", **(headers or {})})


class AuthMetrics:
    def __init__(self, registry) -> None:  # noqa: ANN001 (a prometheus_client registry)
        self.failures = Counter("metricsgw_http_auth_failures",
                                "Requests refused by authentication or authorisation, by reason.",
                                ["reason"], registry=registry)
        self.checks_in_flight = Gauge("metricsgw_http_auth_bcrypt_checks_in_flight",
                                      "bcrypt password checks running now (bounded by "
                                      "--web.auth.max-concurrent-checks).", registry=registry)


def security_middleware(watcher: WebConfigWatcher | None, checker: PasswordChecker, roles: Roles,
                        lifecycle_enabled: bool, metrics: AuthMetrics):
    metrics.checks_in_flight.set_function(lambda: checker.in_flight)

    @web.middleware
    async def guard_access(request: web.Request, handler) -> web.StreamResponse:  # noqa: ANN001
        if watcher is not None:
            watcher.refresh()
            if watcher.error is not None:
                metrics.failures.labels("web_config_invalid").inc()
                return _go_http_error(500, "Internal Server Error")
            users = watcher.config.user_hashes
            if users:
                creds = parse_basic_auth(request.headers.get("Authorization"))
                if creds is None or not await checker.verify(creds[0], creds[1], users):
                    metrics.failures.labels("missing_credentials" if creds is None else "wrong_credentials").inc()
                    return _go_http_error(401, "Unauthorized", {"WWW-Authenticate": "Basic"})
                if not roles.allows(creds[0], _route(request)):
                    metrics.failures.labels("forbidden_for_user").inc()
                    return _go_http_error(403, "Forbidden")
        if _route(request) in LIFECYCLE_PATHS:  # Prometheus's answers, word for word
            if request.method == "GET":
                return web.Response(status=405, text="Only POST or PUT requests allowed")
            if request.method in LIFECYCLE_METHODS and not lifecycle_enabled:
                return web.Response(status=403, text="Lifecycle API is not enabled.")
        return await handler(request)

    return guard_access


def configured_headers(watcher: WebConfigWatcher):
    async def add_headers(request: web.Request, response: web.StreamResponse) -> None:
        for name, value in watcher.config.headers:
            response.headers[name] = value

    return add_headers
