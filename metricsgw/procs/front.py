"""The front: the `serve` process of the multi-process gateway (docs/cluster.md "The picture").

It owns the public listener (TLS, authentication, roles and the lifecycle gate of ``metricsgw/web/``, as a
one-process gateway has them), supervises the children, distributes remote writes over the ingest shards
(distributor.py), passes every other route to a query process (proxy.py; without a web config, a client's
connection itself at its first query: handoff.py), and answers for the whole gateway:
- ``/metrics``: its own figures and every child's, each sample labelled by process (exposition.py);
- ``/-/ready``: 200 only when every child is running and ready, else 503 naming the child and its reason;
- ``/-/reload`` (behind --web.enable-lifecycle) and SIGHUP: passed to every child; 200 when all reloaded;
- a head read of a gateway on another machine (``?scope=head``), and ``/api/v1/status/tsdb``: every shard's
  answer, joined or merged (cluster/gateway_head.py, which the front hands its shards' clients);
- ``/api/v1/status/layout`` and ``/api/v1/status/advise``: the whole gateway's (front_status.py).
Until a child has started (readiness.py: at first, and after the supervisor restarted it), the front holds a
request that needs it a few seconds, then refuses it with a 503 naming, in plain words, the part that is
starting or restarting (unavailable.py). A query needs a query process and every shard, a write its shards.
At start, WALs of this gateway's writers that no shard of this layout replays are flushed first (orphans.py).
Shutdown (SIGTERM/SIGINT): the listener closes, requests in flight finish, then the query processes and the
shards stop in order (each shard flushes its head), and the front exits.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import signal

import aiohttp
from aiohttp import web
from prometheus_client import (CONTENT_TYPE_LATEST, disable_created_metrics,
                               generate_latest)

from ..api import query_status
from ..api.middleware import prometheus_errors
from ..appkeys import QUERY_LOG
from ..cluster import extent_board, gateway_head
from ..config import Config
from ..querylog.channel import serve_records
from ..querylog.owner import QueryLog
from ..web import install as install_access_control
from ..web import listen_site
from . import exposition, front_status
from .clients import ChildClient
from .distributor import Distributor
from .front_telemetry import FrontTelemetry
from .layout import Layout, unlink_socket
from .handoff import FRONT_PATHS, MAX_BODY, MAX_WRITE_BODY, HandoffSender
from .proxy import QueryProxy
from .queries import FrontQueries
from .readiness import hold_within, one_started, wait_started
from .supervisor import Supervisor
from .unavailable import part, refusal, why

log = logging.getLogger(__name__)

disable_created_metrics()  # as telemetry.py does for the children: no *_created series beside every counter

CHILD_CHECK_TIMEOUT_S = 5.0  # /-/ready, /metrics and /-/reload of one child
SHUTDOWN_DRAIN_S = 60.0  # requests in flight when SIGTERM comes


class Front:
    def __init__(self, cfg: Config, layout: Layout, supervisor: Supervisor, telemetry: FrontTelemetry) -> None:
        self.cfg, self.layout, self.tel = cfg, layout, telemetry
        self.clients = {c.name: ChildClient(c, supervisor.children[c.name]) for c in layout.children}
        self.distributor = Distributor(cfg, [self.clients[c.name] for c in layout.shard_children], telemetry)
        self.proxy = QueryProxy(cfg, [self.clients[c.name] for c in layout.query_targets],
                                lambda name, code: telemetry.proxied.labels(name, code).inc())
        self.shards = [self.clients[c.name] for c in layout.shard_children]
        # The gateway's query log: the query processes send their records here (querylog/channel.py).
        self.query_log = QueryLog.from_config(cfg, lambda reason, n: telemetry.query_log_dropped.labels(reason).inc(n))
        self.queries = FrontQueries([self.clients[c.name] for c in layout.query_targets])
        self.gateway_head = gateway_head.GatewayHead(self.shards, cfg.cluster_peer_timeout,
                                                     hold_within(cfg.cluster_peer_timeout))
        # Without a web config (no TLS, no passwords) a query's connection is passed to a query process, and a
        # sender's to the ingest shard when there is one (several: the front splits every write).
        passed_to = [*layout.query_targets, *(layout.shard_children if layout.shards == 1 else [])]
        self.handoff = None if cfg.web_config_file else HandoffSender(
            {c.name: layout.handoff_socket(c) for c in passed_to}, lambda name: telemetry.handed_off.labels(name).inc())
        # the shard a sender's connection is passed to (None: every write goes through the front)
        self.write_target = self.shards[0] if self.handoff and layout.shards == 1 else None

    def build_app(self) -> web.Application:
        app = web.Application(middlewares=[prometheus_errors], client_max_size=self.cfg.remote_write_max_body_size)
        install_access_control(app, self.cfg, self.tel.registry)
        own = {("POST", "/api/v1/write"): self.write, ("GET", "/-/healthy"): self.healthy,
               ("GET", "/-/ready"): self.ready, ("POST", "/-/reload"): self.reload, ("PUT", "/-/reload"): self.reload,
               ("GET", "/metrics"): self.metrics, ("GET", "/api/v1/status/tsdb"): self.gateway_head.tsdb_status,
               ("GET", "/api/v1/status/running_queries"): self.queries.running_queries,
               ("POST", "/api/v1/admin/cancel_query"): self.queries.cancel_query,
               ("GET", "/api/v1/status/recent_queries"): query_status.recent_queries,
               ("GET", "/api/v1/status/top_queries"): query_status.top_queries,
               ("GET", "/api/v1/status/layout"): functools.partial(front_status.layout, self),
               ("GET", "/api/v1/status/advise"): functools.partial(front_status.advise, self)}
        app[QUERY_LOG] = self.query_log
        assert {path for _, path in own} == FRONT_PATHS  # what a query process relays back here (handoff.py)
        for (method, path), handler in own.items():
            app.router.add_route(method, path, handler)
        # GET /-/reload must resolve to the /-/reload resource (not the proxy below), so the lifecycle gate of
        # metricsgw/web answers it with Prometheus's words; if it ever reached this handler it would be a 405.
        app.router.add_route("GET", "/-/reload", self.method_not_allowed)
        allowed = {}
        for method, path in own:
            allowed.setdefault(path, set()).add(method)

        async def everything_else(request: web.Request) -> web.StreamResponse:
            if request.path in allowed:  # the front's own path, another method: 405 as a single process says
                raise web.HTTPMethodNotAllowed(request.method, allowed[request.path])
            if gateway_head.answers(request):  # a peer gateway's head read: the shards', not a query process's
                return await self.gateway_head.handle(request)
            target = await self.query_target()
            if self.handoff is not None:
                return await self._pass_or(request, target.child.name, MAX_BODY,
                                           functools.partial(self.proxy.handle, target=target))
            return await self.proxy.handle(request, target=target)

        app.router.add_route("*", "/{tail:.*}", everything_else)
        app.on_cleanup.append(self._close_clients)
        return app

    async def write(self, request: web.Request) -> web.StreamResponse:
        """Remote write: the sender's connection is passed to the one shard (handoff.py), else split or forwarded
        (the distributor waits for a shard that has not started)."""
        if self.write_target is not None and self.write_target.started:
            return await self._pass_or(request, self.write_target.child.name, MAX_WRITE_BODY, self.distributor.handle)
        return await self.distributor.handle(request)

    async def query_target(self) -> ChildClient:
        """The query process for a query: the least busy that has started, once every shard has too (a query reads
        their recent samples, which are whole only then). Waits for them (readiness.HOLD_S), else refuses."""
        shards_missing, target = await asyncio.gather(wait_started(self.shards), one_started(self.proxy.targets))
        missing = shards_missing + ([] if target else self.proxy.targets)
        if missing:
            raise refusal([why(c) for c in missing])
        return target

    async def _pass_or(self, request: web.Request, target: str, max_body: int, handle) -> web.StreamResponse:
        """Pass the request's connection to ``target`` (handoff.py) if it can be; else ``handle(request, body)``
        (``body``: read already, or None)."""
        if not self.handoff.passable(request, max_body):
            return await handle(request, None)
        body = await request.read() if request.body_exists else b""  # small: passable() says so
        if self.handoff.pass_connection(request, body, target):
            return await _served_elsewhere()
        return await handle(request, body)

    async def _close_clients(self, app: web.Application) -> None:
        if self.handoff is not None:
            self.handoff.close()
        await asyncio.gather(*(c.close() for c in self.clients.values()))

    async def ask(self, name: str, method: str, path: str) -> tuple[int, str]:
        """One child's answer to a small request; (0, why it has none, in plain words) when it cannot answer."""
        client = self.clients[name]
        if not client.proc.running:
            return 0, why(client)
        try:
            async with client.session.request(
                    method, path, timeout=aiohttp.ClientTimeout(total=CHILD_CHECK_TIMEOUT_S)) as resp:
                return resp.status, await resp.text(errors="replace")
        except (aiohttp.ClientError, OSError) as err:  # asyncio's TimeoutError is an OSError
            return 0, why(client, err)

    async def _ask_all(self, method: str, path: str) -> dict[str, tuple[int, str]]:
        names = list(self.clients)
        answers = await asyncio.gather(*(self.ask(n, method, path) for n in names))
        return dict(zip(names, answers))

    async def method_not_allowed(self, request: web.Request) -> web.Response:
        raise web.HTTPMethodNotAllowed(request.method, ["POST", "PUT"])

    async def healthy(self, request: web.Request) -> web.Response:
        return web.Response(text="metricsgw is Healthy.\n")

    async def ready(self, request: web.Request) -> web.Response:
        answers = await self._ask_all("GET", "/-/ready")
        bad = [text if status == 0 else why(self.clients[n], said=text.strip().removeprefix("Service Unavailable: "))
               for n, (status, text) in answers.items() if status != 200]
        # Ready only once the front routes to every child too: a child can answer 200 before the supervisor's probe
        # has seen it start, and until then a write is forwarded instead of handed to the shard.
        bad += [why(self.clients[n]) for n, (status, _) in answers.items()
                if status == 200 and not self.clients[n].started]
        if not bad:
            return web.Response(text="metricsgw is Ready.\n")
        return web.Response(status=503, text=f"Service Unavailable: {'; '.join(bad)}\n")

    async def reload(self, request: web.Request) -> web.Response:
        self.query_log.reopen()  # as Prometheus reopens its query_log_file at a reload
        answers = await self._ask_all("POST", "/-/reload")
        failed = [text if status == 0 else f"{part(self.clients[n].child)}: {text.strip()}"
                  for n, (status, text) in answers.items() if status != 200]
        if not failed:
            return web.Response(text=next(iter(answers.values()))[1])
        return web.Response(status=500, text="\n".join(failed) + "\n")

    async def metrics(self, request: web.Request) -> web.Response:
        answers = await self._ask_all("GET", "/metrics")
        parts = [("front", generate_latest(self.tel.registry).decode())]
        parts += [(n, text) for n, (status, text) in answers.items() if status == 200]
        return web.Response(text=exposition.merge(parts), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _served_elsewhere() -> web.StreamResponse:
    """The handler of a connection passed to a query process: its transport is closed here, so aiohttp cancels
    this handler (handler_cancellation) before it could write anything."""
    await asyncio.sleep(SHUTDOWN_DRAIN_S)
    raise RuntimeError("a connection passed to a query process was not closed here")


async def run(cfg: Config, layout: Layout, supervisor: Supervisor, tel: FrontTelemetry, stop: asyncio.Event) -> None:
    """The front's part of ``serve.serve``, its children started: listen until ``stop``, then stop in order."""
    try:
        front = Front(cfg, layout, supervisor, tel)
        app = front.build_app()  # checks the web config: one refused stops the children already started
    except BaseException:
        await supervisor.stop()
        raise
    unlink_socket(layout.records_socket)
    # Before the front routes anything to a query process, so before one can send a record of a query
    records = await serve_records(layout.records_socket, front.query_log.add)
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=SHUTDOWN_DRAIN_S)
    await runner.setup()
    host, _, port = cfg.web_listen_address.rpartition(":")
    site = listen_site(runner, host or "0.0.0.0", int(port), cfg.web_max_connections)
    await site.start()
    # Where a query process relays a request the front answers, got on a connection passed to it (handoff.py).
    unlink_socket(layout.front_socket)
    await web.UnixSite(runner, layout.front_socket).start()
    log.info("listening on %s; %d ingest shard(s), %d query process(es), sockets in %s", site.name,
             layout.shards, layout.queriers, layout.run_dir)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    loop.add_signal_handler(signal.SIGHUP, lambda: (supervisor.signal_all(signal.SIGHUP), front.query_log.reopen()))
    try:
        await stop.wait()
    finally:
        log.info("shutting down: draining requests, then the children")
        await runner.cleanup()  # stops accepting, waits for the requests in flight
        unlink_socket(layout.front_socket)  # a copy of a stopped gateway's directory must not meet a socket
        await supervisor.stop()
        for shard in layout.shard_children:  # the shards' extent boards: nobody maps them any more
            extent_board.remove(extent_board.path_for(shard.socket))
        records.close()  # the query processes have stopped
        unlink_socket(layout.records_socket)
        await asyncio.to_thread(front.query_log.close)
        log.info("stopped")
