"""The advisor's ``Source`` for ``metricsgw advise``: a gateway's Prometheus API over HTTP, with basic auth when given.
One ``/api/v1/status/tsdb`` call for the counts and one ``/api/v1/series`` call per listed metric, no more."""

from __future__ import annotations

import base64
import json
import urllib.parse
import urllib.request


class Gateway:
    def __init__(self, url: str, user: str | None = None, password: str | None = None, timeout: float = 60.0):
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.headers = {"Accept": "application/json"}
        if user is not None:
            token = base64.b64encode(f"{user}:{password or ''}".encode()).decode()
            self.headers["Authorization"] = f"Basic {token}"

    def _get(self, path: str, params: list[tuple[str, str]]) -> dict:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(urllib.request.Request(url, headers=self.headers), timeout=self.timeout) as resp:
            body = json.load(resp)
        if body.get("status") != "success":
            raise OSError(f"{path}: {body.get('errorType')}: {body.get('error')}")
        return body

    def series_counts(self, limit: int) -> dict[str, int]:
        data = self._get("/api/v1/status/tsdb", [("limit", str(limit))])["data"]
        return {e["name"]: int(e["value"]) for e in data.get("seriesCountByMetricName", [])}

    def list_series(self, metric: str, limit: int) -> list[dict[str, str]] | None:
        body = self._get("/api/v1/series", [("match[]", metric), ("limit", str(limit))])
        return None if body.get("warnings") else body["data"]
