// The playground (#/playground[/<model>]): pick a base model, one of your loaded runs (its live weights)
// or a sampler checkpoint (tinker://...), or type any of them. Chat mode streams our own
// POST /v1/chat/completions (with an optional system prompt, the conversation carried); completion mode
// streams POST /v1/completions with the text as a raw prompt (each prompt on its own). Sampling: max
// tokens, temperature, top-p, top-k, seed, stop sequences. "Side by side" answers one prompt with two
// models at once (say the base model and an adapter). Each streamed token is a span whose logprob and
// top alternatives show on hover, or on focus with the arrow keys inside a reply. A refused request
// shows as an error bubble, and its prompt is marked "not sent" and left out of the conversation. The
// model list defaults to a model that can chat (/v1/models says which have a chat template). In chat mode
// a PNG or JPEG can be attached to a message for vision-language models (image_attach.js).
import {streamOpenAI, api} from "./api.js";
import {el, clear, message, fmtNumber} from "./dom.js";
import {imagePicker, readImage, userContent, thumbnail} from "./image_attach.js";

const TOP_LOGPROBS = 5;
const NONE = "";

function modelGroups(models) {
  const groups = {"Base models": [], "Training runs (live weights)": [], "Sampler checkpoints": []};
  for (const m of models) {
    if (m.owned_by === "tinkerd") groups["Base models"].push(m);
    else if (m.id.startsWith("tinker://")) groups["Sampler checkpoints"].push(m);
    else groups["Training runs (live weights)"].push(m);
  }
  return Object.entries(groups).filter(([, list]) => list.length)
    .map(([label, list]) => el("optgroup", {label}, list.map((m) => el("option", {value: m.id, "data-chat": m.chat_template === false ? "no" : "yes"},
      m.id + (m.chat_template === false ? " (no chat template)" : "")))));
}

// The model to select first: the preset if listed, else the first base model that can chat, else the
// first model that can chat, else the first one.
export function defaultModel(models, preset) {
  if (preset && models.some((m) => m.id === preset)) return preset;
  const chat = (m) => m.chat_template !== false;
  const pick = models.find((m) => m.owned_by === "tinkerd" && chat(m)) || models.find(chat) || models[0];
  return pick ? pick.id : NONE;
}

// The server's refusal in the playground's terms: it cannot point at an endpoint, only at the mode switch.
export function explainError(text) {
  if (/use \/v1\/completions/.test(text)) {
    return text.replace(/;?\s*use \/v1\/completions with a prompt instead\.?/, ".") +
      " Switch Mode to \u201cCompletion\u201d to send the text as a raw prompt.";
  }
  return text;
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
  return el("div", {class: "msg msg-" + role, "data-sent": "pending"}, el("div", {class: "msg-role"}, role), el("div", {class: "msg-text"}, text));
}

// An answer bubble being streamed: its reply element and its role line (the model's name when two answer).
function answerBox(roleText, model) {
  const reply = el("div", {class: "msg-text reply", tabindex: 0, "aria-label": roleText + " reply; arrow keys read token logprobs"});
  const box = el("div", {class: "msg msg-assistant", "data-model": model}, el("div", {class: "msg-role"}, roleText), reply);
  bindTooltip(reply, document.getElementById("tooltip"));
  return {box, reply};
}

function field(id, label, attrs) {
  return el("span", {class: "control"}, el("label", {for: id}, label), el("input", {id, ...attrs}));
}

function numberOrNull(id) {
  const text = document.getElementById(id).value.trim();
  return text === "" ? null : Number(text);
}

// "a | \n\n" -> ["a", "\n\n"]: stop sequences separated by "|", with \n and \t escapes.
export function parseStops(text) {
  return text.split("|").map((s) => s.trim().replace(/\\n/g, "\n").replace(/\\t/g, "\t")).filter((s) => s.length);
}

// The sampling fields every request carries (left out when empty, so the server's defaults apply).
function sampling() {
  const body = {
    max_tokens: numberOrNull("pg-max-tokens") || 64,
    temperature: numberOrNull("pg-temperature") ?? 0.7,
  };
  const topP = numberOrNull("pg-top-p");
  const topK = numberOrNull("pg-top-k");
  const seed = numberOrNull("pg-seed");
  const stops = parseStops(document.getElementById("pg-stop-seq").value);
  if (topP !== null) body.top_p = topP;
  if (topK !== null) body.top_k = topK;
  if (seed !== null) body.seed = seed;
  if (stops.length) body.stop = stops;
  return body;
}

export function showPlayground(container, preset) {
  const ui = {history: [], controllers: new Set()};
  ui.mode = el("select", {id: "pg-mode"}, el("option", {value: "chat"}, "Chat"), el("option", {value: "completion"}, "Completion (raw prompt)"));
  ui.select = el("select", {id: "pg-model"});
  ui.custom = el("input", {id: "pg-model-custom", type: "text", placeholder: "run id or tinker://...", class: "mono", value: preset || ""});
  ui.compare = el("select", {id: "pg-compare"}, el("option", {value: NONE}, "none"));
  ui.system = el("textarea", {id: "pg-system", rows: 2, placeholder: "Optional: instructions for the model"});
  ui.transcript = el("div", {class: "transcript", id: "pg-transcript", "aria-live": "polite", "data-turns": "0"});
  ui.input = el("textarea", {id: "pg-input", rows: 3, placeholder: "Say something", required: true});
  ui.status = el("p", {class: "muted", id: "pg-status", role: "status"});
  ui.image = imagePicker();
  ui.stop = el("button", {type: "button", id: "pg-stop", disabled: true, onclick: () => ui.controllers.forEach((c) => c.abort())}, "Stop");
  const note = el("p", {class: "muted", id: "pg-note"});
  const systemBox = el("div", {class: "chat-form", id: "pg-system-box"}, el("label", {for: "pg-system"}, "System prompt"), ui.system);
  const resetChat = () => { ui.history.length = 0; clear(ui.transcript); ui.transcript.dataset.turns = "0"; ui.status.textContent = ""; };
  const clearButton = el("button", {type: "button", id: "pg-clear", onclick: resetChat}, "Clear chat");
  const inputLabel = el("label", {for: "pg-input"}, "Message");
  const form = el("form", {class: "chat-form", id: "pg-form"}, inputLabel, ui.input,
    el("div", {class: "controls"}, el("button", {type: "submit", id: "pg-send"}, "Send"), ui.stop, clearButton, ui.image.box));
  const describeMode = () => {
    const completion = ui.mode.value === "completion";
    const sideBySide = ui.compare.value !== NONE;
    systemBox.hidden = completion;
    ui.image.box.hidden = completion;
    inputLabel.textContent = completion ? "Prompt" : "Message";
    note.textContent = completion ? "Completion mode: the text is sent as a raw prompt (no chat template); each prompt stands on its own."
      : sideBySide ? "Side by side: each prompt is answered by both models on its own (no conversation is carried)."
        : "Chat mode: the conversation is carried from turn to turn; Clear chat starts over.";
  };
  ui.mode.addEventListener("change", describeMode);
  ui.compare.addEventListener("change", describeMode);
  const settings = el("div", {class: "controls", id: "pg-settings"},
    el("span", {class: "control"}, el("label", {for: "pg-mode"}, "Mode"), ui.mode),
    el("span", {class: "control grow"}, el("label", {for: "pg-model"}, "Model"), ui.select),
    el("span", {class: "control grow"}, el("label", {for: "pg-model-custom"}, "or"), ui.custom),
    el("span", {class: "control grow"}, el("label", {for: "pg-compare"}, "Side by side with"), ui.compare));
  const params = el("div", {class: "controls", id: "pg-params"},
    field("pg-max-tokens", "Max tokens", {type: "number", value: 64, min: 1, max: 4096, class: "num-input"}),
    field("pg-temperature", "Temperature", {type: "number", value: 0.7, min: 0, max: 2, step: 0.1, class: "num-input"}),
    field("pg-top-p", "Top-p", {type: "number", min: 0, max: 1, step: 0.05, placeholder: "1", class: "num-input"}),
    field("pg-top-k", "Top-k", {type: "number", min: -1, step: 1, placeholder: "-1", class: "num-input"}),
    field("pg-seed", "Seed", {type: "number", step: 1, placeholder: "random", class: "num-input"}),
    field("pg-stop-seq", "Stop", {type: "text", placeholder: "e.g. \\n\\n | END", class: "stop-input"}));
  clear(container).append(el("h1", {}, "Playground"), settings, params, systemBox, note, ui.transcript, form, ui.status);
  describeMode();
  api("/v1/models").then((m) => {
    const models = m.data || [];
    ui.select.append(...modelGroups(models));
    ui.compare.append(...modelGroups(models));
    const first = defaultModel(models, preset);
    if (first) ui.select.value = first;
    if (preset && first === preset) ui.custom.value = "";
    ui.select.dataset.ready = "true";
  }).catch((e) => ui.status.replaceChildren(message("Cannot list models: " + e.message, "error")));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    send(ui);
  });
  ui.input.addEventListener("keydown", (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) form.requestSubmit(); });
  return () => ui.controllers.forEach((c) => c.abort());
}

// Marks a refused prompt: it stays visible, dashed, as "not sent", and is not part of the conversation.
function markUnsent(box) {
  box.classList.add("msg-unsent");
  box.dataset.sent = "false";
  box.querySelector(".msg-role").append(el("span", {class: "msg-note"}, "not sent"));
}

function showError(answer, text) {
  answer.box.classList.add("msg-error");
  answer.box.setAttribute("role", "alert");
  answer.box.dataset.error = "true";
  clear(answer.reply).append("Error: " + text);
}

async function send(ui) {
  const text = ui.input.value.trim();
  const model = ui.custom.value.trim() || ui.select.value;
  if (!text || !model) { ui.status.textContent = model ? "Type a message first." : "Pick a model first."; return; }
  const completion = ui.mode.value === "completion";
  let image = null;
  try {
    image = completion ? null : await readImage(ui.image.input);
  } catch (e) {
    ui.status.textContent = "Image not attached: " + e.message;
    return;
  }
  const other = ui.compare.value;
  const models = other !== NONE && other !== model ? [model, other] : [model];
  const single = models.length === 1 && !completion;  // a chat whose conversation is carried
  const system = ui.system.value.trim();
  const prompt = messageBox(completion ? "prompt" : "user", text);
  if (image) prompt.append(thumbnail(image));
  ui.transcript.append(prompt);
  ui.input.value = "";
  const answers = models.map((m) => answerBox(models.length > 1 ? m : completion ? "completion" : "assistant", m));
  ui.transcript.append(models.length > 1 ? el("div", {class: "pair"}, answers.map((a) => a.box)) : answers[0].box);
  const content = userContent(text, image);
  const messages = (system ? [{role: "system", content: system}] : []).concat(single ? ui.history : [], [{role: "user", content}]);
  ui.stop.disabled = false;
  ui.status.textContent = "Streaming from " + models.join(" and ") + "…";
  const results = await Promise.all(models.map((m, i) => streamReply(ui, m, completion ? {prompt: text} : {messages}, answers[i].reply, completion)));
  ui.stop.disabled = true;
  results.forEach((r, i) => { if (r.error) showError(answers[i], explainError(r.error)); });
  const refused = results.every((r) => r.error);
  if (refused) {
    markUnsent(prompt);
    if (!ui.input.value) ui.input.value = text;  // to edit and send again
  } else {
    prompt.dataset.sent = "true";
    ui.image.clear();
    if (single) ui.history.push({role: "user", content}, {role: "assistant", content: results[0].text});
  }
  ui.transcript.dataset.turns = String(ui.history.length / 2);
  ui.status.textContent = results.map((r, i) => (models.length > 1 ? models[i] + ": " : "") +
    (r.error ? "refused" : "done (" + (r.finish || "stopped") + ", " + r.tokens + " tokens)")).join("; ") +
    (refused ? " — the prompt was not sent and is not part of the conversation." : ".");
  answers.forEach((a) => { a.reply.dataset.done = "true"; });
}

// Chat chunks carry logprobs.content [{token, logprob, top_logprobs}]; completion chunks carry the
// parallel lists tokens / token_logprobs / top_logprobs ({token: logprob}).
function entriesOf(choice, completion) {
  const lp = choice.logprobs;
  if (!lp) return [];
  if (!completion) return lp.content || [];
  return (lp.tokens || []).map((token, i) => ({
    token, logprob: (lp.token_logprobs || [])[i],
    top_logprobs: Object.entries((lp.top_logprobs || [])[i] || {}).map(([t, l]) => ({token: t, logprob: l})),
  })).filter((e) => typeof e.logprob === "number");
}

async function streamReply(ui, model, input, reply, completion) {
  const out = {text: "", tokens: 0, finish: null, error: null};
  const controller = new AbortController();
  ui.controllers.add(controller);
  let pending = [];
  const body = {model, ...input, ...sampling(), logprobs: completion ? TOP_LOGPROBS : true};
  if (!completion) body.top_logprobs = TOP_LOGPROBS;
  try {
    await streamOpenAI(completion ? "/v1/completions" : "/v1/chat/completions", body, (chunk) => {
      const choice = (chunk.choices || [])[0];
      if (!choice) return;
      const entries = entriesOf(choice, completion);
      pending = pending.concat(entries);
      out.tokens += entries.length;
      const piece = completion ? choice.text || "" : (choice.delta && choice.delta.content) || "";
      if (piece) {
        reply.append(tokenSpan(piece, pending));
        pending = [];
        out.text += piece;
      }
      if (choice.finish_reason) out.finish = choice.finish_reason;
    }, controller.signal);
  } catch (e) {
    if (e.name !== "AbortError") out.error = e.message;
  } finally {
    ui.controllers.delete(controller);
  }
  return out;
}
