"""Send a catalogue call to a server as Grafana's backend would, and compare two servers' answers."""

from __future__ import annotations

import gzip
import json
import urllib.error
import urllib.request
from dataclasses import dataclass

from tests.e2e.compare import diff
from tests.grafana.catalogue import Call, transport


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    content_encoding: str
    body: dict | None  # None: not JSON
    raw: bytes


def send(base_url: str, call: Call, http_method: str, custom: tuple[tuple[str, str], ...] = (),
         timeout: float = 60.0) -> Answer:
    req = transport(call, http_method, custom)
    r = urllib.request.Request(base_url + req.url, data=req.body if req.method == "POST" else None,
                               method=req.method, headers=req.headers)
    try:
        with urllib.request.urlopen(r, timeout=timeout) as resp:
            status, headers, data = resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as err:
        status, headers, data = err.code, err.headers, err.read()
    encoding = headers.get("Content-Encoding", "")
    raw = gzip.decompress(data) if encoding == "gzip" else data
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    return Answer(status, headers.get("Content-Type", ""), encoding, body, raw)


def differences(call: Call, got: Answer, want: Answer) -> list[str]:
    """What Grafana would see differently in ``got`` (metricsgw) than in ``want`` (Prometheus)."""
    out = []
    for what in ("status", "content_type", "content_encoding"):
        if getattr(got, what) != getattr(want, what):
            out.append(f"{what}: {getattr(got, what)!r} != Prometheus's {getattr(want, what)!r}")
    if want.body is None or got.body is None:
        return out + ([] if got.raw == want.raw else [f"body {got.raw[:200]!r} != {want.raw[:200]!r}"])
    if set(got.body) != set(want.body):
        out.append(f"envelope keys {sorted(got.body)} != {sorted(want.body)}")
    for key in ("status", "errorType", "warnings"):
        if got.body.get(key) != want.body.get(key):
            out.append(f"{key}: {got.body.get(key)!r} != {want.body.get(key)!r}")
    if want.body.get("status") == "success" and "data" in got.body:
        out += [f"data: {d}" for d in _data_differences(call, got.body["data"], want.body["data"])]
    return out


def _data_differences(call: Call, got, want) -> list[str]:
    if call.result == "promql":
        if want["resultType"] in ("scalar", "string"):  # compare.diff reads values as floats
            return [] if got == want else [f"{got} != {want}"]
        return diff(got, want)
    if call.result == "unordered":  # /series: Prometheus does not promise an order, Grafana sorts itself
        got, want = _sorted(got), _sorted(want)
    if got == want:
        return []
    if isinstance(want, list) and isinstance(got, list):
        missing = [x for x in want if x not in got][:3]
        extra = [x for x in got if x not in want][:3]
        return [f"{len(got)} items != {len(want)}; missing {missing}, extra {extra}"
                + ("; same items, other order" if not missing and not extra else "")]
    return [f"{json.dumps(got)[:300]} != {json.dumps(want)[:300]}"]


def _sorted(items: list) -> list:
    return sorted(items, key=lambda x: json.dumps(x, sort_keys=True))
