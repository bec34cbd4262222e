"""A gateway's query API as an evaluator of promqltest's ``check_eval``: its JSON read back into the engine's
Value types, its error answers raised as GatewayErrors with the answer's errorType and message."""

from __future__ import annotations

import numpy as np

from metricsgw.errors import GatewayError
from metricsgw.model import canonical
from metricsgw.promql.value import Matrix, Scalar, String, Vector
from tests.e2e.client import api


class Answered(GatewayError):
    """An error answer of the API, as the gateway typed it."""

    def __init__(self, status: int, body: dict) -> None:
        super().__init__(body.get("error") or str(body))
        self.status = status
        self.error_type = body.get("errorType", f"HTTP {status}")


class HttpEvaluator:
    """``instant`` / ``range`` over HTTP (POST, as Grafana asks). An answer with warnings is still returned;
    its warnings are kept in ``warned`` for the caller (a one-process gateway gives none)."""

    def __init__(self, next_url) -> None:
        self.next_url = next_url  # () -> the base URL to ask now
        self.warned: list[str] = []

    def instant(self, expr: str, t_s: float):
        return self._ask("/api/v1/query", {"query": expr, "time": f"{t_s:.3f}"})

    def range(self, expr: str, start_s: float, end_s: float, step_s: float):
        return self._ask("/api/v1/query_range",
                         {"query": expr, "start": f"{start_s:.3f}", "end": f"{end_s:.3f}", "step": f"{step_s:.3f}"})

    def _ask(self, path: str, params: dict):
        status, body = api(self.next_url(), path, params, method="POST")
        self.warned += body.get("warnings", [])
        if status != 200 or body.get("status") != "success":
            raise Answered(status, body)
        return value_of(body["data"])


def value_of(data: dict):
    """The Value a query API ``data`` object renders (promql/render.py, read back)."""
    kind, result = data["resultType"], data["result"]
    if kind == "scalar":
        return Scalar(float(result[0]), float(result[1]))
    if kind == "string":
        return String(float(result[0]), result[1])
    labels = [canonical(r["metric"].items()) for r in result]
    if kind == "vector":
        t = float(result[0]["value"][0]) if result else 0.0
        return Vector(t, labels, np.array([float(r["value"][1]) for r in result], np.float64))
    points = [r["values"] for r in result]
    offsets = np.cumsum([0] + [len(p) for p in points]).astype(np.int64)
    flat = [p for ps in points for p in ps]
    return Matrix(labels, np.array([round(float(t) * 1000) for t, _ in flat], np.int64),
                  np.array([float(v) for _, v in flat], np.float64), offsets)
