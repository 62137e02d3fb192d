# Issue 15 §2 through the official SDK: `tinkerd --sampling-replicas 1` starts a process that holds the
# base model for sampling only. A run trained on rank 0 and saved for sampling is sampled on the replica:
# the sampler's weights reach it (the log names each adapter sent and its latency), its logprobs equal the
# trainer's (<= 2e-4, as rank 0's own sampler is checked in scenario_dp), base-model samples equal a
# plain server's, the next save sends the new weights, training and sampling run at once, a killed
# replica's next request runs on rank 0 without the client seeing a failure, the replica is started again
# and gets the weights anew, and the replica exits with the server. With stories260K (a real tokenizer) an OpenAI completion with a stop string stops on the
# replica where it stops on a plain server (the replica rebuilds the check with its own tokenizer).
import json
import os
import re
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import sdk_common as sdk
from harness import check, stories_dir
from openai_client import OpenAIClient

LR = 5e-3


def log_text(srv):
    with open(srv.log_path) as f:
        return f.read()


def train_steps(tc, batch, steps):
    for _ in range(steps):
        tc.forward_backward(batch, "cross_entropy").result()
        tc.optim_step(sdk.adam(LR)).result()


def check_sampler_matches_trainer(svc, tc, batch, name):
    """The replica's logprobs of each datum's tokens equal the trainer's forward on rank 0."""
    sc = sdk.resolved(svc.create_sampling_client(model_path=tc.save_weights_for_sampler(name).result().path))
    fwd = tc.forward(batch, "cross_entropy").result()
    worst = 0.0
    for i, d in enumerate(batch[:3]):
        toks = d.model_input.to_ints() + [int(d.loss_fn_inputs["target_tokens"].tolist()[-1])]
        lps = np.asarray(sc.compute_logprobs(sdk.prompt(toks)).result()[1:], dtype=np.float64)
        worst = max(worst, float(np.max(np.abs(lps - sdk.logprobs(fwd, i)))))
    check(worst < 2e-4, "%s: replica vs trainer logprobs differ by %g" % (name, worst))
    return sc


def check_sample_consistent(sc):
    """A sampled sequence's returned logprobs equal compute_logprobs of prompt + sequence."""
    p = [5, 17, 42, 9]
    res = sc.sample(sdk.prompt(p), 2, sdk.params(max_tokens=6, seed=3, temperature=1.0)).result()
    for seq in res.sequences:
        check(len(seq.tokens) > 0, "an empty sample")
        full = sc.compute_logprobs(sdk.prompt(p + list(seq.tokens))).result()[len(p):]
        diff = float(np.max(np.abs(np.asarray(full) - np.asarray(seq.logprobs))))
        check(diff < 2e-4, "sampled logprobs vs compute_logprobs differ by %g" % diff)


def check_base_samples_equal(replica_svc, plain_svc):
    """Base-model sampling on the replica gives a plain server's tokens and logprobs for the same seed."""
    p = [3, 1, 4, 1, 5, 9, 2, 6]
    outs = []
    for svc in (replica_svc, plain_svc):
        sc = sdk.resolved(svc.create_sampling_client(base_model=sdk.BUILTIN_MODEL))
        outs.append(sc.sample(sdk.prompt(p), 1, sdk.params(max_tokens=8, seed=11, temperature=1.0)).result())
    a, b = outs[0].sequences[0], outs[1].sequences[0]
    check(list(a.tokens) == list(b.tokens), "replica tokens %s vs plain %s" % (a.tokens, b.tokens))
    check(np.allclose(a.logprobs, b.logprobs, atol=1e-4), "replica vs plain logprobs")


def check_parallel(tc, batch, sc):
    """A training step and samples submitted together both complete (on two processes)."""
    with ThreadPoolExecutor(4) as pool:
        train = pool.submit(train_steps, tc, batch, 2)
        samples = [pool.submit(lambda: sc.sample(sdk.prompt([7, 8, 9]), 1, sdk.params(max_tokens=16)).result())
                   for _ in range(3)]
        train.result(timeout=120)
        check(all(len(s.result(timeout=120).sequences) == 1 for s in samples), "samples under training")


def replica_status(srv):
    """server_status's sampling_replicas of the built-in model."""
    req = urllib.request.Request("http://127.0.0.1:%d/api/v1/server_status" % srv.port,
                                 headers={"X-API-Key": "tml-test"})
    with urllib.request.urlopen(req, timeout=30) as r:
        status = json.loads(r.read().decode())
    return next(m for m in status["models"] if m["base_model"] == sdk.BUILTIN_MODEL)["sampling_replicas"]


def check_failover(srv, sc, pid):
    """SIGKILL the replica: the next request runs on rank 0 and succeeds; the server goes on."""
    os.kill(pid, 9)
    time.sleep(0.2)
    res = sc.sample(sdk.prompt([1, 2, 3]), 1, sdk.params(max_tokens=4, seed=1)).result()
    check(len(res.sequences[0].tokens) > 0, "no tokens after the replica died")
    text = log_text(srv)
    check("its request runs on rank 0" in text or "sampling replica 1 exited" in text, "no failover logged")


def check_restarted(srv, svc, tc, batch, old_pid):
    """The supervisor starts the replica again; it serves the run's weights again (sent anew)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "sampling replica 1 restarted" not in log_text(srv):
        time.sleep(0.2)
    check("sampling replica 1 restarted" in log_text(srv), "the replica was not restarted")
    pids = srv.child_pids()
    check(len(pids) == 1 and pids[0] != old_pid, "replica processes after the restart: %s" % pids)
    sent_before = log_text(srv).count("sampling replica 1: adapter sent")
    check_sampler_matches_trainer(svc, tc, batch, "after-restart")
    text = log_text(srv)
    check("sampling replica 1 is back" in text, "the engine did not switch to the restarted replica")
    check(text.count("sampling replica 1: adapter sent") > sent_before, "no adapter sent to the new process")
    replicas = replica_status(srv)
    check(len(replicas) == 1 and replicas[0]["healthy"], "server_status after the restart: %r" % replicas)


def completion_text(events):
    return "".join(e["choices"][0].get("text", "") for e in events if isinstance(e, dict) and e.get("choices"))


def check_openai_stop_strings(ctx):
    """stories260K (a real tokenizer): a greedy completion with a stop string, streamed and not, is the same
    on a replica (which rebuilds the stop check with its own tokenizer) as on a plain server."""
    model = "stories260K"
    extra = ["--model", "%s=%s" % (model, stories_dir())]
    replica_srv = ctx.start_server(extra=extra + ["--sampling-replicas", "1"], name="tinkerd-replica-stories")
    plain_srv = ctx.start_server(extra=extra, name="tinkerd-plain-stories")
    body = dict(model=model, prompt="Once upon a time", max_tokens=40, temperature=0)
    full = OpenAIClient(plain_srv.port, "tml-test").completion(**body)["choices"][0]["text"]
    stop = full[len(full) // 2:len(full) // 2 + 3]
    check(len(stop) == 3 and stop.strip(), "no stop string in %r" % full)
    texts, generated = [], []
    for srv in (plain_srv, replica_srv):
        client = OpenAIClient(srv.port, "tml-test")
        answer = client.completion(stop=[stop], **body)
        texts.append(answer["choices"][0]["text"])
        generated.append(answer["usage"]["completion_tokens"])
        texts.append(completion_text(client.stream_completion(stop=[stop], **body)))
    check(len(set(texts)) == 1, "plain vs replica, plain vs streamed: %r" % texts)
    # The text is cut at the stop string either way; the tokens generated show where the engine stopped.
    check(generated[0] == generated[1] < 40, "tokens generated, plain vs replica: %s" % generated)
    check(stop not in texts[0] and len(texts[0]) < len(full), "cut at %r: %r of %r" % (stop, texts[0], full))
    check(len(re.findall(r"\[dist\] sampling replica 1: ready|sampling replica 1 ready", log_text(replica_srv))) == 1,
          "the stories replica did not join")
    pids = replica_srv.child_pids()
    replica_srv.stop()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(os.path.exists("/proc/%d" % p) for p in pids):
        time.sleep(0.1)
    check(pids and not any(os.path.exists("/proc/%d" % p) for p in pids), "replica %s outlived the server" % pids)
    return texts[0]


def run(ctx):
    srv = ctx.start_server(extra=["--sampling-replicas", "1"])
    plain = ctx.start_server()
    pids = srv.child_pids()
    check(len(pids) == 1, "--sampling-replicas 1 should start one process, found %s" % pids)
    check("sampling replica 1 ready" in log_text(srv), "the replica did not join (see the log)")
    svc = sdk.service(srv)
    tc = sdk.resolved(sdk.new_training_client(svc, rank=8, seed=0))
    batch = sdk.sft_batch(3)
    train_steps(tc, batch, 3)
    sc = ctx.case("replica sampler == trainer after 3 steps", check_sampler_matches_trainer, svc, tc, batch, "r3")
    sent = len(re.findall(r"sampling replica 1: adapter sent", log_text(srv)))
    check(sent >= 1, "no adapter sent to the replica")
    ctx.case("sampled logprobs are the replica's weights'", check_sample_consistent, sc)
    ctx.case("base model on the replica == plain server", check_base_samples_equal, svc, sdk.service(plain))
    train_steps(tc, batch, 2)
    sc2 = ctx.case("new weights reach the replica after 2 more steps", check_sampler_matches_trainer, svc, tc,
                   batch, "r5")
    latencies = [float(m) for m in re.findall(r"sampling replica 1: adapter sent, [0-9.]+ MiB in ([0-9.]+) ms",
                                              log_text(srv))]
    check(len(latencies) >= 2, "the second sampler's weights were not sent: %s" % latencies)
    ctx.case("training and sampling at once", check_parallel, tc, batch, sc2 or sc)
    status = replica_status(srv)
    check(len(status) == 1 and status[0]["healthy"] and status[0]["adapters_resident"] >= 1,
          "server_status while the replica works: %r" % status)
    ctx.case("a killed replica fails over to rank 0", check_failover, srv, sc2 or sc, pids[0])
    ctx.case("the killed replica is restarted and synced again", check_restarted, srv, svc, tc, batch, pids[0])
    ctx.case("OpenAI stop strings and streams on a replica", check_openai_stop_strings, ctx)
    ctx.finish()
    return "%d adapter sync(s), %s ms each" % (len(latencies), latencies)
