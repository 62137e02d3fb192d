// DOM and formatting helpers shared by every view. el() and svgEl() build elements whose text is always
// set as text nodes (server strings are never parsed as markup); fmt* turn numbers, bytes, times and
// durations into short readable strings.
const SVG_NS = "http://www.w3.org/2000/svg";

function applyAttrs(node, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.setAttribute("class", value);
    else if (key === "text") node.textContent = String(value);
    else if (key.startsWith("on") && typeof value === "function") node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
}

function appendChildren(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

// el("a", {href: "#/x", class: "c", onclick: f}, "text", otherNode) -> <a>; strings become text nodes.
export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  applyAttrs(node, attrs);
  appendChildren(node, children);
  return node;
}

export function svgEl(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  applyAttrs(node, attrs);
  appendChildren(node, children);
  return node;
}

export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

// A table from column headers and rows of cells (strings or nodes); `caption` names it for screen readers.
// Every cell carries its column's name (data-label): below 700 px a table of class "stack" shows each row
// as a card of "name: value" lines instead of scrolling sideways. An empty header names no label.
export function table(caption, headers, rows, attrs) {
  return el("div", {class: "table-wrap"},
    el("table", attrs || {},
      el("caption", {class: "visually-hidden"}, caption),
      el("thead", {}, el("tr", {}, headers.map((h) => el("th", {scope: "col"}, h)))),
      el("tbody", {}, rows.map((cells) => el("tr", {}, cells.map((c, i) => el("td", {"data-label": headers[i] || null}, c)))))));
}

export function message(text, kind) {
  return el("p", {class: kind === "error" ? "error" : "muted", role: kind === "error" ? "alert" : null}, text);
}

export function fmtNumber(x) {
  if (x === null || x === undefined || Number.isNaN(x)) return "—";
  if (x === 0) return "0";
  const abs = Math.abs(x);
  if (abs >= 1e5 || abs < 1e-3) return x.toExponential(2);
  return Number(x.toPrecision(4)).toString();
}

export function fmtBytes(n) {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return (i === 0 ? n.toString() : n.toFixed(1)) + " " + units[i];
}

export function fmtDuration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "—";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return s + " s";
  if (s < 3600) return Math.floor(s / 60) + " min";
  if (s < 86400) return (s / 3600).toFixed(1) + " h";
  return (s / 86400).toFixed(1) + " d";
}

// Seconds since the epoch of an ISO 8601 string or a number of seconds; null when absent.
export function toSeconds(t) {
  if (t === null || t === undefined) return null;
  if (typeof t === "number") return t;
  const ms = Date.parse(t);
  return Number.isNaN(ms) ? null : ms / 1000;
}

export function nowSeconds() {
  return Date.now() / 1000;
}

export function fmtAgo(t) {
  const s = toSeconds(t);
  return s === null ? "—" : fmtDuration(nowSeconds() - s) + " ago";
}

export function fmtPercent(x) {
  return x === null || x === undefined ? "—" : (100 * x).toFixed(0) + " %";
}

// Offers `text` as a file download named `filename` (a Blob URL, released after the click).
export function download(filename, text, type) {
  const url = URL.createObjectURL(new Blob([text], {type}));
  const link = el("a", {href: url, download: filename, hidden: true});
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}
