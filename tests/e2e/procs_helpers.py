"""Helpers for tests of the multi-process gateway: waiting, and HTTP on a child's Unix socket."""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.parse


def wait_for(cond, what: str, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, f"not seen within {timeout_s:g}s: {what}"
        time.sleep(0.05)


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def unix_get(sock_path: str, path: str, params: dict | None = None, timeout: float = 60.0) -> tuple[int, bytes]:
    """GET ``path`` from the child listening on ``sock_path`` (what only the front can reach in production)."""
    conn = _UnixConnection(sock_path, timeout)
    try:
        conn.request("GET", f"{path}?{urllib.parse.urlencode(params or {})}")
        resp = conn.getresponse()
        return resp.status, resp.read()
    except OSError as err:  # not listening (yet)
        return 0, str(err).encode()
    finally:
        conn.close()


def unix_api(sock_path: str, path: str, params: dict | None = None, timeout: float = 60.0) -> tuple[int, dict]:
    status, body = unix_get(sock_path, path, params, timeout)
    return status, json.loads(body)


def unix_post(sock_path: str, path: str, body: bytes, headers: dict[str, str],
              timeout: float = 60.0) -> tuple[int, dict, bytes]:
    conn = _UnixConnection(sock_path, timeout)
    try:
        conn.request("POST", path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, dict(resp.headers), resp.read()
    finally:
        conn.close()
