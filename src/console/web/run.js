// A run's page (#/run/<id>): its facts, LoRA configuration (targets, rank, seed, optimizer) and
// user_metadata, live metric charts (any recorded metric, a second one on a right-hand axis, log scale,
// smoothing, CSV / JSON download of every point) and its checkpoints (checkpoints.js). While "Live" is
// on, the curves, the facts and the checkpoint list follow the run's push stream (live.js: new points,
// the checkpoint list and the run as the server sends them); without it they poll every few seconds (only
// the steps since the last one held are fetched). The title's data-live-mode says which ("push" or
// "poll") and data-pushed-events counts the pushed events applied.
import {api, ApiError} from "./api.js";
import {el, clear, message, fmtNumber, fmtAgo, download} from "./dom.js";
import {lineChart, chartLegend} from "./chart.js";
import {DEFAULT_METRIC, fetchMetrics, mergePoints, lastStep, metricKeys, seriesOf, lastLoss, stepCount, pointsCsv, pointsJson} from "./metrics.js";
import {loadedModelIds, runState, stateBadge} from "./runs.js";
import {checkpointsSection} from "./checkpoints.js";
import {live} from "./live.js";

const REFRESH_MS = 3000;
const NO_SECOND = "";

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

// The LoRA configuration create_model fixed for the run's life (GET /api/v1/training_runs/{id}: lora_config).
function loraConfig(run) {
  const c = run.lora_config;
  const section = el("section", {"aria-labelledby": "lora-title"}, el("h2", {id: "lora-title"}, "LoRA configuration"));
  if (!c) {
    section.append(message("Not available for this run."));
    return section;
  }
  const targets = [["attention", c.train_attn], ["MLP", c.train_mlp], ["unembedding", c.train_unembed]]
    .filter(([, on]) => on).map(([name]) => name);
  const optimizer = c.optimizer_config && c.optimizer_config.type ? c.optimizer_config.type : "—";
  const rows = [
    ["Targets", targets.length ? targets.join(", ") : "none"],
    ["Rank", String(c.rank)],
    ["Optimizer", optimizer + (c.optimizer_config && c.optimizer_config.version ? " v" + c.optimizer_config.version : "")],
    ["Seed", c.seed === null || c.seed === undefined ? "random" : String(c.seed)],
  ];
  section.append(el("dl", {class: "facts", id: "lora-config"}, rows.map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])));
  return section;
}

function metadata(run) {
  const entries = Object.entries(run.user_metadata || {});
  return el("section", {"aria-labelledby": "metadata-title"},
    el("h2", {id: "metadata-title"}, "User metadata"),
    entries.length === 0 ? message("None set.")
      : el("dl", {class: "facts", id: "user-metadata"}, entries.map(([k, v]) => [el("dt", {class: "mono"}, k), el("dd", {class: "mono"}, String(v))])));
}

function fileStem(runId) {
  return runId.replace(/[^A-Za-z0-9_.-]+/g, "_") + "-metrics";
}

// The chart controls and the chart; `state` holds the points and the choices, redraw() re-renders.
function metricsSection(state) {
  const select = el("select", {id: "metric-select"});
  const second = el("select", {id: "metric-second"});
  const log = el("input", {type: "checkbox", id: "log-scale"});
  const smoothing = el("input", {type: "range", id: "smoothing", min: 0, max: 0.99, step: 0.01, value: state.smoothing});
  const smoothingOut = el("output", {for: "smoothing", id: "smoothing-value"}, String(state.smoothing));
  const live = el("input", {type: "checkbox", id: "live", checked: true});
  const chartBox = el("div", {class: "chart-box", id: "chart"});
  const summary = el("p", {class: "muted", id: "chart-summary"});
  const redraw = () => {
    const keys = metricKeys(state.points);
    if (!keys.includes(state.metric)) state.metric = keys.includes(DEFAULT_METRIC) ? DEFAULT_METRIC : keys[0] || DEFAULT_METRIC;
    if (state.second !== NO_SECOND && !keys.includes(state.second)) state.second = NO_SECOND;
    if ([...select.options].map((o) => o.value).join("\n") !== keys.join("\n")) {
      clear(select).append(...keys.map((k) => el("option", {value: k}, k)));
      clear(second).append(el("option", {value: NO_SECOND}, "none"), ...keys.map((k) => el("option", {value: k}, k)));
    }
    select.value = state.metric;
    second.value = state.second;
    const series = [{label: state.metric, points: seriesOf(state.points, state.metric), axis: "left"}];
    if (state.second !== NO_SECOND && state.second !== state.metric) {
      series.push({label: state.second, points: seriesOf(state.points, state.second), axis: "right"});
    }
    const width = chartBox.clientWidth - 18;  // inside the box's padding and border
    clear(chartBox).append(lineChart(series, {log: state.log, smoothing: state.smoothing, width: width > 0 ? width : undefined}));
    if (series.length > 1) chartBox.append(chartLegend(series));
    summary.textContent = series.map((s) => s.points.length + " points of " + s.label).join(", ") +
      (state.downsampled ? " (older points downsampled)" : "") +
      (!state.live ? "; paused" : state.mode === "push" ? "; live (pushed by the server)" : "; live, every " + REFRESH_MS / 1000 + " s");
  };
  select.addEventListener("change", () => { state.metric = select.value; redraw(); });
  second.addEventListener("change", () => { state.second = second.value; redraw(); });
  log.addEventListener("change", () => { state.log = log.checked; redraw(); });
  smoothing.addEventListener("input", () => { state.smoothing = Number(smoothing.value); smoothingOut.textContent = smoothing.value; redraw(); });
  live.addEventListener("change", () => { state.live = live.checked; redraw(); });
  const csv = el("button", {type: "button", class: "small", id: "download-csv",
    onclick: () => download(fileStem(state.runId) + ".csv", pointsCsv(state.points), "text/csv")}, "Download CSV");
  const json = el("button", {type: "button", class: "small", id: "download-json",
    onclick: () => download(fileStem(state.runId) + ".json", pointsJson(state.runId, state.points, state.downsampled), "application/json")}, "Download JSON");
  const controls = el("div", {class: "controls"},
    el("span", {class: "control grow"}, el("label", {for: "metric-select"}, "Metric"), select),
    el("span", {class: "control grow"}, el("label", {for: "metric-second"}, "Right axis"), second),
    el("span", {class: "control"}, log, el("label", {for: "log-scale"}, "Log scale")),
    el("span", {class: "control"}, el("label", {for: "smoothing"}, "Smoothing"), smoothing, smoothingOut),
    el("span", {class: "control"}, live, el("label", {for: "live"}, "Live")),
    el("span", {class: "control"}, csv, json));
  const section = el("section", {"aria-labelledby": "metrics-title"}, el("h2", {id: "metrics-title"}, "Metrics"), controls, chartBox, summary);
  return {section, redraw};
}

async function refreshPoints(state) {
  const since = lastStep(state.points);
  const fresh = await fetchMetrics(state.runId, since === null ? undefined : since);
  state.points = since === null ? fresh.points : mergePoints(state.points, fresh.points, since);
  state.downsampled = state.downsampled || fresh.downsampled;
}

function eventsPath(state) {
  const since = lastStep(state.points);
  const base = "/api/v1/training_runs/" + encodeURIComponent(state.runId) + "/events";
  return since === null ? base : base + "?since_step=" + since;
}

// A pushed event into the page's state: new points (merged from since_step on the stream's first event),
// the checkpoint list, the run (with whether it is loaded).
function applyEvent(page, name, data) {
  const {state} = page;
  if (name === "metrics") {
    const fresh = Array.isArray(data.points) ? data.points : [];
    state.points = data.since_step === null || data.since_step === undefined ? state.points.concat(fresh)
      : mergePoints(state.points, fresh, data.since_step);
    state.downsampled = state.downsampled || Boolean(data.downsampled);
  } else if (name === "checkpoints") {
    page.checkpoints.show(data.checkpoints || []);
  } else if (name === "run") {
    page.run = data;
    page.loaded = new Set(data.loaded ? [state.runId] : []);
  } else {
    return;
  }
  page.title.dataset.pushedEvents = String(Number(page.title.dataset.pushedEvents || 0) + 1);
  if (state.live) page.redraw();
}

export function showRun(container, runId) {
  const state = {runId, points: [], metric: DEFAULT_METRIC, second: NO_SECOND, log: false, smoothing: 0, live: true, downsampled: false, mode: "poll"};
  let stopLive = null;
  let stopped = false;
  const start = async () => {
    let run;
    try {
      [run] = await Promise.all([api("/api/v1/training_runs/" + encodeURIComponent(runId)), refreshPoints(state).catch(() => {})]);
    } catch (e) {
      clear(container).append(el("h1", {}, "Run"), message(e instanceof ApiError && e.status === 404 ? "No run " + runId + " (or it is not yours)." : "Cannot load the run: " + e.message, "error"));
      return;
    }
    const page = {state, run, loaded: await loadedModelIds()};
    const factsBox = el("div", {}, facts(run, state.points, page.loaded));
    const charts = metricsSection(state);
    page.checkpoints = checkpointsSection(runId);
    page.title = el("h1", {class: "mono run-title", id: "run-title", "data-live-mode": "", "data-pushed-events": "0"}, runId);
    page.redraw = () => {
      charts.redraw();
      clear(factsBox).append(facts(page.run, state.points, page.loaded));
    };
    clear(container).append(el("p", {}, el("a", {href: "#/runs"}, "← All runs")), page.title,
      el("p", {}, el("a", {href: "#/playground/" + encodeURIComponent(runId)}, "Chat with this run's live weights")), factsBox,
      el("div", {class: "two-col"}, loraConfig(run), metadata(run)), charts.section, page.checkpoints.section);
    charts.redraw();
    if (stopped) return;
    stopLive = live({
      path: () => eventsPath(state),
      onEvent: (name, data) => applyEvent(page, name, data),
      onMode: (mode) => { state.mode = mode; page.title.dataset.liveMode = mode; charts.redraw(); },
      tick: async () => {
        if (!state.live) return;
        [page.loaded] = await Promise.all([loadedModelIds(), refreshPoints(state), page.checkpoints.reload()]);
        page.redraw();
      },
      ms: REFRESH_MS,
    });
  };
  start();
  return () => { stopped = true; if (stopLive) stopLive(); };
}
