// A run's recorded metrics (GET /api/v1/training_runs/{id}/metrics, docs/console.md): fetching them
// (whole or since a step), merging an incremental answer into what the page has, and reading series out
// of the points: every "op · name" pair recorded, the last loss, the step count.
import {api} from "./api.js";

export const DEFAULT_METRIC = "forward_backward · loss:sum";

export function metricsPath(runId, sinceStep) {
  const base = "/api/v1/training_runs/" + encodeURIComponent(runId) + "/metrics";
  return sinceStep === undefined || sinceStep === null ? base : base + "?since_step=" + sinceStep;
}

export async function fetchMetrics(runId, sinceStep) {
  const data = await api(metricsPath(runId, sinceStep));
  return {points: Array.isArray(data && data.points) ? data.points : [], downsampled: Boolean(data && data.downsampled)};
}

// Points already held plus an answer for since_step=N: the held ones before step N, then the answer's.
export function mergePoints(held, fresh, sinceStep) {
  return held.filter((p) => p.step < sinceStep).concat(fresh);
}

export function lastStep(points) {
  return points.length ? points[points.length - 1].step : null;
}

export function metricKey(op, name) {
  return op + " · " + name;
}

// Every "op · name" series present, the default loss first, then sorted.
export function metricKeys(points) {
  const keys = new Set();
  for (const p of points) for (const name of Object.keys(p.values || {})) keys.add(metricKey(p.op, name));
  return [...keys].sort((a, b) => (a === DEFAULT_METRIC ? -1 : b === DEFAULT_METRIC ? 1 : a.localeCompare(b)));
}

// The series of one key: [{x: step, y: value, t: time}] in time order.
export function seriesOf(points, key) {
  const out = [];
  for (const p of points) {
    for (const [name, value] of Object.entries(p.values || {})) {
      if (metricKey(p.op, name) === key && typeof value === "number") out.push({x: p.step, y: value, t: p.time});
    }
  }
  return out;
}

export function lastLoss(points) {
  for (let i = points.length - 1; i >= 0; i -= 1) {
    const v = points[i].values && points[i].values["loss:sum"];
    if (points[i].op === "forward_backward" && typeof v === "number") return v;
  }
  return null;
}

// Optimizer steps taken: the largest step recorded (an optim_step point carries the count after it ran).
export function stepCount(points) {
  let steps = 0;
  for (const p of points) steps = Math.max(steps, p.step);
  return steps;
}

export function firstTime(points) {
  return points.length ? points[0].time : null;
}

export function lastTime(points) {
  return points.length ? points[points.length - 1].time : null;
}

function csvField(value) {
  const text = value === null || value === undefined ? "" : String(value);
  return /[",\n\r]/.test(text) ? '"' + text.replace(/"/g, '""') + '"' : text;
}

// A run's points as CSV, one row per recorded value: step, time, op, name, value.
export function pointsCsv(points) {
  const rows = [["step", "time", "op", "name", "value"]];
  for (const p of points) {
    for (const [name, value] of Object.entries(p.values || {})) rows.push([p.step, p.time, p.op, name, value]);
  }
  return rows.map((r) => r.map(csvField).join(",")).join("\n") + "\n";
}

// A run's points as JSON, in the shape the metrics endpoint answers.
export function pointsJson(runId, points, downsampled) {
  return JSON.stringify({training_run_id: runId, downsampled: Boolean(downsampled), points}, null, 1) + "\n";
}
