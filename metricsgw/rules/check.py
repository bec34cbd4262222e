"""``metricsgw check relabel FILE...`` (or its old name, ``check rules``): validate relabel rule files, reported
the way ``promtool check rules`` reports. A Prometheus rule file (``groups:``) is refused naming promtool.

Checking FILE
  SUCCESS: N rules found

or, on stderr, ``  FAILED:`` and the reason (file, rule index, why). Exit code 0 if every file
is valid, 1 otherwise.
"""

from __future__ import annotations

import sys
from typing import Sequence, TextIO

from .loader import load_rule_file
from .relabel import RuleError


def main(files: Sequence[str], out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    if not files:
        print("usage: metricsgw check relabel FILE...", file=err)
        return 1
    failed = False
    for path in files:
        print(f"Checking {path}", file=out)
        try:
            rules = load_rule_file(path)
        except RuleError as exc:
            failed = True
            print("  FAILED:", file=err)
            print(str(exc), file=err)
        else:
            print(f"  SUCCESS: {len(rules)} rules found", file=out)
        print(file=out)
    return 1 if failed else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
