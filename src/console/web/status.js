// The sessions view (#/sessions: the caller's live sessions and samplers, then every session id the
// server keeps) and the server view (#/server: version, uptime, futures pending, and per served model the
// queue depth, KV-cache use, adapters and snapshots resident, tokens/s, busy time), both from
// GET /api/v1/server_status, refreshed every few seconds.
import {api, ApiError} from "./api.js";
import {el, clear, table, message, fmtNumber, fmtBytes, fmtDuration, fmtPercent} from "./dom.js";

const REFRESH_MS = 5000;

function fmtSeconds(x) {
  return x === null || x === undefined ? "—" : fmtNumber(x) + " s";
}

function meter(used, total) {
  if (!total) return fmtBytes(used);
  return el("span", {class: "meter-cell"},
    el("meter", {min: 0, max: total, value: used, "aria-label": "KV cache use"}),
    " " + fmtBytes(used) + " / " + fmtBytes(total));
}

function serverView(status) {
  const facts = [["Version", status.version], ["Uptime", fmtDuration(status.uptime_s)], ["Futures pending", String(status.futures_pending)]];
  const models = status.models || [];
  return [
    el("h1", {}, "Server"),
    el("dl", {class: "facts", id: "server-facts"}, facts.map(([k, v]) => [el("dt", {}, k), el("dd", {}, v ?? "—")])),
    el("h2", {}, "Models served"),
    models.length === 0 ? message("No models.") : table("Models served",
      ["Base model", "Queue depth", "KV cache", "Adapters", "Snapshots", "Tokens/s trained", "Tokens/s sampled", "Engine busy"],
      models.map((m) => [el("span", {class: "mono"}, m.base_model), String(m.queue_depth), meter(m.kv_cache_bytes_used, m.kv_cache_bytes_total),
        String(m.adapters_resident), String(m.snapshots_resident), fmtNumber(m.tokens_per_s_trained),
        fmtNumber(m.tokens_per_s_sampled), fmtPercent(m.engine_busy_fraction)]), {id: "models-table", class: "stack"}),
  ];
}

async function sessionsView(status) {
  const live = status.sessions || [];
  const samplers = status.samplers || [];
  const all = await api("/api/v1/sessions?limit=100").catch(() => ({sessions: []}));
  const liveIds = new Set(live.map((s) => s.session_id));
  const ended = (all.sessions || []).filter((id) => !liveIds.has(id));
  return [
    el("h1", {}, "Sessions"),
    live.length === 0 ? message("No live sessions.") : table("Live sessions", ["Session", "Age", "Training runs", "Samplers"],
      live.map((s) => [el("span", {class: "mono"}, s.session_id), fmtDuration(s.age_s), String(s.training_runs), String(s.samplers)]), {id: "sessions-table", class: "stack"}),
    el("h2", {}, "Samplers"),
    samplers.length === 0 ? message("No samplers have served requests yet.") : table("Samplers",
      ["Sampler", "Base model", "Requests", "Tokens sampled", "Latency p50", "Latency p95"],
      samplers.map((s) => [el("span", {class: "mono"}, s.sampler_id), s.base_model, String(s.requests), String(s.tokens_sampled),
        fmtSeconds(s.latency_p50_s), fmtSeconds(s.latency_p95_s)]), {id: "samplers-table", class: "stack"}),
    el("h2", {}, "Other sessions"),
    ended.length === 0 ? message("None.") : el("ul", {class: "plain mono"}, ended.map((id) => el("li", {}, id))),
  ];
}

function showStatus(container, build) {
  let timer = null;
  let stopped = false;
  const tick = async () => {
    try {
      const status = await api("/api/v1/server_status");
      const parts = await build(status);
      clear(container).append(...parts);
    } catch (e) {
      clear(container).append(message(e instanceof ApiError ? "Cannot read the server status: " + e.message : "Cannot reach the server: " + e, "error"));
    }
    if (!stopped) timer = setTimeout(tick, REFRESH_MS);
  };
  tick();
  return () => { stopped = true; clearTimeout(timer); };
}

export function showServer(container) {
  return showStatus(container, async (status) => serverView(status));
}

export function showSessions(container) {
  return showStatus(container, sessionsView);
}
