# Scenario: the web console (GET /) in a real browser. Trains a few steps through the official tinker SDK
# on a tiny random Qwen3 (real Qwen3 tokenizer and chat template), saves checkpoints, then drives headless
# Chromium (console_browser.py): the run is listed, its loss curve has one point per step and grows
# while training goes on (live refresh), a checkpoint deleted through the UI is gone from the API, one
# published and given a TTL through it is so in the API and its archive link downloads, the playground
# streams a reply with token logprobs, the server and sessions views read server_status, the page fits a
# 390 px phone, the keyboard reaches the views, and --api-keys asks for a key. Screenshots:
# <build>/e2e-artifacts/console/*.png.
import json
import os
import urllib.error
import urllib.request

import console_browser
import sdk_common as sdk
import tiny_chat_model
from harness import check, shared_path
from scenario_sdk_tenants import write_keys

MODEL = "tiny-qwen3"
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
        self.base = "http://127.0.0.1:%d/" % srv.port
        self.artifacts = os.path.join(ctx.build_dir, "e2e-artifacts", "console")
        self.batch = [sdk.datum([9707, 1879, 0, 12522, 5193, 264], [1879, 0, 12522, 5193, 264, 882]),
                      sdk.datum([12522, 5193, 264, 882, 11], [5193, 264, 882, 11, 1052])]

    def shot(self, name):
        return self.browser.screenshot(self.artifacts, name)

    def train(self, steps):
        return [sdk.step(self.tc, self.batch, LR)[0].metrics["loss:sum"] for _ in range(steps)]


def start(ctx):
    tok_dir = shared_path("models", "tokenizers", "qwen3")
    for f in tiny_chat_model.TOKENIZER_FILES:
        shared_path("models", "tokenizers", "qwen3", f)
    model_dir = tiny_chat_model.write(os.path.join(ctx.scratch_dir(), MODEL), tok_dir, context=512)
    srv = ctx.start_server(extra=["--model", "%s=%s" % (MODEL, model_dir)], name="tinkerd-console")
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


def run_row(env):
    links = [a for a in env.browser.css("#runs-table a") if a.text == env.run_id]
    return links[0].find_element("xpath", "./ancestor::tr") if links else None


def check_runs_list(env):
    b = env.browser
    b.get(env.base + "#/runs")
    b.wait("the run %s in the runs table" % env.run_id, lambda: run_row(env))
    # the table is rebuilt every 5 s: read a row's cells in one go, inside the wait
    cells = b.wait("the step count %d in the run's row" % STEPS, lambda: (lambda c: c if c[4] == str(STEPS) else None)(
        [td.text for td in run_row(env).find_elements("tag name", "td")]))
    check(cells[1] == MODEL and cells[2] == "8", "run row %r" % cells)
    check(cells[5] not in ("", "—") and cells[6] in ("training", "idle"), "run row loss/state %r" % cells)
    env.shot("runs.png")
    return "row %s" % cells[1:]


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


def check_playground(env):
    b = env.browser
    b.get(env.base + "#/playground/" + env.run_id)
    b.wait("the run among the model options", lambda: env.run_id in [o.get_attribute("value") for o in b.css("#pg-model option")])
    check(b.wait_css("#pg-model").get_attribute("value") == env.run_id, "the preset run is not selected")
    b.run_js("document.getElementById('pg-max-tokens').value = '24';")
    b.wait_css("#pg-input").send_keys("Hello there")
    b.click(b.wait_css("#pg-send"))
    reply = b.wait_css('.reply[data-done="true"]', "the streamed reply to finish", timeout=60)
    status = b.wait_css("#pg-status").text
    check(status.startswith("Done"), "playground status %r" % status)
    tokens = b.css(".reply .tok")
    check(len(tokens) >= 1 and reply.text.strip() != "", "no streamed text: %r (%s)" % (reply.text, status))
    check(all(t.get_attribute("data-logprob") for t in tokens), "a token without its logprob")
    b.hover(tokens[len(tokens) // 2])
    tip = b.wait("the logprob tooltip", lambda: [t for t in b.css("#tooltip") if t.is_displayed() and "logprob" in t.text])
    env.shot("playground.png")
    return "%d pieces, %r; tooltip %r" % (len(tokens), status, tip[0].text.split("\n")[0][:60])


def check_status_views(env):
    b = env.browser
    b.get(env.base + "#/server")
    b.wait("the served model in the server view", lambda: MODEL in b.wait_css("#models-table").text)
    env.shot("server.png")
    b.get(env.base + "#/sessions")
    session = env.run_id.split(":train:")[0]
    b.wait("the live session", lambda: session in b.wait_css("#sessions-table").text)
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
    b = env.browser
    width, _ = b.set_size(390, 844)
    check(width <= 400, "the viewport is %d px wide, expected ~390" % width)
    b.get(env.base + "#/runs")
    b.wait("the run at phone width", lambda: run_row(env))
    overflow = b.run_js("return document.documentElement.scrollWidth - window.innerWidth;")
    check(overflow <= 1, "the runs page is %d px wider than a 390 px phone" % overflow)
    env.shot("phone-runs.png")
    b.get(env.base + "#/run/" + env.run_id)
    b.wait("the chart at phone width", lambda: chart_points(env) == STEPS + MORE_STEPS)
    chart_width = b.run_js("return document.querySelector('svg.chart').getBoundingClientRect().width;")
    overflow = b.run_js("return document.documentElement.scrollWidth - window.innerWidth;")
    check(chart_width <= width and overflow <= 1, "the run page overflows a phone: chart %s, page +%s px" % (chart_width, overflow))
    env.shot("phone-run.png")
    b.set_size(1280, 800)
    return "no horizontal overflow at %d px" % width


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
        out = [ctx.case("page and assets over HTTP", check_assets, env),
               ctx.case("runs list shows the run", check_runs_list, env),
               ctx.case("run page: loss curve, log scale, smoothing, live refresh", check_run_page, env),
               ctx.case("delete a checkpoint through the UI", check_delete_checkpoint, env),
               ctx.case("publish and archive download through the UI", check_publish_and_archive, env),
               ctx.case("playground streams a reply with token logprobs", check_playground, env),
               ctx.case("server and sessions views", check_status_views, env),
               ctx.case("keyboard navigation", check_keyboard, env),
               ctx.case("phone width (390 px)", check_phone, env),
               ctx.case("sign-in with --api-keys", check_sign_in, ctx, browser)]
        errors = browser.collect_log()
        ctx.case("no JavaScript errors", lambda: check(not errors, "browser errors: %r" % errors[:5]))
    finally:
        browser.quit()
    ctx.finish()
    return "loss %.3f -> %.3f; %s; screenshots in %s" % (losses[0], losses[-1], "; ".join(str(x) for x in out if x),
                                                         env.artifacts)
