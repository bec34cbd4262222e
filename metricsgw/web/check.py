"""``metricsgw check web-config FILE...``: what ``promtool check web-config`` reports, with our checks.

Prints ``FILE SUCCESS`` or ``FILE FAILED: reason`` per file; exit code 1 if any failed. Beyond
promtool it runs the checks that only apply here (building the server's SSLContext)."""

from __future__ import annotations

import sys
from typing import Sequence, TextIO

from ..config import ConfigError
from .tls import build_ssl_context
from .webconfig import load_web_config


def main(files: Sequence[str], out: TextIO | None = None) -> int:
    out = out or sys.stderr  # where promtool prints it
    failed = False
    for path in files:
        try:
            cfg = load_web_config(path)
            if cfg.tls.enabled:
                build_ssl_context(cfg.tls, path)
        except ConfigError as err:
            print(f"{path} FAILED: {err}", file=out)
            failed = True
        else:
            print(f"{path} SUCCESS", file=out)
    return 1 if failed else 0
