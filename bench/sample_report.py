# Turns the sampling benchmark's JSON lines (sample_bench + pytorch_sample_baseline.py + llamacpp_bench.py,
# all from the same run) into one table: rows dtype x kind x batch, columns tinkerd tok/s, % of the bandwidth
# bound, plain PyTorch, llama.cpp on the same weights (its base-model decode at the same batch and prompt
# lengths, llama-batched-bench; prefill: llama-bench) and the mixed-/single-adapter throughput ratio.
# Usage: python3 bench/sample_report.py BUILD/bench/sample_results.jsonl
import json
import sys

# KIND-unfused: KIND with the decode layers' region off (sample_bench), listed after KIND.
KIND_ORDER = {"base": 0, "base-unfused": 1, "adapter": 2, "adapter-unfused": 3, "mixed8": 4, "mixed8-unfused": 5}


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
        if r.get("impl") != impl or r["kind"] not in (*KIND_ORDER, "prefill"):
            continue
        key = r["prompt_tokens"] if r["kind"] == "prefill" else r["batch"]
        out[(r["dtype"], r["kind"], key)] = r
    return out


def decode_table(ours, torch_rows, llama_rows):
    print("| weights | kind | batch | tinkerd tok/s | bound tok/s | % of bound | ms/step | PyTorch tok/s "
          "| llama.cpp tok/s | vs llama.cpp | mixed / single adapter | others' CPU |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    keys = sorted((k for k in ours if k[1] != "prefill"), key=lambda k: (k[0], KIND_ORDER.get(k[1], 9), k[2]))
    for dtype, kind, batch in keys:
        r = ours[(dtype, kind, batch)]
        base_kind = kind.startswith("base")  # base-unfused: the same model with the decode layers' region off
        base_torch = torch_rows.get((dtype, "base", batch)) if base_kind else None
        llama_row = llama_rows.get((dtype, "base", batch)) if base_kind else None
        llama = llama_row and llama_row["tokens_per_s"]
        ratio = None
        single = ours.get((dtype, kind.replace("mixed8", "adapter"), batch))
        if kind.startswith("mixed8") and single:
            ratio = r["tokens_per_s"] / single["tokens_per_s"]
        print(f"| {dtype} | {kind} | {batch} | {r['tokens_per_s']:.1f} | {r['bound_tokens_per_s']:.0f} "
              f"| {r['pct_of_bound']:.0f}% | {r['ms_per_step']:.1f} | {fmt(base_torch and base_torch['tokens_per_s'], '{:.1f}')} "
              f"| {fmt(llama, '{:.1f}')} | {fmt(llama and r['tokens_per_s'] / llama, '{:.2f}x')} "
              f"| {fmt(ratio, '{:.0%}')} | {fmt(r.get('foreign_cpu_pct'), '{:.0f}%')} |")


def prefill_table(ours, torch_rows, llama_rows):
    print("| weights | prompt tokens | tinkerd tok/s | time to first token ms | GFLOP/s | PyTorch tok/s "
          "| PyTorch TTFT ms | llama.cpp tok/s | vs llama.cpp | others' CPU |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for key in sorted(k for k in set(ours) | set(torch_rows) | set(llama_rows) if k[1] == "prefill"):
        r, t = ours.get(key), torch_rows.get(key)
        llama = llama_rows.get(key) and llama_rows[key]["tokens_per_s"]
        tps = r and r["tokens_per_s"]
        print(f"| {key[0]} | {key[2]} | {fmt(tps)} | {fmt(r and r['ttft_ms'])} | {fmt(r and r.get('gflops'))} "
              f"| {fmt(t and t['tokens_per_s'])} | {fmt(t and t['ttft_ms'])} | {fmt(llama)} "
              f"| {fmt(tps and llama and tps / llama, '{:.2f}x')} | {fmt(r and r.get('foreign_cpu_pct'), '{:.0f}%')} |")


def llama_notes(rows, llama_rows):
    """What the llama.cpp column is: tools, build, batch-1 tg128 and the noise of its runs."""
    if not llama_rows:
        print("llama.cpp: no llamacpp rows in this file (bench/llamacpp_bench.py did not run), column empty")
        return
    builds = sorted({r["build"] for r in rows if r.get("impl") == "llamacpp" and r.get("build")})
    tg = {r["dtype"]: r for r in rows if r.get("impl") == "llamacpp" and r.get("kind") == "tg"}
    worst = max((r.get("foreign_cpu_pct", 0) for r in rows if r.get("impl") == "llamacpp"), default=0)
    print(f"llama.cpp column: measured in this run on the same weights (bf16 / f32 GGUF), build "
          f"{', '.join(builds) or '?'}, 2 threads; decode = llama-batched-bench aggregate S_TG (same prompt and "
          f"new-token counts as tinkerd's rows), prefill = llama-bench ppN; batch 1 as llama-bench tgN: "
          + ", ".join(f"{d} tg{r.get('max_tokens', '?')} {r['tokens_per_s']:.1f} tok/s" for d, r in sorted(tg.items()))
          + f"; others used up to {worst:.0f}% of the CPU during its runs")
    for r in rows:
        if r.get("impl") == "llamacpp" and r.get("kind") == "text_check":
            verdict = ("identical" if r["identical"] else
                       f"agree on the first {r['agree_chars']} characters ({r['agree_words']} words)")
            print(f"greedy text, {r['dtype']}, {r['max_tokens']} tokens after {r['prompt']!r}: llama.cpp and tinkerd "
                  f"{verdict}; tinkerd {r['tinkerd']!r}, llama.cpp {r['llamacpp']!r}")


def main():
    rows, notes = load(sys.argv[1])
    bw = [r["bw_gbs"] for r in rows if "bw_gbs" in r]
    if bw:
        print(f"read bandwidth measured in this run (2 threads, best of 3 per measurement): "
              f"{min(bw):.1f}-{max(bw):.1f} GB/s; each decode row's bound uses the value measured right before it "
              f"(weights + one fp32 LoRA copy per distinct adapter in the batch, KV cache not counted)")
    ours, torch_rows, llama_rows = index(rows, "tinkerd"), index(rows, "pytorch"), index(rows, "llamacpp")
    print()
    decode_table(ours, torch_rows, llama_rows)
    print()
    prefill_table(ours, torch_rows, llama_rows)
    llama_notes(rows, llama_rows)
    for note in notes:
        print(f"PyTorch cross-check, {note}")
    print("others' CPU: share of the cores used by other processes during tinkerd's timed runs; "
          "rows above a few % are contaminated (llamacpp-anchor.md kept runs at <= 1-2 %)")


if __name__ == "__main__":
    main()
