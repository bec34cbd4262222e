"""Ask the real Prometheus (/usr/bin/prometheus, 2.42) what a .test script's evals return.

    .venv/bin/python -m tests.promql.oracle tests/promql/testdata/functions.test

For each block of loads (between ``clear``s) the samples are written as OpenMetrics,
turned into TSDB blocks with ``promtool tsdb create-blocks-from openmetrics``, served by a
throw-away Prometheus, and every eval of that block is queried over HTTP. Prints, per eval,
Prometheus's answer next to the script's expectation and ours, so expected values in our
own scripts come from Prometheus, not from us. Blocks with ``stale`` samples are skipped
(OpenMetrics cannot carry staleness markers). A developer tool, not a pytest test.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

from metricsgw.errors import GatewayError
from metricsgw.limits.context import QueryContext
from metricsgw.model import STALE_NAN_BITS
from metricsgw.promql.engine import Engine
from metricsgw.promql.memsource import MemSource
from metricsgw.promql.value import Scalar, Vector

from .promqltest import almost_equal, expand_values, parse_duration_ms, parse_series, _parse_eval


def _segments(path: str):
    """Yield (loads, evals) per clear-separated block: loads = [(labels, [(t, v)])]."""
    lines = open(path, encoding="utf-8").read().split("\n")
    loads, evals = [], []
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if line == "clear":
            yield loads, evals
            loads, evals = [], []
        elif line.startswith("load "):
            interval = parse_duration_ms(line.split(None, 1)[1])
            while i < len(lines) and lines[i].strip() and lines[i][:1] in " \t" and not lines[i].strip().startswith("#"):
                labels, rest = parse_series(lines[i])
                vals = expand_values(rest)
                loads.append((labels, [(k * interval, v) for k, v in enumerate(vals) if v is not None]))
                i += 1
        else:
            ev = _parse_eval(line, i)
            if ev is not None:
                expected = []
                while i < len(lines) and lines[i].strip() and lines[i][:1] in " \t":
                    expected.append(lines[i].strip())
                    i += 1
                evals.append((ev, expected))
    yield loads, evals


def _openmetrics(loads) -> str:
    rows = []
    for labels, pts in loads:
        name = dict(labels).get("__name__", "")
        lbl = ",".join(f'{n}="{v}"' for n, v in labels if n != "__name__")
        for t, v in pts:
            val = "NaN" if math.isnan(v) else ("+Inf" if v == math.inf else "-Inf" if v == -math.inf else repr(v))
            rows.append((name, labels, t, f"{name}{{{lbl}}} {val} {t / 1000:.3f}"))
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    return "\n".join(r[3] for r in rows) + "\n# EOF\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _query(port: int, expr: str, t_s: float) -> dict:
    qs = urllib.parse.urlencode({"query": expr, "time": f"{t_s:.3f}"})
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?{qs}", timeout=10) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        return json.load(e)


def _query_range(port: int, expr: str, start: float, end: float, step: float) -> dict:
    qs = urllib.parse.urlencode({"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step}"})
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query_range?{qs}", timeout=10) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        return json.load(e)


def _ours_range(loads, expr: str, start: float, end: float, step: float):
    src = MemSource()
    for labels, pts in loads:
        if pts:
            src.add(labels, [p[0] for p in pts], [p[1] for p in pts])
    try:
        return Engine(src).range(expr, start, end, step, QueryContext())
    except GatewayError as e:
        return e


def _same_range(prom: dict, ours) -> bool:
    if prom.get("status") != "success":
        return isinstance(ours, GatewayError)
    if isinstance(ours, GatewayError):
        return False
    want = {}
    for r in prom["data"]["result"]:
        want[tuple(sorted(r["metric"].items()))] = {round(float(t) * 1000): float(v) for t, v in r["values"]}
    got = {}
    for k, l in enumerate(ours.labels):
        ts, vs = ours.points(k)
        got[l] = dict(zip(ts.tolist(), vs.tolist()))
    if set(want) != set(got):
        return False
    return all(set(want[l]) == set(got[l]) and all(almost_equal(want[l][t], got[l][t]) for t in want[l]) for l in want)


def _ours(loads, expr: str, t_s: float):
    src = MemSource()
    for labels, pts in loads:
        if pts:
            src.add(labels, [p[0] for p in pts], [p[1] for p in pts])
    try:
        return Engine(src).instant(expr, t_s, QueryContext())
    except GatewayError as e:
        return e


def _same(prom: dict, ours) -> bool:
    if prom.get("status") != "success":
        return isinstance(ours, GatewayError)
    data = prom["data"]
    if data["resultType"] == "scalar":
        return isinstance(ours, Scalar) and almost_equal(float(data["result"][1]), ours.v)
    if data["resultType"] != "vector" or not isinstance(ours, Vector):
        return False
    want = {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in data["result"]}
    got = dict(zip(ours.labels, ours.values.tolist()))
    return set(want) == set(got) and all(almost_equal(want[k], got[k]) for k in want)


def _expected_lines(prom: dict) -> list[str]:
    """Prometheus's answer in the script's expected-series syntax (for --fill)."""
    data = prom["data"]
    if data["resultType"] == "scalar":
        return [f"  {data['result'][1]}"]
    out = []
    for r in data["result"]:
        m = dict(r["metric"])
        name = m.pop("__name__", "")
        lbl = ", ".join(f'{k}="{v}"' for k, v in sorted(m.items()))
        out.append(f"  {name}{{{lbl}}} {r['value'][1]}")
    return out


FILLED: dict[int, tuple[bool, list[str]]] = {}


def main(path: str) -> int:
    bad = 0
    for loads, evals in _segments(path):
        if not evals:
            continue
        if any(any(math.isnan(v) and _bits(v) == STALE_NAN_BITS for _, v in pts) for _, pts in loads):
            print(f"# skipped a block with stale markers ({len(evals)} evals)")
            continue
        tmp = tempfile.mkdtemp(prefix="oracle-")
        try:
            data = os.path.join(tmp, "data")
            om = os.path.join(tmp, "in.om")
            open(om, "w").write(_openmetrics(loads))
            if loads:
                subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", om, data],
                               check=True, capture_output=True)
            cfg = os.path.join(tmp, "p.yml")
            open(cfg, "w").write("global: {scrape_interval: 1h}\n")
            port = _free_port()
            proc = subprocess.Popen(["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={data}",
                                     f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=100y"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                for _ in range(100):
                    try:
                        urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=1)
                        break
                    except Exception:
                        time.sleep(0.1)
                for ev, expected in evals:
                    if ev.kind == "range":
                        bad += _check_range_eval(port, path, loads, ev, expected)
                        continue
                    t = ev.at_ms / 1000.0
                    prom = _query(port, ev.expr, t)
                    ok_prom = prom.get("status") == "success"
                    FILLED[ev.line] = (ok_prom, _expected_lines(prom) if ok_prom else [])
                    ours = _ours(loads, ev.expr, t)
                    ok = _same(prom, ours)
                    bad += not ok
                    mark = "ok  " if ok else "DIFF"
                    print(f"{mark} {os.path.basename(path)}:{ev.line}: {ev.expr}")
                    # The same expression as a range query with an odd step around the instant.
                    rs, re_, st = max(0.0, t - 400), t + 200, 37
                    pr = _query_range(port, ev.expr, rs, re_, st)
                    orr = _ours_range(loads, ev.expr, rs, re_, st)
                    if not _same_range(pr, orr):
                        bad += 1
                        print(f"DIFF {os.path.basename(path)}:{ev.line}: range {rs}..{re_} step {st}: {ev.expr}")
                        print(f"     prometheus: {json.dumps(pr.get('data', pr.get('error')))[:1500]}")
                        print(f"     ours:       {orr}"[:1500])
                    if not ok:
                        print(f"     prometheus: {json.dumps(prom.get('data', prom.get('error')))}")
                        print(f"     ours:       {ours}")
                        print(f"     script:     {expected}")
            finally:
                proc.terminate()
                proc.wait()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return bad


def _check_range_eval(port, path, loads, ev, expected) -> int:
    a, b, st = ev.start_ms / 1000, ev.end_ms / 1000, ev.step_ms / 1000
    pr = _query_range(port, ev.expr, a, b, st)
    ok_prom = pr.get("status") == "success"
    FILLED[ev.line] = (ok_prom, _range_lines(pr, ev) if ok_prom else [])
    ok = _same_range(pr, _ours_range(loads, ev.expr, a, b, st))
    print(f"{'ok  ' if ok else 'DIFF'} {os.path.basename(path)}:{ev.line}: {ev.expr}")
    if not ok:
        print(f"     prometheus: {json.dumps(pr.get('data', pr.get('error')))[:1500]}")
        print(f"     script:     {expected}")
    return 0 if ok else 1


def _range_lines(prom: dict, ev) -> list[str]:
    """A query_range answer as promqltest range lines: one value per step, '_' for none."""
    steps = list(range(ev.start_ms, ev.end_ms + 1, ev.step_ms))
    out = []
    for r in prom["data"]["result"]:
        m = dict(r["metric"])
        name = m.pop("__name__", "")
        lbl = ", ".join(f'{k}="{v}"' for k, v in sorted(m.items()))
        pts = {round(float(t) * 1000): v for t, v in r["values"]}
        out.append(f"  {name}{{{lbl}}} " + " ".join(pts.get(t, "_") for t in steps))
    return out


def _bits(v: float) -> int:
    import struct

    return struct.unpack("<Q", struct.pack("<d", v))[0]


def fill(path: str) -> None:
    """Rewrite a script's expected lines with Prometheus's answers (eval_fail on errors)."""
    main(path)
    lines = open(path, encoding="utf-8").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        i += 1
        ev = _parse_eval(line.strip(), i)
        if ev is None or ev.line not in FILLED:
            out.append(line)
            continue
        ok, exp = FILLED[ev.line]
        head = line.strip()
        head = head.replace("eval_fail ", "eval ", 1) if ok else head.replace("eval ", "eval_fail ", 1)
        out.append(head)
        out.extend(exp)
        while i < len(lines) and lines[i].strip() and lines[i][:1] in " \t":
            i += 1
    open(path, "w", encoding="utf-8").write("\n".join(out))


if __name__ == "__main__":
    if sys.argv[1] == "--fill":
        for p in sys.argv[2:]:
            fill(p)
        sys.exit(0)
    sys.exit(1 if sum(main(p) for p in sys.argv[1:]) else 0)
