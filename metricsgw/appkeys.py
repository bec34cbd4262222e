"""Typed keys for the components an aiohttp app carries (created in app.build_app)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

CONFIG: web.AppKey[Any] = web.AppKey("config")
STORAGE: web.AppKey[Any] = web.AppKey("storage")
TELEMETRY: web.AppKey[Any] = web.AppKey("telemetry")
PIPELINE: web.AppKey[Any] = web.AppKey("pipeline")
RULES: web.AppKey[Any] = web.AppKey("rules")
RULER: web.AppKey[Any] = web.AppKey("ruler")  # ruler.client.RulerClient, or None without --rules.ruler-url
ENGINE: web.AppKey[Any] = web.AppKey("engine")
GUARD: web.AppKey[Any] = web.AppKey("guard")
MEMORY: web.AppKey[Any] = web.AppKey("memory")  # the query memory pool (limits/memory.py)
READ_GATE: web.AppKey[Any] = web.AppKey("read_gate")
BLOCKED: web.AppKey[Any] = web.AppKey("blocked")
QUERY_POOL: web.AppKey[Any] = web.AppKey("query_pool")
REPLAY_TASK: web.AppKey[Any] = web.AppKey("replay_task")
RESULTS_CACHE: web.AppKey[Any] = web.AppKey("results_cache")  # promql.results_cache.ResultsCache, or None: off
FLIGHTS: web.AppKey[Any] = web.AppKey("flights")  # api.flights.Flights: identical range queries share one evaluation
PEERS: web.AppKey[Any] = web.AppKey("peers")  # cluster.peers.PeerFanout, or None without --cluster.peers
QUERY_LOG: web.AppKey[Any] = web.AppKey("query_log")  # querylog.owner.QueryLog, or None in a query process
QUERY_RECORDS: web.AppKey[Any] = web.AppKey("query_records")  # where a finished query's QueryRecord goes
RUNNING: web.AppKey[Any] = web.AppKey("running")  # querylog.running.RunningQueries: the queries answered now
