"""``GET /api/v1/status/advise``: the advisor's proposals (advisor/run.py, the run ``metricsgw advise`` makes), from
what this gateway stores and what reads it: the shipped dashboards/ and rules/alerts/, --advisor.dashboards,
--advisor.rule-files and --query.log-file. ``?format=yaml`` answers the proposed relabel rules as a file to download
(for rules/relabel/, checked by ``metricsgw check relabel``); ``minSeries`` and ``top`` as the command's flags.

A single process counts its own storage (``StorageSource``); the front asks its shards and a query process
(procs/front_status.py). Either way nothing is applied.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from aiohttp import web

from ..advisor.report import advice_json, relabel_yaml
from ..advisor.run import Advice, Options, Source, advise, usage_of
from ..appkeys import CONFIG, STORAGE
from ..config import Config
from ..errors import BadData
from ..http.params import read_params
from ..http.response import success
from ..model import Matcher
from .query import query_context
from .running import run_guarded

REPO = Path(__file__).resolve().parents[2]  # a checkout (or an editable install) ships these beside the package
SHIPPED_DASHBOARDS = REPO / "dashboards"
SHIPPED_RULES = REPO / "rules" / "alerts"


def usage_files(cfg: Config) -> tuple[list[str], list[str], list[str]]:
    """(dashboards, rule files, query logs) the advisor reads."""
    def shipped(folder: Path, suffixes: tuple[str, ...]) -> list[str]:
        return sorted(str(p) for p in folder.glob("*") if p.suffix in suffixes) if folder.is_dir() else []
    logs = [cfg.query_log_file] if cfg.query_log_file and os.path.exists(cfg.query_log_file) else []
    return ([*shipped(SHIPPED_DASHBOARDS, (".json",)), *cfg.advisor_dashboards],
            [*shipped(SHIPPED_RULES, (".yml", ".yaml")), *cfg.advisor_rule_files], logs)


def options_of(params) -> Options:
    def number(name: str, default: int) -> int:
        text = params.get(name)
        if not text:
            return default
        if not text.isdigit():
            raise BadData(f'invalid parameter "{name}": {text!r} is not a whole number')
        return int(text)
    default = Options()
    return Options(min_series=number("minSeries", default.min_series), top=number("top", default.top))


def run(cfg: Config, source: Source, options: Options) -> Advice:
    dashboards, rules, logs = usage_files(cfg)
    try:
        usage = usage_of(dashboards, rules, logs)
    except OSError as err:
        raise BadData(f"the advisor cannot read the query log: {err}") from None
    return advise(source, usage, options)


def answer(advice: Advice, params, files: tuple[list[str], list[str], list[str]]) -> web.Response:
    if params.get("format") == "yaml":
        return web.Response(text=relabel_yaml(advice.proposals), content_type="application/yaml", headers={
            "Content-Disposition": 'attachment; filename="metricsgw-advisor-relabel.yml"'})
    body = advice_json(advice.counts, advice.usage, advice.proposals, advice.options.min_series)
    body["sources"] = {"dashboards": [Path(p).name for p in files[0]], "ruleFiles": [Path(p).name for p in files[1]],
                       "queryLogs": files[2]}
    return success(body)


class StorageSource:
    """What one process stores: the head's series counts, as /api/v1/status/tsdb, and /api/v1/series' listing over
    --query.metadata-default-window."""

    def __init__(self, storage, window_s: float, ctx=None) -> None:  # noqa: ANN001
        self.storage, self.window_s, self.ctx = storage, window_s, ctx

    def series_counts(self, limit: int) -> dict[str, int]:
        return {e["name"]: e["value"] for e in self.storage.tsdb_status(limit)["seriesCountByMetricName"]}

    def list_series(self, metric: str, limit: int) -> list[dict[str, str]] | None:
        end_ms = int(time.time() * 1000)
        found = self.storage.select_series([Matcher("__name__", "=", metric)], end_ms - int(self.window_s * 1000),
                                           end_ms, self.ctx, limit=limit + 1).labels
        return None if len(found) > limit else [dict(lb) for lb in found]


async def advise_handler(request: web.Request) -> web.Response:
    params = await read_params(request)
    cfg = request.app[CONFIG]
    options = options_of(params)
    ctx = query_context(request, params.get("timeout"), metadata=True)
    ctx.max_series = max(ctx.max_series, (options.max_listed_series + 1) * options.top)  # listings are bounded
    source = StorageSource(request.app[STORAGE], cfg.query_metadata_default_window, ctx)
    advice = await run_guarded(request, "advise", ctx, lambda: run(cfg, source, options))
    return answer(advice, params, usage_files(cfg))
