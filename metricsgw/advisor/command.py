"""``metricsgw advise``: read the usage sources, ask the gateway for its counts, print the report, write the YAML.

Exit code 0 when it ran (proposals or not), 1 when the gateway or a file could not be read.
"""

from __future__ import annotations

import sys
from typing import TextIO

from .counts import Counts, Gateway
from .propose import metrics_to_list, propose
from .report import relabel_yaml, text_report
from .sources import dashboard_usage, query_log_usage, rule_file_usage
from .usage import Usage


def main(args, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    usage = Usage([], [])
    for path in args.dashboards:
        usage += dashboard_usage(path)
    for path in args.rules:
        usage += rule_file_usage(path)
    try:
        for path in args.query_log:
            usage += query_log_usage(path)
        password = None
        if args.basic_auth_password_file:
            with open(args.basic_auth_password_file, encoding="utf-8") as f:
                password = f.read().strip()
        gateway = Gateway(args.url, args.basic_auth_user, password)
        counts = Counts(gateway.series_counts(args.max_metrics))
        gateway.list_series(counts, metrics_to_list(counts.series, usage, args.min_series, args.top),
                            args.max_listed_series)
    except (OSError, ValueError, KeyError) as exc:
        print(f"metricsgw advise: {exc}", file=err)
        return 1
    proposals = propose(counts, usage, args.min_series, args.min_values)
    out.write(text_report(counts, usage, proposals, args.min_series))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(relabel_yaml(proposals))
        print(f"\nWrote the proposed relabel rules to {args.out} (not applied).", file=out)
    return 0
