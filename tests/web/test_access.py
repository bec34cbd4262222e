"""Every route behind the web config: 401/403/500 answers, TLS, mutual TLS, roles, lifecycle, reloads.

The server runs in-process exactly as cli.py runs it (AppRunner + TCPSite + our SSLContext);
the clients are aiohttp's, over real sockets and real TLS.
"""

from __future__ import annotations

import asyncio
import os
import ssl

import aiohttp
import pytest
from yarl import URL

from metricsgw import appkeys
from tests.web.certs import bcrypt_hash, make_certs
from tests.web.harness import T0_MS, WRITE_HEADERS, basic, client_context, fetch, serving, write_body

PASSWORD = "s3cret"
PLAIN_HTTP = b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"  # Go's bytes
HASH = bcrypt_hash(PASSWORD)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


def tls_config(certs, extra: str = "", users: str = "alice") -> str:
    text = f"tls_server_config:\n  cert_file: {certs.path('server.crt')}\n  key_file: {certs.path('server.key')}\n"
    text += extra
    if users:
        text += "basic_auth_users:\n" + "".join(f"  {u}: {HASH}\n" for u in users.split(","))
    return text


def run(coro):
    return asyncio.run(coro)


ROUTES = [("GET", "/api/v1/query?query=up"), ("POST", "/api/v1/query_range"), ("GET", "/api/v1/series"),
          ("GET", "/api/v1/labels"), ("GET", "/api/v1/label/job/values"), ("GET", "/api/v1/metadata"),
          ("GET", "/api/v1/status/buildinfo"), ("GET", "/metrics"), ("GET", "/-/healthy"), ("GET", "/-/ready"),
          ("POST", "/-/reload"), ("PUT", "/-/reload"), ("POST", "/api/v1/write"), ("POST", "/api/v1/read"),
          ("GET", "/no/such/route")]


def test_every_route_needs_credentials_and_nothing_is_stored_without(tmp_path, certs):
    async def go():
        cfg = tls_config(certs, "http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
        async with serving(tmp_path, cfg) as srv, aiohttp.ClientSession() as s:
            tls = client_context(certs.ca)
            for creds in ({}, basic("alice", "wrong"), basic("mallory", PASSWORD), {"Authorization": "Bearer x"},
                          {"Authorization": "Basic !!notbase64"}):
                for method, path in ROUTES:
                    status, body, headers = await fetch(s, method, srv.url + path, ssl=tls, data=write_body(),
                                                        headers={**WRITE_HEADERS, **creds})
                    assert (status, body) == (401, "Unauthorized\n"), (method, path, creds)
                    assert headers["WWW-Authenticate"] == "Basic"
                    assert headers["X-Frame-Options"] == "deny"  # configured headers go on errors too
            assert srv.app[appkeys.STORAGE].active_series() == 0  # no unauthenticated write was stored

            ok = basic("alice", PASSWORD)
            status, _, headers = await fetch(s, "POST", srv.url + "/api/v1/write", ssl=tls, data=write_body(),
                                             headers={**WRITE_HEADERS, **ok})
            assert status == 204 and headers["X-Frame-Options"] == "deny"
            status, body, _ = await fetch(s, "GET", srv.url + f"/api/v1/query?query=up&time={T0_MS / 1000}", ssl=tls,
                                          headers=ok)
            assert status == 200 and '"job":"t"' in body
            status, body, _ = await fetch(s, "GET", srv.url + "/metrics", ssl=tls, headers=ok)
            assert 'metricsgw_http_auth_failures_total{reason="missing_credentials"} 45.0' in body
            assert 'metricsgw_http_auth_failures_total{reason="wrong_credentials"} 30.0' in body
            # the user name is everything before the first colon; the password may hold colons
            colon = basic("alice", PASSWORD + ":x")
            assert (await fetch(s, "GET", srv.url + "/-/healthy", ssl=tls, headers=colon))[0] == 401
    run(go())


def test_plain_http_is_refused_when_tls_is_on(tmp_path, certs):
    async def go():
        async with serving(tmp_path, tls_config(certs)) as srv, aiohttp.ClientSession() as s:
            plain = srv.url.replace("https://", "http://")
            status, body, _ = await fetch(s, "POST", plain + "/api/v1/write", data=write_body(),
                                          headers={**WRITE_HEADERS, **basic("alice", PASSWORD)})
            assert (status, body) == (400, "Client sent an HTTP request to an HTTPS server.\n")
            port = int(srv.url.rsplit(":", 1)[1])
            for start, answer in ((b"GET /", PLAIN_HTTP), (b"HEAD /", PLAIN_HTTP), (b"PUT /-/reload", PLAIN_HTTP),
                                  (b"OPTIONS *", PLAIN_HTTP), (b"DELETE /", b"")):  # Go's five starts only
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(start + b" HTTP/1.1\r\nHost: x\r\n\r\n")
                assert await reader.read() == answer, start
                writer.close()
            assert srv.app[appkeys.STORAGE].active_series() == 0
            with pytest.raises(aiohttp.ClientConnectorCertificateError):  # a client that does not trust our CA
                await fetch(s, "GET", srv.url + "/-/healthy", ssl=client_context(certs.path("other-ca.crt")))
    run(go())


def test_mutual_tls(tmp_path, certs):
    extra = f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {certs.ca}\n"

    async def go():
        async with serving(tmp_path, tls_config(certs, extra, users="")) as srv, aiohttp.ClientSession() as s:
            with_cert = client_context(certs.ca, certs.path("client.crt"), certs.path("client.key"))
            assert (await fetch(s, "GET", srv.url + "/-/healthy", ssl=with_cert))[0] == 200
            for refused in (client_context(certs.ca),  # no certificate
                            client_context(certs.ca, certs.path("stranger.crt"), certs.path("stranger.key"))):
                with pytest.raises(aiohttp.ClientError):
                    await fetch(s, "GET", srv.url + "/-/healthy", ssl=refused)
    run(go())


def test_verify_client_cert_if_given(tmp_path, certs):
    extra = f"  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: {certs.ca}\n"

    async def go():
        async with serving(tmp_path, tls_config(certs, extra, users="")) as srv, aiohttp.ClientSession() as s:
            assert (await fetch(s, "GET", srv.url + "/-/healthy", ssl=client_context(certs.ca)))[0] == 200
            with pytest.raises(aiohttp.ClientError):
                await fetch(s, "GET", srv.url + "/-/healthy",
                            ssl=client_context(certs.ca, certs.path("stranger.crt"), certs.path("stranger.key")))
    run(go())


@pytest.mark.parametrize("enabled", [False, True])
def test_lifecycle_endpoints(tmp_path, enabled):
    settings = {"web.enable-lifecycle": "true"} if enabled else {}

    async def go():
        async with serving(tmp_path, None, settings) as srv, aiohttp.ClientSession() as s:
            for method in ("POST", "PUT"):
                status, body, _ = await fetch(s, method, srv.url + "/-/reload")
                assert (status, body) == ((200, "loaded 0 relabel rules from 0 file(s)\n") if enabled
                                          else (403, "Lifecycle API is not enabled."))
            assert (await fetch(s, "GET", srv.url + "/-/reload"))[:2] == (405, "Only POST or PUT requests allowed")
    run(go())


def test_writers_and_readers_apart(tmp_path, certs):
    settings = {"web.write-only-users": ["sender"], "web.read-only-users": ["grafana"], "web.enable-lifecycle": "1"}

    async def go():
        async with serving(tmp_path, tls_config(certs, users="sender,grafana,admin"), settings) as srv, \
                aiohttp.ClientSession() as s:
            tls = client_context(certs.ca)

            async def status(user, method, path):  # the path is sent as written (no normalising by yarl)
                return (await fetch(s, method, URL(srv.url + path, encoded=True), ssl=tls, data=write_body(),
                                    headers={**WRITE_HEADERS, **basic(user, PASSWORD)}))[0]

            assert await status("sender", "POST", "/api/v1/write") == 204
            for method, path in (("GET", "/api/v1/query?query=up"), ("GET", "/api/v1/series"), ("GET", "/metrics"),
                                 ("POST", "/api/v1/read"), ("POST", "/-/reload")):
                assert await status("sender", method, path) == 403, path
            assert await status("grafana", "GET", "/api/v1/query?query=up") == 200
            assert await status("grafana", "POST", "/api/v1/write") == 403
            assert await status("grafana", "POST", "/api/v1/%77rite") == 403  # the route decides, not the spelling
            assert await status("sender", "POST", "/api/v1/%77rite") == 204
            assert await status("grafana", "POST", "/-/reload") == 403
            assert await status("admin", "POST", "/api/v1/write") == 204
            assert await status("admin", "POST", "/-/reload") == 200
            assert await status("sender", "GET", "/api/v1/query?query=up") == 403  # a cached login keeps its role
    run(go())


def test_roles_need_users(tmp_path):
    from metricsgw.config import ConfigError

    async def go():
        async with serving(tmp_path, None, {"web.write-only-users": ["sender"]}):
            pass
    with pytest.raises(ConfigError, match="need basic_auth_users"):
        run(go())


def _bump_mtime(path) -> None:
    """A rewrite within the file system's timestamp granularity must still be seen: move mtime on."""
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


def test_web_config_is_read_again_when_it_changes(tmp_path, certs):
    async def go():
        async with serving(tmp_path, tls_config(certs)) as srv, aiohttp.ClientSession() as s:
            tls, path = client_context(certs.ca), tmp_path / "web.yml"
            get = lambda creds: fetch(s, "GET", srv.url + "/-/healthy", ssl=tls, headers=creds)  # noqa: E731
            assert (await get(basic("alice", PASSWORD)))[0] == 200
            path.write_text(tls_config(certs, users="") + f"basic_auth_users:\n  bob: {bcrypt_hash('new')}\n")
            _bump_mtime(path)
            assert (await get(basic("alice", PASSWORD)))[0] == 401  # a cached login does not outlive its user
            assert (await get(basic("bob", "new")))[0] == 200
            path.write_text(tls_config(certs) + "  bad_key: 1\n")  # broken: nobody gets in, as in Prometheus
            _bump_mtime(path)
            assert (await get(basic("bob", "new")))[:2] == (500, "Internal Server Error\n")
            path.write_text(f"basic_auth_users:\n  alice: {HASH}\n")  # TLS off needs a restart, as in Prometheus
            _bump_mtime(path)
            assert (await get(basic("alice", PASSWORD)))[0] == 500
            path.write_text(tls_config(certs))
            _bump_mtime(path)
            assert (await get(basic("alice", PASSWORD)))[0] == 200
    run(go())


def test_certificate_is_read_again_for_new_connections(tmp_path, certs):
    """The server certificate is replaced by one from another CA; new connections get the new one."""
    work = tmp_path / "certs"
    work.mkdir()
    for name in ("server.crt", "server.key"):
        (work / name).write_bytes((certs.dir / name).read_bytes())
    config = f"tls_server_config:\n  cert_file: {work / 'server.crt'}\n  key_file: {work / 'server.key'}\n"
    other = make_certs(tmp_path / "other")

    async def go():
        async with serving(tmp_path, config) as srv:
            async def healthy(ca):
                async with aiohttp.ClientSession() as s:  # a new session: a new connection and handshake
                    return (await fetch(s, "GET", srv.url + "/-/healthy", ssl=client_context(ca)))[0]

            assert await healthy(certs.ca) == 200
            for name in ("server.crt", "server.key"):
                (work / name).write_bytes((other.dir / name).read_bytes())
                _bump_mtime(work / name)
            assert await healthy(other.ca) == 200
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await healthy(certs.ca)
    run(go())


def test_tls_version_bounds_hold(tmp_path, certs):
    async def go():
        async with serving(tmp_path, tls_config(certs, "  min_version: TLS13\n", users="")) as srv, \
                aiohttp.ClientSession() as s:
            tls12 = client_context(certs.ca)
            tls12.maximum_version = ssl.TLSVersion.TLSv1_2
            with pytest.raises(aiohttp.ClientError):
                await fetch(s, "GET", srv.url + "/-/healthy", ssl=tls12)
            assert (await fetch(s, "GET", srv.url + "/-/healthy", ssl=client_context(certs.ca)))[0] == 200
    run(go())
