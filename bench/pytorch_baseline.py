# Plain PyTorch eager LoRA training baseline for tinkerd's training benchmark:
# a Llama written the way HF transformers (eager attention) + PEFT LoRA do it,
# padded batches, full-vocab cross-entropy, AdamW on LoRA params; prints one
# JSON line per (mode, batch) on stdout and a table on stderr. Owns --check too.
import argparse
import ctypes
import json
import math
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_model  # noqa: E402

IMPL = "pytorch_eager_peft"
BATCHES = {"equal": [256] * 4, "mixed": [64] + [256] * 6 + [1024]}
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


# ---------------------------------------------------------------- model (HF Llama, eager)

def at_least_fp32(x):
    """HF upcasts to float32; float64 (used by --check) is kept as is."""
    return x if x.dtype in (torch.float32, torch.float64) else x.to(torch.float32)


def frozen_linear(weight):
    """nn.Linear without bias whose weight [out, in] is a frozen given tensor."""
    lin = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device="meta")
    lin.weight = nn.Parameter(weight, requires_grad=False)
    return lin


class RMSNorm(nn.Module):
    def __init__(self, weight, eps):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)  # [D]
        self.eps = eps

    def forward(self, x):  # x [B,T,D]; statistics in fp32 as HF does
        in_dtype = x.dtype
        h = at_least_fp32(x)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(in_dtype)


def rope_cos_sin(cfg, seq_len, dtype):
    """cos, sin [T, hd] for positions 0..T-1 (right padding keeps them valid)."""
    hd = cfg["head_dim"]
    inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    with torch.autocast("cpu", enabled=False):
        freqs = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)  # [T, hd/2]
        emb = torch.cat((freqs, freqs), dim=-1)                                   # [T, hd]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg, w, p):
        super().__init__()
        self.nh, self.nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.hd = cfg["head_dim"]
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            setattr(self, name, frozen_linear(w[p + "self_attn." + name + ".weight"]))

    def forward(self, x, cos, sin, mask):
        # x [B,T,D]; cos/sin [T,hd]; mask [B,1,T,T] additive
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.nh, self.hd).transpose(1, 2)   # [B,H,T,hd]
        k = self.k_proj(x).view(b, t, self.nkv, self.hd).transpose(1, 2)  # [B,KV,T,hd]
        v = self.v_proj(x).view(b, t, self.nkv, self.hd).transpose(1, 2)  # [B,KV,T,hd]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.nh // self.nkv
        k = torch.repeat_interleave(k, rep, dim=1)  # [B,H,T,hd]
        v = torch.repeat_interleave(v, rep, dim=1)  # [B,H,T,hd]
        scores = torch.matmul(q, k.transpose(2, 3)) * (self.hd ** -0.5)  # [B,H,T,T]
        scores = scores + mask
        probs = F.softmax(scores, dim=-1, dtype=at_least_fp32(scores).dtype).to(q.dtype)
        out = torch.matmul(probs, v)                        # [B,H,T,hd]
        out = out.transpose(1, 2).reshape(b, t, self.nh * self.hd)
        return self.o_proj(out)                             # [B,T,D]


class MLP(nn.Module):
    def __init__(self, w, p):
        super().__init__()
        for name in ("gate_proj", "up_proj", "down_proj"):
            setattr(self, name, frozen_linear(w[p + "mlp." + name + ".weight"]))

    def forward(self, x):  # [B,T,D] -> [B,T,I] -> [B,T,D]
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg, w, i):
        super().__init__()
        p, eps = f"model.layers.{i}.", cfg["rms_norm_eps"]
        self.input_layernorm = RMSNorm(w[p + "input_layernorm.weight"], eps)
        self.self_attn = Attention(cfg, w, p)
        self.post_attention_layernorm = RMSNorm(w[p + "post_attention_layernorm.weight"], eps)
        self.mlp = MLP(w, p)

    def forward(self, x, cos, sin, mask):  # x [B,T,D]
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg, w, n_layers=None):
        super().__init__()
        self.cfg = cfg
        emb = w["model.embed_tokens.weight"]  # [V,D]
        self.embed_tokens = nn.Embedding(emb.shape[0], emb.shape[1], device="meta")
        self.embed_tokens.weight = nn.Parameter(emb, requires_grad=False)
        n = cfg["num_hidden_layers"] if n_layers is None else n_layers
        self.layers = nn.ModuleList(DecoderLayer(cfg, w, i) for i in range(n))
        self.norm = RMSNorm(w["model.norm.weight"], cfg["rms_norm_eps"])
        head = w.get("lm_head.weight", emb)  # tied unless the file has lm_head
        self.lm_head = frozen_linear(head)
        self.grad_ckpt = False

    def causal_padding_mask(self, attn_mask, dtype):
        """attn_mask [B,T] 1=real -> additive [B,1,T,T] (causal and key padding)."""
        b, t = attn_mask.shape
        causal = torch.ones(t, t, dtype=torch.bool).tril()            # [T,T]
        allowed = causal[None, None] & attn_mask.bool()[:, None, None, :]
        mask = torch.zeros(b, 1, t, t, dtype=dtype)
        return mask.masked_fill(~allowed, torch.finfo(dtype).min)

    def forward(self, input_ids, attn_mask):
        # input_ids, attn_mask [B,T] -> logits [B,T,V]
        h = self.embed_tokens(input_ids)                              # [B,T,D]
        cos, sin = rope_cos_sin(self.cfg, input_ids.shape[1], h.dtype)
        mask = self.causal_padding_mask(attn_mask, h.dtype)
        for layer in self.layers:
            if self.grad_ckpt and torch.is_grad_enabled():
                h = torch.utils.checkpoint.checkpoint(layer, h, cos, sin, mask, use_reentrant=False)
            else:
                h = layer(h, cos, sin, mask)
        return self.lm_head(self.norm(h))


def causal_lm_loss(logits, labels):
    """HF ForCausalLMLoss: upcast, shift labels left, CE mean over labels != -100."""
    logits = at_least_fp32(logits)                                    # [B,T,V]
    labels = F.pad(labels, (0, 1), value=-100)[..., 1:].contiguous()  # [B,T]
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1),
                           ignore_index=-100, reduction="mean")


# ---------------------------------------------------------------- PEFT-style LoRA

class LoraLinear(nn.Module):
    """PEFT lora.Linear: base(x) + lora_B(lora_A(dropout(x))) * alpha / r."""

    def __init__(self, base, r, alpha):
        super().__init__()
        self.base_layer = base
        dtype = base.weight.dtype
        self.lora_A = nn.Linear(base.in_features, r, bias=False, dtype=dtype)   # [r,in]
        self.lora_B = nn.Linear(r, base.out_features, bias=False, dtype=dtype)  # [out,r]
        self.lora_dropout = nn.Identity()  # lora_dropout = 0.0
        self.scaling = alpha / r
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)

    def forward(self, x):  # [B,T,in] -> [B,T,out]
        result = self.base_layer(x)
        x = x.to(self.lora_A.weight.dtype)
        return result + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling


def apply_lora(model, r=32, alpha=32, seed=0):
    """Wraps every target nn.Linear in place; returns the trainable parameters."""
    torch.manual_seed(seed)  # PEFT inits lora_A from the global generator
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if name in LORA_TARGETS and isinstance(child, nn.Linear):
                setattr(module, name, LoraLinear(child, r, alpha))
    return [p for n, p in model.named_parameters() if "lora_" in n]


def perturb_lora_b(model, std, seed):
    """Makes lora_B non-zero so that the backward does real work on A as well."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, LoraLinear):
                noise = torch.randn(m.lora_B.weight.shape, generator=gen, dtype=torch.float32)
                m.lora_B.weight.copy_(noise * std)


# ---------------------------------------------------------------- batches and memory

def make_batch(lengths, vocab, seed, pad_id=0):
    """Random ids right-padded to max(lengths): input_ids/attention_mask/labels [B,T]."""
    gen = torch.Generator().manual_seed(seed)
    b, t = len(lengths), max(lengths)
    ids = torch.randint(3, vocab, (b, t), generator=gen)
    mask = (torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]).long()  # [B,T]
    ids = ids.masked_fill(mask == 0, pad_id)
    return {"input_ids": ids, "attention_mask": mask,
            "labels": ids.masked_fill(mask == 0, -100)}


def estimate_train_gib(cfg, lengths):
    """Rough saved-activation size of one un-checkpointed fp32 train step (GiB).

    Per layer ~(16*D + 6*I) floats per padded token plus two [B,H,T,T] fp32
    attention tensors; the loss keeps ~4 fp32 copies of the [B,T,V] logits.
    """
    b, t = len(lengths), max(lengths)
    n = b * t
    per_layer = n * (16 * cfg["hidden_size"] + 6 * cfg["intermediate_size"]) * 4
    per_layer += 2 * b * cfg["num_attention_heads"] * t * t * 4
    logits = 4 * n * cfg["vocab_size"] * 4
    return (cfg["num_hidden_layers"] * per_layer + logits) / 2**30


def _proc_status_mb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def _libc_call(name, *args):
    try:
        return getattr(ctypes.CDLL("libc.so.6"), name)(*args)
    except (OSError, AttributeError):
        return None


def set_malloc_mmap_threshold(mib):
    """glibc: blocks >= mib MiB are mmap'd (returned to the OS on free), trim at 2x.

    glibc's dynamic default settles near 32 MiB; with per-layer checkpointing on the
    padded batch that leaves ~0.3-0.5 GB of freed heap per layer resident, so
    checkpointed configs use 4 MiB (RSS then tracks live tensors).
    """
    ok = _libc_call("mallopt", -3, mib << 20) == 1          # M_MMAP_THRESHOLD
    return ok and _libc_call("mallopt", -1, 2 * mib << 20) == 1  # M_TRIM_THRESHOLD


def reset_peak_rss():
    """Resets VmHWM (Linux clear_refs 5) after returning freed heap to the OS."""
    _libc_call("malloc_trim", 0)
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def process_peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


# ---------------------------------------------------------------- timed steps

def forward_loss(model, batch, mode):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=(mode == "bf16")):
        logits = model(batch["input_ids"], batch["attention_mask"])  # [B,T,V]
        return causal_lm_loss(logits, batch["labels"])


def train_step(model, opt, batch, mode):
    loss = forward_loss(model, batch, mode)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


def forward_only(model, batch, mode):
    with torch.no_grad():
        return forward_loss(model, batch, mode).item()


def timed(fn, warmup, steps):
    """Runs fn warmup times untimed, then steps times; returns (times, last result)."""
    out = None
    for _ in range(warmup):
        out = fn()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return times, out


def bench_one(model, opt, cfg, mode, name, args):
    """Times forward (no_grad) and the train step for one (mode, batch)."""
    lengths = BATCHES[name]
    batch = make_batch(lengths, cfg["vocab_size"], args.seed + 1)
    est = estimate_train_gib(cfg, lengths)
    ckpt = args.grad_ckpt == "on" or (args.grad_ckpt == "auto" and est > args.ckpt_above_gib)
    model.grad_ckpt = ckpt
    mmap_mib = 4 if ckpt else 32
    mmap_mib = mmap_mib if set_malloc_mmap_threshold(mmap_mib) else None
    scoped = reset_peak_rss()
    cpu0, wall0 = time.process_time(), time.perf_counter()  # cpu_per_wall < threads: contention
    fwd_times, _ = timed(lambda: forward_only(model, batch, mode), args.warmup, args.steps)
    step_times, loss = timed(lambda: train_step(model, opt, batch, mode), args.warmup, args.steps)
    real, padded = sum(lengths), len(lengths) * max(lengths)
    fwd_s, step_s = statistics.median(fwd_times), statistics.median(step_times)
    return {
        "impl": IMPL, "mode": mode, "batch": name, "real_tokens": real, "padded_tokens": padded,
        "fwd_s": round(fwd_s, 4), "step_s": round(step_s, 4),
        "tokens_per_s": round(real / step_s, 2), "fwd_tokens_per_s": round(real / fwd_s, 2),
        "peak_rss_mb": round(_proc_status_mb("VmHWM") if scoped else process_peak_rss_mb(), 1),
        "peak_rss_scope": "config" if scoped else "process",
        "process_peak_rss_mb": round(process_peak_rss_mb(), 1),
        "grad_ckpt": ckpt, "est_activation_gib": round(est, 1), "malloc_mmap_mib": mmap_mib,
        "loss": round(loss, 5),
        "warmup": args.warmup, "steps": args.steps, "threads": torch.get_num_threads(),
        "cpu_per_wall": round((time.process_time() - cpu0) / (time.perf_counter() - wall0), 2),
        "fwd_times": [round(x, 4) for x in fwd_times],
        "step_times": [round(x, 4) for x in step_times], "torch": torch.__version__,
    }


def print_table(rows, out=sys.stderr):
    head = ("mode", "batch", "real", "padded", "ckpt", "fwd_s", "step_s", "tok/s", "peakMB",
            "cpu/wall")
    fmt = "{:<5} {:<6} {:>5} {:>6} {:>5} {:>8} {:>8} {:>7} {:>7} {:>8}"
    print(fmt.format(*head), file=out)
    for r in rows:
        print(fmt.format(r["mode"], r["batch"], r["real_tokens"], r["padded_tokens"],
                         "yes" if r["grad_ckpt"] else "no", f"{r['fwd_s']:.2f}",
                         f"{r['step_s']:.2f}", f"{r['tokens_per_s']:.1f}",
                         f"{r['peak_rss_mb']:.0f}", f"{r['cpu_per_wall']:.2f}"), file=out)
    print(f"process peak RSS (getrusage maxrss): {process_peak_rss_mb():.0f} MB", file=out)


# ---------------------------------------------------------------- self-check

def check_lora_zero_is_base(cfg, w):
    """With lora_B == 0 the LoRA model's loss must equal the base model's."""
    batch = make_batch([12, 20], cfg["vocab_size"], seed=123)
    model = LlamaForCausalLM(cfg, w)
    with torch.no_grad():
        base = forward_loss(model, batch, "fp32").item()
        apply_lora(model, seed=7)
        lora = forward_loss(model, batch, "fp32").item()
    ok = abs(base - lora) <= 1e-6 * abs(base)
    return ok, f"lora_B=0 loss {lora:.7f} vs base {base:.7f}"


def _fd_grad(model, batch, param, idx, eps):
    """Central finite difference of the loss w.r.t. param[idx] (float64)."""
    with torch.no_grad():
        orig = param[idx].item()
        param[idx] = orig + eps
        up = forward_loss(model, batch, "fp32").item()
        param[idx] = orig - eps
        down = forward_loss(model, batch, "fp32").item()
        param[idx] = orig
    return (up - down) / (2 * eps)


def tiny_f64_model(cfg, w):
    """float64 2-layer truncated copy with random LoRA (lora_B clearly non-zero)."""
    keep = ("model.embed_tokens.", "model.norm.", "model.layers.0.", "model.layers.1.")
    w64 = {k: v.double() for k, v in w.items() if k.startswith(keep)}
    model = LlamaForCausalLM(cfg, w64, n_layers=2)
    params = apply_lora(model, seed=11)
    perturb_lora_b(model, std=0.05, seed=12)
    return model, params


def check_fd_grad(model, batch):
    """Autograd lora_A gradients equal central finite differences (float64)."""
    forward_loss(model, batch, "fp32").backward()
    ok, msgs = True, []
    for name in ("layers.0.self_attn.q_proj", "layers.1.mlp.down_proj"):
        a = model.get_submodule(name).lora_A.weight            # [r,in]
        idx = divmod(int(a.grad.abs().argmax()), a.shape[1])
        g, fd = a.grad[idx].item(), _fd_grad(model, batch, a, idx, 1e-5)
        good = abs(g - fd) <= 1e-6 * max(abs(g), abs(fd)) + 1e-12
        ok &= good
        msgs.append(f"{name}.lora_A{list(idx)} grad {g:.6e} fd {fd:.6e} "
                    f"({'ok' if good else 'BAD'})")
    return ok, "; ".join(msgs)


def check_checkpointing(model, params, batch):
    """Gradients with per-layer checkpointing equal those without (float64)."""
    plain = [p.grad.clone() for p in params]
    for p in params:
        p.grad = None
    model.grad_ckpt = True
    forward_loss(model, batch, "fp32").backward()
    model.grad_ckpt = False
    err = max((p.grad - g).abs().max().item() for p, g in zip(params, plain))
    return err <= 1e-12, f"grad-ckpt max |dgrad| {err:.1e}"


def check_padding(model, batch):
    """Real-token logits ignore later (padding) tokens; the loss is a mean over real labels."""
    ids, am = batch["input_ids"], batch["attention_mask"]                    # [B,T]
    with torch.no_grad():
        logits = model(ids, am)                                                # [B,T,V]
        alone = model(ids[:1, :5], am[:1, :5])[0]                              # [5,V]
        err = (logits[0, :5] - alone).abs().max().item()
        nll, count = 0.0, 0
        for row, n in enumerate(am.sum(1).tolist()):  # next-token CE of real tokens only
            nll += F.cross_entropy(logits[row, :n - 1], ids[row, 1:n], reduction="sum").item()
            count += n - 1
        loss_err = abs(causal_lm_loss(logits, batch["labels"]).item() - nll / count)
    ok = err <= 1e-9 and loss_err <= 1e-9
    return ok, f"causal/padding max |dlogit| {err:.1e}, loss vs per-token mean {loss_err:.1e}"


def run_checks(cfg, w):
    t0 = time.perf_counter()
    results = [check_lora_zero_is_base(cfg, w)]
    model, params = tiny_f64_model(cfg, w)
    batch = make_batch([5, 8], cfg["vocab_size"], seed=13)
    results += [check_fd_grad(model, batch), check_checkpointing(model, params, batch),
                check_padding(model, batch)]
    for ok, msg in results:
        print(f"check {'ok  ' if ok else 'FAIL'}: {msg}", file=sys.stderr)
    print(f"checks took {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return all(ok for ok, _ in results)


# ---------------------------------------------------------------- CLI

def parse_args(argv):
    ap = argparse.ArgumentParser(description="PyTorch eager HF+PEFT-style LoRA training baseline.")
    ap.add_argument("model_dir")
    ap.add_argument("--steps", type=int, default=3, help="timed steps (median reported)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps before timing")
    ap.add_argument("--batches", default="equal,mixed", help="comma list of: equal, mixed")
    ap.add_argument("--modes", default="fp32,bf16", help="comma list of: fp32, bf16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--grad-ckpt", choices=["auto", "on", "off"], default="auto",
                    help="per-layer activation checkpointing; auto = when the estimated "
                         "activations exceed --ckpt-above-gib")
    ap.add_argument("--ckpt-above-gib", type=float, default=12.0)
    ap.add_argument("--quick", action="store_true", help="1 warmup + 1 step (script testing)")
    ap.add_argument("--check", action="store_true", help="run the self-checks first")
    ap.add_argument("--check-only", action="store_true", help="run the self-checks and exit")
    args = ap.parse_args(argv)
    if args.quick:
        args.warmup, args.steps = 1, 1
    args.batches = [b for b in args.batches.split(",") if b]
    args.modes = [m for m in args.modes.split(",") if m]
    bad = [b for b in args.batches if b not in BATCHES]
    bad += [m for m in args.modes if m not in ("fp32", "bf16")]
    if bad or args.steps < 1 or args.warmup < 0:
        ap.error(f"unknown batch/mode {bad}, or --steps < 1, or --warmup < 0")
    return args


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg, w = bench_model.load_model_dir(args.model_dir)  # fp32 copy of the base weights
    if (args.check or args.check_only) and not run_checks(cfg, w):
        return 1
    if args.check_only:
        return 0
    model = LlamaForCausalLM(cfg, w)
    params = apply_lora(model, r=32, alpha=32, seed=args.seed)
    perturb_lora_b(model, std=1e-3, seed=args.seed + 2)
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.0)
    print(f"{IMPL}: {sum(p.numel() for p in params):,} LoRA params, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads", file=sys.stderr)
    rows = []
    for mode in args.modes:
        for name in args.batches:
            row = bench_one(model, opt, cfg, mode, name, args)
            print(json.dumps(row), flush=True)
            rows.append(row)
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
