"""--web.config.file: every file of the table is judged the same by us and by promtool 2.42.

We accept a file only if ``promtool check web-config`` accepts it, we reject what it rejects,
and our errors name the key that is wrong.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess

import pytest

from metricsgw.config import ConfigError
from metricsgw.web.tls import build_ssl_context
from metricsgw.web.webconfig import load_web_config
from tests.web.certs import bcrypt_hash, make_certs

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
TLS = "tls_server_config:\n  cert_file: {d}/server.crt\n  key_file: {d}/server.key\n"
HASH = bcrypt_hash("secret")

# (name, file text with {d} = certificate dir, error fragment we must give or None if accepted)
CASES = [
    ("empty", "", None),
    ("users only, no TLS", f"basic_auth_users:\n  alice: {HASH}\n  bob: '{HASH}'\n", None),
    ("tls", TLS, None),
    ("tls relative paths", "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n", None),
    ("tls full", TLS + "  min_version: TLS13\n  max_version: TLS13\n  prefer_server_cipher_suites: false\n"
     "  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_AES_128_GCM_SHA256]\n"
     "  curve_preferences: [X25519, CurveP256]\n", None),
    ("tls10 allowed", TLS + "  min_version: TLS10\n", None),
    ("mtls", TLS + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {d}/ca.crt\n", None),
    ("verify if given", TLS + "  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: {d}/ca.crt\n", None),
    ("request cert", TLS + "  client_auth_type: RequestClientCert\n", None),
    ("require any with CA", TLS + "  client_auth_type: RequireAnyClientCert\n  client_ca_file: {d}/ca.crt\n", None),
    ("headers", "http_server_config:\n  http2: false\n  headers:\n    X-Frame-Options: sameorigin\n"
     "    X-Content-Type-Options: nosniff\n    Strict-Transport-Security: max-age=31536000\n"
     "    X-XSS-Protection: '1'\n    Content-Security-Policy: \"default-src 'self'\"\n", None),
    ("all", TLS + f"http_server_config:\n  headers:\n    X-Frame-Options: deny\nbasic_auth_users:\n  a: {HASH}\n", None),
    # rejected by both
    ("unknown top-level key", "tls_config:\n  cert_file: x\n", "field tls_config not found"),
    ("unknown tls key", "tls_server_config:\n  cert_filse: server.crt\n", "tls_server_config.cert_filse"),
    ("client_allowed_sans (exporter-toolkit 0.9+)", TLS + "  client_auth_type: RequireAndVerifyClientCert\n"
     "  client_ca_file: {d}/ca.crt\n  client_allowed_sans: [client]\n", "tls_server_config.client_allowed_sans"),
    ("unknown http key", "http_server_config:\n  http3: true\n", "http_server_config.http3"),
    ("repeated key", f"basic_auth_users:\n  a: {HASH}\n  a: {HASH}\n", "basic_auth_users.a: key already set"),
    ("bad TLS version", TLS + "  min_version: TLS14\n", "tls_server_config.min_version: unknown TLS version: TLS14"),
    ("lower-case TLS version", TLS + "  max_version: tls13\n", "unknown TLS version"),
    ("unknown cipher", TLS + "  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n", "unknown cipher: TLS_RSA_WITH_RC4"),
    ("unknown curve", TLS + "  curve_preferences: [CurveP999]\n", "unknown curve: CurveP999"),
    ("key without cert", "tls_server_config:\n  key_file: {d}/server.key\n", "missing cert_file"),
    ("cert without key", "tls_server_config:\n  cert_file: {d}/server.crt\n", "missing key_file"),
    ("client auth alone", "tls_server_config:\n  client_auth_type: RequireAndVerifyClientCert\n",
     "missing cert_file"),
    ("cert file absent", "tls_server_config:\n  cert_file: {d}/nope.crt\n  key_file: {d}/server.key\n",
     "tls_server_config.cert_file: open"),
    ("key of another cert", "tls_server_config:\n  cert_file: {d}/server.crt\n  key_file: {d}/client.key\n",
     "failed to load X509KeyPair"),
    ("CA without policy", TLS + "  client_ca_file: {d}/ca.crt\n", "without a Client Auth Policy"),
    ("invalid client auth", TLS + "  client_auth_type: Always\n  client_ca_file: {d}/ca.crt\n",
     "tls_server_config.client_auth_type: invalid ClientAuth: Always"),
    ("plain-text password", "basic_auth_users:\n  john: doe\n",
     "basic_auth_users.john: crypto/bcrypt: hashedSecret"),
    ("bcrypt cost too low", "basic_auth_users:\n  john: " + HASH.replace("$04$", "$03$") + "\n", "cost 3"),
    ("header not allowed", "http_server_config:\n  headers:\n    Server: metricsgw\n",
     'HTTP header "Server" can not be configured'),
    ("header value not allowed", "http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
     "invalid value for X-Frame-Options"),
    ("http2 not a bool", "http_server_config:\n  http2: maybe\n", "http_server_config.http2"),
    ("users not a map", "basic_auth_users: [alice]\n", "basic_auth_users: must be a mapping"),
    ("junk", "hWkNKCp3fvIx3jKnsaBI\nTuEjdwNS8A2vYdFbiKqr\n", "top level: must be a mapping"),
    ("bad yaml", "tls_server_config: {cert_file: [\n", "yaml"),
]


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


def _write(certs, name: str, text: str):
    path = certs.dir / (name.replace(" ", "_").replace("(", "").replace(")", "").replace("+", "") + ".yml")
    path.write_text(text.replace("{d}", str(certs.dir)))
    return path


def _ours(path) -> str | None:
    try:
        cfg = load_web_config(str(path))
        if cfg.tls.enabled:
            build_ssl_context(cfg.tls, str(path))
    except ConfigError as err:
        return str(err)
    return None


@pytest.mark.parametrize("name,text,error", CASES, ids=[c[0] for c in CASES])
def test_we_and_promtool_agree(certs, name, text, error):
    path = _write(certs, name, text)
    ours = _ours(path)
    if error is None:
        assert ours is None, ours
    else:
        assert ours is not None and error in ours, ours
        assert str(path) in ours  # the message names the file as well as the key
    promtool = subprocess.run([PROMTOOL, "check", "web-config", str(path)], capture_output=True, text=True)
    assert (promtool.returncode == 0) == (error is None), promtool.stdout + promtool.stderr


def test_require_any_client_cert_without_ca_is_refused_by_us_only(certs):
    """Go takes any client certificate unchecked; Python's ssl checks every one, so we ask for the CA.

    The one file of this kind promtool accepts and we refuse (the safe direction)."""
    path = _write(certs, "require any", TLS + "  client_auth_type: RequireAnyClientCert\n")
    assert "needs client_ca_file" in _ours(path)
    assert subprocess.run([PROMTOOL, "check", "web-config", str(path)], capture_output=True).returncode == 0


def test_values_read(certs):
    path = _write(certs, "values", CASES[4][1] + f"http_server_config:\n  headers:\n    X-Frame-Options: deny\n"
                  f"basic_auth_users:\n  alice: {HASH}\n  '123': {HASH}\n")
    cfg = load_web_config(str(path))
    assert cfg.tls.min_version == cfg.tls.max_version == "TLS13"
    assert cfg.tls.curve_preferences == ("X25519", "CurveP256") and not cfg.tls.prefer_server_cipher_suites
    assert cfg.headers == (("X-Frame-Options", "deny"),) and cfg.http2
    assert cfg.user_hashes == {"alice": HASH.encode(), "123": HASH.encode()}
    ctx = build_ssl_context(cfg.tls, str(path))
    assert ctx.minimum_version == ctx.maximum_version == ssl.TLSVersion.TLSv1_3
    assert ctx.verify_mode == ssl.CERT_NONE


def test_relative_paths_are_taken_from_the_files_directory(certs):
    cfg = load_web_config(str(_write(certs, "relative", CASES[3][1])))
    assert cfg.tls.cert_file == str(certs.dir / "server.crt")


@pytest.mark.parametrize("auth,mode", [("RequireAndVerifyClientCert", ssl.CERT_REQUIRED),
                                       ("VerifyClientCertIfGiven", ssl.CERT_OPTIONAL),
                                       ("RequireAnyClientCert", ssl.CERT_REQUIRED),
                                       ("RequestClientCert", ssl.CERT_OPTIONAL)])
def test_client_auth_types(certs, auth, mode):
    path = _write(certs, auth, TLS + f"  client_auth_type: {auth}\n  client_ca_file: {{d}}/ca.crt\n")
    cfg = load_web_config(str(path))
    assert build_ssl_context(cfg.tls, str(path)).verify_mode == mode


def test_serve_stops_at_start_on_a_bad_file_naming_the_key(certs, tmp_path, capsys):
    from metricsgw.cli import main

    path = _write(certs, "bad at start", TLS + "  min_version: TLS9\n")
    argv = ["serve", f"--web.config.file={path}", f"--storage.path={tmp_path}", "--web.listen-address=127.0.0.1:1"]
    assert main(argv) == 2
    assert "tls_server_config.min_version: unknown TLS version: TLS9" in capsys.readouterr().err


def test_lifecycle_flag_may_be_given_bare_as_in_prometheus():
    from metricsgw.cmdline import build_parser
    from metricsgw.config import load

    args = build_parser().parse_args(["serve", "--web.enable-lifecycle"])
    assert load({"web.enable-lifecycle": args.web_enable_lifecycle}).web_enable_lifecycle is True
    assert load({}).web_enable_lifecycle is False


def test_check_web_config_command(certs, capsys):
    from metricsgw.cli import main

    good, bad = _write(certs, "check good", TLS), _write(certs, "check bad", TLS + "  min_version: TLS9\n")
    assert main(["check", "web-config", str(good)]) == 0
    assert f"{good} SUCCESS" in capsys.readouterr().err
    assert main(["check", "web-config", str(good), str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{good} SUCCESS" in err and f"{bad} FAILED:" in err and "unknown TLS version: TLS9" in err
