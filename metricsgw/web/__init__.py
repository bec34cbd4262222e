"""Who may write, read and administer: Prometheus's --web.config.file (TLS, basic auth), our
writer/reader separation, and --web.enable-lifecycle. ``install`` puts it in front of every route."""

from __future__ import annotations

import ssl

from aiohttp import web

from ..config import Config, ConfigError
from .auth import PasswordChecker
from .listener import TLSSite
from .middleware import AuthMetrics, Roles, configured_headers, security_middleware
from .tls import ReloadingSSLContext
from .watch import WebConfigWatcher

WEB_CONFIG: web.AppKey[WebConfigWatcher | None] = web.AppKey("web_config")
PASSWORDS: web.AppKey[PasswordChecker] = web.AppKey("passwords")


def install(app: web.Application, cfg: Config, registry) -> None:  # noqa: ANN001 (prometheus registry)
    """Validate the web config (ConfigError names the key) and guard every route of ``app``."""
    watcher = WebConfigWatcher(cfg.web_config_file) if cfg.web_config_file else None
    roles = Roles(frozenset(cfg.web_write_only_users), frozenset(cfg.web_read_only_users))
    both = roles.write_only & roles.read_only
    if both:
        raise ConfigError(f"--web.write-only-users and --web.read-only-users both name {sorted(both)}")
    if (roles.write_only or roles.read_only) and (watcher is None or not watcher.config.users):
        raise ConfigError("--web.write-only-users/--web.read-only-users need basic_auth_users in --web.config.file")
    checker = PasswordChecker(cfg.web_auth_max_concurrent_checks)
    app[WEB_CONFIG] = watcher
    app[PASSWORDS] = checker
    app.middlewares.append(security_middleware(watcher, checker, roles, cfg.web_enable_lifecycle,
                                               AuthMetrics(registry)))
    if watcher is not None:
        app.on_response_prepare.append(configured_headers(watcher))

    async def close(app: web.Application) -> None:
        checker.close()

    app.on_cleanup.append(close)


def server_ssl_context(app: web.Application) -> ssl.SSLContext | None:
    """What the listener needs: None for plain HTTP, else a context that follows the files."""
    watcher = app.get(WEB_CONFIG)
    if watcher is None or not watcher.tls_at_start:
        return None
    return ReloadingSSLContext(watcher.ssl_context_now)


def listen_site(runner: web.AppRunner, host: str, port: int, backlog: int) -> web.TCPSite:
    """The listener for ``runner``'s app: plain, or TLS per the web config (see listener.py)."""
    context = server_ssl_context(runner.app)
    if context is None:
        return web.TCPSite(runner, host, port, backlog=backlog)
    return TLSSite(runner, host, port, backlog=backlog, ssl_context=context)
