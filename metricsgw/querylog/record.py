"""One finished PromQL query, as the query log writes it: Prometheus's query_log_file line, plus metricsgw's fields.

Prometheus 2.42 (``promql/engine.go``, the ``queryLogger`` deferred in ``exec``; ``util/httputil/context.go``)
writes one JSON object per query::

    {"httpRequest":{"clientIP":..,"method":..,"path":..},"params":{"end":..,"query":..,"start":..,"step":..},
     "stats":{"timings":{..},"samples":{..}},"ts":"2006-01-02T15:04:05.000Z","error":".."}

Tools that read Prometheus's file read ours. metricsgw adds what a query guard's operator asks next: the
``status`` (ok, refused, timeout, canceled, error), the ``limit`` that fired (its flag: the one to raise),
``userAgent``, the ``grafana`` headers that name the dashboard and panel, ``bytes`` (the most memory the query
held, the answer's size) and ``slow``. A record crosses from a query process to the front as this same line
(channel.py), so there is one format to read back: ``from_line(to_line(r)) == r``.

Secrets never get here: of the request only the path, the method, the client's address, the user agent and
the Grafana headers below are kept (never Authorization, cookies or the URL's query string).
"""

from __future__ import annotations

import calendar
import re
import time
from dataclasses import dataclass, field
from typing import Any

from ..config import BY_NAME
from ..errors import GatewayError, QueryCanceled, QueryTimeout

STATUSES = ("ok", "refused", "timeout", "canceled", "error")

# What Grafana's backend sends with a data source query (pkg/services/pluginsintegration/clientmiddleware/
# tracing_header_middleware.go; alert rules add X-Rule-Uid): the dashboard, the panel, the org, the data source.
GRAFANA_HEADERS = ("X-Dashboard-Uid", "X-Panel-Id", "X-Grafana-Org-Id", "X-Datasource-Uid", "X-Query-Group-Id",
                   "X-Grafana-From-Expr", "X-Rule-Uid")
# The client's address, set by the front on a request it passes to a query process (procs/proxy.py), which reads
# it only on a request from the front's side of its Unix socket (a client's own copy is dropped by the front).
CLIENT_ADDRESS_HEADER = "X-Metricsgw-Client-Address"
# A header value longer than this is cut: a client chooses them, and the lists keep them in memory.
MAX_HEADER_CHARS = 256


@dataclass(frozen=True)
class Source:
    """Who sent the query."""

    client_ip: str = ""
    method: str = ""
    path: str = ""
    user_agent: str = ""
    grafana: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class QueryRecord:
    query: str
    source: Source
    ts: float  # when it ended, Unix seconds
    status: str = "ok"
    limit: str = ""  # the flag of the limit that fired, refused or timeout: "--query.max-samples"
    error: str = ""
    start: float | None = None  # the window, Unix seconds (an instant query: start == end == time, step 0)
    end: float | None = None
    step: float = 0.0
    total_s: float = 0.0  # Prometheus's execTotalTime: from the request to the answer
    queue_s: float = 0.0  # execQueueTime: waiting for a query slot
    eval_s: float = 0.0  # evalTotalTime: evaluation and the answer's JSON, in the query thread
    samples: int = 0  # totalQueryableSamples: raw samples read
    peak_samples: int = 0  # peakSamples: the most held at once, as --query.max-samples counts them
    peak_bytes: int = 0  # the most memory held at once (--query.max-memory-per-query counts it)
    response_bytes: int = 0  # the answer's JSON, before compression

    @property
    def range_s(self) -> float:
        return (self.end - self.start) if self.start is not None and self.end is not None else 0.0


_FLAG = re.compile(r"--([a-z][a-z0-9_.-]*[a-z0-9])")


def limit_flag(err: BaseException) -> str:
    """The setting a refusal names, as its flag ("--query.max-samples"), or "": every limit's message says which
    flag to raise (style habit 7), so the first setting it names is what fired. Only settings count: a message may
    quote a query, and a query may hold "--" too."""
    if isinstance(err, GatewayError) and err.setting:
        return err.setting
    return next((f"--{m.group(1)}" for m in _FLAG.finditer(str(err)) if m.group(1) in BY_NAME), "")


def outcome(err: BaseException | None, timeout_setting: str = "--query.timeout") -> tuple[str, str]:
    """(status, limit) of a query that ended with ``err`` (None: answered)."""
    if err is None:
        return "ok", ""
    if isinstance(err, QueryTimeout):
        return "timeout", limit_flag(err) or timeout_setting
    if isinstance(err, QueryCanceled) or not isinstance(err, Exception):  # asyncio's CancelledError: the client left
        return "canceled", ""
    flag = limit_flag(err)
    return ("refused", flag) if flag else ("error", "")


def grafana_headers(headers: Any) -> dict[str, str]:
    """The Grafana headers among ``headers`` (a case-insensitive mapping), by their canonical names."""
    return {name: str(headers[name])[:MAX_HEADER_CHARS] for name in GRAFANA_HEADERS if headers.get(name)}


def format_ts(t: float) -> str:
    """Prometheus's query log time: ``2006-01-02T15:04:05.000Z07:00`` in UTC (the "Z" form)."""
    whole, ms = divmod(int(round(t * 1000)), 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{ms:03d}Z"


def parse_ts(text: str) -> float:
    whole, _, frac = text.rstrip("Z").partition(".")
    return calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) + (int(frac) / 1000 if frac else 0.0)


def params_of(query: str, start: float | None, end: float | None, step: float) -> dict[str, Any]:
    """Prometheus's ``params``: the window only once it is known (a query refused before its times were read)."""
    params: dict[str, Any] = {"query": query}
    if start is not None and end is not None:
        params.update(start=format_ts(start), end=format_ts(end), step=int(step))
    return params


def request_of(source: Source) -> dict[str, str]:
    """Prometheus's ``httpRequest``."""
    return {"clientIP": source.client_ip, "method": source.method, "path": source.path}


def to_line(r: QueryRecord, slow: bool = False) -> dict[str, Any]:
    """The query log's JSON object for ``r`` (``slow``: at least --query.slow-duration long)."""
    line: dict[str, Any] = {
        "httpRequest": request_of(r.source),
        "params": params_of(r.query, r.start, r.end, r.step),
        "stats": {"timings": {"evalTotalTime": r.eval_s, "execQueueTime": r.queue_s, "execTotalTime": r.total_s},
                  "samples": {"totalQueryableSamples": r.samples, "peakSamples": r.peak_samples}},
        "ts": format_ts(r.ts),
    }
    if r.error:
        line["error"] = r.error
    line["status"] = r.status
    if r.limit:
        line["limit"] = r.limit
    if r.source.user_agent:
        line["userAgent"] = r.source.user_agent
    if r.source.grafana:
        line["grafana"] = dict(r.source.grafana)
    line["bytes"] = {"peak": r.peak_bytes, "response": r.response_bytes}
    if slow:
        line["slow"] = True
    return line


def from_line(line: dict[str, Any]) -> QueryRecord:
    """The record a query log line describes (the front reads a query process's records so)."""
    req, params = line.get("httpRequest", {}), line["params"]
    stats = line.get("stats", {})
    timings, samples = stats.get("timings", {}), stats.get("samples", {})
    sized = line.get("bytes", {})
    window = "start" in params and "end" in params
    return QueryRecord(
        query=params["query"],
        source=Source(req.get("clientIP", ""), req.get("method", ""), req.get("path", ""), line.get("userAgent", ""),
                      dict(line.get("grafana", {}))),
        ts=parse_ts(line["ts"]), status=line.get("status", "ok"), limit=line.get("limit", ""),
        error=line.get("error", ""), start=parse_ts(params["start"]) if window else None,
        end=parse_ts(params["end"]) if window else None, step=float(params.get("step", 0)),
        total_s=float(timings.get("execTotalTime", 0.0)), queue_s=float(timings.get("execQueueTime", 0.0)),
        eval_s=float(timings.get("evalTotalTime", 0.0)), samples=int(samples.get("totalQueryableSamples", 0)),
        peak_samples=int(samples.get("peakSamples", 0)), peak_bytes=int(sized.get("peak", 0)),
        response_bytes=int(sized.get("response", 0)))
