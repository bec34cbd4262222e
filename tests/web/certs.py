"""Certificates for the TLS tests, made with the openssl command line (Debian's openssl), no network.

One CA signs the server certificate (SANs localhost and 127.0.0.1) and a client certificate;
a second, unrelated CA signs a client certificate the server must refuse.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import bcrypt


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca(d: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
             "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.crt", cwd=d)


def _signed(d: Path, ca: str, name: str, ext: str) -> None:
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", f"/CN={name}",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
    (d / f"{name}.ext").write_text(ext)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt", cwd=d)


@dataclass(frozen=True)
class Certs:
    dir: Path

    def path(self, name: str) -> str:
        return str(self.dir / name)

    @property
    def ca(self) -> str:
        return self.path("ca.crt")


def make_certs(d: Path) -> Certs:
    d.mkdir(parents=True, exist_ok=True)
    _ca(d, "ca")
    _ca(d, "other-ca")
    _signed(d, "ca", "server", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    _signed(d, "ca", "client", "extendedKeyUsage=clientAuth\n")
    _signed(d, "other-ca", "stranger", "extendedKeyUsage=clientAuth\n")
    return Certs(d)


def bcrypt_hash(password: str, cost: int = 4) -> str:
    """Cost 4 (bcrypt's minimum) keeps the tests cheap; the checks are the same at any cost."""
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(cost)).decode()
