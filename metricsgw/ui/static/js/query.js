// The Query page: an expression, run as an instant query (Table) or a range query (Graph), its warnings, and a
// refusal of the guard named by the limit that fired and the flag's value now.

import { ApiError, call, data, flagsIn } from "./api.js";
import { Autocomplete } from "./autocomplete.js";
import { $, el, message, seriesName, show, table } from "./dom.js";
import { draw } from "./graph.js";

const UNITS = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86400, w: 604800, y: 31536000 };
let tab = "table";
let chart = null;

export function parseDuration(text) {
  const t = String(text).trim();
  if (/^\d+(\.\d+)?$/.test(t)) return Number(t) || null;
  if (!/^(\d+(\.\d+)?(ms|s|m|h|d|w|y))+$/.test(t)) return null;
  return t.match(/\d+(\.\d+)?(ms|s|m|h|d|w|y)/g)
    .reduce((sum, p) => sum + parseFloat(p) * UNITS[p.match(/[a-z]+$/)[0]], 0);
}

function evalTime() {
  const v = $("#time").value;
  return v ? new Date(v).getTime() / 1000 : Date.now() / 1000;
}

function selectTab(name) {
  tab = name;
  $("#tab-table").setAttribute("aria-selected", String(name === "table"));
  $("#tab-graph").setAttribute("aria-selected", String(name === "graph"));
  $("#table-view").hidden = name !== "table";
  $("#graph-view").hidden = name !== "graph";
  document.querySelectorAll(".graph-only").forEach((n) => { n.hidden = name !== "graph"; });
}

function notes(body) {
  const out = [];
  for (const w of body.warnings || []) out.push(message("warning", `Warning: ${w}`));
  for (const i of body.infos || []) out.push(message("info", `Info: ${i}`));
  return out;
}

async function refusal(err) {
  const flags = flagsIn(err.message);
  if (!flags.length) return [message("error", `Error: ${err.message}`)];
  let now = {};
  try {
    now = await data("api/v1/status/flags");
  } catch { /* the flag's name is enough */ }
  const limits = flags.map((f) => (now[f.slice(2)] !== undefined ? `${f} (now ${now[f.slice(2)]})` : f)).join(", ");
  return [el("div", { class: "msg error refusal", role: "alert" },
    el("strong", {}, "Refused by the guard"), ` (HTTP ${err.status}): ${err.message}`,
    el("div", { class: "limit" }, "Limit: ", el("code", { class: "flag" }, limits),
      ". Raise it on the gateway, or narrow the query (shorter range, fewer series, a larger step)."))];
}

function valueRows(result, type) {
  if (type === "scalar" || type === "string") return [[type, String(result[1])]];
  if (type === "matrix") {
    return result.map((s) => [seriesName(s.metric),
      el("div", { class: "values" }, (s.values || []).map(([t, v]) => el("div", {}, `${v} @${t}`)))]);
  }
  return result.map((s) => [seriesName(s.metric), s.value ? s.value[1] : (s.histogram ? "histogram" : "")]);
}

async function runTable(expr) {
  const body = await call("api/v1/query", { query: expr, time: evalTime() });
  const { resultType, result } = body.data;
  const rows = valueRows(result, resultType);
  show($("#table-out"), rows.length
    ? table(["Series", "Value"], rows, { id: "result-table", "data-series": String(rows.length) })
    : el("p", { class: "empty" }, "Empty query result"));
  return body;
}

async function runGraph(expr) {
  const range = parseDuration($("#range").value) || 3600;
  const end = evalTime();
  const start = end - range;
  const step = parseDuration($("#step").value) || Math.max(Math.round(range / 250), 1);
  const body = await call("api/v1/query_range", { query: expr, start, end, step });
  const { result } = body.data;
  if (chart) chart.destroy();
  chart = null;
  $("#graph-info").textContent = `${result.length} series, step ${step}s`;
  $("#graph-info").dataset.series = String(result.length);
  if (result.length) chart = draw($("#graph-out"), result, start, end, step);
  else show($("#graph-out"), el("p", { class: "empty" }, "Empty query result"));
  return body;
}

async function run() {
  const expr = $("#expr").value.trim();
  if (!expr) return;
  const params = new URLSearchParams({ expr, tab, range: $("#range").value, step: $("#step").value,
                                       time: $("#time").value });
  history.replaceState(null, "", `?${params}`);
  show($("#messages"), message("info", "Running..."));
  try {
    const body = tab === "graph" ? await runGraph(expr) : await runTable(expr);
    show($("#messages"), notes(body));
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    show($("#messages"), await refusal(err));
    show(tab === "graph" ? $("#graph-out") : $("#table-out"));
  }
}

function restore() {
  const q = new URLSearchParams(location.search);
  $("#expr").value = q.get("expr") || "";
  $("#range").value = q.get("range") || "1h";
  $("#step").value = q.get("step") || "";
  $("#time").value = q.get("time") || "";
  selectTab(q.get("tab") === "graph" || location.pathname.endsWith("/graph") && q.get("tab") !== "table"
    ? "graph" : "table");
}

restore();
const complete = new Autocomplete($("#expr"), $("#suggest"));
complete.load().catch((err) => show($("#messages"), message("error", `Cannot load names to suggest: ${err.message}`)));
$("#query-form").addEventListener("submit", (e) => { e.preventDefault(); run(); });
$("#expr").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.defaultPrevented) { e.preventDefault(); run(); }
});
$("#tab-table").addEventListener("click", () => { selectTab("table"); run(); });
$("#tab-graph").addEventListener("click", () => { selectTab("graph"); run(); });
if ($("#expr").value) run();
