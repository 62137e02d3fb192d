// A run's page (#/run/<id>): its facts and user_metadata, live metric charts (any recorded metric, log
// scale, smoothing, refreshed every few seconds while "Live" is on, fetching only the steps since the
// last one held) and its checkpoints (checkpoints.js).
import {api, ApiError} from "./api.js";
import {el, clear, message, fmtNumber, fmtAgo} from "./dom.js";
import {lineChart} from "./chart.js";
import {DEFAULT_METRIC, fetchMetrics, mergePoints, lastStep, metricKeys, seriesOf, lastLoss, stepCount} from "./metrics.js";
import {loadedModelIds, runState, stateBadge} from "./runs.js";
import {checkpointsSection} from "./checkpoints.js";

const REFRESH_MS = 3000;

function facts(run, points, loaded) {
  const rows = [
    ["Base model", run.base_model],
    ["LoRA rank", run.lora_rank === null || run.lora_rank === undefined ? "—" : String(run.lora_rank)],
    ["Owner", run.model_owner],
    ["Last request", fmtAgo(run.last_request_time)],
    ["Steps", String(stepCount(points))],
    ["Last loss", fmtNumber(lastLoss(points))],
    ["State", stateBadge(runState(run.training_run_id, loaded, points))],
  ];
  return el("dl", {class: "tiles"}, rows.map(([k, v]) => el("div", {class: "tile"}, el("dt", {}, k), el("dd", {}, v))));
}

function metadata(run) {
  const entries = Object.entries(run.user_metadata || {});
  return el("section", {"aria-labelledby": "metadata-title"},
    el("h2", {id: "metadata-title"}, "User metadata"),
    entries.length === 0 ? message("None set.")
      : el("dl", {class: "facts", id: "user-metadata"}, entries.map(([k, v]) => [el("dt", {class: "mono"}, k), el("dd", {class: "mono"}, String(v))])));
}

// The chart controls and the chart; `state` holds the points and the choices, redraw() re-renders.
function metricsSection(state) {
  const select = el("select", {id: "metric-select"});
  const log = el("input", {type: "checkbox", id: "log-scale"});
  const smoothing = el("input", {type: "range", id: "smoothing", min: 0, max: 0.99, step: 0.01, value: state.smoothing});
  const smoothingOut = el("output", {for: "smoothing", id: "smoothing-value"}, String(state.smoothing));
  const live = el("input", {type: "checkbox", id: "live", checked: true});
  const chartBox = el("div", {class: "chart-box", id: "chart"});
  const summary = el("p", {class: "muted", id: "chart-summary"});
  const redraw = () => {
    const keys = metricKeys(state.points);
    if (!keys.includes(state.metric)) state.metric = keys.includes(DEFAULT_METRIC) ? DEFAULT_METRIC : keys[0] || DEFAULT_METRIC;
    if ([...select.options].map((o) => o.value).join("\n") !== keys.join("\n")) {
      clear(select).append(...keys.map((k) => el("option", {value: k}, k)));
    }
    select.value = state.metric;
    const series = seriesOf(state.points, state.metric);
    const width = chartBox.clientWidth - 18;  // inside the box's padding and border
    clear(chartBox).append(lineChart(series, state.metric, {log: state.log, smoothing: state.smoothing, width: width > 0 ? width : undefined}));
    summary.textContent = series.length + " points of " + state.metric + (state.downsampled ? " (older points downsampled)" : "") +
      (state.live ? "; live, every " + REFRESH_MS / 1000 + " s" : "; paused");
  };
  select.addEventListener("change", () => { state.metric = select.value; redraw(); });
  log.addEventListener("change", () => { state.log = log.checked; redraw(); });
  smoothing.addEventListener("input", () => { state.smoothing = Number(smoothing.value); smoothingOut.textContent = smoothing.value; redraw(); });
  live.addEventListener("change", () => { state.live = live.checked; redraw(); });
  const controls = el("div", {class: "controls"},
    el("label", {for: "metric-select"}, "Metric"), select,
    el("span", {class: "control"}, log, el("label", {for: "log-scale"}, "Log scale")),
    el("span", {class: "control"}, el("label", {for: "smoothing"}, "Smoothing"), smoothing, smoothingOut),
    el("span", {class: "control"}, live, el("label", {for: "live"}, "Live")));
  const section = el("section", {"aria-labelledby": "metrics-title"}, el("h2", {id: "metrics-title"}, "Metrics"), controls, chartBox, summary);
  return {section, redraw};
}

async function refreshPoints(state) {
  const since = lastStep(state.points);
  const fresh = await fetchMetrics(state.runId, since === null ? undefined : since);
  state.points = since === null ? fresh.points : mergePoints(state.points, fresh.points, since);
  state.downsampled = state.downsampled || fresh.downsampled;
}

export function showRun(container, runId) {
  const state = {runId, points: [], metric: DEFAULT_METRIC, log: false, smoothing: 0, live: true, downsampled: false};
  let timer = null;
  let stopped = false;
  const start = async () => {
    let run;
    try {
      [run] = await Promise.all([api("/api/v1/training_runs/" + encodeURIComponent(runId)), refreshPoints(state).catch(() => {})]);
    } catch (e) {
      clear(container).append(el("h1", {}, "Run"), message(e instanceof ApiError && e.status === 404 ? "No run " + runId + " (or it is not yours)." : "Cannot load the run: " + e.message, "error"));
      return;
    }
    let loaded = await loadedModelIds();
    const factsBox = el("div", {}, facts(run, state.points, loaded));
    const charts = metricsSection(state);
    clear(container).append(el("p", {}, el("a", {href: "#/runs"}, "← All runs")),
      el("h1", {class: "mono run-title"}, runId),
      el("p", {}, el("a", {href: "#/playground/" + encodeURIComponent(runId)}, "Chat with this run's live weights")), factsBox, charts.section, checkpointsSection(runId), metadata(run));
    charts.redraw();
    const tick = async () => {
      if (state.live) {
        try {
          [loaded] = await Promise.all([loadedModelIds(), refreshPoints(state)]);
          charts.redraw();
          clear(factsBox).append(facts(run, state.points, loaded));
        } catch (e) { /* the next tick tries again */ }
      }
      if (!stopped) timer = setTimeout(tick, REFRESH_MS);
    };
    timer = setTimeout(tick, REFRESH_MS);
  };
  start();
  return () => { stopped = true; clearTimeout(timer); };
}
