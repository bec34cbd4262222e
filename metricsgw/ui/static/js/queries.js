// The Queries page: the queries running now (an administrator may cancel one), the recent slow, refused,
// timed-out, canceled and failed ones from the query log, and the top queries.

import { ApiError, call, data } from "./api.js";
import { $, bytes, count, el, message, seconds, show, table } from "./dom.js";

const KINDS = ["slow", "refused", "timeout", "canceled", "error"];
const REFRESH_MS = 5000;
let kind = new URLSearchParams(location.search).get("kind") || "refused";

function source(q) {
  const req = q.httpRequest || {};
  const g = q.grafana || {};
  return el("div", { class: "source" },
    el("div", {}, `${req.clientIP || "?"} ${req.method || ""} ${req.path || ""}`),
    q.userAgent ? el("div", { class: "ua" }, q.userAgent) : null,
    Object.keys(g).length ? el("div", { class: "grafana" },
      `Grafana: ${g["X-Dashboard-Uid"] ? `dashboard ${g["X-Dashboard-Uid"]}` : ""}` +
      `${g["X-Panel-Id"] ? ` panel ${g["X-Panel-Id"]}` : ""}` +
      `${g["X-Rule-Uid"] ? ` rule ${g["X-Rule-Uid"]}` : ""}${g["X-Grafana-Org-Id"] ? ` org ${g["X-Grafana-Org-Id"]}` : ""}`)
      : null);
}

function span(p) {
  return p.start ? `${p.start} to ${p.end}, step ${p.step}s` : "instant";
}

async function cancel(id) {
  try {
    await call("api/v1/admin/cancel_query", { id }, "POST");
    show($("#messages"), message("info", `Query ${id} canceled.`));
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    const why = err.status === 403 ? " (cancelling needs an administrator and --web.enable-lifecycle)" : "";
    show($("#messages"), message("error", `Cannot cancel query ${id}: ${err.message}${why}`));
  }
  loadRunning();
}

async function loadRunning() {
  try {
    const running = await data("api/v1/status/running_queries");
    show($("#running"), running.length ? table(
      ["Id", "State", "Elapsed", "Query", "Source", "Samples", "Memory", ""],
      running.map((q) => [q.id, q.state, seconds(q.elapsedSeconds),
        el("code", { class: "query" }, q.params.query), source(q),
        count(q.stats.samples.totalQueryableSamples), bytes(q.bytes.held),
        el("button", { type: "button", class: "cancel", "data-id": q.id, onclick: () => cancel(q.id) }, "Cancel")]),
      { id: "running-table" }) : el("p", { class: "empty" }, "No query is running."));
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    show($("#running"), message("error", `Error: ${err.message}`));
  }
}

function recentRows(list) {
  return list.map((q) => [q.ts, el("code", { class: "query" }, q.params.query), span(q.params), source(q),
    seconds(q.stats.timings.execTotalTime), count(q.stats.samples.totalQueryableSamples),
    bytes((q.bytes || {}).peak), bytes((q.bytes || {}).response),
    q.limit ? el("code", { class: "flag" }, q.limit) : "", q.status, q.error || ""]);
}

async function loadRecent() {
  show($("#kinds"), KINDS.map((k) => el("button", {
    type: "button", role: "tab", "aria-selected": String(k === kind), id: `kind-${k}`,
    onclick: () => { kind = k; history.replaceState(null, "", `?kind=${k}`); loadRecent(); },
  }, k)));
  try {
    const lists = await data("api/v1/status/recent_queries", { kind });
    const list = lists[kind] || [];
    show($("#recent"), list.length ? table(
      ["Ended", "Query", "Window", "Source", "Duration", "Samples", "Peak memory", "Answer", "Limit", "Status", "Error"],
      recentRows(list), { id: "recent-table" }) : el("p", { class: "empty" }, `No ${kind} query recently.`));
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    show($("#recent"), message("error", `Error: ${err.message}`));
  }
}

async function loadTop() {
  try {
    const resp = await fetch("api/v1/status/top_queries", { headers: { Accept: "application/json" } });
    const top = await resp.json();
    const lists = [["topByCount", "Most frequent", "count", (v) => count(v)],
      ["topByAvgDuration", "Slowest on average", "avgDurationSeconds", seconds],
      ["topBySumDuration", "Most time in total", "sumDurationSeconds", seconds],
      ["topByAvgMemoryUsage", "Most memory on average", "avgMemoryBytes", bytes]];
    show($("#top"), lists.map(([key, title, field, fmt]) => el("section", { class: "card" }, el("h3", {}, title),
      (top[key] || []).length ? table(["Query", "Range", title.startsWith("Most frequent") ? "Count" : "Value"],
        top[key].map((q) => [el("code", { class: "query" }, q.query), `${q.timeRangeSeconds}s`, fmt(q[field])]))
        : el("p", { class: "empty" }, "none"))));
  } catch (err) {
    show($("#top"), message("error", `Error: ${err.message}`));
  }
}

function refresh() {
  loadRunning();
  loadRecent();
  loadTop();
}

$("#refresh").addEventListener("click", refresh);
refresh();
setInterval(loadRunning, REFRESH_MS);
