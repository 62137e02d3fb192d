# The console scenario's push checks of the runs list, compare and sessions views (scenario_console.py runs
# check_views at 1280 and 390 px, a sampler checkpoint present): each view follows GET /api/v1/events — a
# step trained (runs list, compare) or a session started (sessions) appears with no polling request for that
# view in the server's access log meanwhile — and, with every stream slot taken, the view is refused (429)
# and falls back to polling, where the same change appears through polling requests. No view scrolls
# sideways in either mode.
import json
import re
import time
import urllib.request

import console_push
from harness import check

# The requests each view makes when it polls (the access log's paths carry no query).
POLLING = {
    "runs": r"GET (/api/v1/training_runs|/v1/models|/api/v1/training_runs/[^ ]+/metrics) \d{3} ",
    "compare": r"GET /api/v1/training_runs/[^ ]+/metrics \d{3} ",
    "sessions": r"GET (/api/v1/server_status|/api/v1/sessions) \d{3} ",
}
TITLES = {"runs": "runs-title", "compare": "compare-title", "sessions": "sessions-title"}


def polling_requests(env, view):
    with open(env.srv.log_path, "rb") as f:
        log = f.read().decode("utf-8", "replace")
    return len(re.findall(POLLING[view], log))


def title_data(b, view, name):
    return b.run_js("const t = document.getElementById(arguments[0]); return t ? t.dataset[arguments[1]] : null;",
                    TITLES[view], name)


def view_hash(env, view):
    return {"runs": "#/runs", "compare": "#/compare/" + ",".join((env.run_id, env.other_id)),
            "sessions": "#/sessions"}[view]


def read_view(env, view):
    """What the view shows that the change moves: the run's step count in its row (runs), the run's points
    on the comparison chart (compare: it is the first series), the live sessions listed (sessions); None
    while not shown yet."""
    b = env.browser
    if view == "runs":
        steps = b.run_js("""for (const a of document.querySelectorAll('#runs-table a')) {
            if (a.textContent === arguments[0]) return a.closest('tr').querySelector('td[data-label="Steps"]').textContent;
          } return null;""", env.run_id)
        return int(steps) if steps and steps.isdigit() else None
    if view == "compare":
        charts = [c for c in b.css("#compare-chart svg.chart") if c.get_attribute("data-series") == "2"]
        return int(charts[0].get_attribute("data-points")) if charts else None
    rows = b.run_js("""const t = document.getElementById('sessions-table');
        return t ? [...t.querySelectorAll('td[data-label="Session"]')].map((td) => td.textContent) : null;""")
    return frozenset(rows) if rows else None


def new_session(env):
    req = urllib.request.Request("http://127.0.0.1:%d/api/v1/create_session" % env.srv.port,
                                 data=json.dumps({"tags": ["console-push"]}).encode(),
                                 headers={"X-API-Key": env.key, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())["session_id"]


def change(env, view, before):
    """Makes the change the view must show; returns (what, a predicate on read_view's value)."""
    if view == "sessions":
        session = new_session(env)
        return "session " + session, lambda now: now is not None and session in now
    env.train(1)
    return "step %d -> %d" % (before, before + 1), lambda now: now == before + 1


def open_view(env, view, mode):
    b = env.browser
    b.get(env.base + view_hash(env, view))
    b.wait("the %s view in %s mode" % (view, mode), lambda: title_data(b, view, "liveMode") == mode)
    return b.wait("the %s view's content" % view, lambda: read_view(env, view))


def check_push(env, view, check_fits, tag):
    b = env.browser
    before = open_view(env, view, "push")
    time.sleep(1.0)  # the view's first reads are logged by now
    pushed, polled = int(title_data(b, view, "pushedEvents")), polling_requests(env, view)
    what, arrived = change(env, view, before)
    b.wait("the pushed change on the %s view (%s)" % (view, what), lambda: arrived(read_view(env, view)), timeout=15)
    now_pushed = int(title_data(b, view, "pushedEvents"))
    check(now_pushed > pushed, "%s: pushed events applied %d -> %d" % (view, pushed, now_pushed))
    check(polling_requests(env, view) == polled, "the %s view polled while on the push stream (%d -> %d requests)"
          % (view, polled, polling_requests(env, view)))
    check("pushed by the server" in b.text(), "the %s view does not say it is pushed" % view)
    check_fits(b, "the %s view on the push stream" % view)
    env.shot("%s-pushed-%s.png" % (view, tag))
    return "%s: %s pushed (%d events)" % (view, what, now_pushed - pushed)


def check_fallback(env, view, check_fits, tag):
    b = env.browser
    console_push.leave_streams(env)
    held = console_push.take_every_slot(env)
    try:
        before = open_view(env, view, "poll")
        polled = polling_requests(env, view)
        what, arrived = change(env, view, before)
        b.wait("the polled change on the %s view (%s)" % (view, what), lambda: arrived(read_view(env, view)),
               timeout=20)
        check(polling_requests(env, view) > polled, "no polling request from the %s view while refused" % view)
        check(title_data(b, view, "pushedEvents") == "0", "%s: pushed events applied while refused" % view)
        check("every " in b.text(), "the %s view does not say it polls" % view)
        check_fits(b, "the %s view while polling" % view)
        env.shot("%s-polling-%s.png" % (view, tag))
    finally:
        for sock in held:
            sock.close()
    return "%s: %s by polling, %d streams held" % (view, what, len(held))


def check_views(env, check_fits, width):
    """The three views by push and then by polling at `width` px (the browser goes back to 1280 after)."""
    b = env.browser
    got, _ = b.set_size(width, 844 if width < 700 else 800)
    check(abs(got - width) <= 10, "the viewport is %d px wide, expected ~%d" % (got, width))
    try:
        out = []
        for view in ("runs", "compare", "sessions"):
            out.append(check_push(env, view, check_fits, str(width)))
            out.append(check_fallback(env, view, check_fits, str(width)))
        return "at %d px: %s" % (width, "; ".join(out))
    finally:
        b.set_size(1280, 800)
