# Scenario: the web console (GET /) in a real browser. Trains a few steps through the official tinker SDK
# on a tiny random Qwen3 (real Qwen3 tokenizer and chat template; a copy without a chat template is served
# too, listed first), saves checkpoints (a sampler checkpoint among them, so the playground's model list
# holds a long tinker:// path), then drives headless Chromium (console_browser.py): the run is listed, its
# loss curve has one point per step and grows while training goes on (live refresh), a checkpoint saved
# while its page is open appears without a reload, its LoRA configuration and user_metadata show, a
# second metric goes on a right-hand axis, the points download as CSV and JSON, a step and a checkpoint
# arrive by the push stream without polling and the page polls when its stream is refused
# (console_push.py), the runs list, compare and sessions views take their changes by push and poll when
# refused, at both widths (console_push_views.py), two runs are compared on
# one chart, a checkpoint deleted through the UI is gone from the API, one published and given a TTL
# through it is so in the API and its archive link downloads, the playground defaults to a model that can
# chat, shows a refusal as an error bubble (the prompt marked not sent and left out of the conversation),
# streams chat and completion replies with token logprobs and sampling parameters, and answers side by
# side; the server and sessions views read server_status, the keyboard reaches the views, --api-keys asks
# for a key. Every view is checked at 1280 and 390 px for sideways overflow. Screenshots:
# <build>/e2e-artifacts/console/*.png.
import csv
import io
import json
import os
import shutil
import urllib.error
import urllib.request

import console_browser
import console_image
import console_push
import console_push_views
import sdk_common as sdk
import tiny_chat_model
from harness import check, shared_path
from scenario_sdk_tenants import write_keys

MODEL = "tiny-qwen3"
PLAIN = "a-plain-qwen3"  # the same weights without a chat template: listed first, chat refuses it
STEPS = 12
MORE_STEPS = 2
LR = 1e-2
LOSS = "forward_backward · loss:sum"
KEY = "tml-test"  # dev mode: every tml- key is the same tenant as the console's own probe key


def http_get(srv, path, headers=None):
    """(status, headers, body bytes) of a GET, errors included."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (srv.port, path), headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def api_json(srv, path):
    status, _, body = http_get(srv, path, {"X-API-Key": KEY})
    check(status == 200, "GET %s: %d %r" % (path, status, body[:200]))
    return json.loads(body)


class Env:
    def __init__(self, ctx, srv, tc, run_id, browser):
        self.ctx, self.srv, self.tc, self.run_id, self.browser = ctx, srv, tc, run_id, browser
        self.other_id = None  # a second run, for the comparison
        self.key = KEY
        self.steps = 0  # optimizer steps trained on the run so far
        self.base = "http://127.0.0.1:%d/" % srv.port
        self.artifacts = os.path.join(ctx.build_dir, "e2e-artifacts", "console")
        self.batch = [sdk.datum([9707, 1879, 0, 12522, 5193, 264], [1879, 0, 12522, 5193, 264, 882]),
                      sdk.datum([12522, 5193, 264, 882, 11], [5193, 264, 882, 11, 1052])]

    def shot(self, name):
        return self.browser.screenshot(self.artifacts, name)

    def train(self, steps):
        self.steps += steps
        return [sdk.step(self.tc, self.batch, LR)[0].metrics["loss:sum"] for _ in range(steps)]


def start(ctx):
    tok_dir = shared_path("models", "tokenizers", "qwen3")
    for f in tiny_chat_model.TOKENIZER_FILES:
        shared_path("models", "tokenizers", "qwen3", f)
    model_dir = tiny_chat_model.write(os.path.join(ctx.scratch_dir(), MODEL), tok_dir, context=512)
    plain_dir = os.path.join(ctx.scratch_dir(), PLAIN)
    shutil.copytree(model_dir, plain_dir)
    with open(os.path.join(plain_dir, "tokenizer_config.json")) as f:
        config = json.load(f)
    config.pop("chat_template", None)
    with open(os.path.join(plain_dir, "tokenizer_config.json"), "w") as f:
        json.dump(config, f)
    srv = ctx.start_server(extra=["--model", "%s=%s" % (PLAIN, plain_dir), "--model", "%s=%s" % (MODEL, model_dir),
                                  "--max-event-streams", str(console_push.MAX_EVENT_STREAMS)],
                           name="tinkerd-console")
    svc = sdk.service(srv, api_key=KEY)
    tc = sdk.resolved(svc.create_lora_training_client(base_model=MODEL, rank=8, seed=0,
                                                      user_metadata={"purpose": "console e2e"}))
    return srv, svc, tc


def check_assets(env):
    """The page, a script and an unknown asset over plain HTTP: types, CSP, ETag revalidation, 404 JSON."""
    status, headers, body = http_get(env.srv, "/")
    check(status == 200 and headers.get("Content-Type", "").startswith("text/html"), "GET / %d %r" % (status, headers))
    check("script-src 'self'" in headers.get("Content-Security-Policy", ""), "GET / CSP %r" % headers)
    status, headers, _ = http_get(env.srv, "/console/app.js")
    check(status == 200 and headers.get("Content-Type", "").startswith("text/javascript"), "app.js %r" % headers)
    status, _, _ = http_get(env.srv, "/console/app.js", {"If-None-Match": headers.get("ETag", "")})
    check(status == 304, "app.js revalidation answered %d, expected 304" % status)
    status, headers, body = http_get(env.srv, "/console/nope.js")
    check(status == 404 and json.loads(body).get("code") == "not_found", "unknown asset %d %r" % (status, body))


def overflow(b):
    """How many px the page is wider than the viewport (0 when nothing scrolls sideways)."""
    return b.run_js("return document.documentElement.scrollWidth - window.innerWidth;")


def check_fits(b, view):
    extra = overflow(b)
    check(extra <= 1, "%s is %d px wider than the %d px viewport" % (view, extra, b.run_js("return window.innerWidth;")))


def outside(b, selector):
    """The elements matching selector that are hidden or stick out of the viewport sideways (as text)."""
    return b.run_js("""
        const out = [];
        for (const e of document.querySelectorAll(arguments[0])) {
          const r = e.getBoundingClientRect();
          if (r.width === 0 || r.left < -1 || r.right > window.innerWidth + 1) out.push((e.id || e.textContent).slice(0, 40) + " " + r.left + ".." + r.right);
        }
        return out;""", selector)


def check_inside(b, selector, what):
    b.wait("at least one %s" % what, lambda: b.css(selector))
    bad = outside(b, selector)
    check(not bad, "%s hidden or off-screen: %r" % (what, bad))


def run_row(env):
    links = [a for a in env.browser.css("#runs-table a") if a.text == env.run_id]
    return links[0].find_element("xpath", "./ancestor::tr") if links else None


def check_runs_list(env):
    b = env.browser
    b.get(env.base + "#/runs")
    b.wait("the run %s in the runs table" % env.run_id, lambda: run_row(env))
    # the table is rebuilt every 5 s: read a row's cells in one go, inside the wait
    cells = b.wait("the step count %d in the run's row" % STEPS, lambda: (lambda c: c if c[5] == str(STEPS) else None)(
        [td.text for td in run_row(env).find_elements("tag name", "td")]))
    check(cells[2] == MODEL and cells[3] == "8", "run row %r" % cells)
    check(cells[6] not in ("", "—") and cells[7] in ("training", "idle"), "run row loss/state %r" % cells)
    check_fits(b, "the runs list")
    env.shot("runs.png")
    return "row %s" % cells[2:]


def chart_points(env, metric=LOSS):
    charts = [c for c in env.browser.css("svg.chart") if c.get_attribute("data-metric") == metric]
    return int(charts[0].get_attribute("data-points")) if charts else None


def check_run_page(env):
    b = env.browser
    b.click_found("the run's link", lambda: run_row(env).find_element("tag name", "a"))
    b.wait("the loss chart with %d points" % STEPS, lambda: chart_points(env) == STEPS)
    check("console e2e" in b.wait_css("#user-metadata").text, "user_metadata not shown")
    b.wait("the checkpoint's user_metadata in its row",
           lambda: any("renderer_name=qwen3" in m.text for m in b.css(".checkpoint-metadata")))
    b.click(b.wait_css("#log-scale"))
    b.wait("a log-scale chart plotting every point", lambda: b.css("svg.chart")[0].get_attribute("data-plotted") == str(STEPS))
    b.run_js("const s = document.getElementById('smoothing'); s.value = '0.6'; s.dispatchEvent(new Event('input'));")
    b.wait_css("svg.chart path.smoothed", "the smoothed line")
    options = [o.get_attribute("value") for o in b.css("#metric-select option")]
    check(LOSS in options and any(o.startswith("optim_step") for o in options), "metric options %r" % options)
    env.shot("run.png")
    env.train(MORE_STEPS)  # the page is live: new steps appear without a reload
    b.wait("the live chart to reach %d points" % (STEPS + MORE_STEPS), lambda: chart_points(env) == STEPS + MORE_STEPS)
    return "%d -> %d points live; metrics %d" % (STEPS, STEPS + MORE_STEPS, len(options))


def capture_downloads(b):
    """Keeps every Blob the page turns into a download URL, to read back with downloaded()."""
    b.run_js("""if (!window.__blobs) { window.__blobs = []; const make = URL.createObjectURL;
        URL.createObjectURL = (blob) => { window.__blobs.push(blob); return make(blob); }; }""")


def downloaded(b, count):
    b.wait("download %d" % count, lambda: b.run_js("return (window.__blobs || []).length;") >= count)
    return b.driver.execute_async_script("window.__blobs[arguments[0]].text().then(arguments[1]);", count - 1)


def second_metric(b):
    """Puts an optim_step metric on the right axis; the chart then has two series and a legend."""
    b.run_js("""const s = document.getElementById('metric-second');
        const o = [...s.options].find((x) => x.value.startsWith('optim_step'));
        s.value = o.value; s.dispatchEvent(new Event('change'));""")
    chart = b.wait("a chart with a second series on the right axis", lambda: [c for c in b.css("svg.chart")
                                                                             if c.get_attribute("data-series") == "2"
                                                                             and c.get_attribute("data-right") == "1"])[0]
    labels = [li.get_attribute("data-series-label") for li in b.css("#chart .legend li")]
    check(len(labels) == 2 and labels[0] == LOSS and labels[1].startswith("optim_step"), "legend %r" % labels)
    return chart


def check_run_details(env):
    """LoRA configuration and user_metadata, a second metric on a right axis, CSV and JSON downloads of the
    run's points (equal to the API's), and a checkpoint saved while the page is open appearing live."""
    b = env.browser
    lora = b.wait_css("#lora-config").text
    values = dict(zip([d.text for d in b.css("#lora-config dt")], [d.text for d in b.css("#lora-config dd")]))
    check(values == {"Targets": "attention, MLP, unembedding", "Rank": "8", "Optimizer": "adamw", "Seed": "0"},
          "LoRA config %r (%r)" % (values, lora))
    check("console e2e" in b.wait_css("#user-metadata").text, "user_metadata not shown")
    second_metric(b)
    capture_downloads(b)
    api_points = api_json(env.srv, "/api/v1/training_runs/%s/metrics" % env.run_id)["points"]
    b.click(b.wait_css("#download-csv"))
    rows = list(csv.DictReader(io.StringIO(downloaded(b, 1))))
    check(len(rows) == sum(len(p["values"]) for p in api_points), "CSV rows %d vs API points %r" % (len(rows), len(api_points)))
    losses = [r for r in rows if r["op"] == "forward_backward" and r["name"] == "loss:sum"]
    check(len(losses) == STEPS + MORE_STEPS, "CSV loss rows %d" % len(losses))
    first_loss = [p for p in api_points if p["op"] == "forward_backward"][0]["values"]["loss:sum"]
    check(abs(float(losses[0]["value"]) - first_loss) < 1e-9, "CSV loss %r vs %r" % (losses[0], first_loss))
    b.click(b.wait_css("#download-json"))
    data = json.loads(downloaded(b, 2))
    check(data["training_run_id"] == env.run_id and data["points"] == api_points, "JSON download differs from the API")
    env.tc.save_state("live-ckpt").result()  # the list is live: the new checkpoint shows without a reload
    b.wait("the checkpoint saved while the page is open", lambda: b.css('[data-checkpoint="weights/live-ckpt"]'), timeout=15)
    check_fits(b, "the run page")
    env.shot("run-details.png")
    return "LoRA config, 2 axes, CSV %d rows, JSON %d points, live checkpoint" % (len(rows), len(data["points"]))


def check_compare(env):
    """Two runs ticked on the runs list open one chart with both loss curves, aligned by step, and a legend."""
    b = env.browser
    b.get(env.base + "#/runs")
    for run_id in (env.run_id, env.other_id):
        b.click_found("the compare box of %s" % run_id, lambda r=run_id: [x for x in b.css("input.compare-pick")
                                                                        if x.get_attribute("data-run") == r
                                                                        and not x.is_selected()][0])
    b.click(b.wait("the enabled compare button", lambda: [x for x in b.css("#compare-runs") if x.is_enabled()])[0])
    chart = b.wait("the comparison chart with two series", lambda: [c for c in b.css("#compare-chart svg.chart")
                                                                    if c.get_attribute("data-series") == "2"])[0]
    labels = [li.get_attribute("data-series-label") for li in b.css("#compare-chart .legend li")]
    check(sorted(labels) == sorted([env.run_id, env.other_id]), "legend %r" % labels)
    paths = [p.get_attribute("data-series-label") for p in b.css("#compare-chart path.line")]
    check(sorted(paths) == sorted(labels), "lines %r" % paths)
    check(chart.get_attribute("data-metric") == LOSS, "compared metric %r" % chart.get_attribute("data-metric"))
    check_fits(b, "the compare page")
    env.shot("compare.png")
    return "compared %d runs" % len(labels)


def checkpoint_ids(env):
    return [c["checkpoint_id"] for c in api_json(env.srv, "/api/v1/training_runs/%s/checkpoints" % env.run_id)["checkpoints"]]


def check_delete_checkpoint(env):
    b = env.browser
    check("weights/ckpt-a" in checkpoint_ids(env), "the checkpoint to delete is missing before the test")
    button = b.wait_css('button[aria-label="Delete weights/ckpt-a"]', "the delete button of weights/ckpt-a")
    b.click(button)
    b.click(b.wait("the confirm button", lambda: [x for x in b.css('button[aria-label="Delete weights/ckpt-a"]')
                                                  if x.text == "Confirm delete"])[0])
    b.wait("the deleted status", lambda: "Deleted" in b.wait_css("#checkpoint-status").text)
    ids = checkpoint_ids(env)
    check("weights/ckpt-a" not in ids and "sampler_weights/s1" in ids, "checkpoints after the UI delete: %r" % ids)
    b.wait("the row to leave the table", lambda: not b.css('[data-checkpoint="weights/ckpt-a"]'))
    return "left %r" % ids


def checkpoint_row(env, checkpoint_id):
    cells = [c for c in env.browser.css('[data-checkpoint="%s"]' % checkpoint_id)]
    return cells[0].find_element("xpath", "./ancestor::tr") if cells else None


def check_publish_and_archive(env):
    """Publish and a TTL through the UI (the API then says so); the one-time archive link downloads a tar."""
    b = env.browser
    target = "sampler_weights/s1"
    b.click(b.wait("the publish button of %s" % target, lambda: [x for x in checkpoint_row(env, target).find_elements(
        "tag name", "button") if x.text == "Publish"])[0])
    b.wait("the row to say public", lambda: "public" in checkpoint_row(env, target).text.split())
    listed = api_json(env.srv, "/api/v1/training_runs/%s/checkpoints" % env.run_id)["checkpoints"]
    check([c["public"] for c in listed if c["checkpoint_id"] == target] == [True], "published state %r" % listed)
    ttl_input = b.wait_css("#ttl-sampler_weights-s1", "the TTL field of %s" % target)
    ttl_input.send_keys("3600")
    b.click([x for x in checkpoint_row(env, target).find_elements("tag name", "button") if x.text == "Set TTL"][0])
    b.wait("the row to show the expiry", lambda: "expires in" in checkpoint_row(env, target).text)
    listed = api_json(env.srv, "/api/v1/training_runs/%s/checkpoints" % env.run_id)["checkpoints"]
    check([c["expires_at"] is not None for c in listed if c["checkpoint_id"] == target] == [True], "TTL %r" % listed)
    b.click(b.wait_css('button[aria-label="Archive link for %s"]' % target))
    link = b.wait_css("a.archive-link", "the archive download link")
    href = link.get_attribute("href")
    check("/api/v1/archive_downloads/" in href, "archive link %r" % href)
    path = href.split("127.0.0.1:%d" % env.srv.port, 1)[1]
    status, headers, body = http_get(env.srv, path)
    check(status == 200 and headers.get("Content-Type") == "application/x-tar" and len(body) > 1024,
          "archive download %d %r (%d bytes)" % (status, headers.get("Content-Type"), len(body)))
    return "published, TTL set; archive %d bytes" % len(body)


def pick(b, select_id, value):
    b.run_js("const s = document.getElementById(arguments[0]); s.value = arguments[1]; s.dispatchEvent(new Event('change'));",
             select_id, value)
    check(b.wait_css("#" + select_id).get_attribute("value") == value, "%s did not take %r" % (select_id, value))


def set_field(b, field_id, value):
    b.run_js("document.getElementById(arguments[0]).value = arguments[1];", field_id, value)


def send_prompt(b, text):
    """Sends text; waits for every answer bubble of this turn to finish and returns them."""
    before = len(b.css('.reply[data-done="true"]'))
    box = b.wait_css("#pg-input")
    box.clear()
    box.send_keys(text)
    b.click(b.wait_css("#pg-send"))
    b.wait("the answer to %r" % text, lambda: len(b.css('.reply[data-done="true"]')) > before, timeout=60)
    return [r.find_element("xpath", "..") for r in b.css('.reply[data-done="true"]')[before:]]


def open_playground(env, preset=""):
    b = env.browser
    b.get(env.base + "#/playground" + ("/" + preset if preset else ""))
    b.wait_css('#pg-model[data-ready="true"]', "the model list")
    values = [o.get_attribute("value") for o in b.css("#pg-model option")]
    check(values[0] == PLAIN and any(v.startswith("tinker://") for v in values), "model options %r" % values)
    check_fits(b, "the playground (a sampler checkpoint listed)")
    check_inside(b, "#pg-model, #pg-compare, #pg-send", "the playground's model lists and Send button")
    return values


def check_refusal(env):
    """Chat with a model that has no chat template: an error bubble, the prompt marked not sent and out of
    the conversation, and no pointer at /v1/completions (the playground's own completion mode instead)."""
    b = env.browser
    pick(b, "pg-mode", "chat")
    pick(b, "pg-compare", "")
    pick(b, "pg-model", PLAIN)
    turns = b.wait_css("#pg-transcript").get_attribute("data-turns")
    bubble = send_prompt(b, "Hello refused")[0]
    check("msg-error" in bubble.get_attribute("class") and bubble.is_displayed(), "no error bubble: %r" % bubble.text)
    text = bubble.text
    check("Error:" in text and "Completion" in text and "/v1/completions" not in text, "error bubble %r" % text)
    unsent = b.css('.msg-user[data-sent="false"]')
    check(unsent and "Hello refused" in unsent[-1].text and "not sent" in unsent[-1].text, "the refused prompt is not marked")
    check(b.wait_css("#pg-transcript").get_attribute("data-turns") == turns, "the refused prompt joined the conversation")
    check(b.wait_css("#pg-input").get_attribute("value") == "Hello refused", "the refused text is not back in the box")
    check_inside(b, ".msg-error", "the error bubble")
    return "refused: %r" % text[:80]


def check_side_by_side(env):
    """One prompt answered by the base model and the run's live weights at once, in two bubbles."""
    b = env.browser
    pick(b, "pg-mode", "chat")
    pick(b, "pg-model", MODEL)
    pick(b, "pg-compare", env.run_id)
    set_field(b, "pg-max-tokens", "12")
    bubbles = send_prompt(b, "Which one are you?")
    models = [x.get_attribute("data-model") for x in bubbles]
    check(models == [MODEL, env.run_id], "side-by-side answers from %r" % models)
    for x in bubbles:
        check("msg-error" not in x.get_attribute("class") and x.find_elements("css selector", ".tok[data-logprob]"),
              "a side-by-side answer failed: %r" % x.text)
    check(len(b.css(".pair")) >= 1, "the two answers are not side by side")
    check_inside(b, ".pair .msg", "the side-by-side answers")
    pick(b, "pg-compare", "")
    return "side by side: %s" % " | ".join(x.text.split("\n", 1)[-1][:30] for x in bubbles)


def check_playground(env):
    b = env.browser
    open_playground(env)
    check(b.wait_css("#pg-model").get_attribute("value") == MODEL,
          "the default model is %r, not the first one that can chat" % b.wait_css("#pg-model").get_attribute("value"))
    refusal = check_refusal(env)
    open_playground(env, env.run_id)
    check(b.wait_css("#pg-model").get_attribute("value") == env.run_id, "the preset run is not selected")
    set_field(b, "pg-max-tokens", "24")
    b.wait_css("#pg-system").send_keys("You are terse.")
    reply = send_prompt(b, "Hello there")[0].find_element("css selector", ".reply")
    status = b.wait_css("#pg-status").text
    check(status.startswith("done"), "playground status %r" % status)
    check(b.css('.msg-user[data-sent="true"]') and b.wait_css("#pg-transcript").get_attribute("data-turns") == "1",
          "the answered prompt is not in the conversation")
    tokens = reply.find_elements("css selector", ".tok")
    check(len(tokens) >= 1 and reply.text.strip() != "", "no streamed text: %r (%s)" % (reply.text, status))
    check(all(t.get_attribute("data-logprob") for t in tokens), "a token without its logprob")
    b.hover(tokens[len(tokens) // 2])
    tip = b.wait("the logprob tooltip", lambda: [t for t in b.css("#tooltip") if t.is_displayed() and "logprob" in t.text])
    env.shot("playground.png")
    # completion mode on the model that cannot chat, with every sampling parameter; a seed repeats itself
    pick(b, "pg-mode", "completion")
    pick(b, "pg-model", PLAIN)
    for field, value in (("pg-temperature", "1"), ("pg-top-p", "0.9"), ("pg-top-k", "50"), ("pg-seed", "7"),
                         ("pg-stop-seq", "zzzz | \\n\\n\\n"), ("pg-max-tokens", "16")):
        set_field(b, field, value)
    check(not b.wait_css("#pg-system").is_displayed(), "the system prompt shows in completion mode")
    texts = []
    for _ in range(2):
        answer = send_prompt(b, "Once upon a time")[0]
        check("msg-error" not in answer.get_attribute("class"), "completion refused: %r" % answer.text)
        check(answer.find_elements("css selector", ".tok[data-logprob]"), "a completion without token logprobs")
        texts.append(answer.find_element("css selector", ".reply").text)
    check(texts[0] == texts[1] and texts[0] != "", "seed 7 gave %r then %r" % tuple(texts))
    set_field(b, "pg-seed", "")
    side = check_side_by_side(env)
    check_fits(b, "the playground after its answers")
    env.shot("playground-modes.png")
    return "%s; %d pieces, %r; tooltip %r; completion %r; %s" % (refusal, len(tokens), status, tip[0].text.split("\n")[0][:60],
                                                                 texts[0][:30], side)


def check_status_views(env):
    b = env.browser
    b.get(env.base + "#/server")
    b.wait("the served model in the server view", lambda: MODEL in b.wait_css("#models-table").text)
    check_fits(b, "the server view")
    env.shot("server.png")
    b.get(env.base + "#/sessions")
    session = env.run_id.split(":train:")[0]
    b.wait("the live session", lambda: session in b.wait_css("#sessions-table").text)
    check_fits(b, "the sessions view")
    env.shot("sessions.png")
    return "server and sessions views"


def check_keyboard(env):
    """Tab from the top reaches the nav links (skip link first); Enter on one switches the view."""
    from selenium.webdriver.common.keys import Keys
    b = env.browser
    b.get(env.base + "#/runs")
    b.driver.refresh()  # a fresh document: the focus starts at the top (a hash change alone keeps it)
    b.wait_css("#runs-table")
    b.press(Keys.TAB)
    check(b.run_js("return document.activeElement.className") == "skip-link", "the first Tab stop is not the skip link")
    for _ in range(8):
        if b.run_js("return document.activeElement.dataset.nav || ''") == "server":
            break
        b.press(Keys.TAB)
    check(b.run_js("return document.activeElement.dataset.nav || ''") == "server", "Tab never reached the Server link")
    b.press(Keys.ENTER)
    b.wait("the server view after Enter", lambda: b.run_js("return location.hash") == "#/server" and b.css("#server-facts"))
    return "skip link, nav by Tab + Enter"


def check_phone(env):
    """Every view again at 390 px: nothing scrolls sideways, the runs list is one card per run with Last
    loss and State on screen, the checkpoint actions and the run page's controls stay on screen, and the
    playground's errors and side-by-side answers fit."""
    b = env.browser
    width, _ = b.set_size(390, 844)
    check(width <= 400, "the viewport is %d px wide, expected ~390" % width)
    b.get(env.base + "#/runs")
    b.wait("the run at phone width", lambda: run_row(env))
    check_fits(b, "the runs page")
    for label in ("Run", "Last loss", "State", "Compare"):
        check_inside(b, '#runs-table td[data-label="%s"]' % label, "the runs list's %s" % label)
    check(b.run_js("return getComputedStyle(document.querySelector('#runs-table thead')).display") == "none",
          "the runs list is still a table at phone width")
    env.shot("phone-runs.png")
    b.get(env.base + "#/run/" + env.run_id)
    b.wait("the chart at phone width", lambda: chart_points(env) == env.steps)
    b.wait_css('[data-checkpoint="sampler_weights/s1"]', "the sampler checkpoint's row")
    second_metric(b)
    chart_width = b.run_js("return document.querySelector('svg.chart').getBoundingClientRect().width;")
    check(chart_width <= width, "the chart is %s px wide" % chart_width)
    check_fits(b, "the run page")
    check_inside(b, "#lora-config dd, #user-metadata dd, #download-csv, #download-json, #metric-select, #metric-second",
                 "the run page's LoRA config, metadata and controls")
    check_inside(b, "#checkpoints button, #checkpoints [data-checkpoint]", "the checkpoints' names and actions")
    env.shot("phone-run.png")
    pushed = console_push.check_push(env, "390")
    polled = console_push.check_fallback(env, "390")
    check_fits(b, "the run page while polling")
    b.get(env.base + "#/compare/" + ",".join((env.run_id, env.other_id)))
    b.wait("the comparison at phone width", lambda: [c for c in b.css("#compare-chart svg.chart") if c.get_attribute("data-series") == "2"])
    check_fits(b, "the compare page")
    check_inside(b, "#compare-chart .legend li", "the comparison's legend")
    env.shot("phone-compare.png")
    open_playground(env)
    check(b.wait_css("#pg-model").get_attribute("value") == MODEL, "the default model at phone width")
    check_refusal(env)
    check_side_by_side(env)
    check_fits(b, "the playground after its answers")
    env.shot("phone-playground.png")
    for view, table_id in (("server", "models-table"), ("sessions", "sessions-table")):
        b.get(env.base + "#/" + view)
        b.wait_css("#" + table_id)
        check_fits(b, "the %s view" % view)
    b.set_size(1280, 800)
    return "no horizontal overflow at %d px on runs, run, compare, playground, server, sessions; %s; %s" % (
        width, pushed, polled)


def check_sign_in(ctx, browser):
    keys = write_keys()
    try:
        srv = ctx.start_server(extra=["--api-keys", keys], name="tinkerd-console-keys")
    finally:
        os.unlink(keys)
    b = browser
    b.get("http://127.0.0.1:%d/" % srv.port)
    field = b.wait("the sign-in form", lambda: [f for f in b.css("#api-key") if f.is_displayed()])[0]
    field.send_keys("tml-mallory\n")
    b.wait("the refusal", lambda: "not accepted" in b.wait_css("#sign-in-error").text)
    field.clear()
    field.send_keys("tml-alice\n")
    b.wait("the runs view after signing in", lambda: "Training runs" in b.wait_css("#view h1").text)
    check(b.run_js("return sessionStorage.getItem('tinkerd.apiKey')") == "tml-alice", "the key is not kept in sessionStorage")
    srv.stop()
    return "wrong key refused, right key kept in sessionStorage"


def run(ctx):
    srv, svc, tc = start(ctx)
    run_id = tc.get_info().model_id
    browser = console_browser.open_browser()
    try:
        env = Env(ctx, srv, tc, run_id, browser)
        losses = env.train(STEPS)
        tc.save_state("ckpt-a").result()
        tc.save_weights_for_sampler("s1", user_metadata={"renderer_name": "qwen3"}).result()
        other = sdk.resolved(svc.create_lora_training_client(base_model=MODEL, rank=4, seed=1))
        env.other_id = other.get_info().model_id
        for _ in range(4):
            sdk.step(other, env.batch, LR / 2)
        out = [ctx.case("page and assets over HTTP", check_assets, env),
               ctx.case("runs list shows the run", check_runs_list, env),
               ctx.case("run page: loss curve, log scale, smoothing, live refresh", check_run_page, env),
               ctx.case("run page: LoRA config, metadata, second axis, downloads, live checkpoints",
                        check_run_details, env),
               ctx.case("delete a checkpoint through the UI", check_delete_checkpoint, env),
               ctx.case("publish and archive download through the UI", check_publish_and_archive, env),
               ctx.case("run page: pushed step and checkpoint, polling when refused", console_push.check_both, env,
                        check_fits),
               ctx.case("compare two runs", check_compare, env),
               ctx.case("runs, compare, sessions pushed; polling when refused (1280 px)",
                        console_push_views.check_views, env, check_fits, 1280),
               ctx.case("runs, compare, sessions pushed; polling when refused (390 px)",
                        console_push_views.check_views, env, check_fits, 390),
               ctx.case("playground: default model, refusal, chat, completion, side by side", check_playground, env),
               ctx.case("playground: attach an image", console_image.check_attach_image, env, send_prompt, pick,
                        check_fits, MODEL),
               ctx.case("server and sessions views", check_status_views, env),
               ctx.case("keyboard navigation", check_keyboard, env),
               ctx.case("every view at phone width (390 px)", check_phone, env),
               ctx.case("sign-in with --api-keys", check_sign_in, ctx, browser)]
        errors = browser.collect_log()
        ctx.case("no JavaScript errors", lambda: check(not errors, "browser errors: %r" % errors[:5]))
    finally:
        browser.quit()
    ctx.finish()
    return "loss %.3f -> %.3f; %s; screenshots in %s" % (losses[0], losses[-1], "; ".join(str(x) for x in out if x),
                                                         env.artifacts)
