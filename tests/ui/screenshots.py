"""``python -m tests.ui.screenshots DIR``: a screenshot of each page, as docs/ui.md shows them, taken in headless
Chromium against a gateway in one process loaded as the tests load it (a refused query in its log)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tests.ui.browser import chromium
from tests.ui.gateway import CPU, loaded_gateway

SHOTS = {"query": f"/query?expr=rate({CPU}[5m])&tab=graph&range=10m&step=60", "cardinality": f"/cardinality?match={CPU}&focusLabel=node",
         "queries": "/queries?kind=refused", "status": "/status", "advisor": "/advisor"}
READY = {"query": "#graph-out canvas", "cardinality": "#focus-values", "queries": "#recent-table",
         "status": "#flags-table", "advisor": "#drops-table"}


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work, loaded_gateway(Path(work), "single") as gw, chromium() as browser:
        gw.get("/api/v1/query", {"query": f"{CPU}[30m]", "time": gw.end})  # refused: --query.max-samples
        page = browser.new_page(base_url=gw.url, viewport={"width": 1280, "height": 800})
        for name, path in SHOTS.items():
            page.goto(path)
            page.locator(READY[name]).first.wait_for()
            page.screenshot(path=str(out / f"{name}.png"), full_page=False)
            print(out / f"{name}.png")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/ui"))
