# The console scenario's push checks (scenario_console.py calls them at 1280 and 390 px): an open run page
# follows the server's push stream (GET /api/v1/training_runs/{id}/events) — a new step and a new checkpoint
# appear with no polling request in the server's access log meanwhile — and, with every stream slot taken
# (the server runs with a small --max-event-streams), the page is refused (429) and falls back to polling.
import re
import socket
import time

from harness import check

MAX_EVENT_STREAMS = 3  # the console server's --max-event-streams


def polling_requests(env):
    """How many of the run page's polling requests the server has logged: its metrics, checkpoint list and
    /v1/models reads."""
    with open(env.srv.log_path, "rb") as f:
        log = f.read().decode("utf-8", "replace")
    run = re.escape(env.run_id)
    return len(re.findall(r"GET (/api/v1/training_runs/%s/(metrics|checkpoints)|/v1/models) \d{3} " % run, log))


def title_data(b, name):
    return b.run_js("const t = document.getElementById('run-title'); return t ? t.dataset[arguments[0]] : null;", name)


def chart_points(env):
    charts = [c for c in env.browser.css("svg.chart") if c.get_attribute("data-metric") == "forward_backward · loss:sum"]
    return int(charts[0].get_attribute("data-points")) if charts else None


def open_run_page(env, mode):
    b = env.browser
    b.get(env.base + "#/run/" + env.run_id)
    b.wait("the run page in %s mode" % mode, lambda: title_data(b, "liveMode") == mode)
    return b.wait("the loss chart", lambda: chart_points(env))


def check_push(env, tag):
    """A step trained and a checkpoint saved while the page is open arrive by push, with no polling."""
    b = env.browser
    points = open_run_page(env, "push")
    time.sleep(1.0)  # the page's first reads (run, metrics, /v1/models, checkpoints) are logged by now
    pushed, polled = int(title_data(b, "pushedEvents")), polling_requests(env)
    env.train(1)
    b.wait("the pushed step", lambda: chart_points(env) == points + 1)
    name = "pushed-" + tag
    env.tc.save_state(name).result()
    b.wait("the pushed checkpoint", lambda: b.css('[data-checkpoint="weights/%s"]' % name), timeout=15)
    now_pushed = int(title_data(b, "pushedEvents"))
    check(now_pushed >= pushed + 2, "pushed events applied: %d -> %d" % (pushed, now_pushed))
    check(polling_requests(env) == polled, "the page polled while on the push stream (%d -> %d requests)"
          % (polled, polling_requests(env)))
    check("pushed by the server" in b.wait_css("#chart-summary").text, "the summary does not say pushed")
    return "step %d -> %d and %s pushed (%d events), no polling" % (points, points + 1, name, now_pushed - pushed)


def open_stream(env):
    """A raw stream request on its own connection: (socket, status)."""
    sock = socket.create_connection(("127.0.0.1", env.srv.port), timeout=10)
    sock.sendall(("GET /api/v1/training_runs/%s/events HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: %s\r\n\r\n"
                  % (env.run_id, env.key)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        data = sock.recv(4096)
        if not data:
            break
        head += data
    return sock, int(head.split(b" ", 2)[1]) if head else 0


def take_every_slot(env):
    """Opens streams until the server refuses one (429); returns the open ones."""
    held = []
    for _ in range(MAX_EVENT_STREAMS + 2):
        sock, status = open_stream(env)
        if status != 200:
            sock.close()
            check(status == 429, "a stream over the limit got %d, expected 429" % status)
            return held
        held.append(sock)
    raise AssertionError("no stream was refused after %d" % len(held))


def leave_streams(env):
    """Goes to a view without a push stream (the playground), so that the last view's stream is closed."""
    env.browser.get(env.base + "#/playground")
    time.sleep(1.0)


def check_fallback(env, tag):
    """Every slot taken: the page's stream is refused and it polls; a new step still appears."""
    b = env.browser
    leave_streams(env)
    held = take_every_slot(env)
    try:
        points = open_run_page(env, "poll")
        polled = polling_requests(env)
        env.train(1)
        b.wait("the polled step", lambda: chart_points(env) == points + 1)
        check(polling_requests(env) > polled, "no polling request while the stream was refused")
        check(title_data(b, "pushedEvents") == "0", "pushed events applied while refused")
        check("every 3 s" in b.wait_css("#chart-summary").text, "the summary does not say polling")
        env.shot("run-polling-%s.png" % tag)
    finally:
        for sock in held:
            sock.close()
    return "refused with %d streams open; polled step %d -> %d" % (len(held), points, points + 1)


def check_both(env, check_fits):
    """At the browser's width (1280 px here; scenario_console's phone case calls the two checks at 390)."""
    pushed = check_push(env, "1280")
    check_fits(env.browser, "the run page on the push stream")
    env.shot("run-pushed.png")
    polled = check_fallback(env, "1280")
    check_fits(env.browser, "the run page while polling")
    return "%s; %s" % (pushed, polled)
