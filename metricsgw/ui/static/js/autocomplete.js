// The expression box's suggestions: metric names (and PromQL's functions) where a name may start, label names
// inside {...} or by/without (...), a label's values after label=". Names come from the label APIs once.

import { data } from "./api.js";
import { el } from "./dom.js";

const FUNCTIONS = ["abs", "absent", "absent_over_time", "avg_over_time", "ceil", "changes", "clamp", "clamp_max",
  "clamp_min", "count_over_time", "day_of_month", "day_of_week", "delta", "deriv", "exp", "floor",
  "histogram_quantile", "holt_winters", "hour", "idelta", "increase", "irate", "label_join", "label_replace", "last_over_time",
  "ln", "log2", "log10", "max_over_time", "min_over_time", "minute", "month", "predict_linear", "quantile_over_time",
  "rate", "resets", "round", "scalar", "sgn", "sort", "sort_desc", "sqrt", "stddev_over_time", "sum_over_time",
  "time", "timestamp", "vector", "year", "sum", "avg", "min", "max", "count", "count_values", "group", "stddev",
  "stdvar", "topk", "bottomk", "quantile"];
const MAX_SHOWN = 30;

export class Autocomplete {
  constructor(input, list) {
    this.input = input;
    this.list = list;
    this.metrics = [];
    this.labels = [];
    this.values = new Map();
    this.active = -1;
    this.ready = Promise.resolve();
    input.addEventListener("input", () => this.update());
    input.addEventListener("keydown", (e) => this.key(e));
    input.addEventListener("blur", () => setTimeout(() => this.hide(), 150));
  }

  // Fetches the names once; what is typed before they arrive is completed when they do.
  load() {
    this.ready = Promise.all([data("api/v1/label/__name__/values"), data("api/v1/labels")])
      .then(([metrics, labels]) => { this.metrics = metrics; this.labels = labels; });
    return this.ready;
  }

  // What is being written at the cursor: {kind: "metric"|"label"|"value", word, label}.
  context() {
    const before = this.input.value.slice(0, this.input.selectionStart);
    const value = before.match(/([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)$/);
    if (value && this.insideBraces(before)) return { kind: "value", label: value[1], word: value[3] };
    const word = (before.match(/[a-zA-Z_:][a-zA-Z0-9_:]*$/) || [""])[0];
    const head = before.slice(0, before.length - word.length);
    if (this.insideBraces(head) || /\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*$/.test(head)) {
      return { kind: "label", word };
    }
    return { kind: "metric", word };
  }

  insideBraces(text) {
    return text.lastIndexOf("{") > text.lastIndexOf("}");
  }

  async candidates(ctx) {
    if (ctx.kind === "label") return this.labels;
    if (ctx.kind === "value") {
      if (!this.values.has(ctx.label)) {
        this.values.set(ctx.label, await data(`api/v1/label/${encodeURIComponent(ctx.label)}/values`).catch(() => []));
      }
      return this.values.get(ctx.label);
    }
    return ctx.word ? [...this.metrics, ...FUNCTIONS] : [];
  }

  async update() {
    try {
      await this.ready;
    } catch {
      return; // the page says the names could not be loaded
    }
    const ctx = this.context();
    const all = await this.candidates(ctx);
    const word = ctx.word.toLowerCase();
    const starts = all.filter((c) => c.toLowerCase().startsWith(word) && c !== ctx.word);
    const inside = all.filter((c) => !c.toLowerCase().startsWith(word) && c.toLowerCase().includes(word));
    this.shown = [...starts, ...inside].slice(0, MAX_SHOWN);
    this.ctx = ctx;
    this.active = -1;
    if (!this.shown.length || (ctx.kind === "metric" && !ctx.word)) return this.hide();
    this.list.replaceChildren(...this.shown.map((c, i) => el("li", {
      role: "option", id: `suggest-${i}`, class: FUNCTIONS.includes(c) && ctx.kind === "metric" ? "fn" : null,
      onmousedown: (e) => { e.preventDefault(); this.pick(c); },
    }, c)));
    this.list.hidden = false;
  }

  key(e) {
    if (this.list.hidden) return;
    if (e.key === "ArrowDown" || e.key === "ArrowUp") {
      e.preventDefault();
      const n = this.shown.length;
      this.active = (this.active + (e.key === "ArrowDown" ? 1 : n - 1)) % n;
      [...this.list.children].forEach((li, i) => li.setAttribute("aria-selected", String(i === this.active)));
    } else if ((e.key === "Enter" || e.key === "Tab") && this.active >= 0) {
      e.preventDefault();
      e.stopImmediatePropagation();
      this.pick(this.shown[this.active]);
    } else if (e.key === "Escape") {
      this.hide();
    }
  }

  pick(choice) {
    const at = this.input.selectionStart;
    const start = at - this.ctx.word.length;
    const text = this.input.value;
    this.input.value = text.slice(0, start) + choice + text.slice(at);
    const cursor = start + choice.length;
    this.input.setSelectionRange(cursor, cursor);
    this.input.focus();
    this.hide();
  }

  hide() {
    this.list.hidden = true;
    this.active = -1;
  }
}
