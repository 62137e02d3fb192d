// Attaching an image to a playground chat message (issue 27): a PNG or JPEG file is read as a data: URL
// and sent as an OpenAI image_url part beside the text; the prompt bubble shows it as a thumbnail. Only
// vision-language models accept images: a text-only model's refusal shows as the usual error bubble.
import {el} from "./dom.js";

const MAX_BYTES = 8 << 20;  // larger files are refused here, before any upload
const TYPES = ["image/png", "image/jpeg"];

// The file input and its label, with clear() to empty it after a message is sent.
export function imagePicker() {
  const input = el("input", {type: "file", id: "pg-image", accept: TYPES.join(",")});
  const box = el("span", {class: "control", id: "pg-image-box"}, el("label", {for: "pg-image"}, "Image"), input);
  return {box, input, clear: () => { input.value = ""; }};
}

// The chosen file as a data: URL, or null when none is chosen; rejects with a readable reason.
export function readImage(input) {
  const file = input.files && input.files[0];
  if (!file) return Promise.resolve(null);
  if (!TYPES.includes(file.type)) return Promise.reject(new Error("attach a PNG or JPEG image (got " + (file.type || "an unknown type") + ")"));
  if (file.size > MAX_BYTES) return Promise.reject(new Error("the image is over " + (MAX_BYTES >> 20) + " MiB"));
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result));
    reader.onerror = () => reject(new Error("the image could not be read"));
    reader.readAsDataURL(file);
  });
}

// A user message's content: the text alone, or text + image parts when an image is attached.
export function userContent(text, dataUrl) {
  return dataUrl ? [{type: "text", text}, {type: "image_url", image_url: {url: dataUrl}}] : text;
}

export function thumbnail(dataUrl) {
  return el("img", {class: "msg-image", src: dataUrl, alt: "attached image"});
}
