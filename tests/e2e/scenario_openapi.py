# Scenario: GET /openapi.json describes the server, and the server holds to it under fuzzing. The
# description is fetched without a key and must be valid OpenAPI 3.1 (the official 3.1 meta-schema, as
# schemathesis ships it), every component a valid JSON Schema 2020-12, and load in schemathesis with one
# operation per documented route. Then schemathesis (PyPI) fuzzes every operation for a bounded time with
# a fixed seed and a valid key: positive and negative data, about half of it aimed at real objects made
# here (openapi_fuzz_hooks.py): no answer may be a 5xx and every answer must match its documented schema.
# Afterwards the server is alive, its log holds no 5xx, no future it handed out failed as the server's
# fault (category "server") and every sample result has finite logprobs.
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

import jsonschema_rs
import schemathesis
from schemathesis.specs.openapi.definitions import OPENAPI_31_VALIDATOR

from harness import CheckFailed, check, new_client, sft_batch, stories_dir

STORIES = "stories260K"  # a real tiny Llama with a tokenizer, so the OpenAI routes get past the model check
STORIES_VOCAB = 512
API_KEY = "tml-fuzz"
SEED = 14
FUZZ_SECONDS = 60  # the whole schemathesis run: coverage, then fuzzing until the budget is spent (was 100;
# 60 keeps make test nearer 30 min on 2 cores)
MAX_EXAMPLES = 25  # per operation and phase
POLL_BUDGET = 30.0  # seconds to collect the fuzzed futures' outcomes afterwards


def fetch_description(srv):
    with urllib.request.urlopen("http://127.0.0.1:%d/openapi.json" % srv.port, timeout=10) as r:
        check(r.status == 200, "GET /openapi.json without a key: %d" % r.status)
        check("application/json" in r.headers.get("content-type", ""), "openapi.json content type")
        return json.loads(r.read())


def check_description(srv):
    doc = fetch_description(srv)
    OPENAPI_31_VALIDATOR.validate(doc)  # raises with the offending path
    check(doc["openapi"] == "3.1.0", "openapi version %r" % doc.get("openapi"))
    for name, schema in doc["components"]["schemas"].items():
        try:
            jsonschema_rs.meta.validate(schema)
        except jsonschema_rs.ValidationError as e:
            raise CheckFailed("schema %s is not valid JSON Schema: %s" % (name, e))
    schema = schemathesis.openapi.from_dict(doc)
    operations = [op.ok() for op in schema.get_all_operations()]
    documented = sum(len(item) for item in doc["paths"].values())
    check(len(operations) == documented, "schemathesis loads %d of %d operations" % (len(operations), documented))
    labels = {op.label for op in operations}
    for must in ("POST /api/v1/forward_backward", "POST /api/v1/retrieve_future", "POST /v1/chat/completions",
                 "DELETE /api/v1/training_runs/{run_id}/checkpoints/{checkpoint_id}", "GET /openapi.json"):
        check(must in labels, "%s not described" % must)
    return "%d operations, %d schemas" % (documented, len(doc["components"]["schemas"]))


def make_objects(srv):
    """A session (kept alive), a trained run with a training and a sampler checkpoint, a sampler."""
    wire = srv.wire(api_key=API_KEY)
    sid = wire.create_session()
    tc = new_client(wire, base_model=STORIES, rank=4, session_id=sid)
    tc.forward_backward(sft_batch(seed=3, n=2, length=10))
    tc.optim_step(1e-3)
    ckpt = tc.save_state("fuzz-ckpt")
    samp = tc.save_weights_for_sampler("fuzz-samp")["path"]
    sampler = wire.create_sampling_session(sid, 0, base_model=STORIES)
    kind, name = ckpt.split("/")[-2:]
    return {"session_id": sid, "run_id": tc.model_id, "sampler_id": sampler, "base_model": STORIES,
            "checkpoint_path": ckpt, "sampler_path": samp, "checkpoint_kind": kind, "checkpoint_name": name,
            "checkpoint_id": kind + "/" + name, "vocab_size": STORIES_VOCAB}


def run_schemathesis(srv, ids, scratch):
    ids_file = os.path.join(scratch, "ids.json")
    with open(ids_file, "w") as f:
        json.dump(ids, f)
    futures_file = os.path.join(scratch, "futures.txt")
    env = dict(os.environ, SCHEMATHESIS_HOOKS="openapi_fuzz_hooks", TINKERD_FUZZ_IDS=ids_file,
               TINKERD_FUZZ_FUTURES=futures_file,
               PYTHONPATH=os.path.dirname(os.path.abspath(__file__)) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [os.path.join(os.path.dirname(sys.executable), "schemathesis"), "run",
           "http://127.0.0.1:%d/openapi.json" % srv.port,
           "--checks", "not_a_server_error,response_schema_conformance",
           "--phases", "examples,coverage,fuzzing", "--mode", "all", "--workers", "1",
           "--max-examples", str(MAX_EXAMPLES), "--seed", str(SEED), "--max-time", str(FUZZ_SECONDS),
           "--request-timeout", "20", "--output-truncate", "false", "--header", "X-API-Key: " + API_KEY, "--no-color",
           "--suppress-health-check", "all", "--report", "junit,har", "--report-dir", scratch,
           # the push streams (a run's …/events, /api/v1/events) stay open until the client goes: a fuzzer's
           # request would only time out (run_events_test and e2e_console cover them)
           "--exclude-path-regex", "/events$"]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, cwd=scratch, capture_output=True, text=True, timeout=FUZZ_SECONDS + 60)
    out = proc.stdout + proc.stderr
    cases = re.search(r"(\d+) generated, (.*)", out)
    summary = "%s in %.0f s" % (cases.group(0) if cases else "no test case summary", time.monotonic() - t0)
    if proc.returncode != 0:
        raise CheckFailed("schemathesis found problems (exit %d), %s:\n%s" % (proc.returncode, summary, out[-6000:]))
    check(cases is not None and int(cases.group(1)) > 500, "too few cases: " + summary)
    return summary, futures_file


def finite_logprobs(result):
    """A finished sample's legacy JSON result holds a number for every sampled token's logprob (JSON
    null is how a NaN or infinite logprob comes out)."""
    for seq in result.get("sequences") or []:
        if any(lp is None for lp in seq.get("logprobs") or []):
            return False
    return True


def check_futures(srv, futures_file):
    """Every future the fuzzed requests got ends as a result or a user error, never a server error, and
    every sample result has finite logprobs."""
    ids = open(futures_file).read().split() if os.path.exists(futures_file) else []
    wire = srv.wire(api_key=API_KEY, timeout=10)
    pending, bad, done = list(ids), [], 0
    deadline = time.monotonic() + POLL_BUDGET
    while pending and time.monotonic() < deadline:
        rid = pending.pop(0)
        r = wire.request("POST", "/api/v1/retrieve_future", json.dumps({"request_id": rid}).encode())
        body = r.json() if "json" in r.content_type else {}
        if body.get("type") == "try_again":
            pending.append(rid)
        elif body.get("category") == "server":
            bad.append("%s failed as the server's fault: %s" % (rid, body.get("error")))
        elif not finite_logprobs(body):
            bad.append("%s: a sample with a non-finite logprob: %s" % (rid, json.dumps(body)[:300]))
        else:
            done += 1
    check(not bad, "fuzzed futures:\n  " + "\n  ".join(bad[:20]))
    check(done > 0, "no fuzzed request reached the engine (%d futures)" % len(ids))
    return "%d futures finished (%d still running)" % (done, len(pending))


def check_server_healthy(srv):
    check(srv.proc.poll() is None, "the server exited during fuzzing (code %s)" % srv.proc.returncode)
    check(srv.wire().healthz() == {"status": "ok"}, "healthz after fuzzing")
    with open(srv.log_path, errors="replace") as f:
        log = f.read()
    server_errors = re.findall(r"\[http\] \S+ \S+ 5\d\d .*", log)
    check(not server_errors, "5xx answers in the log:\n  " + "\n  ".join(server_errors[:20]))
    return "%d requests logged, none 5xx" % len(re.findall(r"\[http\] ", log))


def run(ctx):
    keys = tempfile.NamedTemporaryFile("w", suffix=".keys", delete=False)
    keys.write(API_KEY + " fuzz\n")
    keys.close()
    try:
        srv = ctx.start_server(extra=["--api-keys", keys.name, "--poll-timeout-seconds", "1",
                                      "--model", "%s=%s" % (STORIES, stories_dir())], name="tinkerd-openapi")
    finally:
        os.unlink(keys.name)
    described = ctx.case("openapi.json: no key, valid OpenAPI 3.1, loads in schemathesis", check_description, srv)
    ids = ctx.case("real objects to aim at", make_objects, srv)
    scratch = ctx.scratch_dir()
    fuzzed = ctx.case("schemathesis: no 5xx, every answer matches its schema", run_schemathesis, srv, ids or {},
                      scratch) if ids else None
    futures = ctx.case("fuzzed futures: no server error, finite sample logprobs", check_futures, srv, fuzzed[1]) \
        if fuzzed else None
    healthy = ctx.case("server alive, no 5xx in its log", check_server_healthy, srv)
    ctx.finish()
    return "; ".join(str(x) for x in (described, fuzzed and fuzzed[0], futures, healthy))
