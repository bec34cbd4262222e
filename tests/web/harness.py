"""The gateway served in-process the way cli.py serves it (AppRunner + TCPSite with its SSL context)."""

from __future__ import annotations

import asyncio
import base64
import ssl
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web

from metricsgw import appkeys
from metricsgw.app import build_app
from metricsgw.config import load
from metricsgw.remote import codec
from metricsgw.web import listen_site
from metricsgw.web.listener import TLSSite

WRITE_HEADERS = {"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy",
                 "X-Prometheus-Remote-Write-Version": "0.1.0"}


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


# Samples a minute old: inside the ingest time window (retention behind, creation grace ahead).
T0_MS = (int(time.time()) - 60) * 1000


def write_body(name: str = "up", value: float = 1.0, t_ms: int = T0_MS) -> bytes:
    return codec.encode_v1([([("__name__", name), ("job", "t")], [(t_ms, value)])])


def client_context(ca: str | None = None, cert: str | None = None, key: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca)
    if cert:
        ctx.load_cert_chain(cert, key)
    return ctx


@dataclass
class Served:
    app: web.Application
    url: str


@asynccontextmanager
async def serving(tmp_path: Path, web_config: str | None = None, settings: dict | None = None):
    """``settings`` by name, e.g. {"web.enable-lifecycle": "true"}."""
    overrides = {"storage.path": str(tmp_path / "data"), **(settings or {})}
    if web_config is not None:
        path = tmp_path / "web.yml"
        path.write_text(web_config)
        overrides["web.config.file"] = str(path)
    app = build_app(load(overrides))
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    site = listen_site(runner, "127.0.0.1", 0, 128)
    await site.start()
    port = runner.addresses[0][1]
    try:
        while not app[appkeys.STORAGE].ready:
            await asyncio.sleep(0.01)
        yield Served(app, f"{'https' if isinstance(site, TLSSite) else 'http'}://127.0.0.1:{port}")
    finally:
        await runner.cleanup()


async def fetch(session: aiohttp.ClientSession, method: str, url: str, **kw) -> tuple[int, str, dict]:
    async with session.request(method, url, **kw) as r:
        return r.status, await r.text(), dict(r.headers)
