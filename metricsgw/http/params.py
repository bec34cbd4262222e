"""Request parameters the way Prometheus reads them: URL query and form body together.

Grafana POSTs form bodies and may repeat custom parameters in the URL; both are read, repeated
keys are kept (``match[]``), and the first value wins for single-valued parameters.

Both are decoded from their raw bytes as strict UTF-8: aiohttp would turn an invalid byte into
U+FFFD, and ``up{job="\xff"}`` would then run as a valid query for a label value nobody wrote.
"""

from __future__ import annotations

import math
import time
import urllib.parse
from datetime import datetime, timezone

from aiohttp import web
from multidict import MultiDict

from ..config import parse_duration
from ..errors import BadData

# Prometheus's own bounds (web/api/v1/api.go minTime/maxTime): int64 milliseconds, with room left
# for the lookback and ranges subtracted from them.
MIN_TIME_S = -9223372036854775 + 62135596801
MAX_TIME_S = 9223372036854775 - 62135596801


async def read_params(request: web.Request) -> MultiDict:
    params: MultiDict = MultiDict(decode_form(request.rel_url.raw_query_string))
    if request.method == "POST" and request.content_type == "application/x-www-form-urlencoded":
        params.extend(decode_form((await request.read()).decode("utf-8", "surrogateescape")))
    return params


def decode_form(raw: str) -> list[tuple[str, str]]:
    """``a=1&b=%C3%A9`` -> pairs, refusing (400) percent-escapes or bytes that are not UTF-8."""
    pairs = []
    for part in raw.split("&"):
        if not part:
            continue
        key, _, value = part.partition("=")
        key = _strict(key, None)
        pairs.append((key, _strict(value, key)))
    return pairs


def _strict(text: str, key: str | None) -> str:
    data = urllib.parse.unquote_to_bytes(text.replace("+", " ").encode("utf-8", "surrogateescape"))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        what = f'parameter "{key}"' if key is not None else "parameter name"
        raise BadData(f"invalid {what}: invalid UTF-8 in {data!r}") from None


def parse_time(value: str | None, name: str, default: float | None = None) -> float:
    """Unix seconds (float) or RFC3339 -> unix seconds.

    Prometheus 2.42 turns a time outside int64 milliseconds (``time=1e20``) into a garbage
    instant and answers 200; here it is a 400 worded like its duration overflow error."""
    if value is None or value == "":
        if default is None:
            raise BadData(f'invalid parameter "{name}": missing')
        return default
    try:
        t = float(value)
        if math.isfinite(t):
            if not MIN_TIME_S <= t <= MAX_TIME_S:
                raise BadData(f'invalid parameter "{name}": Invalid time value for \'{name}\': cannot parse '
                              f'"{value}" to a valid timestamp. It overflows int64')
            return round(t, 3)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        if dt.tzinfo is None:
            raise ValueError("no timezone")
        return round(dt.timestamp(), 3)
    except ValueError:
        raise BadData(f'invalid parameter "{name}": Invalid time value for \'{name}\': '
                      f'cannot parse "{value}" to a valid timestamp') from None


def parse_step(value: str | None, name: str = "step") -> float:
    """Seconds (float) or a Prometheus duration; like Prometheus, over int64 nanoseconds is a 400."""
    if value is None or value == "":
        raise BadData(f'invalid parameter "{name}": cannot parse "" to a valid duration')
    try:
        d = float(value)
        if not math.isfinite(d):
            raise ValueError(value)
    except ValueError:
        try:
            d = parse_duration(value)
        except ValueError:
            raise BadData(f'invalid parameter "{name}": cannot parse "{value}" to a valid duration') from None
    if abs(d) * 1e9 >= 2.0**63:
        raise BadData(f'invalid parameter "{name}": cannot parse "{value}" to a valid duration. It overflows int64')
    return d


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


def parse_partial_response(value: str | None, default: bool) -> bool:
    """Thanos' ``partial_response``: whether an answer may leave out a peer that cannot be read (with a warning)."""
    return parse_bool(value, "partial_response", default)


def parse_bool(value: str | None, name: str, default: bool = False) -> bool:
    """A true/false parameter (1/0, t/f, true/false), e.g. VictoriaMetrics' ``nocache``."""
    if value is None or value == "":
        return default
    if value.lower() in ("1", "t", "true"):
        return True
    if value.lower() in ("0", "f", "false"):
        return False
    raise BadData(f'invalid parameter "{name}": cannot parse "{value}" (use true or false)')


def now_s() -> float:
    return round(time.time(), 3)


def parse_tsdb_top(params) -> tuple[int, str | None]:
    """/api/v1/status/tsdb's list length (Prometheus's ``limit``, or VictoriaMetrics' ``topN``; 10 when absent) and
    VictoriaMetrics' ``focusLabel``."""
    text = params.get("limit") or params.get("topN")
    try:
        n = parse_limit(text)
    except BadData:
        raise BadData(f'invalid parameter "limit"/"topN": cannot parse {text!r} as a number of entries') from None
    focus = params.get("focusLabel") or None
    return n or 10, focus


def parse_tsdb_window(params) -> tuple[int | None, int | None]:
    """The window /api/v1/status/tsdb counts series over, in ms: ``start`` and ``end``, or VictoriaMetrics' ``date``
    (YYYY-MM-DD, that UTC day); (None, None) when none is given: the head's series."""
    date = params.get("date")
    if date:
        try:
            day = datetime.strptime(date, "%Y-%m-%d").replace(tzinfo=timezone.utc)
        except ValueError:
            raise BadData(f'invalid parameter "date": {date!r} is not a day written YYYY-MM-DD') from None
        start = int(day.timestamp() * 1000)
        return start, start + 86_400_000 - 1
    if params.get("start") is None and params.get("end") is None:
        return None, None
    end = parse_time(params.get("end"), "end", default=now_s())
    start = parse_time(params.get("start"), "start", default=end - 86_400)
    if end < start:
        raise BadData('invalid parameter "end": end timestamp must not be before start time')
    return int(start * 1000), int(end * 1000)
