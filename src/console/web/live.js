// Live pages' refresh. live() reads the server's push stream (GET …/events, Server-Sent Events) and applies
// each event as it comes; when the stream is refused (429: the server's stream limit), fails, or drops and
// cannot be resumed, it falls back to poll(): tick() every `ms`, fetching only what is new.
import {streamEvents} from "./api.js";

const RECONNECT_MS = 1000;

// tick() now, then again `ms` after each tick settles (never two at once), until the returned stop
// function is called.
export function poll(tick, ms) {
  let timer = null;
  let stopped = false;
  const run = async () => {
    try {
      await tick();
    } catch (e) { /* the next tick tries again */ }
    if (!stopped) timer = setTimeout(run, ms);
  };
  run();
  return () => { stopped = true; clearTimeout(timer); };
}

// Push with polling as the fallback: path() names the stream (asked again at each connection, so it can
// carry the latest since_step; null: no stream fits, poll), onEvent(name, data) applies an event, tick/ms
// poll instead, onMode("push" | "poll") says which is in force. A stream that was open and drops is
// resumed (with Last-Event-ID where its events carry ids: no point twice); a refusal or a failed connection
// means polling for the rest of the page's life. Returns stop().
export function live({path, onEvent, tick, ms, onMode}) {
  const abort = new AbortController();
  let stopPolling = null;
  let stopped = false;
  let lastEventId = null;
  const fallBack = () => {
    if (stopped || stopPolling) return;
    onMode("poll");
    stopPolling = poll(tick, ms);
  };
  const connect = async () => {
    let opened = false;
    const target = path();
    if (!target) {
      fallBack();
      return;
    }
    try {
      await streamEvents(target, {
        lastEventId, signal: abort.signal,
        onOpen: () => { opened = true; onMode("push"); },
        onEvent: (name, data, id) => { if (id) lastEventId = id; onEvent(name, data); },
      });
    } catch (e) { /* refused or broken: below */ }
    if (stopped) return;
    if (opened) setTimeout(connect, RECONNECT_MS);  // it worked, then dropped: resume after the last id
    else fallBack();
  };
  connect();
  return () => {
    stopped = true;
    abort.abort();
    if (stopPolling) stopPolling();
  };
}
