"""Every request Grafana's Prometheus data source sends to the server, with the parameters Grafana builds.

Read from Grafana's source (grafana/grafana, versions 10.x-12.x; the frontend lived in
``public/app/plugins/datasource/prometheus/`` until 10.4 and in ``packages/grafana-prometheus/src/``
since, the backend in ``pkg/tsdb/prometheus/`` until 10.3 and ``pkg/promlib/`` since):

- What reaches the server is always sent by Grafana's backend (browser access was removed in 10), so
  ``transport()`` follows ``pkg/promlib/client/client.go``: with the data source's ``httpMethod`` GET
  every call is a GET with its parameters in the URL. With POST (the default, and the README's
  provisioning): panel queries and the frontend's ``metadataRequest`` to query/query_range/series/labels
  (``GET_AND_POST_METADATA_ENDPOINTS`` in datasource.ts) are POSTs with a form body; the paths in
  ``endpointsSupportOnlyGet`` (label values, metadata, rules, alerts, buildinfo, ...) are GETs; any other
  resource call (query_exemplars) is a POST whose parameters stay in the URL and whose body is empty.
  A POST answered 400 or 405 is retried as a GET (``QueryResource``), so the first answer is the one that
  matters. Go's transport asks for ``Accept-Encoding: gzip``.
- Times: the frontend's ``getPrometheusTime`` is ``ceil(ms / 1000)``; ``getRangeSnapInterval`` (cache
  level Low, the default) floors start to the minute and ceils end to the minute (language_utils.ts).
  The backend aligns range queries to the step (``AlignTimeRange``, models/query.go) and writes
  times and steps with ``strconv.FormatFloat(x, 'f', -1, 64)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from urllib.parse import urlencode

from tests.dashboards.grafana import step_s

# pkg/promlib/client/client.go: endpointsSupportOnlyGet (matched with strings.HasPrefix on the path)
GET_ONLY_PREFIXES = ("api/v1/label/", "api/v1/metadata", "/api/v1/rules", "/api/v1/alerts",
                     "/api/v1/status/buildinfo", "/api/v1/status/tsdb")
DEFAULT_SERIES_LIMIT = "40000"  # constants.ts (12.x), components/PrometheusMetricsBrowser.tsx (10.x-11.x)
MATCH_ALL_LABELS = '{__name__!=""}'  # constants.ts (12.x)
QUERY_TIMEOUT = "60s"  # jsonData.queryTimeout, sent as timeout= when set (client.go)


@dataclass(frozen=True)
class Call:
    """One request as Grafana builds it. ``form``: a call the frontend or backend sends as a form body
    when the data source is set to POST. ``result``: how the answers are compared."""

    name: str
    view: str
    source: str
    path: str
    params: tuple[tuple[str, str], ...]
    form: bool = False
    result: str = "exact"  # exact | unordered (a list whose order Prometheus does not define) | promql


@dataclass(frozen=True)
class Request:
    method: str
    url: str  # path and query string
    body: bytes
    headers: dict


def transport(call: Call, http_method: str, custom: tuple[tuple[str, str], ...] = ()) -> Request:
    """The HTTP request Grafana's backend sends for ``call`` when the data source uses ``http_method``.

    ``custom``: the data source's customQueryParameters (e.g. Thanos's ``max_source_resolution``), which
    pkg/promlib/middleware/custom_query_params.go appends to the URL of every request, POSTs included."""
    headers = {"Accept-Encoding": "gzip", "User-Agent": "Grafana/11.5.0"}
    get_only = any(call.path.lstrip("/").startswith(p.lstrip("/")) for p in GET_ONLY_PREFIXES)
    if http_method == "GET" or get_only:
        return Request("GET", _url(call.path, call.params + custom), b"", headers)
    headers["Content-Type"] = "application/x-www-form-urlencoded"
    if call.form:
        return Request("POST", _url(call.path, custom), urlencode(call.params).encode(), headers)
    return Request("POST", _url(call.path, call.params + custom), b"", headers)


def _url(path: str, params: tuple[tuple[str, str], ...]) -> str:
    return f"{path}?{urlencode(params)}" if params else path


# ------------------------------------------------------------------------------------------ times
def prometheus_time(ms: float) -> int:
    """language_utils.ts getPrometheusTime: ceil(ms / 1000), whether rounding up or not."""
    return math.ceil(ms / 1000)


def snapped(from_ms: float, to_ms: float, minutes: int = 1) -> tuple[tuple[str, str], ...]:
    """language_utils.ts getRangeSnapInterval at cache level Low (1 minute)."""
    incr = minutes * 60
    start = math.floor(prometheus_time(from_ms) / incr) * incr
    end_min = math.ceil(prometheus_time(to_ms) / 60)
    end = (end_min - end_min % minutes) * 60
    if start == end:
        end += incr
    return ("start", str(start)), ("end", str(end))


def unsnapped(from_ms: float, to_ms: float) -> tuple[tuple[str, str], ...]:
    """datasource.ts getTimeRangeParams / metric_find_query.ts: whole seconds, not snapped."""
    return ("start", str(prometheus_time(from_ms))), ("end", str(prometheus_time(to_ms)))


def go_float(x: float) -> str:
    """strconv.FormatFloat(x, 'f', -1, 64): the shortest decimal that reads back as x."""
    text = repr(float(x))
    if "e" in text:
        text = f"{x:.20f}".rstrip("0").rstrip(".")
    return text[:-2] if text.endswith(".0") else text


def aligned(t_s: float, step: float, utc_offset_s: int = 0) -> float:
    """models/query.go AlignTimeRange: floor to a multiple of the step (in ns) in the dashboard's time zone
    (the frontend sends utcOffsetSec, e.g. 19800 for UTC+05:30)."""
    step_ns, offset_ns = round(step * 1e9), utc_offset_s * 10**9
    return (math.floor((round(t_s * 1e9) + offset_ns) / step_ns) * step_ns - offset_ns) / 1e9


def range_query(expr: str, from_ms: float, to_ms: float, step: float, timeout: str | None = None,
                utc_offset_s: int = 0):
    """client.go QueryRange: start/end aligned to the step, step in seconds."""
    params = [("query", expr), ("start", go_float(aligned(from_ms / 1000, step, utc_offset_s))),
              ("end", go_float(aligned(to_ms / 1000, step, utc_offset_s))), ("step", go_float(step))]
    return tuple(params + ([("timeout", timeout)] if timeout else []))


def instant_query(expr: str, to_ms: float, timeout: str | None = None):
    """client.go QueryInstant: time is the range's end, not aligned."""
    return tuple([("query", expr), ("time", go_float(to_ms / 1000))] + ([("timeout", timeout)] if timeout else []))


# ------------------------------------------------------------------------------------------ the catalogue
METRIC = "DCGM_FI_DEV_GPU_UTIL"
HISTOGRAM = "apiserver_request_duration_seconds_bucket"


def catalogue(from_ms: float, to_ms: float) -> list[Call]:
    """Every call, for a dashboard time range [from_ms, to_ms] (absolute, as the time picker gives it)."""
    snap = snapped(from_ms, to_ms)
    whole = unsnapped(from_ms, to_ms)
    step = step_s(round((to_ms - from_ms) / 1000))
    ds, lp, rc12 = "datasource.ts", "language_provider.ts", "resource_clients.ts (12.x)"
    mfq, client = "metric_find_query.ts", "pkg/promlib/client/client.go"
    calls = [
        # --- data source settings page: "Save & test", version detection
        Call("health check 1+1", "settings: save & test",
             "pkg/promlib/healthcheck.go (10.x-12.x): instant 1+1, range 1s..4s", "/api/v1/query",
             instant_query("1+1", 4000), form=True, result="promql"),
        Call("buildinfo", "settings: heuristics, detect version",
             "pkg/promlib/heuristics.go, resource/resource.go DetectVersion (10.x-12.x)",
             "/api/v1/status/buildinfo", ()),
        # --- data source load (datasource.ts init)
        Call("rules for recording-rule mapping", "data source load", f"{ds} loadRules (10.x-12.x)",
             "/api/v1/rules", ()),
        Call("exemplars available?", "data source load",
             f"{ds} areExemplarsAvailable (10.x-11.x): start/end in milliseconds, as Grafana sends them",
             "/api/v1/query_exemplars", (("query", "test"), ("start", str(int(from_ms))), ("end", str(int(to_ms))))),
        # --- query editor / Explore start-up (language provider)
        Call("metric names", "editor start-up", f"{lp} start/fetchLabelValues (10.x-11.x)",
             "/api/v1/label/__name__/values", snap),
        Call("metadata", "editor start-up", f"{lp} loadMetricsMetadata (10.x-12.x)", "/api/v1/metadata", ()),
        Call("label names", "editor start-up, label_names()", f"{lp} fetchLabels (10.x-11.x)", "/api/v1/labels", snap,
             form=True),
        Call("metric names, limited", "editor start-up", f"{rc12} LabelsApiClient.queryMetrics",
             "/api/v1/label/__name__/values", (("limit", DEFAULT_SERIES_LIMIT),) + snap),
        Call("label names, limited", "editor start-up", f"{rc12} LabelsApiClient.queryLabelKeys", "/api/v1/labels",
             (("limit", DEFAULT_SERIES_LIMIT),) + snap, form=True),
        Call("all series, limited", "editor start-up (old Prometheus versions)",
             f"{rc12} SeriesApiClient.queryMetrics -> querySeries", "/api/v1/series",
             whole + (("match[]", MATCH_ALL_LABELS), ("limit", DEFAULT_SERIES_LIMIT)), form=True, result="unordered"),
        Call("default series labels", "metrics browser", f"{lp} fetchDefaultSeries (10.x-11.x)",
             "/api/v1/label/job/values", snap),
        # --- metrics browser / label browser
        Call("values of a label", "metrics browser", f"{lp} fetchLabelValues (10.x-11.x)",
             "/api/v1/label/Hostname/values", snap),
        Call("values of a label for a selector", "metrics browser, query builder label value picker",
             f"{lp} fetchSeriesValuesWithMatch (10.x-12.x)", "/api/v1/label/gpu/values",
             snap + (("match[]", f'{{__name__="{METRIC}",Hostname="gpu-node-00000"}}'),)),
        Call("label names for the queries' metrics", "ad hoc filters, label_names() in a dashboard",
             f"{lp} fetchLabels(timeRange, queries): one match[] per metric of the panel queries (11.x)",
             "/api/v1/labels", snap + (("match[]", METRIC), ("match[]", "DCGM_FI_DEV_POWER_USAGE")), form=True),
        Call("label names for a selector", "metrics browser, query builder label picker",
             f"{lp} fetchSeriesLabelsMatch (10.x-11.x)", "/api/v1/labels",
             snap + (("match[]", f'{{__name__="{METRIC}"}}'),), form=True),
        Call("label names for a selector, limited", "metrics browser (12.x)", f"{rc12} queryLabelKeys(match)",
             "/api/v1/labels", (("limit", DEFAULT_SERIES_LIMIT),) + snap + (("match[]", '{job="apiserver"}'),),
             form=True),
        Call("metric names for a selector, limited", "metrics browser (12.x)",
             f"{rc12} queryLabelValues(__name__, match)", "/api/v1/label/__name__/values",
             (("limit", DEFAULT_SERIES_LIMIT),) + snap + (("match[]", '{job="apiserver"}'),)),
        Call("validate selector", "metrics browser: Validate selector", f"{lp} fetchSeries (10.x-11.x)",
             "/api/v1/series",
             whole + (("match[]", f'{METRIC}{{gpu=~"1|2"}}'),), form=True, result="unordered"),
        Call("series for a selector, limited", "metrics browser",
             f"{lp} fetchSeriesLabels (10.x-11.x) with DEFAULT_SERIES_LIMIT",
             "/api/v1/series", snap + (("match[]", '{job="apiserver",verb="GET"}'), ("limit", DEFAULT_SERIES_LIMIT)),
             form=True, result="unordered"),
        # --- query builder pickers
        Call("metric search", "query builder metric picker",
             "querybuilder/components/MetricCombobox.tsx (MetricSelect.tsx in 10.x) formatKeyValueStrings",
             "/api/v1/label/__name__/values",
             snap + (("match[]", '{__name__=~".*GPU.*"}'),)),
        Call("metric search with label filters", "query builder metric picker",
             "MetricCombobox.tsx formatKeyValueStrings with labelsFilters", "/api/v1/label/__name__/values",
             snap + (("match[]", '{__name__=~".*request.*",job="apiserver"}'),)),
        Call("metric search, two words", "query builder metric picker",
             "querybuilder regexifyLabelValuesQueryString: each word becomes word.*",
             "/api/v1/label/__name__/values", snap + (("match[]", '{__name__=~".*node.*memory.*"}'),)),
        # --- template variables (metric_find_query.ts, 10.x-12.x)
        Call("label_values(job)", "variables", f"{mfq} labelValuesQuery", "/api/v1/label/job/values", whole),
        Call("label_values(selector, label)", "variables", f"{mfq} labelValuesQuery with match[]",
             "/api/v1/label/Hostname/values",
             (("match[]", f'{METRIC}{{namespace=~"(batch-jobs|ml-training)"}}'),) + whole),
        Call("label_values(selector with All), label", "variables", f"{mfq} with an interpolated All value",
             "/api/v1/label/gpu/values", (("match[]", f'{METRIC}{{Hostname=~".*"}}'),) + whole),
        Call("label_values with an escaped multi-value", "variables",
             f"{ds} interpolateQueryExpr -> prometheusSpecialRegexEscape: 10.20.0.1:9400 as 10\\\\.20...",
             "/api/v1/label/gpu/values",
             (("match[]", METRIC + '{instance=~"(10\\\\.20\\\\.0\\\\.1:9400|10\\\\.20\\\\.0\\\\.2:9400)"}'),) + whole),
        Call("label_values of a metric that does not exist", "variables", f"{mfq}: an empty list, not null",
             "/api/v1/label/job/values", (("match[]", "no_such_metric"),) + whole),
        Call("series of a metric that does not exist", "metrics browser", f"{lp} fetchSeries: an empty list",
             "/api/v1/series", whole + (("match[]", "no_such_metric"),), form=True),
        Call("query with no result", "panels", f"{client} QueryRange: an empty matrix", "/api/v1/query_range",
             range_query("no_such_metric", from_ms, to_ms, step), form=True, result="promql"),
        Call("metrics(regex)", "variables", f"{mfq} metricNameQuery (regex applied by Grafana)",
             "/api/v1/label/__name__/values", whole),
        Call("label_names(regex)", "variables", f"{mfq} PrometheusLabelNamesRegexWithMatch -> getSeriesLabels",
             "/api/v1/labels", snap + (("match[]", '{__name__=~".*DCGM_FI_DEV.*"}'),), form=True),
        Call("query_result(vector)", "variables", f"{mfq} queryResultQuery", "/api/v1/query",
             # not topk: which of tied series it keeps is Prometheus's choice of the moment, not a result to compare
             (("query", f"sort_desc(sum by (instance) ({METRIC}))"), ("time", str(prometheus_time(to_ms)))),
             form=True, result="promql"),
        Call("query_result(scalar)", "variables", f"{mfq} queryResultQuery", "/api/v1/query",
             (("query", "scalar(count(up))"), ("time", str(prometheus_time(to_ms)))), form=True, result="promql"),
        Call("query_result with $__range", "variables", f"{mfq} queryResultQuery, $__range from getRangeScopedVars",
             "/api/v1/query",
             (("query", f"sort_desc(max by (instance) (max_over_time({METRIC}[{round((to_ms - from_ms) / 1000)}s])))"),
              ("time", str(prometheus_time(to_ms)))), form=True, result="promql"),
        Call("series selector variable", "variables", f"{mfq} metricNameAndLabelsQuery", "/api/v1/series",
             (("match[]", 'up{job="dcgm-exporter"}'),) + whole, form=True, result="unordered"),
        # --- ad hoc filters (datasource.ts getTagKeys/getTagValues)
        Call("ad hoc values with filters", "ad hoc filters", f"{ds} getTagValues -> fetchSeriesValuesWithMatch",
             "/api/v1/label/verb/values", snap + (("match[]", '{job="apiserver",code="200"}'),)),
        # --- panels, Explore, annotations (backend query data)
        Call("range query", "panels", f"{client} QueryRange (10.x-12.x)", "/api/v1/query_range",
             range_query(f"sum by (Hostname) (rate({METRIC}[1m]))", from_ms, to_ms, step), form=True, result="promql"),
        Call("range query with timeout", "panels (queryTimeout set)", f"{client} QueryRange + timeout",
             "/api/v1/query_range",
             range_query(f"histogram_quantile(0.99, sum by (le) (rate({HISTOGRAM}[5m])))", from_ms, to_ms, step,
                         QUERY_TIMEOUT), form=True, result="promql"),
        Call("instant query", "panels (Instant), Explore (Both)", f"{client} QueryInstant", "/api/v1/query",
             instant_query(f"sort_desc(avg by (instance) ({METRIC}))", to_ms), form=True, result="promql"),
        Call("exemplars", "panels with Exemplars on", f"{client} QueryExemplars (aligned like QueryRange)",
             "/api/v1/query_exemplars", range_query(f"rate({HISTOGRAM}[5m])", from_ms, to_ms, step)[:3], form=True),
        Call("annotation query", "annotations", f"{ds} annotationQuery (step 60s) -> QueryRange", "/api/v1/query_range",
             range_query("changes(up[5m]) > 0 or up == 0", from_ms, to_ms, 60), form=True, result="promql"),
        Call("range query, dashboard in UTC+05:45", "panels (dashboard time zone)",
             f"{ds} processTargetV2 utcOffsetSec -> AlignTimeRange", "/api/v1/query_range",
             range_query(f"avg(rate({METRIC}[2m]))", from_ms, to_ms, 120, utc_offset_s=20700),
             form=True, result="promql"),
        Call("incremental refresh", "panels with incremental querying",
             "querycache/QueryCache.ts: only the last overlap window (10m) is asked again", "/api/v1/query_range",
             range_query(f"sum(rate({METRIC}[1m]))", to_ms - 600_000, to_ms, step), form=True, result="promql"),
        Call("fine step", "Explore (min step 1s)", f"{client} QueryRange", "/api/v1/query_range",
             range_query("up", to_ms - 300_000, to_ms, 1), form=True, result="promql"),
        # --- alerting (Grafana-managed rules query through the backend; data source rules listed read-only)
        Call("alert rule instant query", "alerting: rule evaluation",
             f"{ds} getDefaultQuery(UnifiedAlerting) instant -> {client} QueryInstant", "/api/v1/query",
             instant_query(f"max by (Hostname) ({METRIC}) > 50", to_ms), form=True, result="promql"),
        Call("alert rule range query", "alerting: rule evaluation (range)", f"{client} QueryRange, step = interval 15s",
             "/api/v1/query_range", range_query("sum(rate(apiserver_request_total[5m]))", to_ms - 600_000, to_ms, 15),
             form=True, result="promql"),
        Call("rules list", "alerting: data source rules",
             "public/app/features/alerting/unified/api/prometheus.ts fetchRules (10.x-11.x)", "/api/v1/rules", ()),
        Call("rules list, paged", "alerting: rule list view (12.x)",
             "public/app/features/alerting/unified/api/prometheusApi.ts getGroups", "/api/v1/rules",
             (("exclude_alerts", "true"), ("group_limit", "40"))),
    ]
    return calls


def bad_calls(from_ms: float, to_ms: float) -> list[Call]:
    """Requests Grafana sends whose answer is an error it parses (status, errorType, error)."""
    step = step_s(round((to_ms - from_ms) / 1000))
    return [
        Call("syntax error", "panels: a typo", "client.go QueryRange -> 400 bad_data", "/api/v1/query_range",
             range_query("sum(rate(up[5m])", from_ms, to_ms, step), form=True),
        Call("too many points", "panels: step too small", "client.go QueryRange -> 400 bad_data", "/api/v1/query_range",
             range_query("up", to_ms - 86_400_000, to_ms, 1), form=True),
        Call("bad label name in values", "variables: label_values(bad-name)", "metric_find_query.ts -> 400",
             "/api/v1/label/bad-name/values", unsnapped(from_ms, to_ms)),
        Call("execution error", "panels: many-to-many match", "client.go QueryInstant -> 422 execution",
             "/api/v1/query",
             instant_query("up + on() group_left up", to_ms), form=True),
        Call("bad match[]", "metrics browser: unfinished selector", "language_provider.ts -> 400", "/api/v1/series",
             unsnapped(from_ms, to_ms) + (("match[]", '{job="apiserver"'),), form=True),
        Call("empty matcher", "metrics browser: {} selector", "language_provider.ts -> 400", "/api/v1/series",
             unsnapped(from_ms, to_ms) + (("match[]", "{}"),), form=True),
        # a timeout so short that it has passed before evaluation starts, in both servers: no race with the clock
        Call("query timeout", "panels: the data source's queryTimeout exceeded",
             "client.go QueryInstant -> 503 timeout", "/api/v1/query",
             instant_query('count_over_time({__name__=~".+"}[30m])', to_ms, timeout="0.000001"),
             form=True),
    ]
