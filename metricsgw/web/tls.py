"""The server's SSLContext from a web config's tls_server_config, and one that follows file changes.

exporter-toolkit re-reads the web config and the certificate files for every TLS handshake
(GetConfigForClient). asyncio wraps each accepted connection with ``context.wrap_bio``, so
``ReloadingSSLContext`` hands every new connection the context built from the files as they are
now (the watcher rebuilds it only when a file changed).
"""

from __future__ import annotations

import ssl
import warnings
from typing import Callable

from .webconfig import CIPHER_SUITES, CLIENT_AUTH, CURVES, TLS_VERSIONS, TLSServerConfig, WebConfigError


def build_ssl_context(tls: TLSServerConfig, config_path: str) -> ssl.SSLContext:
    """A server context for ``tls`` (enabled); WebConfigError names the key when a file is unusable."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    where = f"web config file {config_path}: tls_server_config"
    try:
        ctx.load_cert_chain(tls.cert_file, tls.key_file)
    except (OSError, ssl.SSLError) as err:
        raise WebConfigError(f"{where}.cert_file/key_file: failed to load X509KeyPair: {err}") from None
    try:
        with warnings.catch_warnings():  # TLS10/TLS11 are deprecated in Python too, but the format allows them
            warnings.simplefilter("ignore", DeprecationWarning)
            ctx.minimum_version = TLS_VERSIONS[tls.min_version]
            ctx.maximum_version = TLS_VERSIONS[tls.max_version]
    except ValueError as err:
        raise WebConfigError(f"{where}.min_version/max_version: {err}") from None
    if tls.prefer_server_cipher_suites:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    tls12 = [CIPHER_SUITES[c] for c in tls.cipher_suites if CIPHER_SUITES[c]]
    try:
        if tls12:
            ctx.set_ciphers(":".join(tls12))
        if tls.curve_preferences:
            # Python's ssl sets one key-exchange curve: the first preference.
            ctx.set_ecdh_curve(CURVES[tls.curve_preferences[0]])
    except (ValueError, ssl.SSLError) as err:
        raise WebConfigError(f"{where}.cipher_suites/curve_preferences: not usable here: {err}") from None
    mode = CLIENT_AUTH[tls.client_auth_type]
    if tls.client_auth_type == "RequestClientCert" and not tls.client_ca_file:
        # Go asks for a certificate and ignores it; asking here would refuse every one sent
        # (nothing to verify it with), so do not ask: the same clients get in.
        mode = ssl.CERT_NONE
    if tls.client_auth_type in ("RequireAnyClientCert", "RequireClientCert") and not tls.client_ca_file:
        raise WebConfigError(f"{where}.client_ca_file: {tls.client_auth_type} needs client_ca_file in metricsgw: "
                             "Python's ssl verifies every client certificate, and without a CA none would pass")
    ctx.verify_mode = mode
    if tls.client_ca_file:
        try:
            ctx.load_verify_locations(cafile=tls.client_ca_file)
        except (OSError, ssl.SSLError) as err:
            raise WebConfigError(f"{where}.client_ca_file: {err}") from None
    return ctx


class ReloadingSSLContext(ssl.SSLContext):
    """Passed to the server once; each connection is wrapped by the context ``current()`` returns."""

    def __new__(cls, current: Callable[[], ssl.SSLContext]) -> "ReloadingSSLContext":
        return super().__new__(cls, ssl.PROTOCOL_TLS_SERVER)

    def __init__(self, current: Callable[[], ssl.SSLContext]) -> None:
        self._current = current

    def wrap_bio(self, incoming, outgoing, server_side=False, server_hostname=None, session=None):  # noqa: ANN001
        return self._current().wrap_bio(incoming, outgoing, server_side=server_side,
                                        server_hostname=server_hostname, session=session)

    def wrap_socket(self, *args, **kwargs):  # noqa: ANN002, ANN003 (blocking servers use this one)
        return self._current().wrap_socket(*args, **kwargs)
