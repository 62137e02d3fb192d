// The runs list (#/runs): the caller's training runs with base model, LoRA rank, age, step count, last
// loss and state (a card per run below 700 px); tick two or more and "Compare" opens
// #/compare/<id>,<id>,... (compare.js). Pushed by the server (GET /api/v1/events?topics=runs: each run with
// its steps, last loss, times and whether it is loaded); when the stream is refused, polled every few
// seconds (the list, /v1/models and each run's metrics). The title's data-live-mode says which ("push" or
// "poll") and data-pushed-events counts the pushed events applied. The state is "training" while loaded
// with an op in the last 30 s, else "idle", or "unloaded".
import {api, ApiError} from "./api.js";
import {el, clear, table, message, fmtNumber, fmtDuration, toSeconds, nowSeconds} from "./dom.js";
import {fetchMetrics, lastLoss, stepCount, firstTime, lastTime} from "./metrics.js";
import {live} from "./live.js";

const REFRESH_MS = 5000;
const TRAINING_WINDOW_S = 30;  // a loaded run with an op this recent is "training", else "idle"
const PAGE = 50;

export function runLink(runId) {
  return el("a", {href: "#/run/" + encodeURIComponent(runId), class: "mono"}, runId);
}

export async function loadedModelIds() {
  try {
    const models = await api("/v1/models");
    return new Set((models.data || []).map((m) => m.id));
  } catch (e) {
    return null;
  }
}

// A run's state from whether it is loaded (null: unknown) and the time of its last recorded op.
export function stateOf(loaded, last) {
  if (loaded === null || loaded === undefined) return "unknown";
  if (!loaded) return "unloaded";
  return last !== null && last !== undefined && nowSeconds() - last < TRAINING_WINDOW_S ? "training" : "idle";
}

export function runState(runId, loaded, points) {
  return stateOf(loaded ? loaded.has(runId) : null, lastTime(points));
}

export function stateBadge(state) {
  return el("span", {class: "badge state-" + state}, state);
}

async function metricsOrNull(runId) {
  try {
    return (await fetchMetrics(runId)).points;
  } catch (e) {
    return null;
  }
}

// The caller's newest runs as the push stream's `runs` event has them, read by polling instead: the list,
// /v1/models and each run's metrics.
async function polledRuns(limit) {
  const [list, loaded] = await Promise.all([api("/api/v1/training_runs?limit=" + limit), loadedModelIds()]);
  const runs = list.training_runs || [];
  const rows = await Promise.all(runs.map(async (run) => {
    const points = await metricsOrNull(run.training_run_id);
    return {...run, loaded: loaded ? loaded.has(run.training_run_id) : null, steps: points ? stepCount(points) : null,
      last_loss: points ? lastLoss(points) : null, first_time: firstTime(points || []), last_time: lastTime(points || [])};
  }));
  return {training_runs: rows, total_count: list.cursor ? list.cursor.total_count : null};
}

// The row's "compare" checkbox: the choice lives in state.selected, so a refresh keeps it.
function compareBox(runId, state, onChange) {
  const box = el("input", {type: "checkbox", class: "compare-pick", "data-run": runId, "aria-label": "Compare " + runId,
    checked: state.selected.has(runId)});
  box.addEventListener("change", () => {
    if (box.checked) state.selected.add(runId);
    else state.selected.delete(runId);
    onChange();
  });
  return box;
}

function rowCells(run, state, onChange) {
  const started = Math.min(toSeconds(run.first_time) ?? Infinity, toSeconds(run.last_request_time) ?? Infinity);
  const known = run.steps !== null && run.steps !== undefined;
  return [
    compareBox(run.training_run_id, state, onChange),
    runLink(run.training_run_id),
    run.base_model,
    run.lora_rank === null || run.lora_rank === undefined ? "—" : String(run.lora_rank),
    Number.isFinite(started) ? fmtDuration(nowSeconds() - started) : "—",
    known ? String(run.steps) : "—",
    known ? fmtNumber(run.last_loss) : "—",
    stateBadge(stateOf(run.loaded, run.last_time)),
  ];
}

// Draws state.data (a `runs` event, pushed or polled); it reads nothing from the server.
function draw(container, state, restart) {
  const runs = state.data.training_runs || [];
  const compare = el("button", {type: "button", id: "compare-runs", onclick: () => {
    location.hash = "#/compare/" + [...state.selected].map(encodeURIComponent).join(",");
  }});
  const onChange = () => {
    compare.disabled = state.selected.size < 2;
    compare.textContent = "Compare selected runs (" + state.selected.size + ")";
  };
  onChange();
  const active = document.activeElement && container.contains(document.activeElement) ? document.activeElement : null;
  const focused = active && (active.getAttribute("href") || (active.dataset.run ? "pick:" + active.dataset.run : null));
  clear(container);
  container.append(el("h1", {id: "runs-title", "data-live-mode": state.mode, "data-pushed-events": String(state.pushed)}, "Training runs"));
  if (runs.length === 0) {
    container.append(message("No training runs yet. Start one with the tinker SDK (see the README) and it shows up here."));
    return;
  }
  const total = state.data.total_count;
  const how = state.mode === "push" ? "live (pushed by the server)" : "refreshed every " + REFRESH_MS / 1000 + " s";
  container.append(
    el("p", {class: "muted", id: "runs-summary"}, runs.length + (total ? " of " + total : "") + " runs, newest first; " + how +
      ". Tick two or more to overlay their curves."),
    el("div", {class: "controls"}, compare),
    table("Training runs", ["Compare", "Run", "Base model", "LoRA rank", "Age", "Steps", "Last loss", "State"],
      runs.map((run) => rowCells(run, state, onChange)), {class: "runs stack", id: "runs-table"}));
  if (total && total > runs.length) {
    container.append(el("button", {type: "button", onclick: () => { state.limit += PAGE; restart(); }}, "Show more runs"));
  }
  const again = focused && [...container.querySelectorAll("a, input.compare-pick")]
    .find((a) => a.getAttribute("href") === focused || "pick:" + a.dataset.run === focused);
  if (again) again.focus();  // a refresh keeps the keyboard user's place
}

function showError(container, e) {
  clear(container).append(el("h1", {}, "Training runs"),
    message(e instanceof ApiError ? "Cannot list runs: " + e.message : "Cannot reach the server: " + e, "error"));
}

// Follows GET /api/v1/events?topics=runs (live.js), polling the list when the stream is refused; while
// pushed, the page is redrawn every few seconds from what it holds (ages and states move with the clock).
export function showRuns(container) {
  const state = {limit: PAGE, selected: new Set(), data: null, mode: "", pushed: 0};
  let stopLive = null;
  const redraw = () => { if (state.data) draw(container, state, restart); };
  const clock = setInterval(() => { if (state.mode === "push") redraw(); }, REFRESH_MS);
  function restart() {
    if (stopLive) stopLive();
    stopLive = live({
      path: () => "/api/v1/events?topics=runs&limit=" + state.limit,
      onEvent: (name, data) => {
        if (name !== "runs") return;
        state.data = data;
        state.pushed += 1;
        redraw();
      },
      onMode: (mode) => { state.mode = mode; redraw(); },
      tick: async () => {
        try {
          state.data = await polledRuns(state.limit);
          redraw();
        } catch (e) {
          showError(container, e);
        }
      },
      ms: REFRESH_MS,
    });
  }
  restart();
  return () => { clearInterval(clock); if (stopLive) stopLive(); };
}
