"""build_app(cfg): the components, the routes, start-up (WAL replay) and clean-up."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from . import appkeys as K, malloc
from .api import advise, exemplars, metadata, pages, query, query_status, rules as rules_api, status
from .api.compression import compress_api_answers
from .api.flights import Flights
from .api.middleware import prometheus_errors
from .api.remote_read import handle_read, read_gate
from .api.remote_write import handle_write
from .cluster.peers import PeerFanout
from .config import SHARD_SOCKETS, Config, ConfigError
from .ingest.pipeline import IngestPipeline
from .ingest.time_window import SampleTimeWindow
from .limits.blocked import BlockedQueries
from .limits.guard import QueryGuard
from .limits.ingest import IngestLimits
from .limits.memory import MemoryShares, pool_for
from .limits.query_text import QueryTextLimits, ensure_recursion_headroom
from .promql.engine import Engine
from .promql.parallel import Parts
from .promql.results_cache import LateLog, ResultsCache
from .querylog.channel import RECORDS_SOCKET, RecordSender
from .querylog.owner import QueryLog
from .querylog.running import RunningQueries
from .ruler.client import RulerClient
from .rules.loader import RuleHolder
from .storage.catalog import stats as catalog_stats
from .storage.files.object_store import ObjectStore, S3Settings, StoreRefused, StoreUnavailable
from .storage.store import Storage
from .telemetry import Telemetry
from .web import install as install_access_control

log = logging.getLogger(__name__)


def storage_for(cfg: Config, memory: MemoryShares, telemetry: Telemetry | None = None, *,
                writer_id: str | None = None) -> Storage:
    """The storage ``cfg`` describes (as writer ``writer_id``, the configured one unless given)."""
    return Storage(
        cfg.storage_path, flush_interval_s=cfg.storage_flush_interval, flush_max_samples=cfg.storage_flush_max_samples,
        partition_ms=int(cfg.storage_partition_duration * 1000), retention_ms=int(cfg.storage_retention_time * 1000),
        wal_segment_size=cfg.storage_wal_segment_size, wal_fsync=cfg.storage_wal_fsync, duckdb_memory_limit=memory.duckdb,
        sample_cache_bytes=memory.cache, duckdb_threads=cfg.storage_duckdb_threads, telemetry=telemetry,
        writer_id=writer_id or cfg.storage_writer_id, vacuum_delay_s=cfg.storage_vacuum_delay,
        follow_others=cfg.storage_follow_others, follow_interval_s=cfg.storage_follow_interval,
        late_after_ms=int(cfg.query_cache_max_freshness * 1000), head_window_ms=int(cfg.storage_head_window * 1000),
        archive_bytes=memory.archive, table_store=table_store_for(cfg))


def table_store_for(cfg: Config) -> ObjectStore | None:
    """The object store --storage.table-url names, or None for a table under --storage.path."""
    if not cfg.storage_table_url:
        return None
    return ObjectStore(S3Settings(cfg.storage_table_url, cfg.storage_s3_endpoint, cfg.storage_s3_region,
                                  cfg.storage_s3_force_path_style, cfg.storage_s3_credentials_file,
                                  cfg.storage_s3_cache_size))


def check_table_store(cfg: Config) -> None:
    """Before any process starts: a store that would lose concurrent commits, or cannot be reached, stops the
    gateway with a plain message (each process's table proves it again as it opens)."""
    try:
        store = table_store_for(cfg)
        if store is not None:
            store.check_conditional_writes()
    except (StoreRefused, StoreUnavailable, ValueError) as err:  # ValueError: not an s3://bucket/prefix URL
        raise ConfigError(f"--storage.table-url: {err}") from None


def results_cache_for(cfg: Config, memory: MemoryShares, storage: Storage, fanout: PeerFanout | None,
                      tel: Telemetry) -> ResultsCache | None:
    """The range-query results cache, watching the late writes of whoever holds the samples queries read: this
    process's storage, or a query process's ingest shards (their extent boards). Off with --cluster.peers: a
    peer's late samples are not seen here."""
    if not cfg.query_cache_results or cfg.cluster_peers:
        return None
    readers = [storage.late_state] if fanout is None else [p.board.read_late for p in fanout.peers]

    def observe(served: int, evaluated: int) -> None:
        tel.results_cache_steps.labels("hit").inc(served)
        tel.results_cache_steps.labels("miss").inc(evaluated)

    cache = ResultsCache(memory.results, int(cfg.query_cache_max_freshness * 1000), LateLog(readers),
                         int(cfg.storage_retention_time * 1000), observe)
    tel.results_cache_bytes.set_function(lambda: cache.stats()[1])
    tel.results_cache_entries.set_function(lambda: cache.stats()[0])
    return cache


def _observe_memory(tel: Telemetry, storage: Storage, pipeline: IngestPipeline) -> None:
    """Every holder of series in memory, and the sample cache, show their entries and bytes in /metrics, read when
    scraped."""
    for part in ("malloc_in_use", "malloc_free", "malloc_mapped", "arrow_pool"):
        tel.memory.labels(part).set_function(lambda part=part: malloc.heap_bytes().get(part, 0))
    tel.memory.labels("duckdb").set_function(storage.duckdb_memory)
    tel.memory.labels("cardinality_ids").set_function(catalog_stats.ids_nbytes)
    tel.sample_cache_entries.set_function(lambda: storage.sample_cache_stats()[0])
    tel.sample_cache_bytes.set_function(lambda: storage.sample_cache_stats()[1])
    for holder, entries, size in (
            ("catalog", lambda: len(storage.catalog), lambda: storage.catalog.nbytes()),
            ("archive", lambda: storage.archive.stats()[0], lambda: storage.archive.stats()[1]),
            ("ingest_cache", lambda: pipeline.cache_size, pipeline.cache_bytes)):
        tel.series_memory_entries.labels(holder).set_function(entries)
        tel.series_memory_bytes.labels(holder).set_function(size)


def build_app(cfg: Config, telemetry: Telemetry | None = None) -> web.Application:
    tel = telemetry or Telemetry()
    app = web.Application(middlewares=[compress_api_answers, prometheus_errors],  # errors are compressed too
                          client_max_size=cfg.remote_write_max_body_size)
    install_access_control(app, cfg, tel.registry)  # TLS/auth/lifecycle before every route (metricsgw/web/)
    memory = MemoryShares.of(cfg.query_max_memory)
    storage = storage_for(cfg, memory, tel)
    rules = RuleHolder(cfg.rules_file, tel)
    app[K.CONFIG] = cfg
    app[K.TELEMETRY] = tel
    app[K.STORAGE] = storage
    app[K.RULES] = rules
    app[K.RULER] = RulerClient(cfg.rules_ruler_url, cfg.rules_ruler_timeout) if cfg.rules_ruler_url else None
    app[K.PIPELINE] = IngestPipeline(storage, tel, rules_holder=rules, limits=IngestLimits(cfg),
                                     time_window=SampleTimeWindow.from_config(cfg))
    app[K.ENGINE] = Engine(storage, lookback_s=cfg.query_lookback_delta, max_points=cfg.query_max_points_per_series,
                           subquery_step_s=cfg.query_subquery_default_step, promql_compat=cfg.query_promql_compat,
                           parts=Parts(cfg.query_max_workers_per_query or os.cpu_count() or 1,
                                       initializer=_idle_priority))
    _observe_memory(tel, storage, app[K.PIPELINE])
    ensure_recursion_headroom(QueryTextLimits.from_config(cfg))
    app[K.MEMORY] = pool_for(memory, cfg.query_max_concurrency)
    storage.archive.pool = app[K.MEMORY]  # the archive's index borrows from it past its share
    tel.query_memory.set_function(lambda: app[K.MEMORY].used)
    tel.query_memory_limit.set(app[K.MEMORY].size)
    app[K.GUARD] = QueryGuard(cfg.query_max_concurrency, cfg.query_max_queue, cfg.query_queue_timeout, tel,
                              pool=app[K.MEMORY])
    app[K.BLOCKED] = BlockedQueries(cfg.query_blocked)
    app[K.READ_GATE] = read_gate(cfg)
    shards = cfg.values.get(SHARD_SOCKETS, [])  # a query process's own ingest shards (procs/layout.py)
    app[K.PEERS] = (PeerFanout(cfg.cluster_peers, cfg.cluster_peer_timeout, tel, shards)
                    if cfg.cluster_peers or shards else None)
    app[K.RESULTS_CACHE] = results_cache_for(cfg, memory, storage, app[K.PEERS], tel)
    app[K.FLIGHTS] = Flights()
    install_query_log(app, cfg, tel)
    # Queries get their own threads: ingestion (event loop + WAL thread) never waits behind them,
    # and those threads run at a lower CPU priority, so when queries and writes compete for the
    # cores the scheduler serves the writes first.
    app[K.QUERY_POOL] = ThreadPoolExecutor(cfg.query_max_concurrency + 2, thread_name_prefix="query",
                                           initializer=_lower_priority)

    r = app.router
    r.add_post("/api/v1/write", handle_write)
    r.add_post("/api/v1/read", handle_read)
    for path, handler in (("/api/v1/query", query.instant_query), ("/api/v1/query_range", query.range_query),
                          ("/api/v1/series", metadata.series), ("/api/v1/labels", metadata.label_names),
                          ("/api/v1/format_query", query.format_query)):
        r.add_get(path, handler)
        r.add_post(path, handler)
    r.add_get("/api/v1/label/{name}/values", metadata.label_values)
    r.add_get("/api/v1/metadata", metadata.metadata)
    r.add_get("/api/v1/status/buildinfo", metadata.buildinfo)
    r.add_get("/api/v1/status/tsdb", metadata.tsdb_status)
    r.add_get("/api/v1/status/flags", status.flags_handler)
    r.add_get("/api/v1/status/runtimeinfo", status.runtimeinfo)
    r.add_get("/api/v1/status/config", status.config)
    r.add_get("/api/v1/status/layout", status.layout)  # the front answers for a whole gateway (procs/front_status.py)
    r.add_get("/api/v1/status/advise", advise.advise_handler)  # the front's too
    pages.add_routes(r)
    r.add_get("/api/v1/query_exemplars", exemplars.query_exemplars)
    r.add_post("/api/v1/query_exemplars", exemplars.query_exemplars)
    r.add_get("/api/v1/rules", rules_api.rules)
    r.add_get("/api/v1/alerts", rules_api.alerts)
    r.add_get("/-/healthy", healthy)
    r.add_get("/-/ready", ready)
    r.add_post("/-/reload", reload_rules)
    r.add_put("/-/reload", reload_rules)
    r.add_get("/metrics", own_metrics)
    r.add_get("/api/v1/status/running_queries", query_status.running_queries)
    r.add_post("/api/v1/admin/cancel_query", query_status.cancel_query)
    if app[K.QUERY_LOG] is not None:  # a query process's lists are the front's (querylog/owner.py)
        r.add_get("/api/v1/status/recent_queries", query_status.recent_queries)
        r.add_get("/api/v1/status/top_queries", query_status.top_queries)

    app.on_startup.append(_open_storage)
    app.on_shutdown.append(_stop_queries)  # before aiohttp waits for the handlers still running
    app.on_cleanup.append(_close_storage)
    return app


def install_query_log(app: web.Application, cfg: Config, tel: Telemetry) -> None:
    """The queries running here, and where a finished one's record goes: this process's own query log, or, in a
    query process of ``metricsgw serve``, the front, which owns the gateway's (querylog/channel.py)."""
    app[K.RUNNING] = RunningQueries()

    def dropped(reason: str, n: int) -> None:
        tel.query_log_dropped.labels(reason).inc(n)

    front = cfg.values.get(RECORDS_SOCKET)
    if front:
        sender = RecordSender(front, dropped)
        app[K.QUERY_LOG], app[K.QUERY_RECORDS] = None, sender.send
        closing = sender.close
    else:
        owner = QueryLog.from_config(cfg, dropped)
        app[K.QUERY_LOG], app[K.QUERY_RECORDS] = owner, owner.add

        async def closing() -> None:
            await asyncio.to_thread(owner.close)

    async def close(app: web.Application) -> None:
        await closing()

    app.on_cleanup.append(close)


QUERY_THREAD_NICENESS = 10


def _lower_priority() -> None:
    try:  # Linux: a thread is a schedulable task with its own nice value
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), QUERY_THREAD_NICENESS)
    except (OSError, AttributeError):
        pass


def _idle_priority() -> None:
    """A thread evaluating a query's batch beside the query's own thread runs only on a core nothing else wants
    (SCHED_IDLE): a spare core on a quiet machine, never a core ingest could use. With the helper at the query
    threads' niceness instead, writes under 3 heavy query clients had a p99 2.47x and 1.59x their idle p99
    (issue 10: at most 1.5x); one thread per query: 1.29x (bench.soak --mode writes-under-queries)."""
    try:
        os.sched_setscheduler(threading.get_native_id(), os.SCHED_IDLE, os.sched_param(0))
    except (OSError, AttributeError):
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except (OSError, AttributeError):
            pass


async def _open_storage(app: web.Application) -> None:
    # Replay in the background so /-/healthy answers at once and /-/ready turns 200 when done.
    storage = app[K.STORAGE]
    storage.claim_writer_id()  # a second live process with this writer id stops here, before serving

    async def replay() -> None:
        try:
            await asyncio.to_thread(storage.open)
        except Exception as err:  # /-/ready says why; writes answer 503 (not ready)
            log.exception("storage failed to open")
            storage.open_error = err
            return
        storage.start_background()

    app[K.REPLAY_TASK] = asyncio.get_running_loop().create_task(replay())
    if app[K.PEERS] is not None:
        app[K.PEERS].bind(asyncio.get_running_loop())


async def _stop_queries(app: web.Application) -> None:
    app[K.GUARD].close()


async def _close_storage(app: web.Application) -> None:
    """Shutdown in order: admit no more queries and cancel the running ones, wait for their threads
    (a cancelled query stops at its next check, DuckDB at once), then storage: the flusher stops,
    the last flush, the WAL, then DuckDB."""
    task = app[K.REPLAY_TASK]
    if not task.done():
        await task
    await _stop_queries(app)  # again: a runner that skips on_shutdown still gets the order
    await asyncio.to_thread(app[K.QUERY_POOL].shutdown, wait=True, cancel_futures=True)
    app[K.ENGINE].parts.shutdown()  # idle: every query, and so every part of one, has finished
    await asyncio.to_thread(app[K.STORAGE].close)
    if app[K.RULER] is not None:
        await app[K.RULER].close()
    if app[K.PEERS] is not None:
        await app[K.PEERS].close()


async def healthy(request: web.Request) -> web.Response:
    return web.Response(text="metricsgw is Healthy.\n")


async def ready(request: web.Request) -> web.Response:
    reason = request.app[K.STORAGE].not_ready_reason()
    if reason is None:
        return web.Response(text="metricsgw is Ready.\n")
    return web.Response(status=503, text=f"Service Unavailable: {reason}\n")


async def reload_rules(request: web.Request) -> web.Response:
    ok, message = reload(request.app)
    if ok:
        return web.Response(text=message + "\n")
    return web.Response(status=500, text=f"failed to reload rules, keeping the last good ones: {message}\n")


def reload(app: web.Application) -> tuple[bool, str]:
    """SIGHUP and /-/reload: the rules again, and the query log reopened, as Prometheus reopens its
    query_log_file at a reload (logrotate may have moved it)."""
    if app[K.QUERY_LOG] is not None:
        app[K.QUERY_LOG].reopen()
    return app[K.RULES].reload()


async def own_metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[K.TELEMETRY].registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
