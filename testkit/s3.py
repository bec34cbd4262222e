"""An S3 server for tests and benches: moto in server mode, in a process of its own on a free port (a real HTTP
S3 endpoint that honours conditional writes), and a proxy in front of it that plays a faulty store: one that
ignores conditional writes (drops ``If-None-Match``, as s3rver or an old MinIO), answers 5xx, or cannot be reached.

moto keeps its buckets in memory: a restarted server is empty. A test that needs the store back with its data
pauses the process instead (``pause``/``resume``: connections hang, as on a partitioned network) or takes the
proxy in front of it down and up again (``StoreProxy``: connections refused, or 5xx answers).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
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
        """What a gateway process is given besides its parent's environment: the keys, by the AWS credential
        chain's environment variables."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}

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


class StoreProxy:
    """A TCP relay to ``upstream`` on a free port, to play a faulty store while ``upstream`` keeps its data:
    ``drop_conditional`` removes the ``If-None-Match: *`` header line from what clients send (the store then
    overwrites where it should answer 412), ``fail(503)`` answers every new connection's request so and closes it,
    ``down()`` closes the port (connections refused, open ones cut) until ``up()`` opens the same port again.

    Bytes, not HTTP: the clients under test keep connections alive as they do against a real store. In a process of
    its own: delta-rs holds the GIL while it waits on the network, so a relay thread in the test's process would
    wait for the very call it should answer."""

    def __init__(self, upstream: str, drop_conditional: bool = False) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._state = ctx.Array("i", [1, 0, 0])  # wanted up, fail_with status, is up (the relay's answer)
        self._proc = ctx.Process(target=_relay_main, args=(upstream, self.port, drop_conditional, self._state),
                                 daemon=True)
        self._proc.start()
        self._wait_state(True)

    def fail(self, status: int | None) -> None:
        self._state[1] = status or 0

    def down(self) -> None:
        self._state[0] = 0
        self._wait_state(False)

    def up(self) -> None:
        self._state[0] = 1
        self._wait_state(True)

    def close(self) -> None:
        self._proc.terminate()
        self._proc.join(10)

    def _wait_state(self, up: bool) -> None:
        deadline = time.monotonic() + 30
        while bool(self._state[2]) != up:
            if time.monotonic() > deadline or not self._proc.is_alive():
                raise RuntimeError(f"the store proxy did not go {'up' if up else 'down'}")
            time.sleep(0.02)


def _relay_main(upstream: str, port: int, drop: bool, state) -> None:
    host, up_port = upstream.removeprefix("http://").split(":")
    conns: list[socket.socket] = []
    lock = threading.Lock()
    listener: socket.socket | None = None
    while True:
        if state[0] and listener is None:
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", port))
            listener.listen(64)
            threading.Thread(target=_accept, args=(listener, (host, int(up_port)), drop, state, conns, lock),
                             daemon=True).start()
            state[2] = 1
        elif not state[0] and listener is not None:
            listener.close()
            listener = None
            with lock:
                cut, conns[:] = list(conns), []
            for c in cut:
                with contextlib.suppress(OSError):
                    c.shutdown(socket.SHUT_RDWR)
                c.close()
            state[2] = 0
        time.sleep(0.02)


def _accept(listener: socket.socket, upstream, drop: bool, state, conns: list, lock) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:  # closed: the proxy went down
            return
        if state[1]:
            threading.Thread(target=_refuse, args=(client, state[1]), daemon=True).start()
            continue
        try:
            server = socket.create_connection(upstream)
        except OSError:
            client.close()
            continue
        with lock:
            conns += [client, server]
        threading.Thread(target=_pipe, args=(client, server, drop), daemon=True).start()
        threading.Thread(target=_pipe, args=(server, client, False), daemon=True).start()


def _refuse(client: socket.socket, status: int) -> None:
    with client, contextlib.suppress(OSError):
        client.settimeout(10)
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = client.recv(65536)
            if not chunk:
                return
            head += chunk
        body = b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
        client.sendall(b"HTTP/1.1 %d Service Unavailable\r\nContent-Type: application/xml\r\n"
                       b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (status, len(body), body))


def _pipe(src: socket.socket, dst: socket.socket, drop: bool) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            if drop:
                data = _IF_NONE_MATCH.sub(b"", data)
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


_IF_NONE_MATCH = re.compile(rb"(?im)^if-none-match: \*\r\n")


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
