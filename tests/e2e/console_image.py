# The console scenario's image check (issue 27): the playground attaches a PNG to a chat message. The
# console's models are text-only, so the server's refusal must come back as the usual error bubble naming
# the model as text-only (proof that the image travelled as an image_url part), with the thumbnail shown in
# the unsent prompt and the page still fitting its width. tests/e2e/scenario_sdk_vision.py covers a vision
# model answering image_url parts.
import os

from harness import check


def write_png(path):
    from PIL import Image
    Image.new("RGB", (24, 16), (200, 30, 30)).save(path, format="PNG")
    return path


def check_attach_image(env, send_prompt, pick, check_fits, model):
    b = env.browser
    pick(b, "pg-mode", "chat")
    pick(b, "pg-compare", "")
    pick(b, "pg-model", model)
    check(b.wait_css("#pg-image-box").is_displayed(), "no image picker in chat mode")
    b.wait_css("#pg-image").send_keys(write_png(os.path.join(env.artifacts, "red.png")))
    bubble = send_prompt(b, "What colour is this?")[0]
    text = bubble.text
    check("msg-error" in bubble.get_attribute("class") and "text-only" in text and "image_url" in text,
          "the text-only model's refusal of the image: %r" % text)
    unsent = b.css('.msg-user[data-sent="false"]')
    check(unsent and unsent[-1].find_elements("css selector", "img.msg-image"), "no thumbnail in the unsent prompt")
    thumb = unsent[-1].find_element("css selector", "img.msg-image")
    check(b.run_js("return arguments[0].complete && arguments[0].naturalWidth === 24;", thumb),
          "the thumbnail did not load (CSP img-src data:?)")
    check_fits(b, "the playground with an attached image")
    pick(b, "pg-mode", "completion")
    check(not b.wait_css("#pg-image-box").is_displayed(), "the image picker shows in completion mode")
    pick(b, "pg-mode", "chat")
    b.run_js("document.getElementById('pg-image').value = '';")
    return "image refused by a text-only model: %r" % text[:70]
