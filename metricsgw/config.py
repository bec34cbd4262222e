"""Every setting in one table: name (= flag and config key), type, default, help.

The flag ``--query.timeout`` and the config key ``query.timeout`` (or nested
``query: {timeout: ...}``) are the same setting. ``--help`` and docs/settings.md's
table are generated from this table, so nothing goes undocumented.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

import yaml

from .model import check_writer_id

# A query process's setting (procs/layout.py), not a flag: its gateway's ingest shards' sockets, in shard order.
SHARD_SOCKETS = "cluster_shard_sockets"
_DURATION_RE = re.compile(r"^((\d+)y)?((\d+)w)?((\d+)d)?((\d+)h)?((\d+)m)?((\d+)s)?((\d+)ms)?$")
_DURATION_UNITS = (365 * 86400, 7 * 86400, 86400, 3600, 60, 1, 0.001)


def parse_duration(text: str) -> float:
    """A Prometheus duration ("1h30m", "250ms", "2m") or plain seconds ("90", "1.5") -> seconds."""
    s = str(text).strip()
    try:
        return float(s)
    except ValueError:
        pass
    m = _DURATION_RE.match(s)
    if not s or not m:
        raise ValueError(f"not a duration: {text!r} (use e.g. 30s, 2m, 1h30m)")
    return sum(int(m.group(2 * i + 2)) * unit for i, unit in enumerate(_DURATION_UNITS) if m.group(2 * i + 2))


_SIZE_UNITS = {"": 1, "b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3,
               "kib": 1024, "mib": 1024**2, "gib": 1024**3, "k": 1024, "m": 1024**2, "g": 1024**3}


def parse_size(text: str) -> int:
    """Bytes: "32MiB", "512KB", "1073741824"."""
    m = re.match(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$", str(text))
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(f"not a size: {text!r} (use e.g. 32MiB, 512KB, or bytes)")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])


def format_duration(seconds: float) -> str:
    """Seconds -> a Prometheus duration as a user writes it: 15d, 2m, 1h30m, 250ms (no weeks or
    years, so a retention of 15 days reads 15d rather than 2w1d). ``parse_duration`` reads it back."""
    ms = int(round(seconds * 1000))
    if ms == 0:
        return "0s"
    out = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        n, ms = divmod(ms, size)
        if n:
            out.append(f"{n}{unit}")
    return "".join(out)


def format_size(n: int) -> str:
    """Bytes -> the largest binary unit that divides it: 2GiB, 64MiB, 512KiB, 1000B."""
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n}B"


def _nonneg_int(text: str) -> int:
    v = int(str(text).replace("_", ""))
    if v < 0:
        raise ValueError(f"must be >= 0, got {v}")
    return v


def _promql_compat(text: str) -> int:
    v = int(str(text))
    if v not in (2, 3):
        raise ValueError(f"must be 2 or 3 (a Prometheus major version), got {v}")
    return v


def _niceness(text: str) -> int:
    v = _nonneg_int(text)
    if v > 19:
        raise ValueError(f"must be 0-19 (the range of nice), got {v}")
    return v


def _positive_int(text: str) -> int:
    v = _nonneg_int(text)
    if v == 0:
        raise ValueError("must be > 0")
    return v


def _listen_address(text: str) -> str:
    host, sep, port = str(text).rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"not HOST:PORT: {text!r}")
    return str(text)


def _http_url(text: str) -> str:
    s = str(text).strip()
    if s and not re.match(r"^https?://[^/\s]+", s):
        raise ValueError(f"not an http(s) URL: {text!r}")
    return s


def _writer_id(text: str) -> str:
    return check_writer_id(str(text))


def _peer_url(text: str) -> str:
    """A peer gateway: http(s)://host:port (a path prefix allowed) or unix:/path/to.sock."""
    s = str(text).strip()
    if re.match(r"^https?://[^/\s]+", s) or re.match(r"^unix:/\S+$", s):
        return s.rstrip("/")
    raise ValueError(f"not a peer address: {text!r} (use http://host:port, https://host:port or unix:/path.sock)")


def _allocator(text: str) -> str:
    s = str(text).strip().lower()
    if s not in ("auto", "jemalloc", "glibc"):
        raise ValueError(f"not an allocator: {text!r} (use auto, jemalloc or glibc)")
    return s


def _bool(text: str | bool) -> bool:
    if isinstance(text, bool):
        return text
    s = str(text).lower()
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {text!r}")


@dataclass(frozen=True)
class Setting:
    name: str
    parse: Callable[[Any], Any]
    default: Any
    help: str
    repeated: bool = False  # flag may be given several times; value is a list

    @property
    def flag(self) -> str:
        return "--" + self.name

    @property
    def shown_default(self) -> str:
        """The default as a user would write it in a flag (docs and --help)."""
        if self.repeated:
            return "—"
        if self.parse is parse_duration:
            return format_duration(self.default)
        if self.parse is parse_size:
            return format_size(self.default)
        return str(self.default)

    @property
    def attr(self) -> str:
        return self.name.replace(".", "_").replace("-", "_")


D, I, P, Z, S, B = parse_duration, _nonneg_int, _positive_int, parse_size, str, _bool

SETTINGS: tuple[Setting, ...] = (
    # --- web
    Setting("web.listen-address", _listen_address, "0.0.0.0:9201", "Address to listen on for the API, remote write and /metrics."),
    Setting("web.max-connections", P, 512, "Maximum simultaneous HTTP connections."),
    Setting("web.config.file", S, "", "Prometheus web config file (exporter-toolkit format): TLS, mutual TLS, "
            "basic_auth_users with bcrypt hashes, response headers. Re-read when it or its certificates change."),
    Setting("web.enable-lifecycle", B, False, "Enable /-/reload over HTTP (POST/PUT); otherwise 403, as in Prometheus. "
            "SIGHUP reloads either way."),
    Setting("web.write-only-users", S, [], "Basic-auth user that may only remote-write (/api/v1/write), so a leaked "
            "sender password cannot read data (metricsgw's addition). Repeatable.", repeated=True),
    Setting("web.read-only-users", S, [], "Basic-auth user that may query but not write nor use admin endpoints "
            "(metricsgw's addition). Repeatable.", repeated=True),
    Setting("web.auth.max-concurrent-checks", P, 1, "bcrypt password checks run at once, in threads of their own "
            "(a brute force waits for them; the event loop and logged-in senders do not). 64 per thread may wait; "
            "past that a login gets 503."),
    # --- processes (metricsgw/procs/)
    Setting("server.single-process", B, False, "Run the whole gateway in this one process (ingest and queries share "
            "one core and its GIL) instead of a front with ingest shard and query processes."),
    Setting("server.allocator", _allocator, "auto", "The C allocator of metricsgw's processes: jemalloc (it gives "
            "freed memory back to the system; glibc's arenas keep hundreds of MB of it under dashboards), glibc, or "
            "auto: jemalloc where libjemalloc.so.2 is installed (Debian: libjemalloc2), else glibc. metricsgw starts "
            "itself again with it preloaded."),
    Setting("ingest.shards", I, 0, "Ingest shard processes, each with its own WAL, head and flush; the front splits "
            "every remote-write request over them by series (0 = one per 2 cores, at least 1). After a change, the "
            "front first flushes the WAL of every writer the new count has no shard for."),
    Setting("query.processes", I, 0, "Query processes the front passes queries to, least busy first (0 = one per "
            "4 cores, at least 1: each holds the series table). Per-gateway budgets (--query.max-memory, "
            "--query.max-concurrency, --query.max-queue) are split evenly over them."),
    Setting("query.processes-niceness", _niceness, 10, "CPU niceness added to the query processes (0-19; 0 = as the "
            "front), so that the kernel gives ingest the CPU first when heavy queries and writes want more cores "
            "than the machine has."),
    # --- storage
    Setting("storage.path", S, "./data", "Directory for the WAL, Parquet partitions and the series table."),
    Setting("storage.flush-interval", D, 120.0, "How often the in-memory head is flushed to Parquet (and the WAL truncated)."),
    Setting("storage.flush-max-samples", P, 2_000_000, "Flush the head early once it holds this many samples."),
    Setting("storage.partition-duration", D, 3600.0, "Time span of one Parquet partition (hive-style, by hour by default)."),
    Setting("storage.retention.time", D, 15 * 86400.0, "Partitions older than this are deleted."),
    Setting("storage.head-window", D, 3600.0, "A series not written for this long (or for --storage.retention.time, "
            "if shorter) is forgotten in memory: the series table, the ingest caches and /api/v1/status/tsdb hold the "
            "series written within it, as Prometheus' head does. Its samples stay on disk and queries over its old "
            "range still find it (docs/storage.md, the head window)."),
    Setting("storage.wal-segment-size", Z, 64 * 1024**2, "WAL segment size before a new segment is started."),
    Setting("storage.wal-fsync", B, True, "Acknowledge a remote write only once its WAL record is fdatasync'd: it "
            "survives a crash of the machine. false: once the record is written to the operating system, as "
            "Prometheus' WAL does; it survives kill -9 of metricsgw but not a power loss, and a sender over one "
            "connection no longer waits for the disk's flush on each request (docs/internals.md, durability)."),
    Setting("storage.duckdb-threads", P, 2, "DuckDB worker threads."),
    Setting("storage.writer-id", _writer_id, "gw0", "This process's name among the writers of the table under "
            "--storage.path (letters, digits, '_', '-'): unique per table, so each gateway sharing a directory needs "
            "its own. Its WAL is <storage.path>/wal/<writer id>/; a second live process with the same id is refused."),
    Setting("storage.follow-interval", D, 5.0, "How often this process loads the other writers' commits to the table "
            "under --storage.path (their series for the metadata APIs, their files for queries). A query that asks "
            "--cluster.peers loads them at once when a peer names a newer table version, whatever this is."),
    Setting("storage.vacuum-delay", D, 300.0, "A file compaction or retention removed from the table is deleted once "
            "no query of this process holds it and this long has passed since its remove, for queries of other "
            "processes reading the same table. Keep it above --query.timeout."),
    Setting("storage.table-url", S, "", "Where the table is: empty for under --storage.path; s3://bucket/prefix for an object store (AWS S3, MinIO, Ceph RGW) that gateways on separate hosts share, each keeping its WAL, head and copies of the table's files under its own --storage.path (docs/object-storage.md). The store must refuse a second conditional write (If-None-Match: *) on one key with 412: the gateway proves it at start, and refuses to start otherwise."),
    Setting("storage.s3.endpoint", _http_url, "", "The object store's http(s)://host:port (MinIO, Ceph RGW); empty for AWS S3."),
    Setting("storage.s3.region", S, "", "The store's region (empty: the AWS chain's, AWS_REGION or the config file)."),
    Setting("storage.s3.force-path-style", B, False, "Address the bucket in the path (http://host/bucket/key) rather than in the host name; MinIO and Ceph RGW usually need it."),
    Setting("storage.s3.credentials-file", S, "", "An AWS shared credentials file (INI: aws_access_key_id, aws_secret_access_key under [default] or AWS_PROFILE's section). Empty: the AWS chain (environment, ~/.aws files, container and instance roles). Keys are never logged nor shown on a page."),
    Setting("storage.s3.cache-size", Z, 0, "With --storage.table-url: disk for this process's copies of other gateways' sample files, fetched when a query needs them (pruned by time first), least recently read out first. 0: every file the table lists is copied here as soon as it is committed (reads never wait on the store)."),
    # --- remote write
    Setting("remote-write.max-body-size", Z, 32 * 1024**2, "Largest compressed remote-write body accepted (413 above)."),
    Setting("remote-write.max-decoded-size", Z, 128 * 1024**2, "Largest declared snappy-decoded size accepted (413 above, before decompressing)."),
    # --- remote read (named as Prometheus's flags)
    Setting("storage.remote.read-sample-limit", I, 50_000_000, "Maximum samples one query of a SAMPLES remote read may return (400 above; 0 = no limit). Every remote read is also held to --query.max-samples and --query.max-series."),
    Setting("storage.remote.read-concurrent-limit", I, 10, "Remote reads served at once (0 = no limit); each one also takes a query slot (--query.max-concurrency)."),
    Setting("storage.remote.read-max-bytes-in-frame", P, 1024 * 1024, "Streamed remote read: bytes of chunks (plus labels) per frame before a series is split across frames."),
    # --- rules
    Setting("cluster.peers", _peer_url, [], "Another gateway (http(s)://host:port, or unix:/path.sock) whose "
            "recent samples, not yet in the shared table, every query and metadata call here also reads "
            "(POST /api/v1/read?scope=head). A peer that cannot answer fails the query with 503, or with "
            "--query.partial-response (or a request's partial_response=true) gives an answer without it and a "
            "warning. Repeatable.", repeated=True),
    Setting("cluster.peer-timeout", D, 10.0, "How long a query waits for a peer's recent samples (with partial "
            "answers, at most half of what is left of the query's own deadline). A front asked for its recent "
            "samples gives its shards the asking query's deadline."),
    Setting("query.partial-response", B, False, "Answer a query or metadata call whose --cluster.peers gateway "
            "cannot be read without that peer's recent samples, with a warning naming it, instead of 503 (as "
            "Thanos' --query.partial-response; a request's partial_response parameter chooses for itself). "
            "This gateway's own ingest shards are never left out."),
    Setting("rules.file", S, [], "Relabel/drop rule file (Prometheus relabel_config YAML list). Repeatable.", repeated=True),
    Setting("rules.ruler-url", _http_url, "", "Ruler that evaluates the alerting/recording rules against metricsgw (vmalert, or a "
            "Prometheus), e.g. http://127.0.0.1:8880; /api/v1/rules and /api/v1/alerts show its groups and alerts "
            "(empty lists when unset)."),
    Setting("rules.ruler-timeout", D, 5.0, "How long /api/v1/rules and /api/v1/alerts wait for the ruler before answering 503."),
    # --- ingest limits (0 = unlimited)
    Setting("ingest.max-series", I, 0, "Maximum active series in total; new series beyond it are dropped (0 = no limit)."),
    Setting("ingest.max-series-per-metric", I, 0, "Maximum active series per metric name (0 = no limit)."),
    Setting("ingest.max-label-names-per-series", I, 40, "Maximum labels per series, __name__ included (0 = no limit)."),
    Setting("ingest.max-label-name-length", I, 256, "Maximum label name length in bytes (0 = no limit)."),
    Setting("ingest.max-label-value-length", I, 4096, "Maximum label value length in bytes (0 = no limit)."),
    Setting("ingest.creation-grace-period", D, 600.0, "Samples more than this ahead of the server's clock are refused "
            "(400, counted as too_far_in_future; Mimir's creation_grace_period). Samples older than "
            "--storage.retention.time are refused too (too_old)."),
    # --- query limits
    Setting("query.timeout", D, 120.0, "Maximum time a query may take; a request's timeout parameter can only shorten it."),
    Setting("query.metadata-timeout", D, 10.0, "Deadline for /series, /labels, /label/<n>/values and /metadata."),
    Setting("query.max-length", Z, 64 * 1024, "Longest query string accepted, in bytes (400 above; "
            "VictoriaMetrics: -search.maxQueryLen). Checked before parsing, like the two below."),
    Setting("query.max-depth", P, 128, "Deepest nesting of ( [ { in a query (400 above)."),
    Setting("query.max-terms", P, 1000, "Most terms (operands of binary or unary operators) in a query (400 above)."),
    Setting("query.lookback-delta", D, 300.0, "How far back an instant selector looks for a sample."),
    Setting("query.promql-compat", _promql_compat, 3, "Which Prometheus' PromQL to answer as where 2.x and 3.x "
            "differ: 3 (range selectors, subqueries and the lookback delta left-open; . in a regex matches a "
            "newline; double_exponential_smoothing, not holt_winters) or 2 (as Prometheus 2.42). "
            "docs/endpoints.md, \"Prometheus 2 or 3\"."),
    Setting("query.max-memory", Z, 1024**3, "Memory all queries together may hold at once: DuckDB's memory_limit gets "
            "3/16 of it, the decoded-sample cache 1/16, the range-query results cache 1/8, the series archive's index (of "
            "the series the head window forgot, for queries reaching back before it) 1/32 (more borrowed from the queries' part while it is kept), and the rest is shared by running queries (samples, series "
            "label sets, result matrices, JSON). A query waits in the queue while too little is free, and one that "
            "would cross it fails with 503 (retry)."),
    Setting("query.max-memory-per-query", Z, 256 * 1024**2, "Memory a single query may hold at once (422 above); "
            "aggregations over range functions are evaluated in series batches to stay under it."),
    Setting("query.max-samples", P, 50_000_000, "Maximum samples a single query may hold in memory at once, "
            "counted as Prometheus 2.42 counts them (points its evaluation holds, not raw samples read, whose memory "
            "--query.max-memory-per-query bounds; 422 above). A remote read counts the raw samples it reads (400 above)."),
    Setting("query.max-series", P, 500_000, "Maximum series a single query may select."),
    Setting("query.max-concurrency", P, 4, "Queries evaluated at once; more wait in the queue."),
    Setting("query.max-workers-per-query", I, 0, "Cores one query may use: an aggregation's batches of series are "
            "evaluated side by side on idle ones, never waited for (0 = the cores of the process that runs it: the "
            "machine's, split over --query.processes; 1 = one at a time). VictoriaMetrics: -search.maxWorkersPerQuery."),
    Setting("query.max-queue", I, 20, "Queries waiting for a slot; beyond it the answer is 429 with Retry-After."),
    Setting("query.queue-timeout", D, 10.0, "How long a query may wait in the queue before 503."),
    Setting("query.cache-results", B, True, "Keep range-query answers in memory (1/8 of --query.max-memory) so a "
            "dashboard's refresh evaluates only the steps it has not seen; a request's nocache=1 bypasses it. Off on a "
            "gateway with --cluster.peers. VictoriaMetrics: -search.disableCache; Mimir: -query-frontend.cache-results."),
    Setting("query.cache-max-freshness", D, 300.0, "Range-query steps newer than this are never cached, and a sample "
            "already older than this when written drops the cached steps it touches (VictoriaMetrics: "
            "-search.cacheTimestampOffset; Mimir: -query-frontend.max-cache-freshness)."),
    Setting("query.max-points-per-series", P, 11_000, "Maximum points per series in a range query (Prometheus: 11,000)."),
    Setting("query.subquery-default-step", D, 60.0, "Step of a subquery written without one, e.g. [1h:] (Prometheus: global evaluation_interval, 1m)."),
    Setting("query.max-metadata-series", P, 30_000, "Server-side cap on /api/v1/series results (truncated with a warning)."),
    Setting("query.max-label-values", P, 100_000, "Server-side cap on /labels and /label/<n>/values results (truncated with a warning)."),
    Setting("query.metadata-default-window", D, 86400.0, "Window used by the metadata APIs when start/end are absent."),
    Setting("query.max-response-bytes", Z, 256 * 1024**2, "Largest JSON result a query may produce (422 above)."),
    Setting("query.blocked", S, [], "Blocked query (repeatable): 'REGEX[;min_range=DUR][;min_step=DUR][;reason=TEXT]'; "
            "REGEX must match the whole query; min_range applies to ranges >= DUR, min_step to steps < DUR.", repeated=True),
    Setting("query.log-file", S, "", "Append one JSON line per PromQL query to this file, in Prometheus's query_log_file "
            "format plus status, limit, userAgent, grafana and bytes (docs/endpoints.md, \"The query log\"); reopened "
            "on SIGHUP and /-/reload, as Prometheus reopens it at a reload. Written by one process (the front)."),
    Setting("query.slow-duration", D, 5.0, "A query that takes at least this long is slow: listed at "
            "/api/v1/status/recent_queries?kind=slow and marked \"slow\":true in --query.log-file (0 = none is; "
            "VictoriaMetrics: -search.logSlowQueryDuration)."),
    Setting("query.recent-queries", I, 100, "Queries kept in each list of /api/v1/status/recent_queries (slow, "
            "refused, timeout, canceled, error; each also within 8MiB), the oldest out first."),
    Setting("query.stats-last-queries", I, 20_000, "The last queries /api/v1/status/top_queries ranks (within 32MiB; "
            "0 = none; VictoriaMetrics: -search.queryStats.lastQueriesCount)."),
    Setting("advisor.dashboards", S, [], "Grafana dashboard JSON file (repeatable) whose queries the advisor "
            "(/api/v1/status/advise, the Advisor page) counts as reads, besides the shipped dashboards/ and "
            "--query.log-file.", repeated=True),
    Setting("advisor.rule-files", S, [], "Prometheus rule file (repeatable) whose expressions the advisor counts as "
            "reads, besides the shipped rules/alerts/.", repeated=True),
    Setting("log.level", S, "info", "Log level: debug, info, warn, error."),
)

BY_NAME = {s.name: s for s in SETTINGS}

# Settings the front gives its children (procs/layout.py), never a flag or a config key, so not in the table:
# - storage_follow_others: load other writers' series into the catalog. An ingest shard answers no query but
#   ?scope=head of its own head, so it skips them (memory, start time).
CHILD_ONLY: dict[str, Any] = {"storage_follow_others": True}


class ConfigError(ValueError):
    """A bad flag or config value; the message names the setting."""


@dataclass
class Config:
    values: dict[str, Any] = field(default_factory=dict)

    def __getattr__(self, attr: str) -> Any:
        try:
            return self.__dict__["values"][attr]
        except KeyError:
            raise AttributeError(attr) from None


def _flatten(data: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, val in data.items():
        name = f"{prefix}{key}"
        if isinstance(val, dict) and name not in BY_NAME:
            out.update(_flatten(val, name + "."))
        else:
            out[name] = val
    return out


def load(overrides: dict[str, Any] | None = None, config_file: str | None = None) -> Config:
    """Defaults, then the config file, then flags/overrides (strings or typed values)."""
    raw: dict[str, Any] = {}
    if config_file:
        try:
            with open(config_file, encoding="utf-8") as fh:
                data = yaml.safe_load(fh) or {}
        except (OSError, yaml.YAMLError) as err:
            raise ConfigError(f"config.file {config_file}: {err}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"config.file {config_file}: top level must be a mapping")
        for name, val in _flatten(data).items():
            if name not in BY_NAME:
                raise ConfigError(f"config.file {config_file}: unknown setting {name!r}")
            raw[name] = val
    for name, val in (overrides or {}).items():
        name = name.replace("_", "-") if name not in BY_NAME else name
        if name not in BY_NAME:
            raise ConfigError(f"unknown setting {name!r}")
        if BY_NAME[name].repeated and name in raw:
            raw[name] = list(raw[name]) + list(val)
        else:
            raw[name] = val
    values: dict[str, Any] = dict(CHILD_ONLY)
    for s in SETTINGS:
        if s.name not in raw:
            values[s.attr] = list(s.default) if s.repeated else s.default
            continue
        val = raw[s.name]
        try:
            if s.repeated:
                items = val if isinstance(val, list) else [val]
                values[s.attr] = [s.parse(v) for v in items]
            else:
                values[s.attr] = s.parse(val)
        except (ValueError, TypeError) as err:
            raise ConfigError(f"invalid value {val!r} for {s.flag}: {err}") from None
    return Config(values)


def markdown_table() -> str:
    """The settings table of docs/settings.md (tests/test_docs.py keeps the page in step with SETTINGS)."""
    rows = ["| flag / config key | default | what it does |", "|---|---|---|"]
    for s in SETTINGS:
        rows.append(f"| `{s.flag}` | `{s.shown_default or '—'}` | {s.help}{' Repeatable.' if s.repeated and 'epeatable' not in s.help else ''} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
