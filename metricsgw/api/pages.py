"""The web pages (issue 32): Query (``/query``, and ``/graph`` as Prometheus names it; ``/`` leads there),
Cardinality, Queries, Status (also at Prometheus's ``/flags`` and ``/config``) and Advisor.

Each page is a static HTML file of ``metricsgw/ui/`` with small JavaScript modules that read the JSON API, so a page
shows exactly what the API answers; uPlot, the graph's library, is vendored under ``ui/static/vendor/``. Nothing is
loaded from elsewhere, and the Content-Security-Policy header says so to the browser. The pages are routes like any
other: the same authentication and roles apply (metricsgw/web/), and in the default layout a query process serves
them as it serves every route the front does not answer itself.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

UI = Path(__file__).resolve().parents[1] / "ui"
PAGES = {"/query": "query.html", "/graph": "query.html", "/cardinality": "cardinality.html",
         "/tsdb-status": "cardinality.html", "/queries": "queries.html", "/status": "status.html",
         "/flags": "status.html", "/config": "status.html", "/advisor": "advisor.html"}
# Only this origin: scripts, styles (uPlot sets some inline), fetches; no frames, no other site.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "connect-src 'self'; frame-ancestors 'none'; base-uri 'self'; form-action 'self'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"}


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/", home)
    for path, name in PAGES.items():
        router.add_get(path, _page(name))
    router.add_static("/static/", UI / "static", append_version=False)


async def home(request: web.Request) -> web.Response:
    raise web.HTTPFound("query")  # relative: a gateway behind a reverse proxy's path prefix keeps it


def _page(name: str):
    path = UI / name

    async def page(request: web.Request) -> web.StreamResponse:
        return web.FileResponse(path, headers=HEADERS)

    page.__name__ = f"page_{path.stem}"
    return page
