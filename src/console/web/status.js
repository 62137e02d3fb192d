// The sessions view (#/sessions: the caller's live sessions and samplers, then every session id the
// server keeps) and the server view (#/server: version, uptime, futures pending, and per served model the
// queue depth, KV-cache use, adapters and snapshots resident, tokens/s, busy time), both from
// GET /api/v1/server_status (and GET /api/v1/sessions), pushed by the server (GET /api/v1/events?topics=status,
// sent when more than the clock changed: uptime and ages are advanced here between events) or, when the
// stream is refused, polled every few seconds. The title's data-live-mode and data-pushed-events say which.
import {api, ApiError} from "./api.js";
import {el, clear, table, message, fmtNumber, fmtBytes, fmtDuration, fmtPercent} from "./dom.js";
import {live} from "./live.js";

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

function title(text, id, page) {
  const how = page.mode === "push" ? "live (pushed by the server)" : "refreshed every " + REFRESH_MS / 1000 + " s";
  return [el("h1", {id, "data-live-mode": page.mode, "data-pushed-events": String(page.pushed)}, text),
    el("p", {class: "muted", id: id + "-mode"}, how)];
}

function serverView({status}, page, elapsed) {
  const facts = [["Version", status.version], ["Uptime", fmtDuration(status.uptime_s + elapsed)], ["Futures pending", String(status.futures_pending)]];
  const models = status.models || [];
  return [
    ...title("Server", "server-title", page),
    el("dl", {class: "facts", id: "server-facts"}, facts.map(([k, v]) => [el("dt", {}, k), el("dd", {}, v ?? "—")])),
    el("h2", {}, "Models served"),
    models.length === 0 ? message("No models.") : table("Models served",
      ["Base model", "Queue depth", "KV cache", "Adapters", "Snapshots", "Tokens/s trained", "Tokens/s sampled", "Engine busy"],
      models.map((m) => [el("span", {class: "mono"}, m.base_model), String(m.queue_depth), meter(m.kv_cache_bytes_used, m.kv_cache_bytes_total),
        String(m.adapters_resident), String(m.snapshots_resident), fmtNumber(m.tokens_per_s_trained),
        fmtNumber(m.tokens_per_s_sampled), fmtPercent(m.engine_busy_fraction)]), {id: "models-table", class: "stack"}),
  ];
}

function sessionsView({status, session_ids: all}, page, elapsed) {
  const live = status.sessions || [];
  const samplers = status.samplers || [];
  const liveIds = new Set(live.map((s) => s.session_id));
  const ended = (all || []).filter((id) => !liveIds.has(id));
  return [
    ...title("Sessions", "sessions-title", page),
    live.length === 0 ? message("No live sessions.") : table("Live sessions", ["Session", "Age", "Training runs", "Samplers"],
      live.map((s) => [el("span", {class: "mono"}, s.session_id), fmtDuration(s.age_s + elapsed), String(s.training_runs), String(s.samplers)]), {id: "sessions-table", class: "stack"}),
    el("h2", {}, "Samplers"),
    samplers.length === 0 ? message("No samplers have served requests yet.") : table("Samplers",
      ["Sampler", "Base model", "Requests", "Tokens sampled", "Latency p50", "Latency p95"],
      samplers.map((s) => [el("span", {class: "mono"}, s.sampler_id), s.base_model, String(s.requests), String(s.tokens_sampled),
        fmtSeconds(s.latency_p50_s), fmtSeconds(s.latency_p95_s)]), {id: "samplers-table", class: "stack"}),
    el("h2", {}, "Other sessions"),
    ended.length === 0 ? message("None.") : el("ul", {class: "plain mono", id: "other-sessions"}, ended.map((id) => el("li", {}, id))),
  ];
}

// What the push stream's `status` event holds, read by polling instead.
async function polledStatus() {
  const [status, all] = await Promise.all([api("/api/v1/server_status"),
    api("/api/v1/sessions?limit=100").catch(() => ({sessions: []}))]);
  return {status, session_ids: all.sessions || []};
}

function showStatus(container, build) {
  const page = {data: null, at: 0, mode: "", pushed: 0};
  const redraw = () => {
    if (page.data) clear(container).append(...build(page.data, page, (Date.now() - page.at) / 1000));
  };
  const take = (data) => { page.data = data; page.at = Date.now(); redraw(); };
  const clock = setInterval(() => { if (page.mode === "push") redraw(); }, REFRESH_MS);
  const stopLive = live({
    path: () => "/api/v1/events?topics=status",
    onEvent: (name, data) => {
      if (name !== "status") return;
      page.pushed += 1;
      take(data);
    },
    onMode: (mode) => { page.mode = mode; redraw(); },
    tick: async () => {
      try {
        take(await polledStatus());
      } catch (e) {
        clear(container).append(message(e instanceof ApiError ? "Cannot read the server status: " + e.message : "Cannot reach the server: " + e, "error"));
      }
    },
    ms: REFRESH_MS,
  });
  return () => { clearInterval(clock); stopLive(); };
}

export function showServer(container) {
  return showStatus(container, serverView);
}

export function showSessions(container) {
  return showStatus(container, sessionsView);
}
