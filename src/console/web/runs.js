// The runs list (#/runs): the caller's training runs with base model, LoRA rank, age, step count, last
// loss and state, refreshed every few seconds (a card per run below 700 px); tick two or more and
// "Compare" opens #/compare/<id>,<id>,... (compare.js). Age, steps and loss come from each run's metrics; the state
// from /v1/models (a loaded run is listed there) and the time of its last recorded op.
import {api, ApiError} from "./api.js";
import {el, clear, table, message, fmtNumber, fmtDuration, toSeconds, nowSeconds} from "./dom.js";
import {fetchMetrics, lastLoss, stepCount, firstTime, lastTime} from "./metrics.js";

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

export function runState(runId, loaded, points) {
  if (!loaded) return "unknown";
  if (!loaded.has(runId)) return "unloaded";
  const last = lastTime(points);
  return last !== null && nowSeconds() - last < TRAINING_WINDOW_S ? "training" : "idle";
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

async function rowOf(run, loaded, state, onChange) {
  const points = await metricsOrNull(run.training_run_id);
  const started = Math.min(toSeconds(firstTime(points || [])) ?? Infinity, toSeconds(run.last_request_time) ?? Infinity);
  return {
    run, points,
    cells: [
      compareBox(run.training_run_id, state, onChange),
      runLink(run.training_run_id),
      run.base_model,
      run.lora_rank === null || run.lora_rank === undefined ? "—" : String(run.lora_rank),
      Number.isFinite(started) ? fmtDuration(nowSeconds() - started) : "—",
      points ? String(stepCount(points)) : "—",
      points ? fmtNumber(lastLoss(points)) : "—",
      stateBadge(runState(run.training_run_id, loaded, points || [])),
    ],
  };
}

async function render(container, state) {
  const limit = state.limit;
  const [list, loaded] = await Promise.all([api("/api/v1/training_runs?limit=" + limit), loadedModelIds()]);
  const runs = list.training_runs || [];
  const compare = el("button", {type: "button", id: "compare-runs", onclick: () => {
    location.hash = "#/compare/" + [...state.selected].map(encodeURIComponent).join(",");
  }});
  const onChange = () => {
    compare.disabled = state.selected.size < 2;
    compare.textContent = "Compare selected runs (" + state.selected.size + ")";
  };
  onChange();
  const rows = await Promise.all(runs.map((run) => rowOf(run, loaded, state, onChange)));
  const active = document.activeElement && container.contains(document.activeElement) ? document.activeElement : null;
  const focused = active && (active.getAttribute("href") || (active.dataset.run ? "pick:" + active.dataset.run : null));
  clear(container);
  container.append(el("h1", {}, "Training runs"));
  if (runs.length === 0) {
    container.append(message("No training runs yet. Start one with the tinker SDK (see the README) and it shows up here."));
    return;
  }
  const total = list.cursor && list.cursor.total_count;
  container.append(
    el("p", {class: "muted"}, runs.length + (total ? " of " + total : "") + " runs, newest first; refreshed every " + REFRESH_MS / 1000 +
      " s. Tick two or more to overlay their curves."),
    el("div", {class: "controls"}, compare),
    table("Training runs", ["Compare", "Run", "Base model", "LoRA rank", "Age", "Steps", "Last loss", "State"],
      rows.map((r) => r.cells), {class: "runs stack", id: "runs-table"}));
  if (total && total > runs.length) {
    container.append(el("button", {type: "button", onclick: () => { state.limit += PAGE; render(container, state); }}, "Show more runs"));
  }
  const again = focused && [...container.querySelectorAll("a, input.compare-pick")]
    .find((a) => a.getAttribute("href") === focused || "pick:" + a.dataset.run === focused);
  if (again) again.focus();  // a refresh keeps the keyboard user's place
}

export function showRuns(container) {
  let timer = null;
  let stopped = false;
  const state = {limit: PAGE, selected: new Set()};
  const tick = async () => {
    try {
      await render(container, state);
    } catch (e) {
      clear(container).append(el("h1", {}, "Training runs"),
        message(e instanceof ApiError ? "Cannot list runs: " + e.message : "Cannot reach the server: " + e, "error"));
    }
    if (!stopped) timer = setTimeout(tick, REFRESH_MS);
  };
  tick();
  return () => { stopped = true; clearTimeout(timer); };
}
