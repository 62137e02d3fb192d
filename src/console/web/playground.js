// The chat playground (#/playground[/<model>]): pick a base model, one of your loaded runs (its live
// weights) or a sampler checkpoint (tinker://...), or type any of them; chat through our own
// POST /v1/chat/completions with stream: true and logprobs; each streamed token is a span whose logprob
// and top alternatives show on hover, or on focus with the arrow keys inside a reply.
import {api, streamChat} from "./api.js";
import {el, clear, message, fmtNumber} from "./dom.js";

const TOP_LOGPROBS = 5;

function modelGroups(models) {
  const groups = {"Base models": [], "Training runs (live weights)": [], "Sampler checkpoints": []};
  for (const m of models) {
    if (m.owned_by === "tinkerd") groups["Base models"].push(m.id);
    else if (m.id.startsWith("tinker://")) groups["Sampler checkpoints"].push(m.id);
    else groups["Training runs (live weights)"].push(m.id);
  }
  return Object.entries(groups).filter(([, ids]) => ids.length)
    .map(([label, ids]) => el("optgroup", {label}, ids.map((id) => el("option", {value: id}, id))));
}

function describe(entry) {
  const p = Math.exp(entry.logprob);
  const tops = (entry.top_logprobs || []).map((t) => JSON.stringify(t.token) + " " + fmtNumber(t.logprob)).join(", ");
  return JSON.stringify(entry.token) + ": logprob " + fmtNumber(entry.logprob) + " (p " + fmtNumber(p) + ")" + (tops ? "; top: " + tops : "");
}

// A streamed piece of text with the logprobs of the tokens that made it.
function tokenSpan(text, entries) {
  const span = el("span", {class: "tok", tabindex: -1}, text);
  if (entries.length) {
    const lp = entries.reduce((sum, e) => sum + e.logprob, 0);
    span.dataset.logprob = String(lp);
    span.title = entries.map(describe).join("\n");
    span.style.setProperty("--p", String(Math.max(0, Math.min(1, Math.exp(lp)))));
  }
  return span;
}

function bindTooltip(reply, tooltip) {
  const show = (span) => {
    if (!span || !span.title) return;
    tooltip.textContent = span.title;
    const box = span.getBoundingClientRect();
    const below = reply.getBoundingClientRect().bottom;  // under the whole reply: its text stays readable
    tooltip.style.left = Math.max(0, Math.min(window.scrollX + box.left, window.scrollX + window.innerWidth - 330)) + "px";
    tooltip.style.top = window.scrollY + below + 8 + "px";
    tooltip.hidden = false;
  };
  reply.addEventListener("mouseover", (e) => show(e.target.closest(".tok")));
  reply.addEventListener("mouseleave", () => { tooltip.hidden = true; });
  reply.addEventListener("focusin", (e) => show(e.target.closest(".tok")));
  reply.addEventListener("focusout", () => { tooltip.hidden = true; });
  reply.addEventListener("keydown", (e) => {
    const tokens = [...reply.querySelectorAll(".tok")];
    const at = tokens.indexOf(document.activeElement);
    const next = e.key === "ArrowRight" ? at + 1 : e.key === "ArrowLeft" ? at - 1 : null;
    if (next === null || tokens.length === 0) return;
    e.preventDefault();
    tokens[Math.max(0, Math.min(tokens.length - 1, next))].focus();
  });
}

function messageBox(role, text) {
  return el("div", {class: "msg msg-" + role}, el("div", {class: "msg-role"}, role), el("div", {class: "msg-text"}, text));
}

function numberField(id, label, value, attrs) {
  return el("span", {class: "control"}, el("label", {for: id}, label), el("input", {id, type: "number", value, ...attrs}));
}

export function showPlayground(container, preset) {
  const history = [];
  const controller = {abort: null};
  const select = el("select", {id: "pg-model"});
  const custom = el("input", {id: "pg-model-custom", type: "text", placeholder: "run id or tinker://...", class: "mono", value: preset || ""});
  const transcript = el("div", {class: "transcript", id: "pg-transcript", "aria-live": "polite"});
  const input = el("textarea", {id: "pg-input", rows: 3, placeholder: "Say something", required: true});
  const status = el("p", {class: "muted", id: "pg-status", role: "status"});
  const stop = el("button", {type: "button", id: "pg-stop", disabled: true, onclick: () => controller.abort && controller.abort.abort()}, "Stop");
  const clearButton = el("button", {type: "button", onclick: () => { history.length = 0; clear(transcript); status.textContent = ""; }}, "Clear chat");
  const form = el("form", {class: "chat-form", id: "pg-form"},
    el("label", {for: "pg-input"}, "Message"), input,
    el("div", {class: "controls"}, el("button", {type: "submit", id: "pg-send"}, "Send"), stop, clearButton));
  const settings = el("div", {class: "controls"},
    el("span", {class: "control"}, el("label", {for: "pg-model"}, "Model"), select),
    el("span", {class: "control"}, el("label", {for: "pg-model-custom"}, "or"), custom),
    numberField("pg-max-tokens", "Max tokens", 64, {min: 1, max: 4096}),
    numberField("pg-temperature", "Temperature", 0.7, {min: 0, max: 2, step: 0.1}));
  clear(container).append(el("h1", {}, "Playground"), settings, transcript, form, status);
  api("/v1/models").then((m) => {
    select.append(...modelGroups(m.data || []));
    if (preset && [...select.options].some((o) => o.value === preset)) { select.value = preset; custom.value = ""; }
  }).catch((e) => status.replaceChildren(message("Cannot list models: " + e.message, "error")));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    send({history, select, custom, input, transcript, status, stop, controller});
  });
  input.addEventListener("keydown", (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) form.requestSubmit(); });
  return () => controller.abort && controller.abort.abort();
}

async function send(ui) {
  const text = ui.input.value.trim();
  const model = ui.custom.value.trim() || ui.select.value;
  if (!text || !model) { ui.status.textContent = model ? "Type a message first." : "Pick a model first."; return; }
  ui.history.push({role: "user", content: text});
  ui.transcript.append(messageBox("user", text));
  ui.input.value = "";
  const reply = el("div", {class: "msg-text reply", tabindex: 0, "aria-label": "assistant reply; arrow keys read token logprobs"});
  ui.transcript.append(el("div", {class: "msg msg-assistant"}, el("div", {class: "msg-role"}, "assistant"), reply));
  bindTooltip(reply, document.getElementById("tooltip"));
  ui.controller.abort = new AbortController();
  ui.stop.disabled = false;
  ui.status.textContent = "Streaming from " + model + "…";
  const result = await streamReply(ui, model, reply);
  ui.stop.disabled = true;
  if (result.error) ui.history.pop();  // the refused message leaves the conversation
  else ui.history.push({role: "assistant", content: result.text});
  ui.status.textContent = result.error ? "Error: " + result.error : "Done (" + (result.finish || "stopped") + ", " + result.tokens + " tokens).";
  reply.dataset.done = "true";
}

async function streamReply(ui, model, reply) {
  const out = {text: "", tokens: 0, finish: null, error: null};
  let pending = [];
  const body = {
    model, messages: ui.history, logprobs: true, top_logprobs: TOP_LOGPROBS,
    max_tokens: Number(document.getElementById("pg-max-tokens").value) || 64,
    temperature: Number(document.getElementById("pg-temperature").value),
  };
  try {
    await streamChat(body, (chunk) => {
      const choice = (chunk.choices || [])[0];
      if (!choice) return;
      const entries = (choice.logprobs && choice.logprobs.content) || [];
      pending = pending.concat(entries);
      out.tokens += entries.length;
      const piece = (choice.delta && choice.delta.content) || "";
      if (piece) {
        reply.append(tokenSpan(piece, pending));
        pending = [];
        out.text += piece;
      }
      if (choice.finish_reason) out.finish = choice.finish_reason;
    }, ui.controller.abort.signal);
  } catch (e) {
    if (e.name !== "AbortError") out.error = e.message;
  }
  return out;
}
