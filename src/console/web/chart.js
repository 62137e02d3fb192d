// The metric chart: one or more series of (step, value) points drawn as an SVG line chart with our own
// code — linear or log y axes (a second, right-hand axis for series marked axis: "right"), exponential-
// moving-average smoothing (debiased, as TensorBoard does), hover and arrow-key read-out of every series
// at the nearest step, and a legend (chartLegend) when there is more than one series. The <svg> carries
// data-points (the first series' length), data-plotted (its points drawn: a log axis leaves out values
// <= 0), data-series (how many series) and data-right (how many on the right axis) for tests and
// assistive tools; each line's <path> carries data-series-label.
import {el, svgEl, fmtNumber} from "./dom.js";

const DEFAULT_WIDTH = 720;
const HEIGHT = 300;
const PALETTE_SIZE = 6;  // .s0 ... .s5 in console.css

// EMA with weight w in [0, 1): smoothed_i = ema_i / (1 - w^(i+1)), so the first values are not pulled to 0.
export function smooth(values, w) {
  if (!(w > 0)) return values.slice();
  let ema = 0;
  return values.map((v, i) => {
    ema = ema * w + (1 - w) * v;
    return ema / (1 - Math.pow(w, i + 1));
  });
}

function niceStep(span, count) {
  const raw = span / Math.max(1, count);
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const norm = raw / mag;
  return (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
}

function linearTicks(min, max, count) {
  if (min === max) return [min];
  const step = niceStep(max - min, count);
  const ticks = [];
  for (let t = Math.ceil(min / step) * step; t <= max + step * 1e-9; t += step) ticks.push(Number(t.toPrecision(12)));
  return ticks;
}

// Ticks in value space for a log axis spanning [10^lo, 10^hi].
function logTicks(lo, hi) {
  if (hi - lo < 1) return linearTicks(lo, hi, 4).map((e) => Math.pow(10, e));
  const ticks = [];
  for (let e = Math.ceil(lo); e <= Math.floor(hi); e += Math.max(1, Math.round((hi - lo) / 5))) ticks.push(Math.pow(10, e));
  return ticks;
}

function extent(values) {
  let min = Infinity, max = -Infinity;
  for (const v of values) { if (v < min) min = v; if (v > max) max = v; }
  if (min === max) { min -= Math.abs(min) * 0.05 || 1; max += Math.abs(max) * 0.05 || 1; }
  return [min, max];
}

// A y scale over `points` (value -> pixel) with its ticks; null when there are no points.
function yScale(points, log, frame) {
  if (points.length === 0) return null;
  const [lo, hi] = extent(points.map((p) => (log ? Math.log10(p.y) : p.y)));
  const sy = (v) => frame.top + (1 - (v - lo) / (hi - lo)) * (frame.height - frame.top - frame.bottom);
  return {of: (y) => sy(log ? Math.log10(y) : y), ticks: log ? logTicks(lo, hi) : linearTicks(lo, hi, 5)};
}

function axes(frame, sx, xTicks, left, right) {
  const g = svgEl("g", {class: "axes"});
  const bottom = frame.height - frame.bottom;
  for (const t of left ? left.ticks : []) {
    const y = left.of(t);
    g.append(svgEl("line", {class: "grid", x1: frame.left, x2: frame.width - frame.right, y1: y, y2: y}),
      svgEl("text", {class: "tick", x: frame.left - 6, y: y + 4, "text-anchor": "end"}, fmtNumber(t)));
  }
  for (const t of right ? right.ticks : []) {
    g.append(svgEl("text", {class: "tick tick-right", x: frame.width - frame.right + 6, y: right.of(t) + 4, "text-anchor": "start"}, fmtNumber(t)));
  }
  for (const t of xTicks) {
    g.append(svgEl("text", {class: "tick", x: sx(t), y: bottom + 16, "text-anchor": "middle"}, String(t)));
  }
  g.append(svgEl("line", {class: "axis", x1: frame.left, x2: frame.width - frame.right, y1: bottom, y2: bottom}),
    svgEl("text", {class: "axis-label", x: frame.width - frame.right, y: frame.height - 2, "text-anchor": "end"}, "step"));
  if (right) g.append(svgEl("line", {class: "axis", x1: frame.width - frame.right, x2: frame.width - frame.right, y1: frame.top, y2: bottom}));
  return g;
}

function pathOf(points, sx, sy, values) {
  return points.map((p, i) => (i ? "L" : "M") + sx(p.x).toFixed(1) + " " + sy(values[i]).toFixed(1)).join(" ");
}

// The hover / keyboard read-out: a marker per series at the step nearest to the pointer and one label
// with every series' value there.
function addReadout(svg, drawn, sx, frame) {
  const steps = [...new Set(drawn.flatMap((d) => d.points.map((p) => p.x)))].sort((a, b) => a - b);
  const markers = drawn.map((d) => svgEl("circle", {class: "marker", r: 4, visibility: "hidden"}));
  const text = svgEl("text", {class: "readout", x: frame.left, y: frame.top - 10}, "");
  let current = -1;
  const show = (i) => {
    current = Math.max(0, Math.min(steps.length - 1, i));
    const x = steps[current];
    const parts = [];
    drawn.forEach((d, k) => {
      const at = d.points.findIndex((p) => p.x === x);
      if (at < 0) { markers[k].setAttribute("visibility", "hidden"); return; }
      markers[k].setAttribute("cx", sx(x));
      markers[k].setAttribute("cy", d.sy(d.points[at].y));
      markers[k].setAttribute("visibility", "visible");
      const s = d.smoothed[at] !== d.points[at].y ? " (smoothed " + fmtNumber(d.smoothed[at]) + ")" : "";
      parts.push(d.label + " " + fmtNumber(d.points[at].y) + s);
    });
    text.textContent = "step " + x + ": " + parts.join(" · ");
  };
  svg.addEventListener("mousemove", (event) => {
    const box = svg.getBoundingClientRect();
    const x = ((event.clientX - box.left) / box.width) * frame.width;
    let best = 0;
    steps.forEach((s, i) => { if (Math.abs(sx(s) - x) < Math.abs(sx(steps[best]) - x)) best = i; });
    show(best);
  });
  svg.addEventListener("keydown", (event) => {
    const moves = {ArrowLeft: -1, ArrowRight: 1, Home: -steps.length, End: steps.length};
    if (!(event.key in moves)) return;
    event.preventDefault();
    show((current < 0 ? steps.length - 1 : current) + moves[event.key]);
  });
  svg.append(...markers, text);
}

// A chart of `series` ([{label, points: [{x: step, y: value}] ordered by x, axis: "left" | "right"}]).
// options: {log, smoothing, width (CSS pixels the chart will take; 720 when absent), metric (the name for
// data-metric when the series are runs, not metrics)}.
export function lineChart(series, options) {
  const log = Boolean(options && options.log);
  const width = Math.max(300, Math.round((options && options.width) || DEFAULT_WIDTH));
  const multi = series.length > 1;
  const hasRight = series.some((s) => s.axis === "right");
  const frame = {left: 64, right: hasRight ? 56 : 16, top: 28, bottom: 34, width, height: HEIGHT};
  const plottedOf = (s) => s.points.filter((p) => Number.isFinite(p.y) && (!log || p.y > 0));
  const plotted = series.map(plottedOf);
  const first = series[0] || {label: "", points: []};
  const total = series.reduce((n, s) => n + s.points.length, 0);
  const svg = svgEl("svg", {
    class: "chart", viewBox: "0 0 " + width + " " + HEIGHT, role: "img", tabindex: 0, focusable: "true",
    "data-points": first.points.length, "data-plotted": (plotted[0] || []).length, "data-metric": (options && options.metric) || first.label,
    "data-series": series.length, "data-right": series.filter((s) => s.axis === "right").length,
    "aria-label": series.map((s) => s.label + ": " + s.points.length + " points" +
      (s.points.length ? ", last " + fmtNumber(s.points[s.points.length - 1].y) + " at step " + s.points[s.points.length - 1].x : "")).join("; "),
  });
  if (plotted.every((p) => p.length === 0)) {
    svg.append(svgEl("text", {class: "tick", x: width / 2, y: HEIGHT / 2, "text-anchor": "middle"},
      total ? "no positive values to show on a log scale" : "no points yet"));
    return svg;
  }
  const [xMin, xMax] = extent(plotted.flat().map((p) => p.x));
  const sx = (x) => frame.left + ((x - xMin) / (xMax - xMin)) * (width - frame.left - frame.right);
  const left = yScale(plotted.filter((p, i) => series[i].axis !== "right").flat(), log, frame);
  const right = yScale(plotted.filter((p, i) => series[i].axis === "right").flat(), log, frame);
  svg.append(axes(frame, sx, linearTicks(xMin, xMax, 6).filter((t) => Number.isInteger(t)), left || right, left ? right : null));
  const drawn = [];
  series.forEach((s, i) => {
    const points = plotted[i];
    if (points.length === 0) return;
    const sy = (s.axis === "right" && left ? right : left || right).of;
    const raw = points.map((p) => p.y);
    const smoothed = smooth(raw, (options && options.smoothing) || 0);
    const hasSmoothing = smoothed.some((v, k) => v !== raw[k]);
    const color = multi ? " s" + (i % PALETTE_SIZE) : "";
    svg.append(svgEl("path", {class: "line raw" + color + (hasSmoothing ? " faded" : ""), "data-series-label": s.label,
      d: pathOf(points, sx, sy, raw)}));
    if (hasSmoothing) svg.append(svgEl("path", {class: "line smoothed" + color, d: pathOf(points, sx, sy, smoothed)}));
    if (points.length <= 80) {
      const dots = svgEl("g", {class: "dots" + color});
      for (const p of points) dots.append(svgEl("circle", {class: "dot", cx: sx(p.x), cy: sy(p.y), r: 2.5}));
      svg.append(dots);
    }
    drawn.push({label: s.label, points, smoothed, sy});
  });
  addReadout(svg, drawn, sx, frame);
  return svg;
}

// The legend of a chart with several series: a colour swatch, the label and its axis when there are two.
export function chartLegend(series) {
  const twoAxes = series.some((s) => s.axis === "right");
  return el("ul", {class: "legend"}, series.map((s, i) => el("li", {"data-series-label": s.label},
    el("span", {class: "swatch s" + (i % PALETTE_SIZE), "aria-hidden": "true"}),
    el("span", {class: "legend-label mono"}, s.label),
    twoAxes ? el("span", {class: "muted"}, s.axis === "right" ? " (right axis)" : " (left axis)") : "")));
}
