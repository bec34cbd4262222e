"""A child of the front: ``python -m metricsgw.procs.child --role=shard --index=0 ... -- <serve flags>``.

It is a whole one-process gateway (``build_app``) with the settings ``layout.child_config`` gives it,
listening on its Unix socket only. It dies with the front (PR_SET_PDEATHSIG, SIGKILL), shuts down in order on
SIGTERM (the last flush included), and reloads its rules on SIGHUP, as ``metricsgw serve`` does. If it
cannot start with its settings (another live process holds its writer id, a setting is refused) it exits
with ``EXIT_REFUSED`` and the front stops the gateway instead of restarting it.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import logging
import os
import signal
import sys

from ..cmdline import build_parser, config_from_args, setup_logging
from ..config import ConfigError
from ..storage.files.writer_lock import WriterIdInUse
from .handoff import HandoffReceiver, front_answers, install_relay, not_a_write
from .layout import EXIT_REFUSED, Child, Layout, child_config, unlink_socket

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Let the kernel kill us when the front exits, however it exits. SIGKILL, not SIGTERM: a front that
    exits in order stops its children first, so this fires only when it died (kill -9, OOM); a child still
    flushing then could meet the next front's child on the same WAL, and the WAL already holds everything
    acknowledged."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent_pid:  # the front died before prctl took effect
        sys.exit(0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="metricsgw.procs.child")
    p.add_argument("--role", choices=("shard", "querier"), required=True)
    p.add_argument("--index", type=int, required=True)
    p.add_argument("--socket", required=True)
    p.add_argument("--parent-pid", type=int, required=True)
    p.add_argument("--shards", type=int, required=True)
    p.add_argument("--queriers", type=int, required=True)
    p.add_argument("serve_args", nargs=argparse.REMAINDER)
    own = p.parse_args(argv)
    die_with_parent(own.parent_pid)
    serve_args = own.serve_args[1:] if own.serve_args[:1] == ["--"] else own.serve_args
    front_cfg = config_from_args(build_parser().parse_args(["serve", *serve_args]))
    child = Child(own.role, own.index, own.socket)
    layout = Layout(own.shards, own.queriers, os.path.dirname(own.socket))
    cfg = child_config(front_cfg, child, layout)
    setup_logging(cfg, process=child.name)
    if child.role == "querier" and cfg.query_processes_niceness:
        # Below ingest: on a machine with fewer cores than busy processes, a heavy query must not take a shard's
        # turn on a core (the write latency a sender sees). Children of ours inherit it; nothing else changes.
        os.nice(cfg.query_processes_niceness)
    from .. import gcpolicy, malloc, testhooks

    malloc.tune()
    gcpolicy.tune()
    testhooks.hold_start(child.name)
    try:
        asyncio.run(_serve(cfg, child, layout))
    except (ConfigError, WriterIdInUse) as err:  # starting again would fail again: tell the front to give up
        print(f"metricsgw: error: {child.name}: {err}", file=sys.stderr)
        return EXIT_REFUSED
    return 0


async def _serve(cfg, child: Child, layout: Layout) -> None:
    from aiohttp import web

    from ..app import build_app
    from ..appkeys import REPLAY_TASK, RULES, STORAGE
    from ..cluster.extent_board import BoardWriter, path_for
    from ..compiled import start_loading

    app = build_app(cfg)
    board = None
    if child.role == "shard":  # before the storage opens: UNKNOWN until its WAL is replayed
        board = BoardWriter(path_for(child.socket))
        app[STORAGE].extent_sink = board.publish
        app[STORAGE].late_sink = board.publish_late  # the query processes' results caches read it
    # It may be passed client connections (handoff.py): a query process a query's, the one shard a sender's.
    takes_connections = child.role == "querier" or layout.shards == 1
    if takes_connections:
        install_relay(app, cfg, layout.front_socket, front_answers if child.role == "querier" else not_a_write)
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    receiver = None
    if takes_connections:  # listening before the socket the front probes: once started, it can take connections
        unlink_socket(layout.handoff_socket(child))
        receiver = HandoffReceiver(layout.handoff_socket(child), runner.server)
        receiver.start()
    unlink_socket(child.socket)  # left by a predecessor that was killed
    site = web.UnixSite(runner, child.socket)
    await site.start()
    logging.getLogger("metricsgw").info("%s listening on %s, storage at %s", child.name, child.socket,
                                        cfg.storage_path)
    # A fixed cost of the process, once its storage is open: loading them meanwhile takes the GIL and a core from
    # the series table's load, which is what a restart waits for (numpy paths answer the first writes and queries;
    # a shard loading its kernels while its storage opened made a restart at 2.7M series ~0.5 s longer)
    kernels = asyncio.get_running_loop().create_task(_after(
        app[REPLAY_TASK], lambda: start_loading(writes=child.role == "shard", queries=child.role == "querier")))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, lambda: None)  # a terminal's Ctrl-C reaches the front, which stops us
    loop.add_signal_handler(signal.SIGHUP, lambda: app[RULES].reload())
    await stop.wait()
    kernels.cancel()
    if receiver is not None:
        receiver.close()
        unlink_socket(layout.handoff_socket(child))
    await runner.cleanup()
    if board is not None:
        # The file stays: a query process maps it, and a next shard takes it over; the front deletes it once
        # every process has stopped.
        board.close()
    unlink_socket(child.socket)  # a copy of a stopped gateway's directory (a backup, tests) must not meet a socket


async def _after(task: asyncio.Task, then) -> None:
    await asyncio.wait([task])  # not awaited itself: its failure is the storage's to report
    then()


if __name__ == "__main__":
    sys.exit(main())
