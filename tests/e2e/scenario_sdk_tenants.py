# S5 plus tenants through the official SDK, on a server with --api-keys (alice, bob): an unknown key is
# tinker.AuthenticationError; alice's run, checkpoints and sampler weights are NotFoundError for bob
# until she publishes a checkpoint (then bob reads and resumes it, but cannot delete or unpublish it);
# alice (rank 4) and bob (rank 16) train pipelined from two threads while a base sampler keeps
# answering the same logprobs, and alice's losses equal a solo run of the same steps. The two checks
# the SDK cannot make (bob polling alice's future id, bob's forward_backward on alice's model id) use
# the wire-level client.
import os
import tempfile
import threading

import numpy as np

import sdk_common as sdk
import tinker
from harness import BUILTIN_MODEL, check, check_close, expect_status, new_client, sft_batch as wire_batch

STEPS = 10
NF = (tinker.NotFoundError,)


def write_keys():
    fd, path = tempfile.mkstemp(prefix="tinkerd-keys-", suffix=".txt")
    with os.fdopen(fd, "w") as f:
        f.write("tml-alice alice\ntml-bob bob\n")
    return path


def check_auth(srv):
    eve = sdk.service(srv, api_key="tml-eve")
    sdk.expect_api_error(lambda: eve.create_lora_training_client(base_model=BUILTIN_MODEL, rank=4).get_info(),
                         (tinker.AuthenticationError,), "an unknown key creates a training client")
    sdk.expect_api_error(lambda: sdk.rest(eve).list_training_runs().result(), (tinker.AuthenticationError,),
                         "an unknown key lists training runs")


def check_isolation(srv, alice, bob, tc, sp, sampler, batch):
    run = tc.get_info().model_id
    rb = sdk.rest(bob)
    sdk.expect_api_error(lambda: rb.get_training_run(run).result(), NF, "bob gets alice's run")
    sdk.expect_api_error(lambda: rb.list_checkpoints(run).result(), NF, "bob lists alice's checkpoints")
    sdk.expect_api_error(lambda: rb.get_weights_info_by_tinker_path(sp).result(), NF,
                         "bob's weights info of alice's unpublished checkpoint")
    sdk.expect_api_error(lambda: rb.delete_checkpoint_from_tinker_path(sp).result(), NF,
                         "bob deletes alice's checkpoint")
    sdk.expect_api_error(lambda: rb.publish_checkpoint_from_tinker_path(sp).result(), NF,
                         "bob publishes alice's checkpoint")
    sdk.expect_api_error(lambda: bob.create_training_client_from_state(sp).get_info(), sdk.USER_ERRORS,
                         "bob resumes alice's unpublished checkpoint")
    sdk.expect_api_error(lambda: bob.create_sampling_client(model_path=sampler).compute_logprobs(
        sdk.prompt([1, 2, 3])).result(), sdk.USER_ERRORS, "bob samples alice's unpublished sampler weights")
    runs = [r.training_run_id for r in rb.list_training_runs(limit=100).result().training_runs]
    check(run not in runs, "bob's list_training_runs shows alice's run")
    check(sdk.rest(alice).get_training_run(run).result().training_run_id == run, "alice gets her own run")
    # what the SDK cannot send: another tenant's future id and model id, at the wire level
    # (legacy JSON bodies: the wire codec's protobuf module cannot share a process with SDK 0.38's)
    wb, wa = srv.wire("tml-bob"), srv.wire("tml-alice")
    mine = new_client(wa, rank=4)
    rid = wa.forward_backward_json(mine.model_id, mine.next_seq(), wire_batch(seed=5, n=1))
    r = wb.poll_once(rid, "ForwardBackward")
    check(r.status == 404 and r.body, "bob polls alice's future: HTTP %d %r" % (r.status, r.body[:200]))
    expect_status(lambda: wb.forward_backward_json(run, 10 ** 6, wire_batch(seed=5, n=1)), (404,),
                  "bob's forward_backward on alice's model")


def check_published(alice, bob, tc, sp, batch):
    ra, rb = sdk.rest(alice), sdk.rest(bob)
    ra.publish_checkpoint_from_tinker_path(sp).result()
    info = rb.get_weights_info_by_tinker_path(sp).result()
    check(info.lora_rank == 4 and info.is_lora is True, "bob's weights info %r" % info)
    mine = bob.create_training_client_from_state(sp)
    check_close(sdk.all_logprobs(mine.forward(batch, "cross_entropy").result()),
                sdk.all_logprobs(tc.forward(batch, "cross_entropy").result()), 1e-6,
                "bob's copy of alice's published checkpoint")
    sdk.expect_api_error(lambda: rb.delete_checkpoint_from_tinker_path(sp).result(),
                         (tinker.NotFoundError, tinker.PermissionDeniedError), "bob deletes a published checkpoint")
    sdk.expect_api_error(lambda: rb.unpublish_checkpoint_from_tinker_path(sp).result(),
                         (tinker.NotFoundError, tinker.PermissionDeniedError), "bob unpublishes it")
    ra.unpublish_checkpoint_from_tinker_path(sp).result()
    sdk.expect_api_error(lambda: rb.get_weights_info_by_tinker_path(sp).result(), NF,
                         "bob's weights info after unpublish")


def pipelined(tc, batch, lr, out=None, key=None):
    try:
        pending = [(tc.forward_backward(batch, "cross_entropy"), tc.optim_step(sdk.adam(lr))) for _ in range(STEPS)]
        res = []
        for fb, opt in pending:
            res.append(fb.result())
            opt.result()
        if out is None:
            return res
        out[key] = res
    except Exception as e:  # noqa: BLE001 - re-raised on the main thread
        if out is None:
            raise
        out[key + "_error"] = e


def base_watch(sc, stop, out):
    p = sdk.prompt([7, 8, 9, 10, 11])
    try:
        first = sc.compute_logprobs(p).result()
        n = 0
        while not stop.is_set():
            got = sc.compute_logprobs(p).result()
            if got != first:
                out["base_error"] = AssertionError("base logprobs changed during training: %r vs %r" % (got, first))
                return
            sc.sample(p, 1, sdk.params(max_tokens=2, temperature=1.0)).result()
            n += 1
        out["base_calls"] = n
    except Exception as e:  # noqa: BLE001
        out["base_error"] = e


def check_concurrent(alice, bob, x, y, solo):
    a_tc = sdk.new_training_client(alice, rank=4, seed=1)
    b_tc = sdk.new_training_client(bob, rank=16, seed=2)
    out, stop = {}, threading.Event()
    watch = threading.Thread(target=base_watch, args=(bob.create_sampling_client(base_model=BUILTIN_MODEL), stop, out))
    watch.start()
    threads = [threading.Thread(target=pipelined, args=(a_tc, x, 1e-2, out, "alice")),
               threading.Thread(target=pipelined, args=(b_tc, y, 5e-3, out, "bob"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    watch.join()
    for k in ("alice", "bob", "base"):
        if k + "_error" in out:
            raise out[k + "_error"]
    a_nll = [sdk.mean_nll(r, x) for r in out["alice"]]
    b_nll = [sdk.mean_nll(r, y) for r in out["bob"]]
    check(a_nll[-1] < a_nll[0] and b_nll[-1] < b_nll[0], "NLL did not fall: alice %r, bob %r" % (a_nll, b_nll))
    check_close([r.metrics["loss:sum"] for r in out["alice"]], solo, 1e-5, "alice concurrent vs solo")
    check(a_tc.get_info().lora_rank == 4 and b_tc.get_info().lora_rank == 16, "get_info ranks")
    check(out.get("base_calls", 0) > 0, "the base sampler made no calls during training")
    return "alice NLL %.3f->%.3f, bob %.3f->%.3f, %d base sampler calls" % (
        a_nll[0], a_nll[-1], b_nll[0], b_nll[-1], out["base_calls"])


def run(ctx):
    keys = write_keys()
    try:
        srv = ctx.start_server(extra=["--api-keys", keys])
    finally:
        os.unlink(keys)
    ctx.case("unknown key -> tinker.AuthenticationError", check_auth, srv)
    alice, bob = sdk.service(srv, "tml-alice"), sdk.service(srv, "tml-bob")
    x, y = sdk.sft_batch(seed=11), sdk.sft_batch(seed=12)
    first = sdk.new_training_client(alice, rank=4, seed=0)
    sdk.train(first, x, [1e-2])
    sp = first.save_state("a1").result().path
    sampler = first.save_weights_for_sampler("a1").result().path
    ctx.case("isolation: alice's run, checkpoints, sampler weights are NotFoundError for bob", check_isolation,
             srv, alice, bob, first, sp, sampler, x)
    ctx.case("published checkpoint readable and resumable by bob", check_published, alice, bob, first, sp, x)
    solo = [r.metrics["loss:sum"] for r in pipelined(sdk.new_training_client(alice, rank=4, seed=1), x, 1e-2)]
    summary = ctx.case("two tenants train concurrently beside a base sampler; alice == solo", check_concurrent,
                       alice, bob, x, y, solo)
    ctx.finish()
    return summary
