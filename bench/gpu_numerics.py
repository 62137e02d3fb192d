# The numerics of tinkerd's GPU paths (docs/gpu.md), on the device, each against a float64 reference of the same
# inputs: the lm_head product as three bf16 parts (kernels::split_bf16_product) next to a plain fp32 product and
# a bf16-rounded one; fp32 attention through SDPA's math kernel with enable_gqa (the engine's) next to the
# memory-efficient kernel on repeated k/v (faster, not used: is its backward reproducible? printed); torch's fused
# RMSNorm next to the unfused ops. Prints one line per row and the times.
#   python bench/gpu_numerics.py [--device cuda] [--tiny]
import argparse
import time

import torch
import torch.nn.functional as F


def timed(fn, sync):
    fn()
    sync()
    t = time.perf_counter()
    for _ in range(5):
        fn()
    sync()
    return (time.perf_counter() - t) / 5


def split_product(a, b):
    """a [n, k] fp32 · b [k, m] bf16 as kernels::split_bf16_product computes it."""
    hi = a.to(torch.bfloat16)
    rest = a - hi.float()
    mid = rest.to(torch.bfloat16)
    lo = (rest - mid.float()).to(torch.bfloat16)
    parts = torch.cat([hi, mid, lo])
    if a.is_cuda:
        sums = torch.mm(parts, b, out_dtype=torch.float32)
    else:
        sums = parts.float() @ b.float()
    return sums.view(3, a.shape[0], b.shape[1]).sum(0)


def report(name, got, want, scale, seconds=None):
    err = (got.double() - want).abs()
    rel = (err / scale).max().item()
    t = "" if seconds is None else "  %.3f ms" % (1e3 * seconds)
    print("%-44s max |err| %.3g, max |err| / (|a|·|b|) %.3g%s" % (name, err.max().item(), rel, t))


def lm_head(dev, sync, tiny):
    n, k, m = (64, 64, 512) if tiny else (256, 2048, 151936)
    h = torch.randn(n, k, device=dev) * 3
    w = (torch.randn(m, k, device=dev) * 0.02).to(torch.bfloat16)  # the stored lm_head [V, C]
    want = h.double() @ w.double().t()
    scale = h.double().abs() @ w.double().abs().t() + 1e-30
    wf = w.float()
    report("lm_head fp32 product (the old GPU path)", h @ wf.t(), want, scale, timed(lambda: h @ wf.t(), sync))
    report("lm_head split bf16 x3 (the new path)", split_product(h, w.t()), want, scale,
           timed(lambda: split_product(h, w.t()), sync))
    rounded = (h.to(torch.bfloat16) @ w.t()).float()
    report("lm_head bf16 input, bf16 result (for scale)", rounded, want, scale,
           timed(lambda: h.to(torch.bfloat16) @ w.t(), sync))
    if dev.type == "cuda":
        out32 = torch.mm(h.to(torch.bfloat16), w.t(), out_dtype=torch.float32)
        report("base product bf16 input, fp32 result (new)", out32, want, scale)


def attention(dev, sync, tiny):
    B, L, H, KV, D = (2, 16, 4, 2, 16) if tiny else (8, 512, 16, 8, 128)
    q = torch.randn(B, H, L, D, device=dev)
    k = torch.randn(B, KV, L, D, device=dev)
    v = torch.randn(B, KV, L, D, device=dev)
    kr, vr = k.repeat_interleave(H // KV, 1), v.repeat_interleave(H // KV, 1)
    s = (q.double() @ kr.double().transpose(-1, -2)) / D ** 0.5
    s = s.masked_fill(torch.ones(L, L, dtype=torch.bool, device=dev).triu(1), float("-inf"))
    want = torch.softmax(s, -1) @ vr.double()
    scale = torch.ones_like(want)
    gqa = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    rep = lambda q, k, v: F.scaled_dot_product_attention(q, k.repeat_interleave(H // KV, 1),
                                                         v.repeat_interleave(H // KV, 1), is_causal=True)
    for name, fn in (("math kernel: used", gqa), ("fused, repeated k/v: not used", rep)):
        report("attention fp32 (%s)" % name, fn(q, k, v), want, scale, timed(lambda: fn(q, k, v), sync))
        print("  its backward reproduces bit for bit: %s" % backward_reproduces(fn, (q, k, v)))


def backward_reproduces(fn, inputs):
    """Whether two backward passes of fn give bitwise equal input gradients."""
    runs = []
    for _ in range(2):
        leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
        runs.append(torch.autograd.grad(fn(*leaves).square().sum(), leaves))
    return all(torch.equal(a, b) for a, b in zip(*runs))


def rms_norm(dev, sync, tiny):
    x = torch.randn(64 if tiny else 4096, 64 if tiny else 2048, device=dev)
    w = torch.randn(x.shape[1], device=dev).to(torch.bfloat16)
    xd = x.double()
    want = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
    scale = want.abs() + 1e-30
    ops = lambda: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    report("RMSNorm as separate fp32 ops (old)", ops(), want, scale, timed(ops, sync))
    if hasattr(torch, "_fused_rms_norm") and dev.type == "cuda":
        fused = lambda: torch._fused_rms_norm(x, [x.shape[1]], w.float(), 1e-6)[0]
        report("RMSNorm fused (new)", fused(), want, scale, timed(fused, sync))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true")
    args = ap.parse_args()
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    torch.manual_seed(0)
    print("numerics: torch %s, %s, allow_tf32 %s" % (torch.__version__, args.device,
                                                     torch.backends.cuda.matmul.allow_tf32))
    lm_head(dev, sync, args.tiny)
    attention(dev, sync, args.tiny)
    rms_norm(dev, sync, args.tiny)
    print("numerics: done")


if __name__ == "__main__":
    main()
