// Building the pages' elements and formatting their numbers.

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

export function $(selector) {
  return document.querySelector(selector);
}

// A table: ``columns`` are headers; each row is a list of cells (text or nodes).
export function table(columns, rows, attrs = {}) {
  return el("table", attrs,
    el("thead", {}, el("tr", {}, columns.map((c) => el("th", {}, c)))),
    el("tbody", {}, rows.map((r) => el("tr", {}, r.map((c) => el("td", {}, c))))));
}

export function show(container, ...nodes) {
  container.replaceChildren(...nodes.flat().filter((n) => n !== null && n !== undefined));
}

export function message(kind, text) {
  return el("div", { class: `msg ${kind}`, role: kind === "error" ? "alert" : "status" }, text);
}

export function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = Number(n) || 0;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${i ? v.toFixed(1) : v} ${units[i]}`;
}

export function seconds(s) {
  const v = Number(s) || 0;
  return v < 1 ? `${Math.round(v * 1000)}ms` : `${v.toFixed(v < 10 ? 2 : 1)}s`;
}

export function count(n) {
  return Number(n).toLocaleString("en-US");
}

// A series' labels as PromQL writes them: name{a="b", c="d"}.
export function seriesName(metric) {
  const name = metric.__name__ || "";
  const pairs = Object.entries(metric).filter(([k]) => k !== "__name__")
    .map(([k, v]) => `${k}=${JSON.stringify(v)}`);
  return pairs.length || !name ? `${name}{${pairs.join(", ")}}` : name;
}
