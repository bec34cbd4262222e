// A range query's matrix drawn with uPlot (vendored: static/vendor/uplot/), one line per series.

import { seriesName } from "./dom.js";

const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
  "#bcbd22", "#17becf"];

// [timestamps, values of series 1, ...] on one shared time axis; null where a series has no point.
export function aligned(result, start, end, step) {
  const n = Math.floor((end - start) / step) + 1;
  const xs = Array.from({ length: n }, (_, i) => start + i * step);
  const columns = result.map((s) => {
    const ys = new Array(n).fill(null);
    for (const [t, v] of s.values || []) {
      const i = Math.round((t - start) / step);
      if (i >= 0 && i < n) ys[i] = Number(v);
    }
    return ys;
  });
  return [xs, ...columns];
}

export function draw(container, result, start, end, step) {
  container.replaceChildren();
  const width = Math.max(container.clientWidth || 0, 400);
  const opts = {
    width, height: 360,
    scales: { x: { time: true } },
    series: [{}, ...result.map((s, i) => ({
      label: seriesName(s.metric), stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: false,
    }))],
    axes: [{}, { size: 70 }],
    legend: { live: true },
  };
  // eslint-disable-next-line no-undef
  return new uPlot(opts, aligned(result, start, end, step), container);
}
