# Plain PyTorch reference for the sampling benchmark (bench/sample_bench.cpp): a hand-written Llama
# forward with a preallocated KV cache ([B, KV, Tmax, D] per layer), greedy decode at several batch
# sizes and prefill of one long prompt, timed the same way (decode = (b*(T-1)) / (t_T - t_1)). One JSON
# line per measurement on stdout (impl "pytorch"), progress on stderr. Run with /usr/bin/python3.
import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_model  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


class Llama:
    """Weights of an HF Llama dir plus a cached forward; activations in the weights' dtype, norms and
    softmax statistics in fp32 (as HF does)."""

    def __init__(self, model_dir, dtype):
        self.cfg, w = bench_model.load_model_dir(model_dir, dtype)
        c = self.cfg
        self.dtype, self.eps = dtype, c["rms_norm_eps"]
        self.nh, self.nkv, self.hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        self.emb = w["model.embed_tokens.weight"]
        self.head = w.get("lm_head.weight", self.emb)
        self.norm = w["model.norm.weight"]
        names = ("input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                 "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
        self.layers = [[w[f"model.layers.{i}.{n}.weight"] for n in names] for i in range(c["num_hidden_layers"])]
        inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, self.hd, 2, dtype=torch.float32) / self.hd))
        freqs = torch.outer(torch.arange(c["max_position_embeddings"], dtype=torch.float32), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos, self.sin = emb.cos().to(dtype), emb.sin().to(dtype)  # [Tmax, D]

    def new_cache(self, batch, tmax):
        shape = (batch, self.nkv, tmax, self.hd)
        return [(torch.empty(shape, dtype=self.dtype), torch.empty(shape, dtype=self.dtype)) for _ in self.layers]

    def rms(self, x, weight):
        h = x.float()
        return weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)

    def rope(self, x, pos):  # x [B, T, heads, D]
        t = x.shape[1]
        cos, sin = self.cos[pos:pos + t, None, :], self.sin[pos:pos + t, None, :]
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    def attention(self, x, layer, cache, pos):  # x [B, T, C] normed
        b, t, _ = x.shape
        _, wq, wk, wv, wo = layer[:5]
        q = self.rope(F.linear(x, wq).view(b, t, self.nh, self.hd), pos)
        k = self.rope(F.linear(x, wk).view(b, t, self.nkv, self.hd), pos)
        v = F.linear(x, wv).view(b, t, self.nkv, self.hd)
        kc, vc = cache
        kc[:, :, pos:pos + t] = k.transpose(1, 2)
        vc[:, :, pos:pos + t] = v.transpose(1, 2)
        s = pos + t
        rep = self.nh // self.nkv
        q = q.view(b, t, self.nkv, rep, self.hd).permute(0, 2, 3, 1, 4)  # [B, KV, rep, T, D]
        scores = q @ kc[:, :, None, :s].transpose(-1, -2) * self.hd ** -0.5  # [B, KV, rep, T, S]
        if t > 1:
            causal = torch.ones(t, s, dtype=torch.bool).tril(diagonal=pos)
            scores = scores.masked_fill(~causal, float("-inf"))
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(x.dtype)
        out = (probs @ vc[:, :, None, :s]).permute(0, 3, 1, 2, 4).reshape(b, t, self.nh * self.hd)
        return F.linear(out, wo)

    def forward(self, tokens, cache, pos):
        """tokens [B, T] at positions pos..pos+T-1 -> fp32 logits [B, V] of the last position."""
        h = self.emb[tokens]
        for layer, kv in zip(self.layers, cache):
            h = h + self.attention(self.rms(h, layer[0]), layer, kv, pos)
            x = self.rms(h, layer[5])
            h = h + F.linear(F.silu(F.linear(x, layer[6])) * F.linear(x, layer[7]), layer[8])
        return F.linear(self.rms(h[:, -1], self.norm), self.head).float()

    def greedy(self, prompts, max_tokens):
        """prompts [B, P] (equal lengths) -> generated tokens [B, max_tokens]; EOS does not stop it."""
        b, p = prompts.shape
        cache = self.new_cache(b, p + max_tokens)
        out = [self.forward(prompts, cache, 0).argmax(-1)]
        for i in range(1, max_tokens):
            out.append(self.forward(out[-1][:, None], cache, p + i - 1).argmax(-1))
        return torch.stack(out, dim=1)


class ForeignCpu:
    """Share of all cores' time used by other processes since creation (as sample_bench measures it)."""

    def __init__(self):
        self.wall, self.busy, self.own = time.perf_counter(), self.machine_busy(), self.own_cpu()

    @staticmethod
    def machine_busy():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def own_cpu():
        u = resource.getrusage(resource.RUSAGE_SELF)
        return u.ru_utime + u.ru_stime

    def percent(self):
        foreign = (self.machine_busy() - self.busy) - (self.own_cpu() - self.own)
        return max(0.0, 100 * foreign / ((time.perf_counter() - self.wall) * os.cpu_count()))


def timed(fn, repeats):
    """Median wall time of repeats calls after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def emit(row):
    print(json.dumps(row), flush=True)


def decode_case(model, args, dtype, batch):
    gen = torch.Generator().manual_seed(1000 + batch)
    prompts = torch.randint(3, model.cfg["vocab_size"], (batch, args.prompt), generator=gen)
    noise = ForeignCpu()
    t_full = timed(lambda: model.greedy(prompts, args.max_tokens), args.repeats)
    t_one = timed(lambda: model.greedy(prompts, 1), args.repeats)
    foreign = noise.percent()
    tps = batch * (args.max_tokens - 1) / (t_full - t_one)
    print(f"  pytorch {dtype} base b={batch}: decode {tps:.1f} tok/s, "
          f"{1e3 * (t_full - t_one) / max(1, args.max_tokens - 1):.1f} ms/step, prefill {1e3 * t_one:.0f} ms "
          f"(others used {foreign:.0f}% CPU)", file=sys.stderr)
    emit({"bench": "sample", "impl": "pytorch", "dtype": dtype, "kind": "base", "batch": batch,
          "prompt_tokens": args.prompt, "max_tokens": args.max_tokens, "tokens": batch * args.max_tokens,
          "tokens_per_s": round(tps, 2), "ms": round(1e3 * t_full, 1), "first_ms": round(1e3 * t_one, 1),
          "ms_per_step": round(1e3 * (t_full - t_one) / max(1, args.max_tokens - 1), 2),
          "foreign_cpu_pct": round(foreign, 1)})


def prefill_case(model, args, dtype, length):
    gen = torch.Generator().manual_seed(7 + length)
    prompt = torch.randint(3, model.cfg["vocab_size"], (1, length), generator=gen)
    noise = ForeignCpu()
    t = timed(lambda: model.greedy(prompt, 1), args.repeats)
    foreign = noise.percent()
    print(f"  pytorch {dtype} prefill {length}: {length / t:.0f} tok/s, time to first token {1e3 * t:.0f} ms "
          f"(others used {foreign:.0f}% CPU)", file=sys.stderr)
    emit({"bench": "sample", "impl": "pytorch", "dtype": dtype, "kind": "prefill", "batch": 1,
          "prompt_tokens": length, "tokens_per_s": round(length / t, 1), "ms": round(1e3 * t, 1),
          "ttft_ms": round(1e3 * t, 1), "foreign_cpu_pct": round(foreign, 1)})


def check_tokens(model, dtype, path):
    """Compares greedy tokens with sample_bench's greedy_check line for this dtype in `path`."""
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.startswith("{")]
    ref = [r for r in rows if r.get("kind") == "greedy_check" and r.get("dtype") == dtype]
    if not ref:
        print(f"tokens match: n/a ({dtype}: no greedy_check line in {path})")
        return
    want = ref[-1]["tokens"]
    got = model.greedy(torch.tensor([ref[-1]["prompt"]]), len(want))[0].tolist()
    first = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), None)
    verdict = "yes" if first is None else f"no (first difference at token {first} of {len(want)})"
    print(f"tokens match: {verdict} ({dtype}, {len(want)} greedy tokens vs tinkerd)")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("model_dir")
    ap.add_argument("--dtype", choices=["auto", "fp32", "bf16"], default="auto")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--prefill", default="256,512")
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--check", help="sample_bench JSON lines holding a greedy_check line")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dtype = args.dtype
    if dtype == "auto":
        with open(os.path.join(args.model_dir, "config.json")) as f:
            dtype = "bf16" if json.load(f).get("torch_dtype") == "bfloat16" else "fp32"
    print(f"pytorch_sample_baseline: torch {torch.__version__}, {dtype}, {torch.get_num_threads()} threads",
          file=sys.stderr)
    with torch.inference_mode():
        model = Llama(args.model_dir, DTYPES[dtype])
        if args.check:
            check_tokens(model, dtype, args.check)
        for batch in [int(b) for b in args.batches.split(",") if int(b) > 0]:
            decode_case(model, args, dtype, batch)
        for length in [int(n) for n in args.prefill.split(",") if int(n) > 0]:
            prefill_case(model, args, dtype, length)


if __name__ == "__main__":
    main()
