"""The --web.config.file format of Prometheus (exporter-toolkit), parsed and validated.

Mirrors exporter-toolkit v0.8 (the one Prometheus 2.42 and its promtool are built with): strict
YAML (unknown or repeated keys are errors), scalar text read as yaml.v2 reads it, relative paths
taken from the file's directory, and the checks of its ``Validate``: bcrypt hashes well formed,
cert/key present and loadable, client CA readable and only with a client_auth_type. Anything we
accept, ``promtool check web-config`` accepts too (tests/web/test_webconfig.py runs both).
This module is pure: it reads files and returns values; building the SSLContext is tls.py's job.
"""

from __future__ import annotations

import os
import re
import ssl
from dataclasses import dataclass, field
from functools import cached_property

import yaml

from ..config import ConfigError

TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
                "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}

# Go's tls.CipherSuites() (the secure ones, which is all exporter-toolkit accepts) -> OpenSSL name.
# The TLS 1.3 suites are not configurable in Go or OpenSSL's cipher list: accepted, then ignored.
CIPHER_SUITES = {
    "TLS_AES_128_GCM_SHA256": None, "TLS_AES_256_GCM_SHA384": None, "TLS_CHACHA20_POLY1305_SHA256": None,
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
}
CURVES = {"CurveP256": "prime256v1", "CurveP384": "secp384r1", "CurveP521": "secp521r1", "X25519": "X25519"}

# The client_auth_type values and their ssl verify modes. Go's RequestClientCert and
# RequireAnyClientCert take a certificate without checking it; Python's ssl checks every
# certificate a client sends, so those two verify against client_ca_file (see tls.py / docs/security.md).
CLIENT_AUTH = {"": ssl.CERT_NONE, "NoClientCert": ssl.CERT_NONE, "RequestClientCert": ssl.CERT_OPTIONAL,
               "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL, "RequireAnyClientCert": ssl.CERT_REQUIRED,
               "RequireClientCert": ssl.CERT_REQUIRED,  # kept by exporter-toolkit for backwards compatibility
               "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}

# exporter-toolkit's extraHTTPHeaders: the only headers a web config may set, and for two of them
# the only values (private there "to ensure consistency in the Prometheus ecosystem").
ALLOWED_HEADERS: dict[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (), "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"), "X-XSS-Protection": (), "Content-Security-Policy": (),
}


class WebConfigError(ConfigError):
    """A web config file that Prometheus would refuse; the message names the file and the key."""


@dataclass(frozen=True)
class TLSServerConfig:
    cert_file: str = ""
    key_file: str = ""
    client_auth_type: str = ""
    client_ca_file: str = ""
    min_version: str = "TLS12"
    max_version: str = "TLS13"
    cipher_suites: tuple[str, ...] = ()
    curve_preferences: tuple[str, ...] = ()
    prefer_server_cipher_suites: bool = True

    @property
    def enabled(self) -> bool:
        return bool(self.cert_file or self.key_file or self.client_auth_type or self.client_ca_file)

    def files(self) -> tuple[str, ...]:
        return tuple(f for f in (self.cert_file, self.key_file, self.client_ca_file) if f)


@dataclass(frozen=True)
class WebConfig:
    tls: TLSServerConfig = field(default_factory=TLSServerConfig)
    http2: bool = True  # accepted for compatibility; aiohttp serves HTTP/1.1 only
    headers: tuple[tuple[str, str], ...] = ()
    users: tuple[tuple[str, str], ...] = ()  # (user, bcrypt hash)

    @cached_property  # looked at on every request
    def user_hashes(self) -> dict[str, bytes]:
        return {u: h.encode() for u, h in self.users}


_TRUE = {"y", "yes", "true", "on"}
_FALSE = {"n", "no", "false", "off"}
_BCRYPT = re.compile(r"^\$2[a-z]?\$(\d\d)\$")
_MIN_BCRYPT_LEN = 59  # golang.org/x/crypto/bcrypt's minHashSize


class _Reader:
    """Walks the composed YAML nodes: line numbers for errors and yaml.v2's reading of scalars."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, node: yaml.Node | None, key: str, msg: str) -> WebConfigError:
        where = f" (line {node.start_mark.line + 1})" if node is not None else ""
        return WebConfigError(f"web config file {self.path}: {key}: {msg}{where}")

    def mapping(self, node: yaml.Node, key: str, fields: tuple[str, ...] | None) -> dict[str, yaml.Node]:
        if _is_null(node):
            return {}
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, key or "top level", "must be a mapping")
        out: dict[str, yaml.Node] = {}
        for k, v in node.value:
            name = self.string(k, key)
            full = f"{key}.{name}" if key else name
            if fields is not None and name not in fields:
                raise self.fail(k, full, f"field {name} not found (allowed: {', '.join(fields)})")
            if name in out:
                raise self.fail(k, full, "key already set in map")
            out[name] = v
        return out

    def string(self, node: yaml.Node, key: str) -> str:
        if _is_null(node):
            return ""
        if not isinstance(node, yaml.ScalarNode):
            raise self.fail(node, key, "must be a string")
        return node.value

    def boolean(self, node: yaml.Node, key: str, default: bool) -> bool:
        if _is_null(node):
            return default
        text = self.string(node, key).lower()
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        raise self.fail(node, key, f"cannot unmarshal {node.value!r} into bool")

    def strings(self, node: yaml.Node, key: str) -> list[tuple[yaml.Node, str]]:
        if _is_null(node):
            return []
        if not isinstance(node, yaml.SequenceNode):
            raise self.fail(node, key, "must be a list")
        return [(item, self.string(item, key)) for item in node.value]


def _is_null(node: yaml.Node | None) -> bool:
    return node is None or (isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null")


def _join_dir(base: str, path: str) -> str:
    return path if not path or os.path.isabs(path) else os.path.join(base, path)


def _check_bcrypt(reader: _Reader, node: yaml.Node, user: str, hashed: str) -> None:
    """bcrypt.Cost's checks: what Prometheus refuses at start-up."""
    key = f"basic_auth_users.{user}"
    if len(hashed) < _MIN_BCRYPT_LEN:
        raise reader.fail(node, key, "crypto/bcrypt: hashedSecret too short to be a bcrypted password")
    m = _BCRYPT.match(hashed)
    if not m:
        raise reader.fail(node, key, "not a bcrypt hash (expected $2a$, $2b$ or $2y$ then the cost)")
    if not 4 <= int(m.group(1)) <= 31:
        raise reader.fail(node, key, f"crypto/bcrypt: cost {int(m.group(1))} is outside allowed range (4,31)")


def load_web_config(path: str) -> WebConfig:
    """Read and validate the file; raise WebConfigError naming the key that is wrong."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as err:
        raise WebConfigError(f"web config file {path}: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise WebConfigError(f"web config file {path}: not UTF-8 text: {err}") from None
    reader = _Reader(path)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as err:
        raise WebConfigError(f"web config file {path}: yaml: {err}") from None
    top = reader.mapping(root, "", ("tls_server_config", "http_server_config", "basic_auth_users"))
    base = os.path.dirname(path)
    tls = _read_tls(reader, top.get("tls_server_config"), base)
    http = reader.mapping(top.get("http_server_config"), "http_server_config", ("http2", "headers"))
    http2 = reader.boolean(http.get("http2"), "http_server_config.http2", True)
    headers = []
    for name, vnode in reader.mapping(http.get("headers"), "http_server_config.headers", None).items():
        value = reader.string(vnode, f"http_server_config.headers.{name}")
        if name not in ALLOWED_HEADERS:
            raise reader.fail(vnode, "http_server_config.headers", f'HTTP header "{name}" can not be configured')
        allowed = ALLOWED_HEADERS[name]
        if allowed and value not in allowed:
            raise reader.fail(vnode, f"http_server_config.headers.{name}",
                              f"invalid value for {name}. Expected one of: {list(allowed)}, but got: {value!r}")
        headers.append((name, value))
    users = []
    for user, hnode in reader.mapping(top.get("basic_auth_users"), "basic_auth_users", None).items():
        hashed = reader.string(hnode, f"basic_auth_users.{user}")
        _check_bcrypt(reader, hnode, user, hashed)
        users.append((user, hashed))
    return WebConfig(tls=tls, http2=http2, headers=tuple(headers), users=tuple(users))


_TLS_FIELDS = ("cert_file", "key_file", "client_auth_type", "client_ca_file", "cipher_suites", "curve_preferences",
               "min_version", "max_version", "prefer_server_cipher_suites")


def _read_tls(reader: _Reader, node: yaml.Node | None, base: str) -> TLSServerConfig:
    m = reader.mapping(node, "tls_server_config", _TLS_FIELDS)
    key = "tls_server_config."
    s = {name: reader.string(m.get(name), key + name)
         for name in ("cert_file", "key_file", "client_auth_type", "client_ca_file")}
    versions = {}
    for name, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
        v = reader.string(m.get(name), key + name) or default
        if v not in TLS_VERSIONS:
            raise reader.fail(m.get(name), key + name, f"unknown TLS version: {v}")
        versions[name] = v
    ciphers = []
    for item, c in reader.strings(m.get("cipher_suites"), key + "cipher_suites"):
        if c not in CIPHER_SUITES:
            raise reader.fail(item, key + "cipher_suites", f"unknown cipher: {c}")
        ciphers.append(c)
    curves = []
    for item, c in reader.strings(m.get("curve_preferences"), key + "curve_preferences"):
        if c not in CURVES:
            raise reader.fail(item, key + "curve_preferences", f"unknown curve: {c}")
        curves.append(c)
    tls = TLSServerConfig(
        cert_file=_join_dir(base, s["cert_file"]), key_file=_join_dir(base, s["key_file"]),
        client_auth_type=s["client_auth_type"], client_ca_file=_join_dir(base, s["client_ca_file"]),
        min_version=versions["min_version"], max_version=versions["max_version"],
        cipher_suites=tuple(ciphers), curve_preferences=tuple(curves),
        prefer_server_cipher_suites=reader.boolean(m.get("prefer_server_cipher_suites"),
                                                   key + "prefer_server_cipher_suites", True))
    if not tls.enabled:
        return tls
    # ConfigToTLSConfig's order of checks.
    if not tls.cert_file:
        raise reader.fail(node, key + "cert_file", "missing cert_file")
    if not tls.key_file:
        raise reader.fail(node, key + "key_file", "missing key_file")
    for name in ("cert_file", "key_file", "client_ca_file"):
        path = getattr(tls, name)
        if path and not os.path.isfile(path):
            raise reader.fail(m.get(name), key + name, f"open {path}: no such file")
    if tls.client_auth_type not in CLIENT_AUTH:
        raise reader.fail(m.get("client_auth_type"), key + "client_auth_type",
                          f"invalid ClientAuth: {tls.client_auth_type} (one of NoClientCert, RequestClientCert, "
                          "RequireAnyClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert)")
    if tls.client_ca_file and CLIENT_AUTH[tls.client_auth_type] == ssl.CERT_NONE:
        raise reader.fail(m.get("client_ca_file"), key + "client_ca_file",
                          "Client CA's have been configured without a Client Auth Policy")
    return tls
