// The Advisor page: /api/v1/status/advise's proposals (what nothing reads, and the labels no query of a metric
// reads), the relabel rules as YAML and a link to download them. Nothing is applied.

import { ApiError, data } from "./api.js";
import { $, bytes, count, el, message, show, table } from "./dom.js";

function params() {
  return { minSeries: $("#minSeries").value, top: $("#top").value };
}

function render(a) {
  const q = new URLSearchParams({ ...params(), format: "yaml" });
  return [
    el("p", { id: "advice-summary" }, `${count(a.metrics)} metrics, ${count(a.series)} series; ${count(a.queries)} `
      + `queries read ${count(a.readMetrics)} of them. Read from: ${a.sources.dashboards.length} dashboards, `
      + `${a.sources.ruleFiles.length} rule files, ${a.sources.queryLogs.length ? "the query log" : "no query log"}.`),
    a.everyMetricRead.length ? message("warning", `These select series without a metric name, so every metric `
      + `counts as read: ${a.everyMetricRead.join(", ")}`) : null,
    el("h2", {}, `Drop: ${a.drops.length} unread metrics, ${count(a.droppedSeries)} series`),
    el("p", {}, `No dashboard, rule or logged query reads them; no query changes. ${a.smallUnread} smaller unread `
      + "metrics are left alone."),
    a.drops.length ? table(["Metric", "Series"], a.drops.map((d) => [el("code", {}, d.metric), count(d.series)]),
      { id: "drops-table" }) : el("p", { class: "empty" }, "none"),
    el("h2", {}, `Remove labels: ${a.labelRemovals.length} metrics`),
    el("p", {}, "Labels no query of the metric reads; its series stay distinct without them. A removal that "
      + "changes a query's output is written commented out in the rules: you decide."),
    a.labelRemovals.length ? table(["Metric", "Labels (values)", "Bytes", "Queries whose output changes"],
      a.labelRemovals.map((r) => [el("code", {}, r.metric),
        r.labels.map((l, i) => `${l} (${r.values[i]})`).join(", "), bytes(r.bytes),
        r.changedQueries.length ? el("ul", {}, r.changedQueries.map((x) => el("li", {}, x))) : "none"]),
      { id: "removals-table" }) : el("p", { class: "empty" }, "none"),
    a.notProposed.length ? [el("h2", {}, "Not proposed"), table(["Metric", "Label", "Why"],
      a.notProposed.map((u) => [u.metric, u.label, u.reason]))] : null,
    a.unparsed.length ? [el("h2", {}, `Not understood (${a.unparsed.length}; the metrics they read are not counted)`),
      table(["Where", "Error"], a.unparsed.map((u) => [u.query, u.error]))] : null,
    el("h2", {}, "Relabel rules"),
    el("p", {}, el("a", { id: "download", href: `api/v1/status/advise?${q}`, download: "metricsgw-advisor-relabel.yml" },
      "Download as a --rules.file"), " (check it with ", el("code", {}, "metricsgw check relabel FILE"), ")"),
    el("pre", { id: "rules-yaml" }, a.relabelRules),
  ];
}

async function load() {
  show($("#messages"), message("info", "Advising..."));
  try {
    show($("#advice"), render(await data("api/v1/status/advise", params())).flat());
    show($("#messages"));
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    show($("#messages"), message("error", `Error: ${err.message}`));
  }
}

$("#advise-form").addEventListener("submit", (e) => { e.preventDefault(); load(); });
load();
