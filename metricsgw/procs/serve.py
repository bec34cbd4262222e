"""``metricsgw serve`` as a multi-process gateway: the front starts its children first, then its own part.

A restart waits for the children (each imports the gateway and opens its storage: ~4 s at 2.7M series on 2
cores), not for the front. So the front starts them before it imports its web part (front.py: aiohttp, the
status routes, ~0.6 s), which loads while they start. Before any child starts: the layout, and the WALs of
writers no longer in it flushed into the table (orphans.py), so that every query process reads them. A web
config the front then refuses stops the children it started (front.run).
"""

from __future__ import annotations

import asyncio

from ..config import Config, ConfigError
from ..storage.files.writer_lock import WriterIdInUse
from .front_telemetry import FrontTelemetry
from .layout import resolve
from .orphans import flush_orphans
from .supervisor import Supervisor


async def serve(cfg: Config, serve_args: list[str]) -> None:
    layout = resolve(cfg)
    tel = FrontTelemetry()
    stop = asyncio.Event()
    refused: list[str] = []

    def give_up(child: str) -> None:
        refused.append(child)
        stop.set()

    supervisor = Supervisor(layout, serve_args, tel, give_up)
    try:
        await asyncio.to_thread(flush_orphans, cfg, layout)
    except WriterIdInUse as err:
        raise ConfigError(str(err)) from None
    supervisor.start()
    await supervisor.spawned()
    from .front import run  # (here: the children import and open their storage meanwhile)

    await run(cfg, layout, supervisor, tel, stop)
    if refused:
        raise ConfigError(f"{', '.join(refused)} could not start with these settings (its error is logged above)")
