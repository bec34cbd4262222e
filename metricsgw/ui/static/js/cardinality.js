// The Cardinality page: /api/v1/status/tsdb's lists over the head or a window of days (every partition), a
// drill-down from a metric to its labels and from a label to its values, and each top metric's series day by day.

import { ApiError, data } from "./api.js";
import { $, bytes, count, el, message, show, table } from "./dom.js";

const DAY = 86400;

function windowParams() {
  const w = $("#window").value;
  if (w === "head") return {};
  if (w === "date") return $("#date").value ? { date: $("#date").value } : {};
  const end = Math.floor(Date.now() / 1000);
  return { start: end - Number(w) * DAY, end };
}

function state() {
  const q = new URLSearchParams(location.search);
  return { match: q.get("match") || "", focus: q.get("focusLabel") || "" };
}

function go(match, focus) {
  const q = new URLSearchParams(location.search);
  for (const [k, v] of [["match", match], ["focusLabel", focus]]) {
    if (v) q.set(k, v); else q.delete(k);
  }
  history.pushState(null, "", `?${q}`);
  $("#match").value = match || "";
  load();
}

function link(text, onclick) {
  return el("a", { href: "#", onclick: (e) => { e.preventDefault(); onclick(); } }, text);
}

function share(n, total) {
  return total ? `${((100 * n) / total).toFixed(1)}%` : "";
}

function section(title, id, columns, rows) {
  return el("section", { id, class: "card" }, el("h2", {}, title),
    rows.length ? table(columns, rows) : el("p", { class: "empty" }, "none"));
}

function render(d, match, focus) {
  const total = d.headStats.numSeries;
  const where = match ? ` of ${match}` : "";
  show($("#summary"),
    el("p", { id: "totals" }, el("strong", { id: "num-series" }, count(total)), ` series${where}, `,
      el("strong", { id: "num-pairs" }, count(d.headStats.numLabelPairs)), " label=value pairs",
      match ? [" ", link("(all metrics)", () => go("", ""))] : []));
  const metricsRows = d.seriesCountByMetricName.map((e) => [
    link(e.name, () => go(e.name, "")), count(e.value), share(e.value, total)]);
  const labelRows = d.labelValueCountByLabelName.map((e) => [
    link(e.name, () => go(match, e.name)), count(e.value)]);
  const pairRows = d.seriesCountByLabelValuePair.map((e) => [e.name, count(e.value), share(e.value, total)]);
  const memRows = d.memoryInBytesByLabelName.map((e) => [e.name, bytes(e.value)]);
  const parts = [
    match ? null : section("Metrics by series", "top-metrics", ["Metric", "Series", "Share"], metricsRows),
    section(`Labels${where} by distinct values`, "top-labels", ["Label", "Values"], labelRows),
    section(`Label=value pairs${where} by series`, "top-pairs", ["Pair", "Series", "Share"], pairRows),
    section(`Label bytes${where}`, "top-memory", ["Label", "Bytes"], memRows),
  ];
  if (focus && d.seriesCountByFocusLabelValue) {
    parts.unshift(section(`Values of ${focus}${where} by series`, "focus-values", ["Value", "Series", "Share"],
      d.seriesCountByFocusLabelValue.map((e) => [e.name, count(e.value), share(e.value, total)])));
  }
  show($("#tables"), parts);
}

async function load() {
  const { match, focus } = state();
  const params = { ...windowParams(), topN: $("#topN").value || 10, focusLabel: focus };
  if (match) params["match[]"] = match;
  show($("#messages"), message("info", "Counting..."));
  try {
    render(await data("api/v1/status/tsdb", params), match, focus);
    show($("#messages"));
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    show($("#messages"), message("error", `Error: ${err.message}`));
  }
}

function isoDay(t) {
  return new Date(t * 1000).toISOString().slice(0, 10);
}

// One table of a figure per day: the names of the newest day's top N, and what each counted on every day.
function growthTable(title, id, field, answers, days, topN, what) {
  const last = answers[answers.length - 1][field].slice(0, topN).map((e) => e.name);
  const byDay = answers.map((a) => new Map(a[field].map((e) => [e.name, e.value])));
  const rows = last.map((name) => [name, ...byDay.map((m) => count(m.get(name) || 0))]);
  return [el("h2", {}, title),
    rows.length ? table([what, ...days], rows, { id }) : el("p", { class: "empty" }, "none")];
}

async function growth() {
  const { match } = state();
  const today = Math.floor(Date.now() / 1000 / DAY) * DAY;
  const days = Array.from({ length: 7 }, (_, i) => isoDay(today - (6 - i) * DAY));
  const topN = Number($("#topN").value) || 10;
  const where = match ? ` of ${match}` : "";
  show($("#growth"), message("info", "Counting each day..."));
  try {
    const answers = await Promise.all(days.map((date) => data("api/v1/status/tsdb",
      { date, topN: 100000, ...(match ? { "match[]": match } : {}) })));
    show($("#growth"), [
      growthTable("Series per day (every partition)", "growth-table", "seriesCountByMetricName", answers, days, topN,
        "Metric"),
      growthTable(`Distinct values per day${where}`, "growth-labels", "labelValueCountByLabelName", answers, days,
        topN, "Label"),
      growthTable(`Series per label=value pair per day${where}`, "growth-pairs", "seriesCountByLabelValuePair",
        answers, days, topN, "Pair"),
    ].flat());
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    show($("#growth"), message("error", `Error: ${err.message}`));
  }
}

$("#match").value = state().match;
$("#window").addEventListener("change", () => {
  $("#date").hidden = $("#window").value !== "date";
  if (!$("#date").value) $("#date").value = isoDay(Date.now() / 1000); // today (UTC) until another day is picked
});
$("#card-form").addEventListener("submit", (e) => { e.preventDefault(); go($("#match").value.trim(), ""); });
$("#growth-button").addEventListener("click", growth);
window.addEventListener("popstate", () => { $("#match").value = state().match; load(); });
load();
