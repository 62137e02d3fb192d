# Issue 15 §1 through the official SDK: `tinkerd --dp 2` (rank 0 serves HTTP; a follower process it
# starts runs its share of each forward_backward, gradients all-reduced over Gloo) trains as one process
# does. Two runs trained at once (their ops batched together, so one batch mixes two adapters) give the
# same losses and per-token logprobs as on a `--dp 1` server (<= 1e-5 relative); rank 0's sampler weights
# give the trainer's logprobs; the follower exists while the server runs and is gone after SIGTERM
# (faults: scenario_dp_fault.py, with the wire client: its protobuf module and the SDK's clash).
import os
import time

import numpy as np

import sdk_common as sdk
from harness import check, check_close

STEPS = 5
LR = 2e-3


def train_two_runs(svc):
    """Each step submits both runs' forward_backward and optim_step before awaiting any."""
    a = sdk.resolved(sdk.new_training_client(svc, rank=8, seed=0))
    b = sdk.resolved(sdk.new_training_client(svc, rank=8, seed=1))
    batch_a, batch_b = sdk.sft_batch(3), sdk.sft_batch(4, n=6)
    losses, logprobs = [], []
    for _ in range(STEPS):
        fa, fb = a.forward_backward(batch_a, "cross_entropy"), b.forward_backward(batch_b, "cross_entropy")
        oa, ob = a.optim_step(sdk.adam(LR)), b.optim_step(sdk.adam(LR))
        ra, rb = fa.result(), fb.result()
        oa.result(), ob.result()
        losses.append([ra.metrics["loss:sum"], rb.metrics["loss:sum"]])
        logprobs.append(np.concatenate([sdk.all_logprobs(ra), sdk.all_logprobs(rb)]))
    return {"losses": np.array(losses), "logprobs": logprobs, "client": a, "batch": batch_a}


def check_same_training(single, dp):
    check_close(dp["losses"].ravel().tolist(), single["losses"].ravel().tolist(), 1e-5, "--dp 2 vs --dp 1 losses")
    for step, (x, y) in enumerate(zip(dp["logprobs"], single["logprobs"])):
        check(x.shape == y.shape, "step %d: logprobs shapes %s vs %s" % (step, x.shape, y.shape))
        worst = float(np.max(np.abs(x - y) / np.maximum(1.0, np.abs(y))))
        check(worst <= 1e-5, "step %d: per-token logprobs differ by %g (relative)" % (step, worst))
    first, last = dp["losses"][0], dp["losses"][-1]
    check(np.all(last < first), "losses did not fall over %d steps: %s" % (STEPS, dp["losses"].tolist()))


def check_sampler(svc, run):
    """Rank 0 holds the same weights as the followers: its sampler gives the trainer's logprobs."""
    tc, batch = run["client"], run["batch"]
    sc = sdk.resolved(svc.create_sampling_client(model_path=tc.save_weights_for_sampler("dp").result().path))
    fwd = tc.forward(batch, "cross_entropy").result()
    for i, d in enumerate(batch[:2]):
        toks = d.model_input.to_ints() + [int(d.loss_fn_inputs["target_tokens"].tolist()[-1])]
        lps = np.asarray(sc.compute_logprobs(sdk.prompt(toks)).result()[1:], dtype=np.float64)
        check(np.max(np.abs(lps - sdk.logprobs(fwd, i))) < 2e-4, "datum %d: sampler vs trainer logprobs" % i)


def check_followers_exit(srv, pids):
    srv.stop()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(os.path.exists("/proc/%d" % p) for p in pids):
        time.sleep(0.1)
    alive = [p for p in pids if os.path.exists("/proc/%d" % p)]
    check(not alive, "followers still running after the server stopped: %s" % alive)


def run(ctx):
    single_srv = ctx.start_server()
    dp_srv = ctx.start_server(extra=["--dp", "2"])
    pids = dp_srv.child_pids()
    check(len(pids) == 1, "--dp 2 should start one follower process, found %s" % pids)
    with open(dp_srv.log_path) as f:
        check("rank 1 of 2 joined" in f.read(), "the follower did not join the group (see the log)")
    single = train_two_runs(sdk.service(single_srv))
    dp_svc = sdk.service(dp_srv)
    dp = train_two_runs(dp_svc)
    ctx.case("--dp 2 trains two runs as --dp 1 does", check_same_training, single, dp)
    ctx.case("rank 0's sampler weights == trainer", check_sampler, dp_svc, dp)
    ctx.case("followers exit with the server", check_followers_exit, dp_srv, pids)
    ctx.finish()
    return "%d steps of two runs, losses %s" % (STEPS, np.round(dp["losses"][-1], 4).tolist())
