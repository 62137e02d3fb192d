// Compare runs (#/compare/<id>,<id>,...): one metric of two or more runs overlaid on one chart, aligned
// by step, with a legend naming each run; log scale and smoothing as on a run's page, and the same live
// refresh (only the steps since the last one held are fetched).
import {ApiError} from "./api.js";
import {el, clear, message} from "./dom.js";
import {lineChart, chartLegend} from "./chart.js";
import {DEFAULT_METRIC, fetchMetrics, mergePoints, lastStep, metricKeys, seriesOf} from "./metrics.js";
import {runLink} from "./runs.js";
import {poll} from "./live.js";

const REFRESH_MS = 3000;

export function parseRunList(param) {
  return [...new Set(param.split(",").map((s) => decodeURIComponent(s).trim()).filter(Boolean))];
}

async function refresh(run) {
  const since = lastStep(run.points);
  const fresh = await fetchMetrics(run.id, since === null ? undefined : since);
  run.points = since === null ? fresh.points : mergePoints(run.points, fresh.points, since);
}

export function showCompare(container, param) {
  const runs = parseRunList(param).map((id) => ({id, points: [], error: null}));
  const state = {metric: DEFAULT_METRIC, log: false, smoothing: 0};
  const select = el("select", {id: "compare-metric"});
  const log = el("input", {type: "checkbox", id: "compare-log"});
  const smoothing = el("input", {type: "range", id: "compare-smoothing", min: 0, max: 0.99, step: 0.01, value: 0});
  const chartBox = el("div", {class: "chart-box", id: "compare-chart"});
  const notes = el("div", {id: "compare-notes"});
  const redraw = () => {
    const keys = [...new Set(runs.flatMap((r) => metricKeys(r.points)))]
      .sort((a, b) => (a === DEFAULT_METRIC ? -1 : b === DEFAULT_METRIC ? 1 : a.localeCompare(b)));
    if (!keys.includes(state.metric)) state.metric = keys.includes(DEFAULT_METRIC) ? DEFAULT_METRIC : keys[0] || DEFAULT_METRIC;
    if ([...select.options].map((o) => o.value).join("\n") !== keys.join("\n")) {
      clear(select).append(...keys.map((k) => el("option", {value: k}, k)));
    }
    select.value = state.metric;
    const series = runs.filter((r) => !r.error).map((r) => ({label: r.id, points: seriesOf(r.points, state.metric), axis: "left"}));
    const width = chartBox.clientWidth - 18;
    clear(chartBox).append(lineChart(series, {log: state.log, smoothing: state.smoothing, width: width > 0 ? width : undefined, metric: state.metric}), chartLegend(series));
    clear(notes).append(...runs.filter((r) => r.error).map((r) => message(r.id + ": " + r.error, "error")));
  };
  select.addEventListener("change", () => { state.metric = select.value; redraw(); });
  log.addEventListener("change", () => { state.log = log.checked; redraw(); });
  smoothing.addEventListener("input", () => { state.smoothing = Number(smoothing.value); redraw(); });
  clear(container).append(el("p", {}, el("a", {href: "#/runs"}, "← All runs")), el("h1", {}, "Compare runs"));
  if (runs.length < 2) {
    container.append(message("Pick two or more runs on the runs page to compare them."));
    return () => {};
  }
  container.append(
    el("ul", {class: "plain compare-runs"}, runs.map((r) => el("li", {}, runLink(r.id)))),
    el("div", {class: "controls"},
      el("label", {for: "compare-metric"}, "Metric"), select,
      el("span", {class: "control"}, log, el("label", {for: "compare-log"}, "Log scale")),
      el("span", {class: "control"}, el("label", {for: "compare-smoothing"}, "Smoothing"), smoothing)),
    chartBox, notes, el("p", {class: "muted"}, "Curves are aligned by step; live while this page is open."));
  const tick = async () => {
    await Promise.all(runs.map((r) => refresh(r).then(() => { r.error = null; }, (e) => {
      r.error = e instanceof ApiError && e.status === 404 ? "no such run (or it is not yours)" : "cannot load: " + e.message;
    })));
    redraw();
  };
  return poll(tick, REFRESH_MS);
}
