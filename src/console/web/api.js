// The console's only way to the server: JSON calls with the signed-in key (X-API-Key), errors as ApiError
// with the server's message, the dev-mode probe, and the OpenAI streams read as Server-Sent Events.
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

// Streams POST /v1/chat/completions or /v1/completions (`path`, stream: true): calls onChunk(parsed
// chunk) per SSE event until [DONE]. Throws ApiError when the request is refused before the stream
// starts, or when an error event arrives in the stream.
export async function streamOpenAI(path, body, onChunk, signal) {
  const response = await fetch(path, {
    method: "POST", signal, headers: headers(true), body: JSON.stringify({...body, stream: true}),
  });
  if (!response.ok) {
    const text = await response.text();
    let data = null;
    try { data = JSON.parse(text); } catch (e) { data = null; }
    throw new ApiError(response.status, errorText(data, text || response.statusText));
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const {value, done} = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, {stream: true});
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") return;
        const chunk = JSON.parse(data);
        if (chunk && chunk.error) throw new ApiError(500, errorText(chunk, "the stream failed"));
        onChunk(chunk);
      }
    }
  }
}
