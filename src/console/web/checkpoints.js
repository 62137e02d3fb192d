// A run's checkpoints on its page: name (with its user_metadata), kind, time, size, TTL, public; and the actions the REST API
// offers: publish / unpublish, set or clear the TTL, delete (asks to confirm in place), and a one-time
// archive download link. Every action re-reads the list from the server afterwards, and the run page's
// live refresh (pushed or polled) redraws it too (a save_state made while the page is open appears without a reload).
import {api} from "./api.js";
import {el, clear, table, message, fmtBytes, fmtAgo, fmtDuration, toSeconds, nowSeconds} from "./dom.js";

function checkpointPath(runId, checkpointId) {
  const [kind, name] = checkpointId.split("/");
  return "/api/v1/training_runs/" + encodeURIComponent(runId) + "/checkpoints/" + encodeURIComponent(kind) + "/" + encodeURIComponent(name);
}

function ttlText(expiresAt) {
  const t = toSeconds(expiresAt);
  return t === null ? "never expires" : "expires in " + fmtDuration(t - nowSeconds());
}

function button(label, onclick, attrs) {
  return el("button", {type: "button", class: "small", onclick, ...(attrs || {})}, label);
}

// Delete asks once more in place (no modal dialog): the first press turns the button into "Confirm".
function deleteButton(checkpoint, run) {
  const b = button("Delete", () => {
    if (b.dataset.armed === "yes") {
      run("Deleted " + checkpoint.checkpoint_id, (base) => api(base, {method: "DELETE"}));
      return;
    }
    b.dataset.armed = "yes";
    b.textContent = "Confirm delete";
    b.classList.add("danger");
  }, {"aria-label": "Delete " + checkpoint.checkpoint_id, "data-action": "delete"});
  return b;
}

function ttlForm(checkpoint, run) {
  const id = "ttl-" + checkpoint.checkpoint_id.replace(/[^A-Za-z0-9_-]/g, "-");
  const input = el("input", {type: "number", id, min: 1, step: 1, placeholder: "seconds", class: "ttl-input"});
  return el("span", {class: "ttl-form"},
    el("label", {for: id, class: "visually-hidden"}, "TTL in seconds for " + checkpoint.checkpoint_id), input,
    button("Set TTL", () => {
      const seconds = input.value === "" ? null : Number(input.value);
      run(seconds === null ? "TTL removed" : "TTL set", (base) => api(base + "/ttl", {method: "PUT", body: {ttl_seconds: seconds}}));
    }));
}

function archiveButton(checkpoint, base, cell) {
  return button("Archive", async () => {
    try {
      const answer = await api(base + "/archive");
      const link = el("a", {href: answer.url, download: "checkpoint.tar", class: "archive-link"}, "Download .tar");
      clear(cell).append(link, el("span", {class: "muted"}, " (one use, until " + new Date(answer.expires).toLocaleTimeString() + ")"));
      link.focus();
    } catch (e) {
      clear(cell).append(message("Archive failed: " + e.message, "error"));
    }
  }, {"aria-label": "Archive link for " + checkpoint.checkpoint_id});
}

function rowOf(runId, checkpoint, act) {
  const base = checkpointPath(runId, checkpoint.checkpoint_id);
  const run = (label, call) => act(label, () => call(base));  // call(base path) -> a promise
  const archiveCell = el("span");
  archiveCell.append(archiveButton(checkpoint, base, archiveCell));
  const publish = checkpoint.public
    ? button("Unpublish", () => run("Unpublished", (b) => api(b + "/publish", {method: "DELETE"})))
    : button("Publish", () => run("Published", (b) => api(b + "/publish", {method: "POST"})));
  const meta = Object.entries(checkpoint.user_metadata || {}).map(([k, v]) => k + "=" + v).join(", ");
  return [
    el("span", {},
      el("span", {class: "mono", "data-checkpoint": checkpoint.checkpoint_id}, checkpoint.checkpoint_id),
      meta ? el("span", {class: "muted checkpoint-metadata", title: "user_metadata"}, " " + meta) : ""),
    checkpoint.checkpoint_type,
    fmtAgo(checkpoint.time),
    fmtBytes(checkpoint.size_bytes),
    ttlText(checkpoint.expires_at),
    checkpoint.public ? "public" : "private",
    el("span", {class: "actions"}, publish, ttlForm(checkpoint, run), archiveCell, deleteButton(checkpoint, run)),
  ];
}

// The section, reload() (the run page's polling calls it) and show(list) (a list pushed by the server); the
// table is rebuilt only when the list changed, so a TTL being typed or an archive link survives the
// refreshes in between.
export function checkpointsSection(runId) {
  const box = el("div", {id: "checkpoints"});
  const status = el("p", {class: "muted", role: "status", id: "checkpoint-status"});
  let shown = null;  // the list drawn, as JSON
  const render = (list, force) => {
    const signature = JSON.stringify(list);
    if (!force && signature === shown) return;
    shown = signature;
    clear(box).append(list.length === 0 ? message("No checkpoints yet (save_state / save_weights_for_sampler make them).")
      : table("Checkpoints", ["Checkpoint", "Kind", "Saved", "Size", "TTL", "Visibility", "Actions"],
        list.map((c) => rowOf(runId, c, act)), {class: "checkpoints stack"}));
    box.dataset.count = String(list.length);
  };
  const load = async (force) => {
    try {
      const data = await api("/api/v1/training_runs/" + encodeURIComponent(runId) + "/checkpoints");
      render(data.checkpoints || [], force);
    } catch (e) {
      shown = null;
      clear(box).append(message("Cannot list checkpoints: " + e.message, "error"));
    }
  };
  const act = async (label, call) => {
    try {
      await call();
      status.textContent = label + ".";
    } catch (e) {
      status.textContent = label + " failed: " + e.message;
    }
    await load(true);
  };
  load(true);
  const section = el("section", {"aria-labelledby": "checkpoints-title"}, el("h2", {id: "checkpoints-title"}, "Checkpoints"), status, box);
  return {section, reload: () => load(false), show: (list) => render(list, false)};
}
