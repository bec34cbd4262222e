"""A small synchronous client for the servers under test (Prometheus's HTTP API and remote write)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request


def api(base_url: str, path: str, params: dict | list | None = None, method: str = "GET",
        timeout: float = 30.0) -> tuple[int, dict]:
    query = urllib.parse.urlencode(params or {}, doseq=True)
    if method == "GET":
        req = urllib.request.Request(f"{base_url}{path}?{query}")
    else:
        req = urllib.request.Request(f"{base_url}{path}", data=query.encode(), method=method,
                                     headers={"Content-Type": "application/x-www-form-urlencoded"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        body = e.read()
        try:
            return e.code, json.loads(body)
        except ValueError:
            return e.code, {"raw": body.decode(errors="replace")}


def remote_write(base_url: str, body: bytes, version: int = 1, timeout: float = 30.0) -> tuple[int, str, dict]:
    ctype = "application/x-protobuf" if version == 1 else "application/x-protobuf;proto=io.prometheus.write.v2.Request"
    headers = {"Content-Type": ctype, "Content-Encoding": "snappy",
               "X-Prometheus-Remote-Write-Version": "0.1.0" if version == 1 else "2.0.0"}
    req = urllib.request.Request(f"{base_url}/api/v1/write", data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace"), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace"), dict(e.headers)
