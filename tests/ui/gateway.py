"""A gateway loaded for the pages' tests and screenshots, in the default layout behind basic auth (--web.config.file,
an administrator and a read-only user) or without it, or in one process."""

from __future__ import annotations

import base64
import contextlib
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from metricsgw.remote.codec import encode_v1
from testkit.procs import free_port, start_metricsgw
from tests.e2e.procs_helpers import wait_for
from tests.guard.helpers import QueryHold
from tests.web.certs import bcrypt_hash

ADMIN, READER = ("admin", "admin-pw"), ("reader", "reader-pw")
MAX_SAMPLES = 250
PODS, POINTS = 10, 60  # an hour of ui_cpu_seconds_total, a sample a minute: 300 in 30 minutes, over MAX_SAMPLES
CPU, UNREAD = "ui_cpu_seconds_total", "ui_never_read_total"  # no shipped dashboard or rule reads either
DROPPED = "ui_dropped_total"  # the relabel rule of the gateway drops it
# The default layout behind basic auth (the front proxies every page), and without (the front hands a browser's
# connection to a query process, which relays back what the front answers); one process.
LAYOUTS = {"default-auth": [], "default": [], "single": ["--server.single-process"]}


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@dataclass
class Gateway:
    url: str
    auth: tuple[str, str] | None
    hold: QueryHold
    single: bool
    dead_peer: str
    end: float  # the newest sample's time, Unix seconds

    def headers(self, who: tuple[str, str] | None = None) -> dict[str, str]:
        who = who or self.auth
        return {"Authorization": basic(*who)} if who and self.auth else {}

    def get(self, path: str, params=None, who=None, method: str = "GET",  # noqa: ANN001
            headers: dict[str, str] | None = None) -> tuple[int, dict]:
        query = urllib.parse.urlencode(params or {}, doseq=True)
        data = query.encode() if method == "POST" else None
        url = f"{self.url}{path}" + (f"?{query}" if query and method == "GET" else "")
        req = urllib.request.Request(url, data=data, method=method, headers={**self.headers(who), **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                body = r.read()
                return r.status, json.loads(body) if r.headers.get_content_type() == "application/json" else {
                    "raw": body.decode(errors="replace")}
        except urllib.error.HTTPError as e:
            body = e.read()
            try:
                return e.code, json.loads(body)
            except ValueError:
                return e.code, {"raw": body.decode(errors="replace")}

    def credentials(self, who: tuple[str, str] | None = None) -> dict | None:
        """What the browser answers the gateway's Basic challenge with, as a user's browser does once asked."""
        who = who or self.auth
        return {"username": who[0], "password": who[1], "send": "always"} if who and self.auth else None

    def ready(self) -> bool:
        try:
            return self.get("/-/ready")[0] == 200
        except OSError:  # not listening yet
            return False

    def data(self, path: str, params=None):  # noqa: ANN001
        status, body = self.get(path, params)
        assert status == 200, body
        return body["data"]


def _series(end_ms: int) -> list:
    cpu = [([("__name__", CPU), ("pod", f"p{i}"), ("node", f"n{i % 2}")],
            [(end_ms - k * 60_000, float(k + i)) for k in range(POINTS)]) for i in range(PODS)]
    unread = [([("__name__", UNREAD), ("i", str(i))], [(end_ms, 1.0)]) for i in range(3)]
    return cpu + unread


@contextlib.contextmanager
def loaded_gateway(work: Path, layout: str):
    """A gateway in ``layout`` (a key of LAYOUTS) under ``work``, loaded with ui_cpu_seconds_total and
    ui_never_read_total, stopped at the end."""
    hold = QueryHold(work / "hold")
    dead_peer = f"http://127.0.0.1:{free_port()}"  # nothing listens: answers carry the peer's warning
    (work / "relabel.yml").write_text(f"- source_labels: [__name__]\n  regex: {DROPPED}\n  action: drop\n")
    extra = [*LAYOUTS[layout], f"--query.log-file={work / 'queries.log'}", f"--query.max-samples={MAX_SAMPLES}",
             f"--rules.file={work / 'relabel.yml'}",
             "--query.slow-duration=1s", "--web.enable-lifecycle", f"--cluster.peers={dead_peer}",
             "--query.partial-response=true"]
    auth = None
    if layout.endswith("-auth"):
        auth = ADMIN
        (work / "web.yml").write_text("basic_auth_users:\n" + "".join(
            f"  {u}: {bcrypt_hash(p)}\n" for u, p in (ADMIN, READER)))
        extra += [f"--web.config.file={work / 'web.yml'}", f"--web.read-only-users={READER[0]}"]
    gw = start_metricsgw(work, extra=extra, env=hold.env)
    end_ms = (int(time.time()) - 5) * 1000
    g = Gateway(gw.base_url, auth, hold, layout == "single", dead_peer, end_ms / 1000)
    try:
        wait_for(lambda: gw.proc.poll() is not None or g.ready(), "the gateway ready")
        assert gw.proc.poll() is None, gw.log_tail()
        req = urllib.request.Request(f"{gw.base_url}/api/v1/write", data=encode_v1(_series(end_ms)), method="POST",
                                     headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy",
                                              "X-Prometheus-Remote-Write-Version": "0.1.0", **g.headers()})
        with urllib.request.urlopen(req, timeout=60) as r:
            assert r.status == 204
        yield g
    finally:
        hold.release()
        gw.stop()
