// The console's only way to the server: JSON calls with the signed-in key (X-API-Key), errors as ApiError
// with the server's message, the dev-mode probe, the OpenAI streams and the live views' push streams read
// as Server-Sent Events (fetch and a stream reader, never EventSource: the key stays in a header).
const KEY_STORAGE = "tinkerd.apiKey";
// In dev mode (no --api-keys) the server accepts any tml- key: if this one works, nobody needs to sign in.
const DEV_KEY = "tml-console-dev";

export const auth = {key: sessionStorage.getItem(KEY_STORAGE) || "", dev: false};

export class ApiError extends Error {
  constructor(status, detail) {
    super(detail);
    this.status = status;
  }
}

export function setKey(key, dev) {
  auth.key = key;
  auth.dev = Boolean(dev);
  if (key && !dev) sessionStorage.setItem(KEY_STORAGE, key);
  else sessionStorage.removeItem(KEY_STORAGE);
}

function headers(json) {
  const h = {};
  if (auth.key) h["X-API-Key"] = auth.key;
  if (json) h["Content-Type"] = "application/json";
  return h;
}

function errorText(data, fallback) {
  if (data && typeof data.detail === "string") return data.detail;
  if (data && data.error && typeof data.error.message === "string") return data.error.message;
  return fallback;
}

// api("/api/v1/training_runs") -> parsed JSON; a non-2xx answer throws ApiError(status, server message).
export async function api(path, options) {
  const {method = "GET", body, signal} = options || {};
  const response = await fetch(path, {
    method, signal, headers: headers(body !== undefined),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
  if (!response.ok) throw new ApiError(response.status, errorText(data, text || response.statusText));
  return data;
}

// True when `key` is accepted (a cheap authenticated read).
export async function keyWorks(key) {
  const response = await fetch("/api/v1/training_runs?limit=1", {headers: {"X-API-Key": key}});
  return response.ok;
}

export async function probeDevMode() {
  try {
    return await keyWorks(DEV_KEY) ? DEV_KEY : null;
  } catch (e) {
    return null;
  }
}

async function refusal(response) {
  const text = await response.text();
  let data = null;
  try { data = JSON.parse(text); } catch (e) { data = null; }
  return new ApiError(response.status, errorText(data, text || response.statusText));
}

// Reads a Server-Sent-Events body: onEvent({name, id, data: [data lines]}) per event that has data
// (comments, such as heartbeats, are skipped), until the body ends or onEvent returns true.
async function readEvents(response, onEvent) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const {value, done} = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, {stream: true});
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = {name: "message", id: null, data: []};
      for (const line of buffer.slice(0, end).split("\n")) {
        if (line.startsWith("event:")) event.name = line.slice(6).trim();
        else if (line.startsWith("id:")) event.id = line.slice(3).trim();
        else if (line.startsWith("data:")) event.data.push(line.slice(5).trim());
      }
      buffer = buffer.slice(end + 2);
      if (event.data.length && onEvent(event)) {
        reader.cancel().catch(() => {});
        return;
      }
    }
  }
}

// Streams POST /v1/chat/completions or /v1/completions (`path`, stream: true): calls onChunk(parsed
// chunk) per SSE event until [DONE]. Throws ApiError when the request is refused before the stream
// starts, or when an error event arrives in the stream.
export async function streamOpenAI(path, body, onChunk, signal) {
  const response = await fetch(path, {
    method: "POST", signal, headers: headers(true), body: JSON.stringify({...body, stream: true}),
  });
  if (!response.ok) throw await refusal(response);
  await readEvents(response, (event) => {
    for (const data of event.data) {
      if (data === "[DONE]") return true;
      const chunk = JSON.parse(data);
      if (chunk && chunk.error) throw new ApiError(500, errorText(chunk, "the stream failed"));
      onChunk(chunk);
    }
    return false;
  });
}

// Server-Sent Events of GET `path` (/api/v1/training_runs/{id}/events, /api/v1/events?topics=...): onOpen()
// once the server accepted, then onEvent(name, parsed data, id) per event until the stream ends. Throws
// ApiError when refused (429 when the server's stream limit is reached).
export async function streamEvents(path, {lastEventId, signal, onOpen, onEvent}) {
  const h = headers(false);
  h.Accept = "text/event-stream";
  if (lastEventId) h["Last-Event-ID"] = lastEventId;
  const response = await fetch(path, {signal, headers: h, cache: "no-store"});
  if (!response.ok) throw await refusal(response);
  onOpen();
  await readEvents(response, (event) => {
    onEvent(event.name, JSON.parse(event.data.join("\n")), event.id);
    return false;
  });
}
