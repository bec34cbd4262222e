"""An S3 server for tests and benches: moto in server mode, in a process of its own on a free port (a real HTTP
S3 endpoint that honours conditional writes), stopped and restarted at will to play an unreachable store, and a
proxy in front of it that drops ``If-None-Match`` (a store that ignores conditional writes: s3rver, old MinIO).

moto keeps its buckets in memory: a restarted server is empty. A test that needs the store back with its data
pauses the process instead (``pause``/``resume``: connections hang, as on a partitioned network) or stops the
proxy in front of it (``HeaderDroppingProxy(..., drop=False)``: connections are refused).
"""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from .procs import free_port

# moto accepts any key pair; these are what the gateways under test are given.
ACCESS_KEY = "testing-key-id"
SECRET_KEY = "testing-secret-key-do-not-log"
REGION = "us-east-1"


class MotoServer:
    """``moto_server`` on 127.0.0.1:<free port>; ``bucket(name)`` creates a bucket."""

    def __init__(self, log_dir: Path) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._log = open(log_dir / f"moto-{self.port}.log", "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        _wait_port(self.port, self.proc)

    def client(self, endpoint: str | None = None):
        import boto3  # the test extra's; the gateway itself talks to S3 through metricsgw/storage/files/s3.py

        return boto3.client("s3", endpoint_url=endpoint or self.endpoint, region_name=REGION,
                            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)

    def bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name

    def env(self) -> dict[str, str]:
        """What a gateway process is given: the keys by the AWS credential chain's environment variables."""
        return {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}

    def pause(self) -> None:
        """Freeze the server: connections are accepted by the kernel and never answered (a store that hangs)."""
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()


class HeaderDroppingProxy:
    """An HTTP proxy to ``upstream`` on a free port. With ``drop`` it removes ``If-None-Match`` from every request,
    so the store behind it overwrites where it should answer 412; ``close()`` makes the endpoint refuse
    connections while ``upstream`` keeps its data."""

    def __init__(self, upstream: str, drop: bool = True) -> None:
        host, port = upstream.removeprefix("http://").split(":")
        drop_header = drop

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _relay(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items()
                           if not (drop_header and k.lower() == "if-none-match")}
                conn = http.client.HTTPConnection(host, int(port), timeout=30)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                finally:
                    conn.close()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay

            def log_message(self, *args) -> None:  # the test's output is not the place for every request
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _wait_port(port: int, proc: subprocess.Popen, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"moto_server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"moto_server not listening on {port} after {timeout_s}s")
