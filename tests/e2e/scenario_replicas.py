# Issue 15 §2 through the official SDK: `tinkerd --sampling-replicas 1` starts a process that holds the
# base model for sampling only. A run trained on rank 0 and saved for sampling is sampled on the replica:
# the sampler's weights reach it (the log names each adapter sent and its latency), its logprobs equal the
# trainer's (<= 2e-4, as rank 0's own sampler is checked in scenario_dp), base-model samples equal a
# plain server's, the next save sends the new weights, training and sampling run at once, a killed
# replica's next request runs on rank 0 without the client seeing a failure, and the replica exits with
# the server.
import json
import os
import re
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import sdk_common as sdk
from harness import check

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
    time.sleep(0.5)
    res = sc.sample(sdk.prompt([1, 2, 3]), 1, sdk.params(max_tokens=4, seed=1)).result()
    check(len(res.sequences[0].tokens) > 0, "no tokens after the replica died")
    check("its request runs on rank 0" in log_text(srv), "no failover logged")
    replicas = replica_status(srv)
    check(len(replicas) == 1 and not replicas[0]["healthy"], "server_status after the kill: %r" % replicas)


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
    ctx.finish()
    return "%d adapter sync(s), %s ms each" % (len(latencies), latencies)
