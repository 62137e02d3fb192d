// The metric chart: one series of (step, value) points drawn as an SVG line chart with our own code —
// linear or log y axis, exponential-moving-average smoothing (debiased, as TensorBoard does), hover and
// arrow-key read-out of the nearest point. The <svg> carries data-points (the series' length) and
// data-plotted (points drawn: a log axis leaves out values <= 0) for tests and assistive tools.
import {svgEl, fmtNumber} from "./dom.js";

const DEFAULT_WIDTH = 720;
const HEIGHT = 300;
const PAD = {left: 64, right: 16, top: 28, bottom: 34};
let WIDTH = DEFAULT_WIDTH;  // the chart being drawn: its viewBox width is the box's CSS width, so text stays 11 px

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

function makeScales(points, log) {
  const ys = points.map((p) => (log ? Math.log10(p.y) : p.y));
  const [xMin, xMax] = extent(points.map((p) => p.x));
  const [yMin, yMax] = extent(ys);
  const sx = (x) => PAD.left + ((x - xMin) / (xMax - xMin)) * (WIDTH - PAD.left - PAD.right);
  const sy = (v) => PAD.top + (1 - (v - yMin) / (yMax - yMin)) * (HEIGHT - PAD.top - PAD.bottom);
  const yOf = (y) => sy(log ? Math.log10(y) : y);
  const yTicks = log ? logTicks(yMin, yMax) : linearTicks(yMin, yMax, 5);
  return {sx, yOf, xTicks: linearTicks(xMin, xMax, 6).filter((t) => Number.isInteger(t)), yTicks};
}

function axes(scales) {
  const g = svgEl("g", {class: "axes"});
  const bottom = HEIGHT - PAD.bottom;
  for (const t of scales.yTicks) {
    const y = scales.yOf(t);
    g.append(svgEl("line", {class: "grid", x1: PAD.left, x2: WIDTH - PAD.right, y1: y, y2: y}),
      svgEl("text", {class: "tick", x: PAD.left - 6, y: y + 4, "text-anchor": "end"}, fmtNumber(t)));
  }
  for (const t of scales.xTicks) {
    g.append(svgEl("text", {class: "tick", x: scales.sx(t), y: bottom + 16, "text-anchor": "middle"}, String(t)));
  }
  g.append(svgEl("line", {class: "axis", x1: PAD.left, x2: WIDTH - PAD.right, y1: bottom, y2: bottom}),
    svgEl("text", {class: "axis-label", x: WIDTH - PAD.right, y: HEIGHT - 2, "text-anchor": "end"}, "step"));
  return g;
}

function pathOf(points, scales, values) {
  return points.map((p, i) => (i ? "L" : "M") + scales.sx(p.x).toFixed(1) + " " + scales.yOf(values[i]).toFixed(1)).join(" ");
}

// The hover / keyboard read-out: a marker and a label on the point nearest to the pointer.
function addReadout(svg, points, scales, smoothed, label) {
  const marker = svgEl("circle", {class: "marker", r: 4, visibility: "hidden"});
  const text = svgEl("text", {class: "readout", x: PAD.left, y: PAD.top - 10}, "");
  const width = WIDTH;  // this chart's, for the handlers below
  let current = -1;
  const show = (i) => {
    current = Math.max(0, Math.min(points.length - 1, i));
    const p = points[current];
    marker.setAttribute("cx", scales.sx(p.x));
    marker.setAttribute("cy", scales.yOf(p.y));
    marker.setAttribute("visibility", "visible");
    const s = smoothed[current] !== p.y ? " (smoothed " + fmtNumber(smoothed[current]) + ")" : "";
    text.textContent = "step " + p.x + ": " + label + " " + fmtNumber(p.y) + s;
  };
  svg.addEventListener("mousemove", (event) => {
    const box = svg.getBoundingClientRect();
    const x = ((event.clientX - box.left) / box.width) * width;
    let best = 0;
    points.forEach((p, i) => { if (Math.abs(scales.sx(p.x) - x) < Math.abs(scales.sx(points[best].x) - x)) best = i; });
    show(best);
  });
  svg.addEventListener("keydown", (event) => {
    const moves = {ArrowLeft: -1, ArrowRight: 1, Home: -points.length, End: points.length};
    if (!(event.key in moves)) return;
    event.preventDefault();
    show((current < 0 ? points.length - 1 : current) + moves[event.key]);
  });
  svg.append(marker, text);
}

// A chart of `points` ([{x: step, y: value}], ordered by x) named `label`. options: {log, smoothing,
// width (CSS pixels the chart will take; 720 when absent)}.
export function lineChart(points, label, options) {
  const log = Boolean(options && options.log);
  WIDTH = Math.max(300, Math.round((options && options.width) || DEFAULT_WIDTH));
  const plotted = log ? points.filter((p) => p.y > 0 && Number.isFinite(p.y)) : points.filter((p) => Number.isFinite(p.y));
  const svg = svgEl("svg", {
    class: "chart", viewBox: "0 0 " + WIDTH + " " + HEIGHT, role: "img", tabindex: 0, focusable: "true",
    "data-points": points.length, "data-plotted": plotted.length, "data-metric": label,
    "aria-label": label + ": " + points.length + " points" +
      (points.length ? ", last " + fmtNumber(points[points.length - 1].y) + " at step " + points[points.length - 1].x : ""),
  });
  if (plotted.length === 0) {
    svg.append(svgEl("text", {class: "tick", x: WIDTH / 2, y: HEIGHT / 2, "text-anchor": "middle"},
      points.length ? "no positive values to show on a log scale" : "no points yet"));
    return svg;
  }
  const scales = makeScales(plotted, log);
  const raw = plotted.map((p) => p.y);
  const smoothed = smooth(raw, (options && options.smoothing) || 0);
  svg.append(axes(scales));
  const hasSmoothing = smoothed.some((v, i) => v !== raw[i]);
  svg.append(svgEl("path", {class: hasSmoothing ? "line raw faded" : "line raw", d: pathOf(plotted, scales, raw)}));
  if (hasSmoothing) svg.append(svgEl("path", {class: "line smoothed", d: pathOf(plotted, scales, smoothed)}));
  if (plotted.length <= 80) {
    const dots = svgEl("g", {class: "dots"});
    for (const p of plotted) dots.append(svgEl("circle", {class: "dot", cx: scales.sx(p.x), cy: scales.yOf(p.y), r: 2.5}));
    svg.append(dots);
  }
  addReadout(svg, plotted, scales, smoothed, label);
  return svg;
}
