# S6 through the official SDK: DPO as the cookbook runs it, with forward_backward_custom and a loss
# written in local torch (beta 0.1) against reference logprobs from a sampler snapshot taken at
# creation. Step 0: loss log 2, margin 0; after 10 steps loss < 0.5, accuracy 1, margin > 0; the
# custom metrics sit beside the server's name:reduction keys. The gradients the SDK sends equal the
# analytic DPO gradient (a twin client given -dL/dlogprobs as cross_entropy weights by hand gets the
# same loss:sum, grad_norm and next logprobs). Then top-5 distillation: 2-D [N,5] cross_entropy
# targets and weights from the reference's topk_prompt_logprobs; the loss falls.
import numpy as np
import torch

import sdk_common as sdk
from harness import check, check_abs, check_close

BETA = 0.1
STEPS = 10
LR = 1e-3
PROMPT_LEN = 6


def pairs_data(seed=21, n_pairs=4, length=12):
    """Chosen and rejected datums alternating: a shared prompt, different responses, weight 1 on the
    response targets only."""
    rng = np.random.default_rng(seed)
    data = []
    for _ in range(n_pairs):
        p = [int(t) for t in rng.integers(1, 200, size=PROMPT_LEN)]
        for _ in range(2):
            resp = [int(t) for t in rng.integers(1, 200, size=length - PROMPT_LEN + 1)]
            seq = p + resp
            w = [0.0] * (PROMPT_LEN - 1) + [1.0] * (len(seq) - PROMPT_LEN)
            data.append(sdk.datum(seq[:-1], seq[1:], w))
    return data


def reference_logprobs(ref, data):
    out = []
    for d in data:
        toks = d.model_input.to_ints() + [int(d.loss_fn_inputs["target_tokens"].tolist()[-1])]
        out.append(torch.tensor(ref.compute_logprobs(sdk.prompt(toks)).result()[1:], dtype=torch.float32))
    return out


def make_dpo_loss(ref_lps):
    def dpo_loss(data, logprobs_list):
        terms = []
        for d, lp, ref in zip(data, logprobs_list, ref_lps):
            w = torch.tensor(d.loss_fn_inputs["weights"].tolist(), dtype=torch.float32)
            terms.append(torch.dot(lp.float() - ref, w))
        chosen, rejected = torch.stack(terms[0::2]), torch.stack(terms[1::2])
        z = BETA * (chosen - rejected)
        loss = -torch.nn.functional.logsigmoid(z).mean()
        return loss, {"dpo_loss": float(loss), "accuracy": float((z > 0).float().mean()),
                      "margin": float(z.mean())}
    return dpo_loss


def analytic_weights(data, logprobs_list, ref_lps):
    """-dL/dlogprobs of the DPO loss, per datum (what the SDK must send as cross_entropy weights)."""
    w = [np.asarray(d.loss_fn_inputs["weights"].tolist(), dtype=np.float64) for d in data]
    s = [float(np.dot(np.asarray(lp, dtype=np.float64) - r.numpy().astype(np.float64), wi))
         for lp, r, wi in zip(logprobs_list, ref_lps, w)]
    n = len(data) // 2
    out = []
    for k in range(n):
        z = BETA * (s[2 * k] - s[2 * k + 1])
        g = (1.0 - 1.0 / (1.0 + np.exp(-z))) * BETA / n  # -dL/dz * dz/ds_chosen
        out.append(g * w[2 * k])
        out.append(-g * w[2 * k + 1])
    return out


def check_dpo_training(svc, data):
    tc = sdk.new_training_client(svc, rank=8, seed=0)
    ref = tc.save_weights_and_get_sampling_client()
    ref_lps = reference_logprobs(ref, data)
    loss_fn = make_dpo_loss(ref_lps)
    hist = []
    for _ in range(STEPS):
        res = tc.forward_backward_custom(data, loss_fn).result()
        tc.optim_step(sdk.adam(LR)).result()
        hist.append(dict(res.metrics))
    m0, last = hist[0], hist[-1]
    check_abs(m0["dpo_loss"], np.log(2.0), 1e-3, "step-0 DPO loss (policy == reference)")
    check_abs(m0["margin"], 0.0, 1e-3, "step-0 margin")
    check(any(":" in k for k in m0), "no server name:reduction metric beside the custom ones: %r" % m0)
    check(last["dpo_loss"] < 0.5 and last["accuracy"] == 1.0 and last["margin"] > 0,
          "after %d steps: %r (losses %s)" % (STEPS, last, [round(h["dpo_loss"], 3) for h in hist]))
    return "DPO loss %.3f -> %.3f, margin %.3f" % (m0["dpo_loss"], last["dpo_loss"], last["margin"])


def check_gradients(svc, data):
    """forward_backward_custom == forward_backward with the analytic -dL/dlp weights, step for step."""
    custom = sdk.new_training_client(svc, rank=8, seed=3)
    manual = sdk.new_training_client(svc, rank=8, seed=3)
    ref_lps = reference_logprobs(custom.save_weights_and_get_sampling_client(), data)
    sdk.train(custom, data, [LR])  # move away from the reference so the gradient is not symmetric
    sdk.train(manual, data, [LR])
    for step in range(2):
        a = custom.forward_backward_custom(data, make_dpo_loss(ref_lps)).result()
        oa = custom.optim_step(sdk.adam(LR)).result()
        fwd = manual.forward(data, "cross_entropy").result()
        lps = [sdk.logprobs(fwd, i) for i in range(len(data))]
        weights = analytic_weights(data, lps, ref_lps)
        lin = [sdk.datum(d.model_input.to_ints(), d.loss_fn_inputs["target_tokens"].tolist(), w)
               for d, w in zip(data, weights)]
        b = manual.forward_backward(lin, "cross_entropy").result()
        ob = manual.optim_step(sdk.adam(LR)).result()
        check_close(sdk.all_logprobs(a), sdk.all_logprobs(b), 1e-6, "step %d: logprobs" % step)
        ma, mb = (oa.metrics or {}), (ob.metrics or {})
        gn = [k for k in ma if k.startswith("grad_norm")]
        check(gn, "optim_step metrics lack grad_norm: %r" % ma)
        check_close(ma[gn[0]], mb[gn[0]], 1e-4, "step %d: %s custom vs analytic" % (step, gn[0]))
    after_a = custom.forward(data, "cross_entropy").result()
    after_b = manual.forward(data, "cross_entropy").result()
    check_close(sdk.all_logprobs(after_a), sdk.all_logprobs(after_b), 1e-5, "logprobs after 2 DPO steps")
    return "grad_norm %.4g" % ma[gn[0]]


def check_topk_distillation(svc):
    """2-D [N,5] targets and weights (the teacher's top-5 probabilities) train: the loss falls."""
    teacher = svc.create_sampling_client(base_model=sdk.BUILTIN_MODEL)
    rng = np.random.default_rng(8)
    data = []
    for _ in range(3):
        seq = [int(t) for t in rng.integers(1, 200, size=10)]
        res = teacher.sample(sdk.prompt(seq), 1, sdk.params(max_tokens=1), include_prompt_logprobs=True,
                             topk_prompt_logprobs=5).result()
        rows = res.topk_prompt_logprobs
        check(rows[0] is None and all(r is not None and len(r) == 5 for r in rows[1:]), "top-5 rows %r" % rows[:2])
        targets = np.array([[t for t, _ in r] for r in rows[1:]], dtype=np.int64)
        probs = np.exp(np.array([[lp for _, lp in r] for r in rows[1:]], dtype=np.float32))
        data.append(sdk.datum(seq[:-1], targets, probs / probs.sum(axis=1, keepdims=True)))
    student = sdk.new_training_client(svc, rank=8, seed=4)
    first = student.forward(data, "cross_entropy").result()
    check(sdk.logprobs(first, 0).shape == (9, 5), "2-D logprobs shape %s" % (sdk.logprobs(first, 0).shape,))
    losses = sdk.train(student, data, [1e-3] * 5)
    check(losses[-1] < losses[0], "2-D cross_entropy loss did not fall: %r" % losses)
    return "2-D CE %.3f -> %.3f" % (losses[0], losses[-1])


def run(ctx):
    srv = ctx.start_server()
    svc = sdk.service(srv)
    data = pairs_data()
    dpo = ctx.case("DPO via forward_backward_custom: log 2 at step 0, learns", check_dpo_training, svc, data)
    grads = ctx.case("custom gradients == analytic DPO gradient", check_gradients, svc, data)
    topk = ctx.case("top-5 distillation with 2-D cross_entropy targets", check_topk_distillation, svc)
    ctx.finish()
    return "%s; %s; %s" % (dpo, grads, topk)
