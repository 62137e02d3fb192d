# Turns the sampling benchmark's JSON lines (sample_bench + pytorch_sample_baseline.py) into one table:
# rows dtype x kind x batch, columns tinkerd tok/s, % of the bandwidth bound, plain PyTorch, llama.cpp
# (../shared/docs/reference/llamacpp-anchor.md) and the mixed-/single-adapter throughput ratio.
# Usage: python3 bench/sample_report.py BUILD/bench/sample_results.jsonl
import json
import sys

# llamacpp-anchor.md, same machine and model shape, 2 threads. Decode batch 1: llama-bench tg128 (§4a);
# batch 8 / 32: llama-batched-bench aggregate S_TG (§4b); prefill: llama-bench pp256 / pp512 (§4a).
LLAMA_CPP = {
    ("bf16", "base", 1): 95.4, ("bf16", "base", 8): 256.9, ("bf16", "base", 32): 397.1,
    ("fp32", "base", 1): 47.1, ("fp32", "base", 8): 176.7, ("fp32", "base", 32): 296.9,
    ("bf16", "prefill", 256): 1049, ("bf16", "prefill", 512): 890,
    ("fp32", "prefill", 256): 533, ("fp32", "prefill", 512): 524,
}
KIND_ORDER = {"base": 0, "adapter": 1, "mixed8": 2}


def load(path):
    rows, notes = [], []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                row = json.loads(line)
                if row.get("bench") == "sample":
                    rows.append(row)
            elif line.startswith("tokens match"):
                notes.append(line)
    return rows, notes


def fmt(value, spec="{:.0f}"):
    return "-" if value is None else spec.format(value)


def index(rows, impl):
    """(dtype, kind, batch or prompt length) -> last row of that impl."""
    out = {}
    for r in rows:
        if r.get("impl") != impl or r["kind"] not in ("base", "adapter", "mixed8", "prefill"):
            continue
        key = r["prompt_tokens"] if r["kind"] == "prefill" else r["batch"]
        out[(r["dtype"], r["kind"], key)] = r
    return out


def decode_table(ours, torch_rows):
    print("| weights | kind | batch | tinkerd tok/s | bound tok/s | % of bound | ms/step | PyTorch tok/s "
          "| llama.cpp tok/s | vs llama.cpp | mixed / single adapter | others' CPU |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    keys = sorted((k for k in ours if k[1] != "prefill"), key=lambda k: (k[0], KIND_ORDER.get(k[1], 9), k[2]))
    for dtype, kind, batch in keys:
        r = ours[(dtype, kind, batch)]
        base_torch = torch_rows.get((dtype, "base", batch)) if kind == "base" else None
        llama = LLAMA_CPP.get((dtype, kind, batch))
        ratio = None
        single = ours.get((dtype, "adapter", batch))
        if kind == "mixed8" and single:
            ratio = r["tokens_per_s"] / single["tokens_per_s"]
        print(f"| {dtype} | {kind} | {batch} | {r['tokens_per_s']:.1f} | {r['bound_tokens_per_s']:.0f} "
              f"| {r['pct_of_bound']:.0f}% | {r['ms_per_step']:.1f} | {fmt(base_torch and base_torch['tokens_per_s'], '{:.1f}')} "
              f"| {fmt(llama, '{:.1f}')} | {fmt(llama and r['tokens_per_s'] / llama, '{:.2f}x')} "
              f"| {fmt(ratio, '{:.0%}')} | {fmt(r.get('foreign_cpu_pct'), '{:.0f}%')} |")


def prefill_table(ours, torch_rows):
    print("| weights | prompt tokens | tinkerd tok/s | time to first token ms | GFLOP/s | PyTorch tok/s "
          "| PyTorch TTFT ms | llama.cpp tok/s | vs llama.cpp | others' CPU |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for key in sorted(k for k in set(ours) | set(torch_rows) if k[1] == "prefill"):
        r, t = ours.get(key), torch_rows.get(key)
        llama = LLAMA_CPP.get(key)
        tps = r and r["tokens_per_s"]
        print(f"| {key[0]} | {key[2]} | {fmt(tps)} | {fmt(r and r['ttft_ms'])} | {fmt(r and r.get('gflops'))} "
              f"| {fmt(t and t['tokens_per_s'])} | {fmt(t and t['ttft_ms'])} | {fmt(llama)} "
              f"| {fmt(tps and llama and tps / llama, '{:.2f}x')} | {fmt(r and r.get('foreign_cpu_pct'), '{:.0f}%')} |")


def main():
    rows, notes = load(sys.argv[1])
    bw = [r["bw_gbs"] for r in rows if "bw_gbs" in r]
    if bw:
        print(f"read bandwidth measured in this run (2 threads, best of 3 per measurement): "
              f"{min(bw):.1f}-{max(bw):.1f} GB/s; each decode row's bound uses the value measured right before it "
              f"(weights + one fp32 LoRA copy per distinct adapter in the batch, KV cache not counted)")
    ours, torch_rows = index(rows, "tinkerd"), index(rows, "pytorch")
    print()
    decode_table(ours, torch_rows)
    print()
    prefill_table(ours, torch_rows)
    for note in notes:
        print(f"PyTorch cross-check, {note}")
    print("others' CPU: share of the cores used by other processes during the timed runs; "
          "rows above a few % are contaminated (llamacpp-anchor.md kept runs at <= 1-2 %)")


if __name__ == "__main__":
    main()
