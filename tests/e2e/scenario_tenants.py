# Scenario S5 plus authentication: a server with --api-keys (alice, bob). Missing/unknown keys get
# 401 JSON; alice's runs, checkpoints, futures and model are 404 for bob until she publishes a
# checkpoint; two tenants train concurrently (rank 4 / rank 16, pipelined, two threads) and alice's
# losses equal a solo run of the same steps.
import os
import tempfile
import threading

from harness import (all_logprobs, check, check_close, expect_status, expect_user_error, mean_nll, new_client,
                     sft_batch)

STEPS = 10


def write_keys():
    fd, path = tempfile.mkstemp(prefix="tinkerd-keys-", suffix=".txt")
    with os.fdopen(fd, "w") as f:
        f.write("tml-alice alice\ntml-bob bob\n")
    return path


def check_auth(srv):
    for key, what in ((None, "no key"), ("tml-eve", "unknown key")):
        w = srv.wire(api_key=key)
        r = w.request("POST", "/api/v1/create_session", b'{"tags":[],"user_metadata":{},"type":"create_session"}')
        check(r.status == 401, "%s: HTTP %d (want 401)" % (what, r.status))
        check("application/json" in r.content_type and isinstance(r.json(), dict),
              "%s: 401 without a JSON body: %r %r" % (what, r.content_type, r.body[:200]))
        w.close()


def check_isolation(alice, bob, tc, request_id, sp):
    run = tc.model_id
    expect_status(lambda: bob.get_training_run(run), (404,), "bob gets alice's run")
    expect_status(lambda: bob.list_checkpoints(run), (404,), "bob lists alice's checkpoints")
    r = bob.poll_once(request_id, "ForwardBackward")
    check(r.status == 404 and r.body, "bob polls alice's future: HTTP %d %r" % (r.status, r.body[:200]))
    expect_status(lambda: bob.forward_backward(run, tc.seq + 1, sft_batch(seed=5, n=1)), (404,),
                  "bob's forward_backward on alice's model")
    sid = run.split(":")[0]  # the SDK's model id format: <session>:train:<n>
    expect_status(lambda: bob.get_session(sid), (404,), "bob gets alice's session")
    check(sid not in bob.list_sessions(limit=100).get("sessions", []), "bob lists alice's session")
    bob_runs = [x["training_run_id"] for x in bob.list_training_runs(limit=100)["training_runs"]]
    check(run not in bob_runs, "bob's list_training_runs shows alice's run")
    expect_status(lambda: bob.weights_info(sp), (404,), "bob's weights_info on an unpublished checkpoint")
    thief = new_client(bob, rank=4)
    expect_user_error(lambda: thief.load_state(sp), "bob loads alice's unpublished checkpoint")
    expect_status(lambda: bob.archive_url(sp), (404,), "bob's archive URL of alice's checkpoint")
    expect_status(lambda: bob.delete_checkpoint(sp), (404,), "bob deletes alice's checkpoint")
    expect_status(lambda: bob.publish(sp), (404,), "bob publishes alice's checkpoint")
    check(alice.get_training_run(run)["training_run_id"] == run, "alice gets her own run")


def check_published(alice, bob, tc, sp, batch):
    alice.publish(sp)
    info = bob.weights_info(sp)
    check(info.get("lora_rank") == 4 and info.get("is_lora") is True, "bob's weights_info %r" % info)
    got = bob.get_training_run(tc.model_id, access_scope="accessible")
    check(got.get("training_run_id") == tc.model_id, "bob's accessible get_training_run %r" % got)
    mine = new_client(bob, rank=info["lora_rank"])
    mine.load_state(sp)
    check_close(all_logprobs(mine.forward(batch)), all_logprobs(tc.forward(batch)), 1e-6,
                "bob's copy of alice's published checkpoint")
    expect_status(lambda: bob.delete_checkpoint(sp), (403, 404), "bob deletes alice's published checkpoint")
    expect_status(lambda: bob.unpublish(sp), (403, 404), "bob unpublishes alice's checkpoint")
    alice.unpublish(sp)
    expect_status(lambda: bob.weights_info(sp), (404,), "bob's weights_info after unpublish")


def train_thread(tc, batch, lr, out, key):
    try:
        fbs = []
        pending = []
        for _ in range(STEPS):
            pending.append((tc.forward_backward_async(batch), tc.optim_step_async(lr)))
            if len(pending) == 2:
                fb, opt = pending.pop(0)
                fbs.append(fb.result())
                opt.result()
        for fb, opt in pending:
            fbs.append(fb.result())
            opt.result()
        out[key] = fbs
    except Exception as e:  # re-raised on the main thread
        out[key + "_error"] = e


def concurrent(alice_tc, bob_tc, x, y):
    out = {}
    threads = [threading.Thread(target=train_thread, args=(alice_tc, x, 1e-2, out, "alice")),
               threading.Thread(target=train_thread, args=(bob_tc, y, 5e-3, out, "bob"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in ("alice", "bob"):
        if k + "_error" in out:
            raise out[k + "_error"]
    return out["alice"], out["bob"]


def check_ranks(alice, a_tc, b_tc):
    check(a_tc.get_info().get("lora_rank") == 4, "alice's get_info rank")
    check(b_tc.get_info().get("lora_rank") == 16, "bob's get_info rank")
    expect_status(lambda: alice.get_info(b_tc.model_id), (404,), "alice's get_info on bob's model")


def run(ctx):
    keys = write_keys()
    try:
        srv = ctx.start_server(extra=["--api-keys", keys])
    finally:
        os.unlink(keys)
    ctx.case("no key / unknown key -> 401 JSON", check_auth, srv)
    alice, bob = srv.wire("tml-alice"), srv.wire("tml-bob")
    alice.client_config()
    bob.client_config()
    x, y = sft_batch(seed=11), sft_batch(seed=12)

    first = new_client(alice, rank=4, seed=0)
    fut = first.forward_backward_async(x)
    fut.result()
    first.optim_step(1e-2)
    sp = first.save_state("a1")
    ctx.case("isolation: alice's run, checkpoints, future, model are 404 for bob", check_isolation,
             alice, bob, first, fut.request_id, sp)
    ctx.case("published checkpoint readable and loadable by bob", check_published, alice, bob, first, sp, x)

    solo = new_client(alice, rank=4, seed=1)
    solo_losses = solo.train(x, [1e-2] * STEPS, pipelined=True)

    a_tc = new_client(alice, rank=4, seed=1)
    b_tc = new_client(bob, rank=16, seed=2)
    a_fbs, b_fbs = concurrent(a_tc, b_tc, x, y)
    a_nll = [mean_nll(r, x) for r in a_fbs]
    b_nll = [mean_nll(r, y) for r in b_fbs]
    check(a_nll[-1] < a_nll[0] and b_nll[-1] < b_nll[0], "NLL did not fall: alice %r, bob %r" % (a_nll, b_nll))
    ctx.case("alice's concurrent run == solo run", check_close, [r.metrics["loss:sum"] for r in a_fbs],
             solo_losses, 1e-5, "alice concurrent vs solo")
    ctx.case("get_info ranks; other tenant's model 404", check_ranks, alice, a_tc, b_tc)
    ctx.finish()
    return "401s ok; isolation ok; publish ok; alice NLL %.3f->%.3f, bob %.3f->%.3f; concurrent == solo" % (
        a_nll[0], a_nll[-1], b_nll[0], b_nll[-1])
