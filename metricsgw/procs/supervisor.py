"""The front's children: start them, restart one that dies (with backoff, saying why), stop them in order.

A child is restarted however it ended (crash, kill -9, OOM kill): the data it acknowledged is in its WAL and
comes back when it replays. The backoff doubles from ``FIRST_BACKOFF_S`` up to ``MAX_BACKOFF_S`` and starts
over once a child has stayed up for ``STABLE_AFTER_S``, so a child that cannot start (a full disk at open)
does not spin, and one that died once after hours comes back at once. A child that says it cannot start
with its settings (``layout.EXIT_REFUSED``: its writer id is held by another live process, a setting is
refused) is not restarted: the front stops the gateway and exits with an error.
From each start until the child answers that it has started (readiness.py), ``started`` is clear: the front
holds requests for it meanwhile, and says it is starting or restarting.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time

from . import readiness
from .layout import EXIT_REFUSED, Child, Layout

log = logging.getLogger(__name__)

FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
STABLE_AFTER_S = 60.0


def exit_text(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


class ChildProcess:
    """One child and its restart loop."""

    def __init__(self, child: Child, argv: list[str], telemetry, on_refused) -> None:
        self.child = child
        self.argv = argv
        self.on_refused = on_refused  # called when the child says it cannot start with its settings
        self.proc: asyncio.subprocess.Process | None = None
        self.last_exit = ""  # why the previous run ended, for /-/ready and the log
        self.restarts = 0
        self.started = asyncio.Event()  # this run has answered that it started (readiness.py); clear at its end
        self.spawned = asyncio.Event()  # its first process exists
        self._stopping = False
        self._task: asyncio.Task | None = None
        self._tel = telemetry

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"supervise {self.child.name}")

    async def until_spawned(self) -> None:
        """Once its first process exists (or its run ended without one)."""
        spawned = asyncio.ensure_future(self.spawned.wait())
        await asyncio.wait([spawned, self._task], return_when=asyncio.FIRST_COMPLETED)
        spawned.cancel()

    async def _run(self) -> None:
        backoff = FIRST_BACKOFF_S
        while not self._stopping:
            started = time.monotonic()
            self.proc = await asyncio.create_subprocess_exec(*self.argv, stdin=asyncio.subprocess.DEVNULL)
            self.spawned.set()
            self._tel.child_up.labels(self.child.name).set(1)
            probe = asyncio.get_running_loop().create_task(self._until_started(started))
            try:
                code = await self.proc.wait()
            finally:
                probe.cancel()
                self.started.clear()
            self._tel.child_up.labels(self.child.name).set(0)
            if self._stopping:
                return
            self.last_exit = exit_text(code)
            if code == EXIT_REFUSED:
                log.error("%s cannot start with these settings (see its error above); stopping the gateway",
                          self.child.name)
                self.on_refused(self.child.name)
                return
            if time.monotonic() - started >= STABLE_AFTER_S:
                backoff = FIRST_BACKOFF_S
            self.restarts += 1
            self._tel.child_restarts.labels(self.child.name).inc()
            log.error("%s (pid %d) %s; restarting it in %.1fs (restart %d)", self.child.name, self.proc.pid,
                      self.last_exit, backoff, self.restarts)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    async def _until_started(self, since: float) -> None:
        await readiness.until_started(self.child.socket)
        self.started.set()
        # how long a start and a comeback take (docs/processes.md)
        log.info("%s (pid %d) started in %.1fs", self.child.name, self.proc.pid, time.monotonic() - since)

    def signal(self, sig: int) -> None:
        if self.running:
            try:
                self.proc.send_signal(sig)
            except ProcessLookupError:
                pass

    async def stop(self, timeout_s: float) -> None:
        """SIGTERM and wait for the orderly shutdown (last flush); SIGKILL past ``timeout_s``: the WAL
        still holds everything acknowledged."""
        self._stopping = True
        if self.running:
            self.signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), timeout_s)
            except asyncio.TimeoutError:
                log.error("%s did not stop within %.0fs; killing it", self.child.name, timeout_s)
                self.signal(signal.SIGKILL)
                await self.proc.wait()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass


class Supervisor:
    def __init__(self, layout: Layout, serve_args: list[str], telemetry, on_refused) -> None:
        self.layout = layout
        self.children = {c.name: ChildProcess(c, _argv(c, layout, serve_args), telemetry, on_refused)
                         for c in layout.children}

    def start(self) -> None:
        for child in self.children.values():
            child.start()

    async def spawned(self) -> None:
        """Once every child's first process exists."""
        for child in self.children.values():
            await child.until_spawned()

    def signal_all(self, sig: int) -> None:
        for child in self.children.values():
            child.signal(sig)

    async def stop(self, timeout_s: float = 120.0) -> None:
        """Queriers first (they read what the shards wrote), then the shards, each flushing its head."""
        queriers = [c for c in self.children.values() if c.child.role == "querier"]
        shards = [c for c in self.children.values() if c.child.role == "shard"]
        await asyncio.gather(*(c.stop(timeout_s) for c in queriers))
        await asyncio.gather(*(c.stop(timeout_s) for c in shards))


def _argv(child: Child, layout: Layout, serve_args: list[str]) -> list[str]:
    return [sys.executable, "-m", "metricsgw.procs.child", f"--role={child.role}", f"--index={child.index}",
            f"--socket={child.socket}", f"--parent-pid={os.getpid()}", f"--shards={layout.shards}",
            f"--queriers={layout.queriers}", "--", *serve_args]
