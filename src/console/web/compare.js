// Compare runs (#/compare/<id>,<id>,...): one metric of two or more runs overlaid on one chart, aligned
// by step, with a legend naming each run; log scale and smoothing as on a run's page. Live as a run's page
// is: the runs' new points pushed by the server (GET /api/v1/events?topics=metrics&run_ids=...), or, when
// the stream is refused (an unknown run: 404; every slot taken: 429), polled every few seconds (only the
// steps since the last one held). The title's data-live-mode and data-pushed-events say which and how much.
import {ApiError} from "./api.js";
import {el, clear, message} from "./dom.js";
import {lineChart, chartLegend} from "./chart.js";
import {DEFAULT_METRIC, fetchMetrics, mergePoints, lastStep, metricKeys, seriesOf} from "./metrics.js";
import {runLink} from "./runs.js";
import {live} from "./live.js";

const REFRESH_MS = 3000;
const MAX_PUSHED_RUNS = 8;  // the stream's run_ids limit: more runs are polled

export function parseRunList(param) {
  return [...new Set(param.split(",").map((s) => decodeURIComponent(s).trim()).filter(Boolean))];
}

async function refresh(run) {
  const since = lastStep(run.points);
  const fresh = await fetchMetrics(run.id, since === null ? undefined : since);
  run.points = since === null ? fresh.points : mergePoints(run.points, fresh.points, since);
}

// The stream's path: every run, from the earliest of their last steps held (all points when one has none).
function eventsPath(runs) {
  const held = runs.map((r) => lastStep(r.points));
  const since = held.some((s) => s === null) ? "" : "&since_step=" + Math.min(...held);
  return "/api/v1/events?topics=metrics&run_ids=" + runs.map((r) => encodeURIComponent(r.id)).join(",") + since;
}

// A pushed `metrics` event into its run's points (merged from since_step on the stream's first batch).
function applyPoints(runs, data) {
  const run = runs.find((r) => r.id === data.training_run_id);
  if (!run) return false;
  const fresh = Array.isArray(data.points) ? data.points : [];
  run.points = data.since_step === null || data.since_step === undefined ? run.points.concat(fresh)
    : mergePoints(run.points, fresh, data.since_step);
  run.error = null;
  return true;
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
  const title = el("h1", {id: "compare-title", "data-live-mode": "", "data-pushed-events": "0"}, "Compare runs");
  const mode = el("span", {id: "compare-mode"});
  clear(container).append(el("p", {}, el("a", {href: "#/runs"}, "← All runs")), title);
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
    chartBox, notes, el("p", {class: "muted"}, "Curves are aligned by step; live while this page is open", mode, "."));
  const tick = async () => {
    await Promise.all(runs.map((r) => refresh(r).then(() => { r.error = null; }, (e) => {
      r.error = e instanceof ApiError && e.status === 404 ? "no such run (or it is not yours)" : "cannot load: " + e.message;
    })));
    redraw();
  };
  redraw();  // the empty chart until the first points come
  return live({
    path: () => (runs.length > MAX_PUSHED_RUNS ? null : eventsPath(runs)),
    onEvent: (name, data) => {
      if (name !== "metrics" || !applyPoints(runs, data)) return;
      title.dataset.pushedEvents = String(Number(title.dataset.pushedEvents) + 1);
      redraw();
    },
    onMode: (m) => {
      title.dataset.liveMode = m;
      mode.textContent = m === "push" ? " (pushed by the server)" : " (every " + REFRESH_MS / 1000 + " s)";
    },
    tick, ms: REFRESH_MS,
  });
}
