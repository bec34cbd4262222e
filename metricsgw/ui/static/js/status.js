// The Status page: build and runtime, the layout (processes, peers) with each part's health, the storage's sizes,
// the relabel rules in force, and the flags. At /flags and /config it opens at that section.

import { ApiError, data } from "./api.js";
import { $, bytes, count, el, message, show, table } from "./dom.js";

function pairs(obj) {
  return table(["", ""], Object.entries(obj).map(([k, v]) => [k, String(v)]), { class: "pairs" });
}

function health(part) {
  return el("span", { class: part.healthy ? "up" : "down" }, part.healthy ? "healthy" : `down: ${part.status}`);
}

async function section(target, load) {
  try {
    show(target, await load());
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    show(target, message("error", `Error: ${err.message}`));
  }
}

async function build() {
  const [info, runtime] = await Promise.all([data("api/v1/status/buildinfo"), data("api/v1/status/runtimeinfo")]);
  return [pairs({ version: info.revision, "Prometheus API version": info.version }), pairs(runtime)];
}

async function layoutAndStorage() {
  const l = await data("api/v1/status/layout");
  const mode = l.singleProcess ? "one process (--server.single-process)"
    : `${l.shards} ingest shard(s), ${l.queryProcesses} query process(es), behind a front`;
  show($("#storage-out"), el("p", {}, "Directory ", el("code", {}, l.storage.path), ", ",
    bytes(l.storage.parts.reduce((s, p) => s + p.bytes, 0)), " in all"),
  table(["Part", "Bytes", "Files"], l.storage.parts.map((p) => [p.name, bytes(p.bytes), count(p.files)]),
    { id: "storage-table" }));
  return [el("p", { id: "mode" }, mode),
    table(["Process", "Role", "PID", "Health"], l.parts.map((p) => [p.name, p.role, String(p.pid || ""), health(p)]),
      { id: "parts-table" }),
    el("h3", {}, "Peers (--cluster.peers)"),
    l.peers.length ? table(["Peer", "Last read"], l.peers.map((p) => [p.name, p.state]), { id: "peers-table" })
      : el("p", { class: "empty" }, "none")];
}

async function config() {
  const c = await data("api/v1/status/config");
  return [el("p", {}, c.files.length ? `${c.rules.length} rules from ${c.files.join(", ")} (reloaded ${c.reloads} times)`
    : "No --rules.file: series are stored as written."),
  c.rules.length ? el("pre", { id: "rules-yaml" }, c.yaml) : null];
}

let allFlags = {};

function flagsTable() {
  const f = $("#flag-filter").value.toLowerCase();
  const rows = Object.entries(allFlags).filter(([k, v]) => !f || k.includes(f) || String(v).toLowerCase().includes(f))
    .map(([k, v]) => [el("code", {}, `--${k}`), String(v)]);
  return table(["Flag", "Value"], rows, { id: "flags-table" });
}

async function flags() {
  allFlags = await data("api/v1/status/flags");
  return flagsTable();
}

$("#flag-filter").addEventListener("input", () => show($("#flags-out"), flagsTable()));
await Promise.all([section($("#build-out"), build), section($("#layout-out"), layoutAndStorage),
  section($("#config-out"), config), section($("#flags-out"), flags)]);
const anchor = location.pathname.split("/").pop();
if (anchor === "flags" || anchor === "config") document.getElementById(anchor).scrollIntoView();
