"""Typed errors. Each subclass fixes one Prometheus ``errorType`` and one HTTP status.

Handlers raise these; ``api.middleware.prometheus_errors`` is the one place that turns
them into Prometheus's JSON error envelope.
"""

from __future__ import annotations


class GatewayError(Exception):
    """Base class of every error a client may see."""

    error_type = "internal"
    status = 500
    headers: dict[str, str] = {}
    # The flag of the limit that refused the request, where its message names several (the guard's queue);
    # otherwise the query log takes the first setting the message names (querylog/record.py limit_flag).
    setting = ""

    def __init_subclass__(cls, error_type: str = "", status: int = 0, **kw: object) -> None:
        super().__init_subclass__(**kw)
        cls.error_type = error_type or cls.error_type
        cls.status = status or cls.status


class BadData(GatewayError, error_type="bad_data", status=400):
    """The request itself is wrong: a bad parameter, bad PromQL, bad remote-write payload."""


class NotSupported(BadData):
    """A valid PromQL feature we do not evaluate: answered as 400, never a wrong result."""

    def __init__(self, feature: str) -> None:
        super().__init__(f"not supported: {feature}")


class UnsupportedMediaType(GatewayError, error_type="bad_data", status=415):
    """Remote write with an unknown Content-Type proto or Content-Encoding."""


class PayloadTooLarge(GatewayError, error_type="bad_data", status=413):
    """A body (or its declared decoded size) over a configured limit."""


class ExecError(GatewayError, error_type="execution", status=422):
    """The query is valid but evaluating it failed or would break a limit."""


class LimitExceeded(ExecError):
    """A query limit fired; the message names the limit and the flag that raises it."""


class NotFound(GatewayError, error_type="not_found", status=404):
    """What the request names does not exist (Prometheus's errorNotFound): a running query that ended."""


class QueryCanceled(GatewayError, error_type="canceled", status=499):
    """The client went away."""


class QueryTimeout(GatewayError, error_type="timeout", status=503):
    """A deadline passed."""


class Unavailable(GatewayError, error_type="unavailable", status=503):
    """We cannot serve right now (overload, not ready); the client should retry."""

    def __init__(self, msg: str, retry_after_s: int = 1) -> None:
        super().__init__(msg)
        self.headers = {"Retry-After": str(retry_after_s)}


class TooManyRequests(Unavailable):
    """The query queue is full."""

    status = 429


class IngestRejected(BadData):
    """Some series of a write were refused on purpose (bad labels, limits).

    The valid remainder was stored; the sender must not retry (4xx)."""


class ForwardedError(GatewayError):
    """The answer of a child process (ingest shard, querier), passed on by the front with its status, so the
    sender's retry logic sees what the child decided (4xx: do not retry; 429/5xx: retry)."""

    def __init__(self, status: int, msg: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(msg)
        self.status = status
        self.error_type = ("unavailable" if status in (429, 503) else "internal" if status >= 500 else "bad_data")
        self.headers = headers or {}

