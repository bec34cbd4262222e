"""Follow the web config file (and the certificate files it names) the way exporter-toolkit does.

exporter-toolkit reads the file for every request and every TLS handshake. We look at the files'
stat() per request and per new connection and parse again only when one changed. While the file
is broken every request is answered 500 (exporter-toolkit's "Unable to parse configuration"):
nobody gets in on a half-written password list. New connections keep the last good certificate.
"""

from __future__ import annotations

import logging
import os
import ssl

from .tls import build_ssl_context
from .webconfig import WebConfig, WebConfigError, load_web_config

log = logging.getLogger(__name__)


class WebConfigWatcher:
    def __init__(self, path: str) -> None:
        self.path = path
        self.config, self.ssl_context = self._load()  # a bad file at start stops the server (WebConfigError)
        self.tls_at_start = self.config.tls.enabled
        self.error: str | None = None
        self._signature = self._stat()

    def _load(self) -> tuple[WebConfig, ssl.SSLContext | None]:
        cfg = load_web_config(self.path)
        return cfg, build_ssl_context(cfg.tls, self.path) if cfg.tls.enabled else None

    def _stat(self) -> tuple:
        sig = []
        for path in (self.path, *self.config.tls.files()):
            try:
                st = os.stat(path)
                sig.append((path, st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                sig.append((path, None))
        return tuple(sig)

    def refresh(self) -> None:
        """Parse again if a file changed since the last look (cheap when nothing did)."""
        signature = self._stat()
        if signature == self._signature:
            return
        self._signature = signature
        try:
            cfg, ctx = self._load()
            if cfg.tls.enabled != self.tls_at_start:
                raise WebConfigError(f"web config file {self.path}: tls_server_config: turning TLS "
                                     f"{'on' if cfg.tls.enabled else 'off'} needs a restart")
        except WebConfigError as err:
            if self.error != str(err):
                log.error("web config not reloaded, answering 500 until it is fixed: %s", err)
            self.error = str(err)
            return
        self.config, self.ssl_context, self.error = cfg, ctx, None
        self._signature = self._stat()  # the new config may name other certificate files
        log.info("web config reloaded from %s", self.path)

    def ssl_context_now(self) -> ssl.SSLContext:
        """For each new TLS connection (see tls.ReloadingSSLContext)."""
        self.refresh()
        assert self.ssl_context is not None, "TLS context asked for without tls_server_config"
        return self.ssl_context
