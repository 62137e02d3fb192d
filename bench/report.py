# Turns the JSON lines of `make bench` (train_bench + pytorch_baseline) into the comparison table
# printed at the end of the run and pasted into docs/benchmarks.md.
import json
import sys


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


def main():
    rows = load(sys.argv[1])
    gemm = [r for r in rows if r.get("impl") == "gemm"]
    peak_bf16 = max(r["bf16_gflops"] for r in gemm) if gemm else float("nan")
    peak_fp32 = max(r["fp32_gflops"] for r in gemm) if gemm else float("nan")
    print(f"matmul ceilings (4096x576x1536, 2 threads), best seen in this run: fp32 {peak_fp32:.0f} GFLOP/s, "
          f"bf16 {peak_bf16:.0f} GFLOP/s (each tinkerd row uses the ceiling measured right before it)")
    ours = [r for r in rows if r.get("impl") == "tinkerd"]
    base = [r for r in rows if r.get("impl") == "pytorch_eager_peft"]
    best_base = {}
    for r in base:
        b = r["batch"]
        if b not in best_base or r["step_s"] < best_base[b]["step_s"]:
            best_base[b] = r
    print()
    print("| impl | weights | batch | real tokens | fwd s | fwd+bwd+optim s | optim s | train tok/s "
          "| train GFLOP/s | % bf16 ceiling | vs best PyTorch | peak RSS MB |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in ours:
        ref = best_base.get(r["batch"])
        ratio = ref["step_s"] / r["step_s"] if ref else float("nan")
        weights = r["mode"] + (" (bf16 inputs)" if r.get("matmul") == "bf16" else "")
        print(f"| tinkerd | {weights} | {r['batch']} | {r['real_tokens']} | {r['fwd_s']:.2f} | {r['step_s']:.2f} "
              f"| {r['optim_s']:.3f} | {r['tokens_per_s']:.0f} | {r['train_gflops']:.0f} "
              f"| {100 * r['bf16_peak_frac']:.0f}% of {r.get('bf16_gflops', peak_bf16):.0f} | {ratio:.2f}x | {r['peak_rss_mb']:.0f} |")
    for r in base:
        flops = next((o["train_gflop"] for o in ours if o["batch"] == r["batch"]), float("nan"))
        gf = flops / r["step_s"]
        print(f"| PyTorch eager (padded) | {r['mode']} | {r['batch']} | {r['real_tokens']} | {r['fwd_s']:.2f} "
              f"| {r['step_s']:.2f} | - | {r['tokens_per_s']:.0f} | {gf:.0f} | {100 * gf / peak_bf16:.0f}% "
              f"| {best_base[r['batch']]['step_s'] / r['step_s']:.2f}x | {r.get('peak_rss_mb', float('nan')):.0f} |")


if __name__ == "__main__":
    main()
