"""The real clients against a secured metricsgw (TLS + basic auth, writers and readers apart).

Prometheus 2.42 self-scrapes and remote-writes with basic_auth + tls_config.ca_file while a
brute force of the login runs; vmalert queries with basic auth and a CA file and writes its
recording back the same way. Certificates are made here with openssl; everything is 127.0.0.1.
"""

from __future__ import annotations

import base64
import re
import signal
import json
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from testkit.procs import PROMETHEUS, Server, _spawn, free_port, start_metricsgw
from tests.web.certs import bcrypt_hash, make_certs

VMALERT = "/usr/bin/vmalert"
USERS = {"prometheus": "sender-pw", "vmalert": "vmalert-pw", "grafana": "grafana-pw"}
BRUTE_FORCE_LOGINS = 30
WAIT_S = 90  # liveness bound of each wait below; nothing is asserted about how long anything takes


class Client:
    def __init__(self, base_url: str, ca: str, cert: tuple[str, str] | None = None) -> None:
        self.base_url, self.tls = base_url, ssl.create_default_context(cafile=ca)
        if cert:
            self.tls.load_cert_chain(*cert)

    def get(self, path: str, user: str | None = None, password: str | None = None) -> tuple[int, bytes]:
        headers = {}
        if user is not None:
            headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        req = urllib.request.Request(self.base_url + path, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=60, context=self.tls) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def query(self, expr: str, user: str | None = "grafana") -> list:
        password = USERS[user] if user else None
        status, body = self.get("/api/v1/query?" + urllib.parse.urlencode({"query": expr}), user, password)
        assert status == 200, body
        return json.loads(body)["data"]["result"]


def wait_for(what: str, probe, server: Server):
    for _ in range(WAIT_S * 4):
        result = probe()
        if result:
            return result
        if server.proc.poll() is not None:
            raise RuntimeError(f"{server.name} exited: {server.log_tail()}")
        time.sleep(0.25)
    raise AssertionError(f"gave up waiting for {what}; {server.name} log: {server.log_tail()}")


def metric_value(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + " ") or line.startswith(name + "{"))


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    work = tmp_path_factory.mktemp("secured")
    certs = make_certs(work / "certs")
    web_config = work / "web.yml"
    web_config.write_text(
        f"tls_server_config:\n  cert_file: {certs.path('server.crt')}\n  key_file: {certs.path('server.key')}\n"
        "basic_auth_users:\n" + "".join(f"  {u}: {bcrypt_hash(p, cost=10)}\n" for u, p in USERS.items()))
    gw = start_metricsgw(work / "gw", extra=[f"--web.config.file={web_config}", "--web.write-only-users=prometheus",
                                             "--web.read-only-users=grafana"])
    client = Client(gw.base_url.replace("http://", "https://"), certs.ca)
    try:
        wait_for("metricsgw ready", lambda: _answers(client), gw)
        yield work, certs, gw, client
    finally:
        gw.stop()


def _answers(client: Client) -> bool:
    try:
        return client.get("/-/ready", "grafana", USERS["grafana"])[0] == 200  # mutual TLS only: ignored
    except OSError:
        return False


SENDER_AUTH = f"""    basic_auth:
      username: prometheus
      password: {USERS['prometheus']}
"""


def start_prometheus(work: Path, certs, write_url: str, auth: str = SENDER_AUTH, client_cert: bool = False) -> Server:
    port = free_port()
    cert = f"      cert_file: {certs.path('client.crt')}\n      key_file: {certs.path('client.key')}\n" if client_cert else ""
    work.mkdir(parents=True, exist_ok=True)
    config = work / "prometheus.yml"
    config.write_text(f"""
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: prometheus
    static_configs:
      - targets: ["127.0.0.1:{port}"]
remote_write:
  - url: {write_url}
{auth}    tls_config:
      ca_file: {certs.ca}
{cert}    queue_config:
      batch_send_deadline: 500ms
      min_backoff: 50ms
      max_backoff: 1s
""")
    argv = [PROMETHEUS, f"--storage.tsdb.path={work / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
            f"--config.file={config}", "--log.level=warn"]
    return _spawn("prometheus", argv, work / "data", port)


def brute_force(client: Client, results: list) -> None:
    for i in range(BRUTE_FORCE_LOGINS):
        user = "prometheus" if i % 2 else f"admin{i}"
        results.append(client.get("/api/v1/query?query=up", user, f"guess-{i}")[0])


def test_prometheus_remote_writes_over_tls_with_basic_auth_through_a_brute_force(secured):
    work, certs, gw, client = secured
    prom = start_prometheus(work / "prom", certs, client.base_url + "/api/v1/write")
    try:
        prom.wait_ready()
        first = wait_for("Prometheus's samples in metricsgw", lambda: client.query('up{job="prometheus"}'), gw)
        assert first[0]["value"][1] == "1"

        attempts: list[int] = []
        attackers = [threading.Thread(target=brute_force, args=(client, attempts)) for _ in range(3)]
        for t in attackers:
            t.start()
        for t in attackers:
            t.join(WAIT_S * 2)
        assert attempts == [401] * (3 * BRUTE_FORCE_LOGINS)

        # Ingest went on: samples scraped after the attack ended arrive too.
        after = time.time()
        wait_for("samples scraped after the brute force", lambda: client.query(
            f'timestamp(up{{job="prometheus"}}) > {after}'), gw)
        text = _prom_metrics(prom)
        assert metric_value(text, "prometheus_remote_storage_samples_failed_total") == 0
        assert metric_value(text, "prometheus_remote_storage_samples_total") > 0
        # The sender's credentials write but cannot read (our writer/reader separation).
        assert client.get("/api/v1/query?query=up", "prometheus", USERS["prometheus"])[0] == 403
        status, body = client.get("/metrics", "vmalert", USERS["vmalert"])
        assert re.search(r'^metricsgw_http_auth_failures_total\{(process="front",)?reason="wrong_credentials"\}', body.decode(),
                         re.M), body
    finally:
        prom.stop()


def _prom_metrics(prom: Server) -> str:
    with urllib.request.urlopen(prom.base_url + "/metrics", timeout=30) as r:
        return r.read().decode()


def test_vmalert_queries_and_writes_back_with_basic_auth_and_a_ca_file(secured):
    work, certs, gw, client = secured
    rules = work / "vmalert-rules.yml"
    rules.write_text("groups:\n  - name: secured\n    interval: 1s\n    rules:\n"
                     "      - record: secured:vector\n        expr: vector(42)\n")
    port = free_port()
    auth = [f"-{side}.basicAuth.username=vmalert" for side in ("datasource", "remoteWrite")]
    auth += [f"-{side}.basicAuth.password={USERS['vmalert']}" for side in ("datasource", "remoteWrite")]
    auth += [f"-{side}.tlsCAFile={certs.ca}" for side in ("datasource", "remoteWrite")]
    argv = [VMALERT, f"-httpListenAddr=127.0.0.1:{port}", f"-datasource.url={client.base_url}",
            f"-remoteWrite.url={client.base_url}", f"-rule={rules}", "-evaluationInterval=1s",
            "-remoteWrite.flushInterval=500ms", "-loggerLevel=WARN", *auth]
    vmalert = _spawn("vmalert", argv, work / "vmalert" / "data", port)
    try:
        result = wait_for("vmalert's recording in metricsgw", lambda: client.query("secured:vector"), vmalert)
        assert result[0]["value"][1] == "42"
        # vmalert's own view: its rule evaluated against metricsgw without errors.
        with urllib.request.urlopen(vmalert.base_url + "/api/v1/rules", timeout=30) as r:
            rule = json.loads(r.read())["data"]["groups"][0]["rules"][0]
        assert rule.get("lastError", "") == "" and rule["health"] == "ok"
    finally:
        vmalert.stop()


def test_plain_http_and_wrong_ca_are_refused(secured):
    _, certs, gw, client = secured
    with pytest.raises(urllib.error.HTTPError) as refused:  # the TLS port does not speak plain HTTP
        urllib.request.urlopen(gw.base_url + "/-/healthy", timeout=30)
    assert refused.value.code == 400 and refused.value.read() == b"Client sent an HTTP request to an HTTPS server.\n"
    stranger = Client(client.base_url, certs.path("other-ca.crt"))
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        stranger.get("/-/healthy")
    assert client.get("/-/healthy")[0] == 401
    assert client.get("/-/healthy", "grafana", "nope")[0] == 401


def _call(method: str, url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_lifecycle_answers_as_prometheus_does_and_sighup_still_reloads(tmp_path):
    from testkit.procs import start_prometheus

    rules = tmp_path / "rules.yml"
    rules.write_text("- source_labels: [__name__]\n  regex: drop_me\n  action: drop\n")
    prom = start_prometheus(tmp_path / "prom")
    gw = start_metricsgw(tmp_path / "gw", extra=[f"--rules.file={rules}"])
    try:
        prom.wait_ready()
        gw.wait_ready()
        for method in ("POST", "PUT", "GET"):
            theirs, ours = _call(method, prom.base_url + "/-/reload"), _call(method, gw.base_url + "/-/reload")
            assert ours == theirs, method
        assert _call("POST", gw.base_url + "/-/reload")[0] == 403

        rules.write_text(rules.read_text() + "- source_labels: [__name__]\n  regex: drop_too\n  action: drop\n")
        gw.proc.send_signal(signal.SIGHUP)
        wait_for("rules reloaded by SIGHUP",
                 lambda: re.search(r"^metricsgw_rules_loaded(\{[^}]*\})? 2\.0$", _call("GET", gw.base_url + "/metrics")[1],
                                   re.M) is not None, gw)
    finally:
        gw.stop()
        prom.stop()


def _raw(port: int, request: bytes) -> bytes:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_answers_match_prometheus_with_the_same_web_config(secured):
    """Prometheus 2.42 started with our web.yml is the oracle for every refusal."""
    work, certs, gw, client = secured
    port = free_port()
    config = work / "oracle.yml"
    config.write_text("global: {}\n")
    argv = [PROMETHEUS, f"--storage.tsdb.path={work / 'oracle-data'}", f"--web.listen-address=127.0.0.1:{port}",
            f"--config.file={config}", f"--web.config.file={work / 'web.yml'}", "--log.level=warn"]
    prom = _spawn("prometheus-oracle", argv, work / "oracle-data", port)
    oracle = Client(f"https://127.0.0.1:{port}", certs.ca)
    try:
        wait_for("Prometheus with the web config", lambda: _answers(oracle), prom)
        cases = [("/api/v1/query?query=up", None, None), ("/metrics", "grafana", "wrong"),
                 ("/api/v1/labels", "nobody", "x"), ("/-/healthy", "grafana", "")]
        for path, user, password in cases:
            assert client.get(path, user, password) == oracle.get(path, user, password), path
        for name, url in (("metricsgw", client.base_url), ("prometheus", oracle.base_url)):
            for method in ("POST", "PUT", "GET"):
                req = urllib.request.Request(url + "/-/reload", method=method, headers={
                    "Authorization": "Basic " + base64.b64encode(f"vmalert:{USERS['vmalert']}".encode()).decode()})
                try:
                    with urllib.request.urlopen(req, timeout=30, context=client.tls) as r:
                        answer = (r.status, r.read())
                except urllib.error.HTTPError as e:
                    answer = (e.code, e.read())
                assert answer == ((405, b"Only POST or PUT requests allowed") if method == "GET"
                                  else (403, b"Lifecycle API is not enabled.")), (name, method)
        gw_port = int(client.base_url.rsplit(":", 1)[1])
        for request in (b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n", b"POST /api/v1/write HTTP/1.0\r\n\r\n"):
            assert _raw(gw_port, request) == _raw(port, request), request
    finally:
        prom.stop()


def test_prometheus_remote_writes_over_mutual_tls(tmp_path):
    certs = make_certs(tmp_path / "certs")
    web_config = tmp_path / "web.yml"
    web_config.write_text(
        f"tls_server_config:\n  cert_file: {certs.path('server.crt')}\n  key_file: {certs.path('server.key')}\n"
        f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {certs.ca}\n")
    gw = start_metricsgw(tmp_path / "gw", extra=[f"--web.config.file={web_config}"])
    base = gw.base_url.replace("http://", "https://")
    client = Client(base, certs.ca, (certs.path("client.crt"), certs.path("client.key")))
    prom = None
    try:
        wait_for("metricsgw ready", lambda: _answers(client), gw)
        prom = start_prometheus(tmp_path / "prom", certs, base + "/api/v1/write", auth="", client_cert=True)
        prom.wait_ready()
        wait_for("Prometheus's samples over mutual TLS", lambda: client.query('up{job="prometheus"}', None), gw)
        text = _prom_metrics(prom)
        assert metric_value(text, "prometheus_remote_storage_samples_failed_total") == 0
        assert metric_value(text, "prometheus_remote_storage_samples_total") > 0
        for stranger in (Client(base, certs.ca), Client(base, certs.ca, (certs.path("stranger.crt"),
                                                                           certs.path("stranger.key")))):
            with pytest.raises(OSError):  # no certificate, or one our CA did not sign: no handshake
                stranger.get("/-/healthy")
    finally:
        if prom is not None:
            prom.stop()
        gw.stop()


def test_prometheus_remote_reads_with_the_readers_credentials(secured):
    """A series only metricsgw holds comes back through a real Prometheus's remote_read over TLS."""
    from metricsgw.remote import codec

    work, certs, gw, client = secured
    now_ms = int(time.time() * 1000)
    body = codec.encode_v1([([("__name__", "only_in_metricsgw"), ("job", "secured")], [(now_ms, 7.0)])])
    req = urllib.request.Request(client.base_url + "/api/v1/write", data=body, method="POST", headers={
        "Content-Type": "application/x-protobuf", "Content-Encoding": "snappy",
        "X-Prometheus-Remote-Write-Version": "0.1.0",
        "Authorization": "Basic " + base64.b64encode(f"prometheus:{USERS['prometheus']}".encode()).decode()})
    with urllib.request.urlopen(req, timeout=30, context=client.tls) as r:
        assert r.status == 204
    port = free_port()
    (work / "reader").mkdir(exist_ok=True)
    config = work / "reader" / "prometheus.yml"
    config.write_text(f"""
remote_read:
  - url: {client.base_url}/api/v1/read
    read_recent: true
    basic_auth:
      username: grafana
      password: {USERS['grafana']}
    tls_config:
      ca_file: {certs.ca}
""")
    argv = [PROMETHEUS, f"--storage.tsdb.path={work / 'reader' / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
            f"--config.file={config}", "--log.level=warn"]
    prom = _spawn("prometheus-reader", argv, work / "reader" / "data", port)
    try:
        prom.wait_ready()
        url = prom.base_url + "/api/v1/query?" + urllib.parse.urlencode({"query": "only_in_metricsgw",
                                                                          "time": now_ms / 1000})
        with urllib.request.urlopen(url, timeout=60) as r:
            result = json.loads(r.read())["data"]["result"]
        assert [(x["metric"]["job"], x["value"][1]) for x in result] == [("secured", "7")]
    finally:
        prom.stop()
