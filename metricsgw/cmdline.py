"""The command line of ``metricsgw``: its parser, the settings a ``serve`` command line gives, and the log set-up.

Apart from cli.py (which runs the commands) so the front's children (procs/child.py) parse the same ``serve``
flags without importing the command that starts them.
"""

from __future__ import annotations

import argparse
import logging

from . import __version__
from .config import SETTINGS, _bool, load


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


def _advise_parser(sub) -> None:
    """`metricsgw advise` (run by advisor/command.py)."""
    p = sub.add_parser("advise", help="propose relabel rules that drop what no dashboard, rule or query reads",
                       description="Compare what the gateway stores with what dashboards, rule files and the query "
                                   "log read, and propose relabel rules (never applied).")
    p.add_argument("--url", required=True, help="the gateway, e.g. http://HOST:9201")
    p.add_argument("--dashboards", nargs="+", default=[], metavar="FILE", help="Grafana dashboard JSON files")
    p.add_argument("--rules", nargs="+", default=[], metavar="FILE", help="Prometheus rule files (groups:)")
    p.add_argument("--query-log", action="append", default=[], metavar="FILE", help="a --query.log-file file")
    p.add_argument("--min-series", type=int, default=1, help="propose dropping unread metrics with at least this "
                                                              "many series (default: 1)")
    p.add_argument("--min-values", type=int, default=2, help="judge labels with at least this many values (default: 2)")
    p.add_argument("--top", type=int, default=10, help="judge the labels of this many read metrics, those with the "
                                                       "most series: one /api/v1/series call each (default: 10)")
    p.add_argument("--max-metrics", type=int, default=100000, help="metrics asked of /api/v1/status/tsdb")
    p.add_argument("--max-listed-series", type=int, default=100000, help="series listed per judged metric")
    p.add_argument("--basic-auth-user", default=None, help="the gateway's basic auth user")
    p.add_argument("--basic-auth-password-file", default=None, help="a file holding its password")
    p.add_argument("--out", default=None, metavar="FILE.yml", help="write the proposed relabel rules here")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="metricsgw", description="Prometheus-compatible metrics gateway and query guard.")
    parser.add_argument("--version", action="version", version=f"metricsgw {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _serve_parser(sub)
    check = sub.add_parser("check", help="validate files, like promtool check")
    check_sub = check.add_subparsers(dest="what", required=True)
    # "rules" is the old name: relabel rules are the only rules metricsgw takes (rules/check.py says so when
    # given a Prometheus rule file, which a ruler evaluates)
    relabel = check_sub.add_parser("relabel", aliases=["rules"], help="validate relabel rule files (--rules.file)")
    relabel.add_argument("files", nargs="+")
    web_config = check_sub.add_parser("web-config", help="validate --web.config.file files")
    web_config.add_argument("files", nargs="+")
    _advise_parser(sub)
    return parser


def config_from_args(args: argparse.Namespace):
    """The settings of a parsed ``serve`` command line (ConfigError names a bad one)."""
    overrides = {s.name: getattr(args, s.attr) for s in SETTINGS if hasattr(args, s.attr)}
    return load(overrides, args.config_file)


def setup_logging(cfg, process: str | None = None) -> None:
    proc = f"proc={process} " if process else ""
    logging.basicConfig(level=getattr(logging, cfg.log_level.upper().replace("WARN", "WARNING"), logging.INFO),
                        format=f"ts=%(asctime)s level=%(levelname)s {proc}component=%(name)s msg=%(message)s")
