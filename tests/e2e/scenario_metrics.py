# Issue 14's monitoring through the official tinker SDK (0.38, .venv), on a server with two tenants and
# --max-metric-points 8: alice trains 3 steps and a forward, then samples; GET /metrics (no key) parsed by
# prometheus_client's parser has request counts per route pattern equal to what the SDK sent, tokens
# trained == the datums' tokens, tokens sampled == the tokens the SDK got, no tenant or run id in any
# label; GET /api/v1/training_runs/{id}/metrics has one point per op, with the SDK's own loss values,
# num_tokens, learning rates and steps, and is a 404 for bob; server_status lists alice's sampler (its
# tokens) and sessions, none for bob; a run resumed with its optimizer counts steps on from its checkpoint;
# a run past the bound is downsampled; a restart keeps every point and the sampler's counts and latency
# p50 / p95 (the same numbers: they come from the stored histogram).
import json
import os
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

import sdk_common as sdk
from harness import BUILTIN_MODEL, check, check_close

LR = 1e-3
STEPS = 3
MAX_POINTS = 8


def write_keys(ctx):
    path = os.path.join(ctx.scratch_dir(), "keys.txt")  # kept until cleanup: the restart reads it again
    with open(path, "w") as f:
        f.write("tml-alice alice\ntml-bob bob\n")
    return path


def http_get(srv, path, key=None):
    """(status, body text) of a GET; 4xx answers are returned, not raised."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (srv.port, path))
    if key:
        req.add_header("X-API-Key", key)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def get_json(srv, path, key="tml-alice"):
    status, body = http_get(srv, path, key)
    check(status == 200, "GET %s: HTTP %d %s" % (path, status, body[:200]))
    return json.loads(body)


def samples_of(srv):
    """Every sample of GET /metrics as {(name, frozenset(labels)): value}, read by prometheus_client."""
    status, text = http_get(srv, "/metrics")
    check(status == 200, "GET /metrics without a key: HTTP %d" % status)
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out, text


def value(samples, name, **labels):
    key = (name, frozenset(labels.items()))
    check(key in samples, "no sample %s%r in /metrics" % (name, labels))
    return samples[key]


def train(svc, batch):
    """STEPS (forward_backward, optim_step) pairs, then a forward: the SDK's results, in op order."""
    tc = sdk.resolved(sdk.new_training_client(svc, rank=8, seed=0))
    ops = []
    for _ in range(STEPS):
        fb, opt = sdk.step(tc, batch, LR)
        ops += [("forward_backward", fb.metrics), ("optim_step", opt.metrics)]
    ops.append(("forward", tc.forward(batch, "cross_entropy").result().metrics))
    return tc, tc.get_info().model_id, ops


def sample(svc):
    sc = sdk.resolved(svc.create_sampling_client(base_model=BUILTIN_MODEL))
    res = sc.sample(sdk.prompt([1, 2, 3]), 2, sdk.params(max_tokens=5, temperature=1.0, seed=7)).result()
    return sum(len(s.tokens) for s in res.sequences)


def check_run_points(srv, run_id, ops, batch):
    got = get_json(srv, "/api/v1/training_runs/%s/metrics" % run_id)
    points = got["points"]
    check(got["training_run_id"] == run_id and got["downsampled"] is False, "header %r" % {
        k: got[k] for k in ("training_run_id", "downsampled")})
    check([p["op"] for p in points] == [op for op, _ in ops], "ops %r" % [p["op"] for p in points])
    bearing = float(sum((sdk.weights_of(d) > 0).sum() for d in batch))
    for i, (p, (op, metrics)) in enumerate(zip(points, ops)):
        check(p["step"] == (i + 1) // 2, "point %d (%s) at step %d" % (i, op, p["step"]))
        for name, v in metrics.items():  # every metric the SDK got back, with its value
            check_close(p["values"].get(name, float("nan")), v, 1e-6, "point %d %s" % (i, name))
        if op == "optim_step":
            check_close(p["values"]["learning_rate"], LR, 1e-12, "optim_step learning_rate")
        else:
            check(p["values"]["num_tokens"] == bearing, "num_tokens %r != %r" % (p["values"]["num_tokens"], bearing))
        check(p["duration_s"] >= 0 and p["time"] > 1.7e9, "point %d time/duration %r" % (i, p))
    later = get_json(srv, "/api/v1/training_runs/%s/metrics?since_step=%d" % (run_id, STEPS))
    check(len(later["points"]) == 2, "since_step=%d gave %d points" % (STEPS, len(later["points"])))
    status, _ = http_get(srv, "/api/v1/training_runs/%s/metrics" % run_id, "tml-bob")
    check(status == 404, "bob reading alice's run metrics: HTTP %d" % status)
    return "%d points, loss:sum %.3f -> %.3f" % (len(points), ops[0][1]["loss:sum"], ops[-3][1]["loss:sum"])


def check_prometheus(srv, batch, ops, sampled, run_id):
    samples, text = samples_of(srv)
    post = lambda route: value(samples, "tinkerd_http_requests_total", method="POST", route=route, status="200")
    fb_routes = post("/api/v1/forward_backward") + samples.get(
        ("tinkerd_http_requests_total", frozenset({"method": "POST", "route": "/api/v1/forward", "status": "200"}.items())),
        0)
    n_fb = sum(1 for op, _ in ops if op != "optim_step")
    check(fb_routes == n_fb, "forward_backward + forward requests counted %r, sent %d" % (fb_routes, n_fb))
    check(post("/api/v1/optim_step") == STEPS, "optim_step requests %r" % post("/api/v1/optim_step"))
    hist = value(samples, "tinkerd_http_request_duration_seconds_count", method="POST",
                 route="/api/v1/optim_step", status="200")
    check(hist == STEPS, "optim_step latency histogram count %r" % hist)
    tokens = STEPS * sum(len(d.model_input.to_ints()) for d in batch)
    trained = value(samples, "tinkerd_tokens_trained_total", base_model=BUILTIN_MODEL)
    check(trained == tokens, "tokens trained %r, the datums hold %d" % (trained, tokens))
    got = value(samples, "tinkerd_tokens_sampled_total", base_model=BUILTIN_MODEL)
    check(got == sampled, "tokens sampled %r, the SDK got %d" % (got, sampled))
    check(value(samples, "tinkerd_queue_depth", base_model=BUILTIN_MODEL, kind="training") == 0, "queue not empty")
    check(value(samples, "tinkerd_adapters_resident", base_model=BUILTIN_MODEL, kind="training") >= 1, "no adapter")
    check(value(samples, "tinkerd_engine_busy_seconds_total", base_model=BUILTIN_MODEL) > 0, "engine never busy")
    check(value(samples, "tinkerd_kv_cache_budget_bytes", base_model=BUILTIN_MODEL) > 0, "no KV budget")
    check(value(samples, "tinkerd_sqlite_bytes") > 0 and value(samples, "tinkerd_process_resident_memory_bytes") > 0,
          "sqlite size / RSS")
    for secret in ("alice", "tml-", run_id):
        check(secret not in text, "%r appears in /metrics" % secret)
    return "%d samples; %d tokens trained, %d sampled" % (len(samples), trained, got)


def check_server_status(srv, sampled):
    status = get_json(srv, "/api/v1/server_status")
    model = next(m for m in status["models"] if m["base_model"] == BUILTIN_MODEL)
    check(model["tokens_per_s_trained"] > 0 and model["kv_cache_bytes_total"] > 0, "model %r" % model)
    check(len(status["samplers"]) == 1, "samplers %r" % status["samplers"])
    s = status["samplers"][0]
    check(s["requests"] == 1 and s["tokens_sampled"] == sampled, "sampler %r, the SDK got %d tokens" % (s, sampled))
    check(s["latency_p95_s"] >= s["latency_p50_s"] > 0, "latencies %r" % s)
    check(len(status["sessions"]) >= 1 and status["version"], "sessions %r" % status["sessions"])
    bobs = get_json(srv, "/api/v1/server_status", "tml-bob")
    check(bobs["samplers"] == [] and bobs["sessions"] == [], "bob sees %r" % bobs)
    return s


def check_sampler_after_restart(srv, before):
    """The sampler's counts and latency quantiles after a restart: exactly those before it."""
    check(before is not None, "no sampler status from before the restart to compare with")
    samplers = get_json(srv, "/api/v1/server_status")["samplers"]
    check(len(samplers) == 1, "samplers after the restart %r" % samplers)
    keys = ("sampler_id", "requests", "tokens_sampled", "latency_p50_s", "latency_p95_s")
    after = {k: samplers[0][k] for k in keys}
    check(after == {k: before[k] for k in keys}, "after the restart %r, before it %r" % (after, before))
    return "p50 %.4f s, p95 %.4f s kept" % (after["latency_p50_s"], after["latency_p95_s"])


def check_downsampled(svc, batch):
    tc = sdk.resolved(sdk.new_training_client(svc, rank=4, seed=1))
    losses = [tc.forward_backward(batch, "cross_entropy").result().metrics["loss:sum"] for _ in range(3 * MAX_POINTS)]
    return tc.get_info().model_id, losses


def check_downsampled_points(srv, run_id, losses):
    got = get_json(srv, "/api/v1/training_runs/%s/metrics" % run_id)
    n = len(got["points"])
    check(got["downsampled"] is True and MAX_POINTS // 2 <= n <= MAX_POINTS, "%d points, downsampled %r" % (
        n, got["downsampled"]))
    check_close(got["points"][-1]["values"]["loss:sum"], losses[-1], 1e-6, "the newest point is exact")
    return "%d ops kept as %d points" % (len(losses), n)


def check_resumed_steps(svc, srv, tc, batch):
    """A run resumed with its optimizer state counts steps on from its checkpoint's step."""
    path = tc.save_state("metrics-%d" % STEPS).result().path
    resumed = sdk.resolved(svc.create_training_client_from_state_with_optimizer(path))
    sdk.step(resumed, batch, LR)
    points = get_json(srv, "/api/v1/training_runs/%s/metrics" % resumed.get_info().model_id)["points"]
    check([(p["op"], p["step"]) for p in points] == [("forward_backward", STEPS), ("optim_step", STEPS + 1)],
          "resumed run's points %r" % [(p["op"], p["step"]) for p in points])


def run(ctx):
    srv = ctx.start_server(extra=["--api-keys", write_keys(ctx), "--max-metric-points", str(MAX_POINTS)])
    svc = sdk.service(srv, "tml-alice")
    batch = sdk.sft_batch(seed=5)
    tc, run_id, ops = train(svc, batch)
    sampled = sample(svc)
    points = ctx.case("run metrics: one point per op, the SDK's values", check_run_points, srv, run_id, ops, batch)
    prom = ctx.case("GET /metrics parsed by prometheus_client", check_prometheus, srv, batch, ops, sampled, run_id)
    sampler = ctx.case("server_status: alice's sampler and sessions only", check_server_status, srv, sampled)
    ctx.case("a run resumed with its optimizer counts steps on", check_resumed_steps, svc, srv, tc, batch)
    small_run, losses = check_downsampled(svc, batch)
    thinned = ctx.case("a run past --max-metric-points is downsampled", check_downsampled_points, srv, small_run,
                       losses)
    srv.restart()
    ctx.case("points survive a restart", check_run_points, srv, run_id, ops, batch)
    kept = ctx.case("sampler counts and latency quantiles survive a restart", check_sampler_after_restart, srv,
                    sampler)
    ctx.finish()
    return "%s; %s; %s; %s" % (points, prom, thinned, kept)
