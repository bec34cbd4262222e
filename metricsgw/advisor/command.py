"""``metricsgw advise``: read the usage sources, ask the gateway for its counts, print the report, write the YAML.

Exit code 0 when it ran (proposals or not), 1 when the gateway or a file could not be read.
"""

from __future__ import annotations

import sys
from typing import TextIO

from .gateway import Gateway
from .report import relabel_yaml, text_report
from .run import Options, advise, usage_of


def main(args, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    options = Options(args.min_series, args.min_values, args.top, args.max_metrics, args.max_listed_series)
    try:
        usage = usage_of(args.dashboards, args.rules, args.query_log)
        password = None
        if args.basic_auth_password_file:
            with open(args.basic_auth_password_file, encoding="utf-8") as f:
                password = f.read().strip()
        advice = advise(Gateway(args.url, args.basic_auth_user, password), usage, options)
    except (OSError, ValueError, KeyError) as exc:
        print(f"metricsgw advise: {exc}", file=err)
        return 1
    out.write(text_report(advice.counts, advice.usage, advice.proposals, options.min_series))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(relabel_yaml(advice.proposals))
        print(f"\nWrote the proposed relabel rules to {args.out} (not applied).", file=out)
    return 0
