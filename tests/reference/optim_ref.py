# Reference optimizer loop for LoRA adapters in float64: global grad-norm clipping + AdamW.
# Owns: the torch.optim.AdamW / clip_grad_norm_ trajectory (the reference) and an independent
# hand-written AdamW + clipping trajectory that must agree with it (belt and braces).
import math

import torch

import losses


def manual_clip(grads, max_norm: float):
    """In-place clip of a list of grads like clip_grad_norm_; -> (total_norm, triggered)."""
    total = math.sqrt(sum(float((g * g).sum()) for g in grads))
    coef = max_norm / (total + 1e-6)
    if coef < 1.0:
        for g in grads:
            g.mul_(coef)
    return total, coef < 1.0


def manual_adamw(p, g, m, v, step, hp):
    """One torch-style AdamW update of tensors p, m, v in place (step counts from 1)."""
    lr, b1, b2, eps, wd = hp["learning_rate"], hp["beta1"], hp["beta2"], hp["eps"], hp["weight_decay"]
    p.mul_(1.0 - lr * wd)  # decoupled weight decay, before the Adam update
    m.mul_(b1).add_((1.0 - b1) * g)
    v.mul_(b2).add_((1.0 - b2) * g * g)
    m_hat = m / (1.0 - b1**step)
    v_hat = v / (1.0 - b2**step)
    p.sub_(lr * m_hat / (v_hat.sqrt() + eps))


def _loss_and_backward(model, adapter, call):
    loss, _, _ = losses.call_loss(model, adapter, call)
    loss.backward()
    return float(loss)


def run_torch_adam(model, init_adapter, call, hp, steps, dtype=torch.float64):
    """-> (losses before each step, final params {key: tensor}, clip log [(norm, triggered)])."""
    adapter = init_adapter.clone(requires_grad=True, dtype=dtype)
    params = list(adapter.params.values())
    opt = torch.optim.AdamW(params, lr=hp["learning_rate"], betas=(hp["beta1"], hp["beta2"]),
                            eps=hp["eps"], weight_decay=hp["weight_decay"])
    loss_log, clip_log = [], []
    for _ in range(steps):
        loss_log.append(_loss_and_backward(model, adapter, call))
        if hp["grad_clip_norm"] > 0:
            total = float(torch.nn.utils.clip_grad_norm_(params, hp["grad_clip_norm"]))
            clip_log.append((total, hp["grad_clip_norm"] / (total + 1e-6) < 1.0))
        opt.step()
        opt.zero_grad(set_to_none=False)
    final = {k: v.detach().clone() for k, v in adapter.params.items()}
    return loss_log, final, clip_log


def run_manual_adam(model, init_adapter, call, hp, steps):
    """Same trajectory with manual_clip + manual_adamw -> (losses, final params)."""
    adapter = init_adapter.clone(requires_grad=True)
    params = list(adapter.params.values())
    ms = [torch.zeros_like(p) for p in params]
    vs = [torch.zeros_like(p) for p in params]
    loss_log = []
    for step in range(1, steps + 1):
        loss_log.append(_loss_and_backward(model, adapter, call))
        grads = [p.grad for p in params]
        if hp["grad_clip_norm"] > 0:
            manual_clip(grads, hp["grad_clip_norm"])
        with torch.no_grad():
            for p, g, m, v in zip(params, grads, ms, vs):
                manual_adamw(p, g, m, v, step, hp)
        for p in params:
            p.grad = None
    return loss_log, {k: v.detach().clone() for k, v in adapter.params.items()}


def run_adam_checked(model, init_adapter, call, hp, steps):
    """Reference trajectory, asserted equal (to ~1e-10 relative) to the manual one."""
    loss_log, final, clip_log = run_torch_adam(model, init_adapter, call, hp, steps)
    m_loss, m_final = run_manual_adam(model, init_adapter, call, hp, steps)
    for a, b in zip(loss_log, m_loss):
        assert abs(a - b) <= 1e-10 * max(1.0, abs(a)), f"loss mismatch torch {a} manual {b}"
    for key, ref in final.items():
        err = float((ref - m_final[key]).abs().max())
        assert err <= 1e-10 * max(1.0, float(ref.abs().max())), f"AdamW mismatch on {key}: {err}"
    return loss_log, final, clip_log


def grad_norm_at(model, adapter, call) -> float:
    """Global L2 norm of the call's gradient at the adapter's current weights."""
    a = adapter.clone(requires_grad=True)
    losses.call_loss(model, a, call)[0].backward()
    return math.sqrt(sum(float((p.grad * p.grad).sum()) for p in a.params.values()))


# ---- Dimuon (docs/sdk-0.38.md): per LoRA matrix, momentum EMA, damped row/column equilibration, the matrix
# sign by quintic Newton-Schulz, a step of Frobenius norm lr * sqrt(rank) * (rank / 32)^exponent. Written from
# the documented steps, independently of engine/dimuon.cpp, in float64.

NS_COEFS = (3.4445, -4.7750, 2.0315)


def _sign_by_newton_schulz(x):
    """One matrix's approximate polar factor: 5 quintic iterations on the wide orientation."""
    tall = x.shape[0] > x.shape[1]
    y = x.T if tall else x
    y = y / (torch.linalg.matrix_norm(y) + 1e-7)
    a, b, c = NS_COEFS
    for _ in range(5):
        gram = y @ y.T
        y = a * y + (b * gram + c * gram @ gram) @ y
    return y.T if tall else y


def dimuon_direction(m, rank, damping):
    """The update direction of one momentum matrix m (2-D)."""
    sq = m * m
    rows, cols = sq.mean(dim=1, keepdim=True), sq.mean(dim=0, keepdim=True)
    x = m / torch.sqrt(rows + damping * rows.mean() + 1e-30) / torch.sqrt(cols + damping * cols.mean() + 1e-30)
    o = _sign_by_newton_schulz(x)
    norm = float(torch.linalg.matrix_norm(o))
    return o * (math.sqrt(rank) / norm) if norm > 0 else o


def run_dimuon(model, init_adapter, call, hp, steps):
    """-> (losses before each step, final params, clip log), float64."""
    adapter = init_adapter.clone(requires_grad=True)
    params = list(adapter.params.values())
    moms = [torch.zeros_like(p) for p in params]
    lr = hp["learning_rate"] * (adapter.rank / 32.0) ** hp["rank_lr_correction_exponent"]
    loss_log, clip_log = [], []
    for _ in range(steps):
        loss_log.append(_loss_and_backward(model, adapter, call))
        grads = [p.grad for p in params]
        if hp["grad_clip_norm"] > 0:
            clip_log.append(manual_clip(grads, hp["grad_clip_norm"]))
        with torch.no_grad():
            for p, g, m in zip(params, grads, moms):
                m.mul_(hp["beta1"]).add_((1.0 - hp["beta1"]) * g)
                p.sub_(lr * dimuon_direction(m, adapter.rank, hp["damping"]))
        for p in params:
            p.grad = None
    return loss_log, {k: v.detach().clone() for k, v in adapter.params.items()}, clip_log
