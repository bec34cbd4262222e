"""The pages' fixtures: a loaded gateway in each layout (gateway.py), the browser, a watched page per test."""

from __future__ import annotations

import pytest

from tests.ui.browser import Watch, chromium
from tests.ui.gateway import LAYOUTS, loaded_gateway


@pytest.fixture(scope="module", params=list(LAYOUTS))
def gateway(request, tmp_path_factory):
    with loaded_gateway(tmp_path_factory.mktemp(f"ui-{request.param}"), request.param) as g:
        yield g


@pytest.fixture(scope="module")
def browser():
    """Closed with its module: a live sync Playwright marks an asyncio loop running in the main thread, and
    every later test that calls asyncio.run() would fail."""
    with chromium() as b:
        yield b


@pytest.fixture
def watch(gateway):
    return Watch(gateway.url)


@pytest.fixture
def page(browser, gateway, watch):
    """A fresh page signed in as the administrator (where there is auth), watched for errors and foreign requests."""
    context = browser.new_context(base_url=gateway.url, http_credentials=gateway.credentials())
    watch.attach(context)
    context.set_default_timeout(30_000)  # a liveness bound: every expectation waits for the page, at any speed
    p = context.new_page()
    yield p
    context.close()
    watch.check()
