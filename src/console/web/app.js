// The console's entry point: signs in (a key from sessionStorage, dev mode's probe, else the sign-in
// form), then routes the URL's #fragment to a view — #/runs, #/run/<id>, #/compare/<id>,<id>,...,
// #/sessions, #/server, #/playground[/<model>] — stopping the previous view's refresh timers on every change.
import {auth, setKey, keyWorks, probeDevMode} from "./api.js";
import {clear} from "./dom.js";
import {showRuns} from "./runs.js";
import {showRun} from "./run.js";
import {showSessions, showServer} from "./status.js";
import {showPlayground} from "./playground.js";
import {showCompare} from "./compare.js";

const view = document.getElementById("view");
let stopView = null;

function route() {
  const [name, ...rest] = location.hash.replace(/^#\/?/, "").split("/");
  const param = rest.length ? decodeURIComponent(rest.join("/")) : "";
  const views = {
    runs: () => showRuns(view),
    run: () => showRun(view, param),
    compare: () => showCompare(view, rest.join("/")),
    sessions: () => showSessions(view),
    server: () => showServer(view),
    playground: () => showPlayground(view, param),
  };
  const active = views[name] ? name : "runs";
  for (const link of document.querySelectorAll("[data-nav]")) {
    const current = link.dataset.nav === active || ((active === "run" || active === "compare") && link.dataset.nav === "runs");
    if (current) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (stopView) stopView();
  document.getElementById("tooltip").hidden = true;
  clear(view);
  stopView = views[active]();
}

function showSignedIn() {
  document.getElementById("sign-in").hidden = true;
  view.hidden = false;
  document.getElementById("who-label").textContent = auth.dev ? "dev mode (no API keys)" : "signed in";
  document.getElementById("sign-out").hidden = auth.dev;
  window.addEventListener("hashchange", route);
  route();
}

function showSignIn(errorText) {
  view.hidden = true;
  document.getElementById("sign-in").hidden = false;
  document.getElementById("sign-in-error").textContent = errorText || "";
  document.getElementById("api-key").focus();
}

async function signIn(event) {
  event.preventDefault();
  const key = document.getElementById("api-key").value.trim();
  if (await keyWorks(key).catch(() => false)) {
    setKey(key, false);
    showSignedIn();
  } else {
    showSignIn("That key is not accepted by this server.");
  }
}

async function start() {
  document.getElementById("sign-in-form").addEventListener("submit", signIn);
  document.getElementById("sign-out").addEventListener("click", () => { setKey("", false); location.reload(); });
  if (auth.key && await keyWorks(auth.key).catch(() => false)) {
    showSignedIn();
    return;
  }
  const devKey = await probeDevMode();
  if (devKey) {
    setKey(devKey, true);
    showSignedIn();
    return;
  }
  showSignIn(auth.key ? "The saved key is no longer accepted." : "");
}

start();
