"""Headless Chromium (Debian's ``chromium``, installed by ``make test`` as the other real servers are) driven by
Playwright: its Python package carries the driver, and is pointed at that browser (never ``playwright install``,
which would download one). Every page a test opens is watched: a console error, an uncaught exception or a
request to anywhere but the gateway fails the test at its end.
"""

from __future__ import annotations

import contextlib
import shutil
import urllib.parse
from dataclasses import dataclass, field

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@contextlib.contextmanager
def chromium():
    """The browser, closed at the end. Playwright's launch gives it a fresh profile (a temporary user data
    directory, removed at the close), and each test a fresh context (no cookies, cache or credentials shared)."""
    if not shutil.which(CHROMIUM):
        raise RuntimeError(f"{CHROMIUM} is missing: `make debs` installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Watch:
    """What went wrong in a browser context: console errors, page errors, requests leaving the gateway."""

    origin: str
    errors: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    allowed: list[str] = field(default_factory=list)  # console errors a test causes on purpose

    def allow(self, text: str) -> None:
        """A console error containing ``text`` is expected: Chromium logs every failed fetch ("Failed to load
        resource: ... 422"), a refusal the page shows as it should."""
        self.allowed.append(text)

    def attach(self, context) -> None:  # noqa: ANN001 (a playwright BrowserContext)
        context.on("request", self._request)
        context.on("page", self._page)

    def _page(self, page) -> None:  # noqa: ANN001
        page.on("console", lambda m: self.errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))

    def _request(self, request) -> None:  # noqa: ANN001
        url = urllib.parse.urlsplit(request.url)
        if url.scheme in ("data", "blob", "about"):
            return
        if f"{url.scheme}://{url.netloc}" != self.origin or url.hostname not in ("127.0.0.1", "localhost"):
            self.foreign.append(request.url)

    def check(self) -> None:
        errors = [e for e in self.errors if not any(a in e for a in self.allowed)]
        assert not errors, f"the page logged errors: {errors}"
        assert not self.foreign, f"requests left the gateway: {self.foreign}"
