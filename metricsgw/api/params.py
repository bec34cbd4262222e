"""Request parameters the way Prometheus reads them: URL query and form body together.

Grafana POSTs form bodies and may repeat custom parameters in the URL; both are read, repeated
keys are kept (``match[]``), and the first value wins for single-valued parameters.
"""

from __future__ import annotations

import math
import time
from datetime import datetime

from aiohttp import web
from multidict import MultiDict

from ..config import parse_duration
from ..errors import BadData

async def read_params(request: web.Request) -> MultiDict:
    params: MultiDict = MultiDict(request.query)
    if request.method == "POST" and request.content_type == "application/x-www-form-urlencoded":
        form = await request.post()
        for k, v in form.items():
            params.add(k, v)
    return params


def parse_time(value: str | None, name: str, default: float | None = None) -> float:
    """Unix seconds (float) or RFC3339 -> unix seconds."""
    if value is None or value == "":
        if default is None:
            raise BadData(f'invalid parameter "{name}": missing')
        return default
    try:
        t = float(value)
        if math.isfinite(t):
            return round(t, 3)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        if dt.tzinfo is None:
            raise ValueError("no timezone")
        return round(dt.timestamp(), 3)
    except ValueError:
        raise BadData(f'invalid parameter "{name}": cannot parse "{value}" to a valid timestamp') from None


def parse_step(value: str | None, name: str = "step") -> float:
    if value is None or value == "":
        raise BadData(f'invalid parameter "{name}": cannot parse "" to a valid duration')
    try:
        d = float(value)
        if math.isfinite(d):
            return d
    except ValueError:
        pass
    try:
        return parse_duration(value)
    except ValueError:
        raise BadData(f'invalid parameter "{name}": cannot parse "{value}" to a valid duration') from None


def parse_timeout(value: str | None) -> float | None:
    if value is None or value == "":
        return None
    return parse_step(value, "timeout")


def parse_limit(value: str | None) -> int | None:
    """Prometheus's ``limit``: 0 or absent means none."""
    if value is None or value == "":
        return None
    try:
        n = int(value)
    except ValueError:
        raise BadData(f'invalid parameter "limit": cannot parse "{value}" to a valid limit') from None
    if n < 0:
        raise BadData('invalid parameter "limit": limit must be non-negative')
    return n or None


def now_s() -> float:
    return round(time.time(), 3)
