"""`metricsgw serve [flags]` and `metricsgw check rules FILE...`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from . import __version__
from .config import SETTINGS, ConfigError, _bool, load


def _serve_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("serve", help="run the gateway",
                       description="Run the gateway. Every flag is also a config-file key (same name).")
    p.add_argument("--config.file", dest="config_file", default=None,
                   help="YAML file of settings; flags override it")
    for s in SETTINGS:
        kwargs = {"dest": s.attr, "help": s.help, "default": argparse.SUPPRESS, "metavar": "VALUE"}
        if s.repeated:
            kwargs["action"] = "append"
        elif s.parse is _bool:  # a bare --web.enable-lifecycle means true, as with Prometheus's flags
            kwargs.update(nargs="?", const="true")
        p.add_argument(s.flag, **kwargs)
        shown = "none" if s.repeated else s.shown_default
        p._option_string_actions[s.flag].help = f"{s.help} (default: {shown})"
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="metricsgw", description="Prometheus-compatible metrics gateway and query guard.")
    parser.add_argument("--version", action="version", version=f"metricsgw {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _serve_parser(sub)
    check = sub.add_parser("check", help="validate files, like promtool check")
    check_sub = check.add_subparsers(dest="what", required=True)
    rules = check_sub.add_parser("rules", help="validate relabel rule files")
    rules.add_argument("files", nargs="+")
    web_config = check_sub.add_parser("web-config", help="validate --web.config.file files")
    web_config.add_argument("files", nargs="+")
    return parser


def config_from_args(args: argparse.Namespace):
    """The settings of a parsed ``serve`` command line (ConfigError names a bad one)."""
    overrides = {s.name: getattr(args, s.attr) for s in SETTINGS if hasattr(args, s.attr)}
    return load(overrides, args.config_file)


def setup_logging(cfg, process: str | None = None) -> None:
    proc = f"proc={process} " if process else ""
    logging.basicConfig(level=getattr(logging, cfg.log_level.upper().replace("WARN", "WARNING"), logging.INFO),
                        format=f"ts=%(asctime)s level=%(levelname)s {proc}component=%(name)s msg=%(message)s")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if args.command == "check" and args.what == "web-config":
        from .web.check import main as check_web_config
        return check_web_config(args.files)
    if args.command == "check":
        from .rules.check import main as check_rules
        return check_rules(args.files)
    try:
        cfg = config_from_args(args)
    except ConfigError as err:
        print(f"metricsgw: error: {err}", file=sys.stderr)
        return 2
    setup_logging(cfg, process=None if cfg.server_single_process else "front")
    from . import gcpolicy, malloc

    malloc.tune()  # before any thread starts: arenas and the mmap threshold (malloc.py)
    gcpolicy.tune()
    try:
        if cfg.server_single_process:
            asyncio.run(_serve(cfg))
        else:
            from .procs.front import serve as serve_front

            asyncio.run(serve_front(cfg, argv[argv.index("serve") + 1:]))
    except ConfigError as err:
        print(f"metricsgw: error: {err}", file=sys.stderr)
        return 2
    return 0


async def _serve(cfg) -> None:
    from aiohttp import web

    from .app import build_app
    from .appkeys import RULES
    from .compiled import start_loading
    from .web import listen_site

    start_loading()  # a fixed cost of the process, loaded while the WAL replays
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
    loop.add_signal_handler(signal.SIGHUP, lambda: app[RULES].reload())
    await stop.wait()
    await runner.cleanup()
