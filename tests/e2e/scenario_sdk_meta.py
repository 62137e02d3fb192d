# The device-strict mode end to end: tinkerd --device meta (every engine tensor on torch's meta device, no
# memory the host could read; ARCHITECTURE.md) driven through the official SDK. The numbers mean nothing
# there (the host sees zeros), so this asserts only that each request completes with the right shapes:
# forward, forward_backward with each of the five losses, a custom (DPO-style) loss, optim_step, save_state
# and resume with the optimizer, sampler weights, sampling (greedy, temperature with num_samples, prompt and
# top-k prompt logprobs) and compute_logprobs.
import numpy as np

import sdk_common as sdk
from harness import check

LOSSES = ["cross_entropy", "importance_sampling", "ppo", "cispo", "dro"]


def rl_batch(seed):
    """SFT datums plus the RL losses' inputs (sampler logprobs, advantages), all [N]."""
    out = []
    for d in sdk.sft_batch(seed):
        n = len(d.loss_fn_inputs["target_tokens"].tolist())
        out.append(sdk.datum(d.model_input.to_ints(), d.loss_fn_inputs["target_tokens"].tolist(),
                             logprobs=np.full(n, -2.0), advantages=np.linspace(-1.0, 1.0, n)))
    return out


def check_shapes(out, batch, what):
    check(len(out.loss_fn_outputs) == len(batch), "%s: %d outputs for %d datums" % (what, len(out.loss_fn_outputs),
                                                                                  len(batch)))
    for i, d in enumerate(batch):
        lp = sdk.logprobs(out, i)
        check(lp.shape == (len(d.loss_fn_inputs["target_tokens"].tolist()),), "%s: logprobs shape %s" % (what, lp.shape))
    check("loss:sum" in out.metrics, "%s: no loss:sum in %r" % (what, out.metrics))


def train_every_loss(svc):
    tc = sdk.resolved(sdk.new_training_client(svc, rank=4, seed=1))
    sft = sdk.sft_batch(3)
    check_shapes(tc.forward(sft, "cross_entropy").result(), sft, "forward")
    rl = rl_batch(4)
    for loss in LOSSES:
        batch = sft if loss == "cross_entropy" else rl
        out, _ = sdk.step(tc, batch, 1e-3, loss_fn=loss)
        check_shapes(out, batch, loss)

    def pair_loss(data, logprobs_list):  # DPO's shape: chosen minus rejected, through local torch
        import torch
        z = torch.stack([lp.sum() for lp in logprobs_list[0::2]]) - torch.stack([lp.sum() for lp in logprobs_list[1::2]])
        loss = -torch.nn.functional.logsigmoid(0.1 * z).mean()
        return loss, {"dpo_loss": float(loss.detach())}
    custom = tc.forward_backward_custom(sft, pair_loss).result()
    check("dpo_loss" in custom.metrics, "custom loss metrics %r" % custom.metrics)
    tc.optim_step(sdk.adam(1e-3)).result()
    return tc, sft


def resume(svc, tc, batch):
    path = tc.save_state("meta").result().path
    resumed = sdk.resolved(svc.create_training_client_from_state_with_optimizer(path))
    out, _ = sdk.step(resumed, batch, 1e-3)
    check_shapes(out, batch, "after resume")


def sample(tc):
    sampler = sdk.resolved(tc.save_weights_and_get_sampling_client("meta"))
    start = [5, 9, 13, 17, 21, 25]
    greedy = sampler.sample(sdk.prompt(start), 1, sdk.params(max_tokens=6, temperature=0.0, stop=[])).result()
    check(len(greedy.sequences) == 1 and len(greedy.sequences[0].tokens) == 6, "greedy: %r" % greedy)
    hot = sampler.sample(sdk.prompt(start), 3, sdk.params(max_tokens=5, temperature=1.0, seed=2, stop=[])).result()
    check(len(hot.sequences) == 3 and all(len(s.tokens) == len(s.logprobs) == 5 for s in hot.sequences),
          "temperature 1, 3 samples: %r" % hot)
    res = sampler.sample(sdk.prompt(start), 1, sdk.params(max_tokens=1), include_prompt_logprobs=True,
                         topk_prompt_logprobs=3).result()
    check(len(res.prompt_logprobs) == len(start) and res.prompt_logprobs[0] is None, "prompt logprobs %r"
          % res.prompt_logprobs)
    check(len(res.topk_prompt_logprobs) == len(start) and all(len(t) == 3 for t in res.topk_prompt_logprobs[1:]),
          "top-k prompt logprobs %r" % res.topk_prompt_logprobs)
    lps = sampler.compute_logprobs(sdk.prompt(start)).result()
    check(len(lps) == len(start) and lps[0] is None, "compute_logprobs %r" % lps)


def run(ctx):
    srv = ctx.start_server(extra=["--device", "meta"])
    svc = sdk.service(srv)
    trained = ctx.case("forward, the five losses, a custom loss, optim_step on meta", train_every_loss, svc)
    if trained:
        tc, batch = trained
        ctx.case("save_state and resume with the optimizer on meta", resume, svc, tc, batch)
        ctx.case("sampling and compute_logprobs on meta", sample, tc)
    ctx.finish()
    return "every request completed on the meta device"
