"""metricsgw's own metrics, on a registry of their own (injected, so tests get a fresh one)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

# Prometheus's own Go client exposes no *_created series; neither do we.
disable_created_metrics()

_FAST = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)
_SLOW = (0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)

QUERY_LOG_DROPPED_HELP = ("Query records the query log lost, by reason: buffer_full and write_error (--query.log-file), "
                          "channel_full, front_unreachable and too_large (a query process's records on their way "
                          "to the front).")


class Telemetry:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.samples_ingested = Counter(
            "metricsgw_ingested_samples", "Samples stored (acknowledged to the sender).", registry=r)
        self.samples_discarded = Counter(
            "metricsgw_discarded_samples", "Samples not stored, by reason.", ["reason"], registry=r)
        self.histograms_discarded = Counter(
            "metricsgw_discarded_histograms", "Native histogram samples not stored, by reason.", ["reason"], registry=r)
        self.exemplars_discarded = Counter(
            "metricsgw_discarded_exemplars", "Exemplars not stored, by reason.", ["reason"], registry=r)
        self.write_requests = Counter(
            "metricsgw_remote_write_requests", "Remote-write requests by protocol version and status code.",
            ["version", "code"], registry=r)
        self.active_series = Gauge(
            "metricsgw_active_series", "Series that received samples within the active window.", registry=r)
        self.series_memory_entries = Gauge(
            "metricsgw_series_memory_entries", "Series held in memory, by holder: catalog (the series table: those "
            "written within --storage.head-window), archive (the index of the series on disk, for queries reaching back before "
            "it to the series it forgot), ingest_cache (the ingest pipeline's series cache).", ["holder"], registry=r)
        self.series_memory_bytes = Gauge(
            "metricsgw_series_memory_bytes", "About the bytes each holder of metricsgw_series_memory_entries holds "
            "(the archive's: 1/32 of --query.max-memory, and past it what it borrows from the queries' part).", ["holder"], registry=r)
        self.head_samples = Gauge(
            "metricsgw_head_samples", "Samples held in the in-memory head, not yet flushed.", registry=r)
        self.wal_fsync = Histogram(
            "metricsgw_wal_fsync_duration_seconds", "WAL write+fsync time per group commit.", buckets=_FAST, registry=r)
        self.wal_group_size = Histogram(
            "metricsgw_wal_group_commit_records", "WAL records written per fsync.",
            buckets=(1, 2, 4, 8, 16, 32, 64), registry=r)
        self.flush_duration = Histogram(
            "metricsgw_flush_duration_seconds", "Head flush to Parquet time.", buckets=_SLOW, registry=r)
        self.flush_failures = Counter(
            "metricsgw_flush_failures", "Head flushes that failed (retried at the next interval).", registry=r)
        # Storage health, for the shipped alerts (rules/alerts/metricsgw.yml) and /-/ready.
        self.wal_write_failures = Counter(
            "metricsgw_wal_write_failures", "WAL writes or fsyncs that failed (the writes were answered 503).",
            registry=r)
        self.storage_writable = Gauge(
            "metricsgw_storage_writable", "1 while the WAL accepts writes, 0 while it cannot (disk full, I/O error).",
            registry=r)
        self.storage_free_bytes = Gauge(
            "metricsgw_storage_free_bytes", "Free bytes on the file system of --storage.path.", registry=r)
        self.compaction_failures = Counter(
            "metricsgw_compaction_failures", "Compactions or retention passes that failed (retried later).",
            registry=r)
        self.replay_duration = Gauge(
            "metricsgw_wal_replay_duration_seconds", "Time the last WAL replay took at start-up.", registry=r)
        self.http_requests = Counter(
            "metricsgw_http_requests", "HTTP requests by handler and status code.", ["handler", "code"], registry=r)
        self.http_duration = Histogram(
            "metricsgw_http_request_duration_seconds", "HTTP request duration by handler.", ["handler"],
            buckets=_SLOW, registry=r)
        self.query_duration = Histogram(
            "metricsgw_query_duration_seconds", "PromQL evaluation time by endpoint.", ["endpoint"],
            buckets=_SLOW, registry=r)
        self.query_samples = Histogram(
            "metricsgw_query_samples_loaded", "Samples loaded per query.",
            buckets=(1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 5e7), registry=r)
        self.guard_rejections = Counter(
            "metricsgw_guard_rejections", "Requests refused or stopped by the query guard, by limit.",
            ["limit"], registry=r)
        self.queries_inflight = Gauge(
            "metricsgw_queries_inflight", "Queries being evaluated now.", registry=r)
        self.query_memory = Gauge(
            "metricsgw_query_memory_bytes", "Bytes running queries hold now, charged against --query.max-memory.",
            registry=r)
        self.query_memory_limit = Gauge(
            "metricsgw_query_memory_limit_bytes", "The running queries' share of --query.max-memory.", registry=r)
        self.results_cache_steps = Counter(
            "metricsgw_query_results_cache_steps", "Steps of range queries through the results cache, by result: hit "
            "(read from the cache), miss (evaluated).", ["result"], registry=r)
        self.results_cache_bytes = Gauge(
            "metricsgw_query_results_cache_bytes", "Bytes the range-query results cache holds (its limit: 1/8 of "
            "--query.max-memory).", registry=r)
        self.sample_cache_bytes = Gauge(
            "metricsgw_query_sample_cache_bytes", "Bytes the cache of decoded samples of recently read files holds (its "
            "limit: 1/16 of --query.max-memory).", registry=r)
        self.sample_cache_entries = Gauge(
            "metricsgw_query_sample_cache_entries", "(file, metric) pairs the sample cache holds decoded.", registry=r)
        self.memory = Gauge(
            "metricsgw_memory_bytes", "Memory this process holds, by part: malloc_in_use, malloc_free (freed, kept by "
            "the allocator), malloc_mapped (big blocks mapped alone), arrow_pool, duckdb (what DuckDB counts of its "
            "own), cardinality_ids (label value ids the cardinality counts keep). Python's small objects are in none "
            "of the others.", ["part"], registry=r)
        self.results_cache_entries = Gauge(
            "metricsgw_query_results_cache_entries", "Range queries the results cache holds answers of.", registry=r)
        self.query_log_dropped = Counter(
            "metricsgw_query_log_dropped_lines", QUERY_LOG_DROPPED_HELP, ["reason"], registry=r)
        self.queries_queued = Gauge(
            "metricsgw_queries_queued", "Queries waiting for a concurrency slot.", registry=r)
        self.peer_requests = Counter(
            "metricsgw_peer_requests", "Reads of a peer's recent samples (--cluster.peers) by peer and result: "
            "ok, down, refused, timeout, garbage.", ["peer", "result"], registry=r)
        self.peer_reads_skipped = Counter(
            "metricsgw_peer_reads_skipped", "Reads of an ingest shard's recent samples not made: its extent board said "
            "it held nothing in memory in the query's window.", ["peer"], registry=r)
        self.rules_reload_success = Gauge(
            "metricsgw_rules_last_reload_successful", "1 if the last rules reload succeeded.", registry=r)
        self.rules_loaded = Gauge(
            "metricsgw_rules_loaded", "Relabel rules in force.", registry=r)
