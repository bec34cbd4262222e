"""`metricsgw serve [flags]`, `metricsgw check relabel FILE...`, `metricsgw check web-config FILE...` and
`metricsgw advise --url URL [--dashboards FILE...] [--rules FILE...] [--query-log FILE] [--out FILE.yml]`."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from .cmdline import build_parser, config_from_args, setup_logging
from .config import ConfigError


def main(argv: list[str] | None = None) -> int:
    as_program, argv = argv is None, sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if args.command == "check" and args.what == "web-config":
        from .web.check import main as check_web_config
        return check_web_config(args.files)
    if args.command == "check":
        from .rules.check import main as check_relabel
        return check_relabel(args.files)
    if args.command == "advise":
        from .advisor.command import main as advise
        return advise(args)
    try:
        cfg = config_from_args(args)
    except ConfigError as err:
        print(f"metricsgw: error: {err}", file=sys.stderr)
        return 2
    from . import gcpolicy, malloc

    if as_program:  # a call from Python (tests) is never replaced by another program
        _with_allocator(cfg.server_allocator)
    setup_logging(cfg, process=None if cfg.server_single_process else "front")
    logging.getLogger("metricsgw").info("C allocator: %s (--server.allocator=%s)", malloc.allocator(),
                                        cfg.server_allocator)
    malloc.tune()  # before any thread starts: arenas and the mmap threshold (malloc.py)
    gcpolicy.tune()
    try:
        if cfg.storage_table_url:
            from .app import check_table_store

            check_table_store(cfg)
        if cfg.server_single_process:
            asyncio.run(_serve(cfg))
        else:
            from .procs.serve import serve as serve_front

            asyncio.run(serve_front(cfg, argv[argv.index("serve") + 1:]))
    except ConfigError as err:
        print(f"metricsgw: error: {err}", file=sys.stderr)
        return 2
    return 0


def _with_allocator(choice: str) -> None:
    """Start this program again, same pid and arguments, with --server.allocator's allocator preloaded (malloc.py);
    its children inherit it. Before any thread or file: nothing is lost."""
    import os

    from . import malloc

    try:
        env = malloc.restart_env(choice, dict(os.environ))
    except ValueError as err:
        raise SystemExit(f"metricsgw: error: {err}") from None
    if env is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


async def _serve(cfg) -> None:
    from aiohttp import web

    from .app import build_app, reload
    from .compiled import start_loading
    from .web import listen_site

    start_loading(queries=True)  # a fixed cost of the process, loaded while the WAL replays
    app = build_app(cfg)
    host, _, port = cfg.web_listen_address.rpartition(":")
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    site = listen_site(runner, host or "0.0.0.0", int(port), cfg.web_max_connections)  # TLS per --web.config.file
    await site.start()
    logging.getLogger("metricsgw").info("listening on %s, storage at %s", site.name, cfg.storage_path)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    loop.add_signal_handler(signal.SIGHUP, lambda: reload(app))
    await stop.wait()
    await runner.cleanup()
