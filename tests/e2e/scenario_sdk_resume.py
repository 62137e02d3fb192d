# S4 (resume) through the official SDK. Run A trains 3 steps, save_state (TTL) + sampler weights,
# trains 3 more. B = create_training_client_from_state_with_optimizer: steps 4-6 bit-identical to A.
# C = create_training_client_from_state: step 4 identical, steps 5-6 differ (Adam restarts). Then
# load_state / load_state_with_optimizer on fresh live clients, load on a used client refused, a
# deleted checkpoint and a malformed path refused cleanly, sampling from the saved sampler weights.
import numpy as np

import sdk_common as sdk
from harness import BUILTIN_MODEL, check, check_abs, rel_close

LR = 1e-2
TTL = 604800
METADATA = {"renderer_name": "role_colon"}


def run_a(svc, batch):
    tc = sdk.new_training_client(svc, rank=8, seed=0, user_metadata=METADATA)
    sdk.train(tc, batch, [LR] * 3)
    sp = tc.save_state("000003", ttl_seconds=TTL).result().path
    run_id = tc.get_info().model_id
    check(sp == "tinker://%s/weights/000003" % run_id, "save_state path %r" % sp)
    sampler = tc.save_weights_for_sampler("000003").result().path
    check(sampler == "tinker://%s/sampler_weights/000003" % run_id, "sampler path %r" % sampler)
    after3 = tc.forward(batch, "cross_entropy").result()
    losses = sdk.train(tc, batch, [LR] * 3)
    return tc, sp, sampler, losses, after3


def check_with_optimizer(svc, sp, batch, a):
    tc = svc.create_training_client_from_state_with_optimizer(sp)
    info = tc.get_info()
    check(info.lora_rank == 8 and info.model_data.model_name == BUILTIN_MODEL, "resumed get_info %r" % info)
    b = sdk.train(tc, batch, [LR] * 3)
    check(b == a, "resume with optimizer: steps 4-6 %r, uninterrupted %r (must be bit-identical)" % (b, a))


def check_without_optimizer(svc, sp, batch, a):
    c = sdk.train(svc.create_training_client_from_state(sp), batch, [LR] * 3)
    check(c[0] == a[0], "resume without optimizer: step-4 loss %r vs %r (same weights)" % (c[0], a[0]))
    check(not rel_close(c[1:], a[1:], 1e-4), "without optimizer steps 5-6 should differ (Adam restarts): "
          "%r vs %r" % (c, a))
    return c


def check_live_loads(svc, sp, batch, a, after3):
    """load_state_with_optimizer / load_state on fresh clients behave like B / C."""
    fresh = sdk.new_training_client(svc, rank=8, seed=5)
    fresh.load_state_with_optimizer(sp).result()
    got = fresh.forward(batch, "cross_entropy").result()
    check(np.array_equal(sdk.all_logprobs(got), sdk.all_logprobs(after3)), "load_state_with_optimizer: "
          "forward differs from run A after step 3")
    check(sdk.train(fresh, batch, [LR] * 3) == a, "load_state_with_optimizer: steps 4-6 differ from A")
    plain = sdk.new_training_client(svc, rank=8, seed=6)
    plain.load_state(sp).result()
    c = sdk.train(plain, batch, [LR] * 2)
    check(c[0] == a[0] and not rel_close(c[1], a[1], 1e-4), "load_state: %r vs A %r" % (c, a[:2]))


def check_used_model_load(tc, sp):
    sdk.expect_api_error(lambda: tc.load_state_with_optimizer(sp).result(), sdk.USER_ERRORS,
                         "load_state on a model that has trained")


def check_deleted_and_bad(svc, batch):
    tc = sdk.new_training_client(svc, rank=8, seed=1)
    sdk.train(tc, batch, [LR])
    rolling = tc.save_state("rolling").result().path
    sdk.rest(svc).delete_checkpoint_from_tinker_path(rolling).result()
    sdk.expect_api_error(lambda: svc.create_training_client_from_state(rolling).get_info(), sdk.USER_ERRORS,
                         "resume from a deleted checkpoint")
    sp = tc.save_state("kept").result().path
    bad = sp + "/extra"
    sdk.expect_api_error(lambda: svc.create_training_client_from_state(bad).get_info(),
                         sdk.USER_ERRORS + (ValueError,), "resume from a path with an extra segment")
    fresh = sdk.new_training_client(svc, rank=8)
    sdk.expect_api_error(lambda: fresh.load_state(bad).result(), sdk.USER_ERRORS + (ValueError,),
                         "load_state with an extra segment")


def check_sampler(svc, sampler, tc, batch):
    """Sampling from the step-3 sampler weights gives run A's step-3 logprobs, not the later ones."""
    sc = svc.create_sampling_client(model_path=sampler)
    d = batch[0]
    toks = d.model_input.to_ints() + [int(d.loss_fn_inputs["target_tokens"].tolist()[-1])]
    lps = np.asarray(sc.compute_logprobs(sdk.prompt(toks)).result()[1:], dtype=np.float64)
    return lps


def run(ctx):
    srv = ctx.start_server()
    svc = sdk.service(srv)
    batch = sdk.sft_batch(seed=2)
    tc, sp, sampler, a, after3 = run_a(svc, batch)
    ctx.note("A steps 4-6: %s" % a)
    ctx.case("B: from_state_with_optimizer == uninterrupted (bit-exact)", check_with_optimizer, svc, sp, batch, a)
    c = ctx.case("C: from_state: step 4 equal, 5-6 differ", check_without_optimizer, svc, sp, batch, a)
    ctx.case("load_state(_with_optimizer) on fresh live clients", check_live_loads, svc, sp, batch, a, after3)
    ctx.case("load_state on a used model is refused", check_used_model_load, tc, sp)
    ctx.case("deleted checkpoint / malformed path refused cleanly", check_deleted_and_bad, svc, batch)
    lps = ctx.case("sampler weights of step 3 == A's step-3 forward", check_sampler, svc, sampler, tc, batch)
    if lps is not None:
        ctx.case("sampler weights of step 3 == A's step-3 forward (values)", check_abs, lps,
                 sdk.logprobs(after3, 0), 2e-4, "sampler vs trainer after step 3")
    ctx.finish()
    return "A %s; B == A bit-exact; C %s" % (["%.5f" % x for x in a], c and ["%.5f" % x for x in c])
