"""The Status page's data, as Prometheus's ``/api/v1/status/*`` names it, plus the gateway's own layout.

- ``flags``: every setting in force, by its flag name, as text (Prometheus: the command line's flags); a password
  in a peer's URL is hidden.
- ``runtimeinfo``: Prometheus's fields that mean something here (start time, working directory, the last rules
  reload, retention) and the Python runtime's.
- ``config``: the relabel rules in force (``--rules.file``), as YAML (Prometheus's ``yaml`` field) and one by one.
- ``layout``: the processes serving, each with its health, the ``--cluster.peers`` and their last state, and the
  storage's directories with their sizes. A single process answers for itself; the front answers for the whole
  gateway (procs/front_status.py), from the same pieces.
"""

from __future__ import annotations

import os
import platform
import re
import sys
import time

import yaml
from aiohttp import web

from .. import malloc
from ..appkeys import CONFIG, PEERS, RULES, STORAGE
from ..config import SETTINGS, Config, format_duration
from ..http.response import success

STARTED = time.time()
_URL_PASSWORD = re.compile(r"(://[^/@:\s]*):[^/@\s]*@")


def flags(cfg: Config) -> dict[str, str]:
    out = {}
    for s in SETTINGS:
        value = getattr(cfg, s.attr)
        text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
        out[s.name] = _URL_PASSWORD.sub(r"\1:<secret>@", text)
    return out


def runtime(cfg: Config, rules) -> dict:  # noqa: ANN001 (rules: a RuleHolder)
    return {"startTime": _rfc3339(STARTED), "CWD": os.getcwd(),
            "reloadConfigSuccess": rules.last_ok, "lastConfigTime": _rfc3339(rules.last_time), "storageRetention": format_duration(cfg.storage_retention_time),
            "pythonVersion": platform.python_version(), "pythonImplementation": platform.python_implementation(),
            "platform": sys.platform, "cpuCount": os.cpu_count() or 0, "allocator": malloc.allocator()}


def _rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def rules_config(rules) -> dict:  # noqa: ANN001 (a RuleHolder)
    current = rules.current
    listed = []
    for rule, source in zip(current.rules, current.sources):
        one = {"source": source, "action": rule.action}
        if rule.source_labels:
            one["source_labels"] = list(rule.source_labels)
        for key in ("regex", "target_label", "replacement", "separator"):
            one[key] = getattr(rule, key)
        if rule.modulus:
            one["modulus"] = rule.modulus
        listed.append(one)
    text = yaml.safe_dump([{k: v for k, v in r.items() if k != "source"} for r in listed], sort_keys=False) \
        if listed else "[]\n"
    return {"yaml": text, "files": list(rules.paths), "rules": listed, "reloads": rules.generation}


def storage_sizes(path: str) -> list[dict]:
    """Bytes and files under each part of the storage directory: the WAL, each kind of table file, the rest."""
    sizes: dict[str, list[int]] = {}
    for dirpath, _, files in os.walk(path):
        rel = os.path.relpath(dirpath, path).split(os.sep)
        part = "/".join(rel[:2]) if rel[0] == "table" else rel[0] if rel[0] != "." else "(top)"
        entry = sizes.setdefault(part, [0, 0])
        for name in files:
            try:
                entry[0] += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:  # removed meanwhile (a compaction, a WAL segment)
                continue
            entry[1] += 1
    return [{"name": k, "bytes": v[0], "files": v[1]} for k, v in sorted(sizes.items()) if v[1]]


def peers_of(fanout) -> list[dict]:  # noqa: ANN001 (a PeerFanout or None)
    if fanout is None:
        return []
    return [{"name": p.name, "state": p.state} for p in fanout.peers if not p.primary]


async def flags_handler(request: web.Request) -> web.Response:
    return success(flags(request.app[CONFIG]))


async def runtimeinfo(request: web.Request) -> web.Response:
    return success(runtime(request.app[CONFIG], request.app[RULES]))


async def config(request: web.Request) -> web.Response:
    return success(rules_config(request.app[RULES]))


async def layout(request: web.Request) -> web.Response:
    """One process's own layout (a single process; in a query process, its view, which the front asks for)."""
    cfg, storage = request.app[CONFIG], request.app[STORAGE]
    reason = storage.not_ready_reason()
    return success({
        "singleProcess": True,
        "parts": [{"name": "metricsgw", "role": "single process", "pid": os.getpid(), "healthy": reason is None,
                   "status": "ready" if reason is None else reason}],
        "peers": peers_of(request.app[PEERS]),
        "storage": {"path": cfg.storage_path, "parts": storage_sizes(cfg.storage_path)}})
