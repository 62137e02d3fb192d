#!/usr/bin/env python3
"""The tinker-cookbook's own recipes, unchanged, against a real tinkerd, offline.

    tests/cookbook/run.py --build BUILD_DIR [--model smollm2|tiny-qwen3] sl|rl|sl_loop|rl_loop

sl: `python -m tinker_cookbook.recipes.chat_sl.train` (the cookbook's supervised loop,
    tinker_cookbook.supervised.train) on conversations.jsonl (20 local conversations): the train NLL
    falls from the first epoch to the last, checkpoints (state + sampler) are saved, and the run and its
    checkpoints show in the REST listing.
rl: `python -m tinker_cookbook.recipes.math_rl.train env=arithmetic` (the cookbook's RL loop,
    tinker_cookbook.rl.train, on its synthetic "What is x + y?" reward): every iteration completes,
    rewards are logged, the sampler/trainer logprob KL stays ~0 (on-policy), the final checkpoint saves.
sl_loop, rl_loop: recipes/sl_loop.py and recipes/rl_loop.py themselves (see ALIASES below for why the
    model is served under a name the cookbook's model_info knows, and the data sets are cache entries).

The tokenizer comes from a Hugging Face hub cache entry in a temporary HF_HOME (scripts/hf-cache-entry.py)
with HF_HUB_OFFLINE=1. The default model is the one tinkerd serves by default
(HuggingFaceTB/SmolLM2-135M-Instruct, a GGUF); tiny-qwen3 (random weights, the real Qwen3 tokenizer)
is a fast stand-in. Exit 77 (skip) when the model files are absent.
"""
import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cookbook_env import HERE, RENDERER, Env, Failed, Skip, SKIP, check, read_jsonl  # noqa: E402


def scenario_sl(env):
    log_path = os.path.join(env.tmp, "sl-log")
    steps_per_epoch, epochs = 5, 3  # 20 conversations, batch 4
    env.run_recipe("tinker_cookbook.recipes.chat_sl.train", [
        ("base_url", env.base_url), ("model_name", env.name), ("renderer_name", RENDERER),
        ("dataset", os.path.join(HERE, "conversations.jsonl")), ("batch_size", 4),
        ("num_epochs", epochs), ("learning_rate", 1e-3), ("lora_rank", 8), ("max_length", 512),
        ("save_every", steps_per_epoch), ("eval_every", 0), ("infrequent_eval_every", 0),
        ("log_path", log_path), ("behavior_if_log_dir_exists", "delete")], timeout=600)

    rows = [r for r in read_jsonl(os.path.join(log_path, "metrics.jsonl")) if "train_mean_nll" in r]
    nll = [r["train_mean_nll"] for r in rows]
    print("  train_mean_nll per step: " + " ".join("%.3f" % x for x in nll))
    check(len(nll) == steps_per_epoch * epochs, "expected %d steps, got %d" % (steps_per_epoch * epochs, len(nll)))
    check(all(math.isfinite(x) and x > 0 for x in nll), "non-finite or non-positive NLL: %s" % nll)
    first = sum(nll[:steps_per_epoch]) / steps_per_epoch
    last = sum(nll[-steps_per_epoch:]) / steps_per_epoch
    print("  mean NLL: epoch 1 %.3f -> epoch %d %.3f" % (first, epochs, last))
    check(last < 0.95 * first, "train NLL did not fall: epoch 1 %.3f, epoch %d %.3f" % (first, epochs, last))

    ckpts = read_jsonl(os.path.join(log_path, "checkpoints.jsonl"))
    print("  checkpoints.jsonl: %s" % [(c.get("name"), c.get("state_path"), c.get("sampler_path"))
                                       for c in ckpts])
    final = [c for c in ckpts if c.get("name") == "final"]
    check(final and final[-1].get("state_path") and final[-1].get("sampler_path"),
          "no final checkpoint with state and sampler paths: %s" % ckpts)
    check(any(c.get("name") != "final" and c.get("state_path") for c in ckpts),
          "no periodic checkpoint: %s" % ckpts)

    # The REST listing (the official SDK's RestClient) shows the run and its checkpoints.
    state_path = final[-1]["state_path"]
    run_id = state_path[len("tinker://"):].split("/")[0]
    rest = env.rest()
    runs = rest.list_training_runs().result()
    listed = {r.training_run_id: r for r in runs.training_runs}
    check(run_id in listed, "run %s not in list_training_runs: %s" % (run_id, list(listed)))
    run = listed[run_id]
    check(run.base_model == env.name, "run base_model %r, want %r" % (run.base_model, env.name))
    check(run.lora_rank == 8, "run lora_rank %r, want 8" % run.lora_rank)
    check((run.user_metadata or {}).get("renderer_name") == RENDERER,
          "run user_metadata %r lacks renderer_name=%s" % (run.user_metadata, RENDERER))
    paths = {c.tinker_path for c in rest.list_checkpoints(run_id).result().checkpoints}
    for c in ckpts:
        for key in ("state_path", "sampler_path"):
            if c.get(key):
                check(c[key] in paths, "%s %s not in list_checkpoints: %s" % (key, c[key], sorted(paths)))
    print("  REST: run %s listed (base_model %s, rank %d, renderer %s), %d checkpoints" % (
        run_id, run.base_model, run.lora_rank, run.user_metadata.get("renderer_name"), len(paths)))


def scenario_rl(env):
    log_path = os.path.join(env.tmp, "rl-log")
    steps = 3
    env.run_recipe("tinker_cookbook.recipes.math_rl.train", [
        ("base_url", env.base_url), ("model_name", env.name), ("renderer_name", RENDERER),
        ("env", "arithmetic"), ("group_size", 4), ("groups_per_batch", 4), ("max_tokens", 5),
        ("learning_rate", 1e-4), ("lora_rank", 8), ("max_steps", steps), ("eval_every", 0),
        ("save_every", 0), ("log_path", log_path), ("behavior_if_log_dir_exists", "delete")],
        timeout=600)

    rows = [r for r in read_jsonl(os.path.join(log_path, "metrics.jsonl")) if "env/all/reward/total" in r]
    check(len(rows) == steps, "expected %d logged iterations, got %d" % (steps, len(rows)))
    for r in rows:
        reward, kl = r["env/all/reward/total"], r.get("optim/kl_sample_train_v1")
        print("  step %s: reward %.3f correct %.3f format %.3f kl_sample_train_v1 %s frac_mixed %s" % (
            r.get("step"), reward, r.get("env/all/correct", float("nan")),
            r.get("env/all/format", float("nan")), kl, r.get("env/all/by_group/frac_mixed")))
        # arithmetic's reward is correct + 0.1 * (format - 1): within [-0.1, 1].
        check(math.isfinite(reward) and -0.1 - 1e-9 <= reward <= 1 + 1e-9, "reward out of range: %r" % reward)
        if kl is not None:  # absent when every group had equal rewards (nothing trained)
            check(abs(kl) < 0.01, "sampler/trainer KL %r: sampling and training logprobs disagree" % kl)
    ckpts = read_jsonl(os.path.join(log_path, "checkpoints.jsonl"))
    final = [c for c in ckpts if c.get("name") == "final"]
    check(final and final[-1].get("sampler_path"), "no final checkpoint: %s" % ckpts)


# recipes/sl_loop.py and recipes/rl_loop.py hard-code two things no local run can change without
# editing them: the renderer comes from model_info.get_recommended_renderer_name(model_name), which
# only knows the hosted service's model names (HuggingFaceTB/... raises ConfigurationError: unknown
# organization), and the data from datasets.load_dataset("HuggingFaceH4/no_robots") /
# ("openai/gsm8k", "main"). They run unchanged when the model is served under a name model_info knows
# (ALIASES: one whose recommended renderer writes the model's own chat format) and the data sets are
# in the `datasets` cache (here: our conversations as "no_robots", toy sums as "gsm8k").
ALIASES = {"smollm2": "Qwen/Qwen3-4B-Instruct-2507",  # qwen3_instruct: ChatML, SmolLM2's format
           "tiny-qwen3": "Qwen/Qwen3-8B"}  # qwen3: the Qwen3 tokenizer's own format


def scenario_sl_loop(env):
    env.datasets_cache_entry("HuggingFaceH4/no_robots", "default",
                             {"train": read_jsonl(os.path.join(HERE, "conversations.jsonl"))})
    log_path = os.path.join(env.tmp, "sl-loop-log")
    env.run_recipe("tinker_cookbook.recipes.sl_loop", [
        ("base_url", env.base_url), ("model_name", env.name), ("batch_size", 2),
        ("learning_rate", 2e-3), ("lora_rank", 8), ("max_length", 512), ("save_every", 5),
        ("log_path", log_path)], timeout=600)
    nll = [r["train_mean_nll"] for r in read_jsonl(os.path.join(log_path, "metrics.jsonl"))
           if "train_mean_nll" in r]
    print("  train_mean_nll per step: " + " ".join("%.3f" % x for x in nll))
    check(len(nll) == 10, "expected 10 steps, got %d" % len(nll))
    first, last = sum(nll[:3]) / 3, sum(nll[-3:]) / 3
    print("  mean NLL: steps 0-2 %.3f -> steps 7-9 %.3f" % (first, last))
    check(last < first, "train NLL did not fall: %.3f -> %.3f" % (first, last))
    ckpts = read_jsonl(os.path.join(log_path, "checkpoints.jsonl"))
    check([c for c in ckpts if c.get("name") == "000005" and c.get("state_path")], "no step-5 state: %s" % ckpts)
    check([c for c in ckpts if c.get("name") == "final" and c.get("sampler_path")], "no final: %s" % ckpts)


def scenario_rl_loop(env):
    rows = [{"question": "What is %d + %d?" % (a, b), "answer": "%d + %d = %d\n#### %d" % (a, b, a + b, a + b)}
            for a, b in ((2, 3), (4, 4), (1, 6), (5, 2), (3, 3), (7, 1), (2, 2), (6, 3))]
    env.datasets_cache_entry("openai/gsm8k", "main", {"train": rows, "test": rows[:2]})
    log_path = os.path.join(env.tmp, "rl-loop-log")
    env.run_recipe("tinker_cookbook.recipes.rl_loop", [
        ("base_url", env.base_url), ("model_name", env.name), ("batch_size", 4), ("group_size", 4),
        ("max_tokens", 24), ("learning_rate", 1e-4), ("lora_rank", 8), ("log_path", log_path)], timeout=600)
    metrics = [r for r in read_jsonl(os.path.join(log_path, "metrics.jsonl")) if "reward/total" in r]
    print("  reward/total per batch: %s" % [r["reward/total"] for r in metrics])
    check(len(metrics) == 2, "expected 2 batches, got %d" % len(metrics))
    check(all(0.0 <= r["reward/total"] <= 1.0 for r in metrics), "reward out of range: %s" % metrics)
    ckpts = read_jsonl(os.path.join(log_path, "checkpoints.jsonl"))
    check([c for c in ckpts if c.get("name") == "final" and c.get("sampler_path")], "no final: %s" % ckpts)


SCENARIOS = {"sl": scenario_sl, "rl": scenario_rl, "sl_loop": scenario_sl_loop, "rl_loop": scenario_rl_loop}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--model", default="smollm2", choices=("smollm2", "tiny-qwen3"))
    ap.add_argument("scenario", choices=sorted(SCENARIOS))
    args = ap.parse_args()
    t0 = time.monotonic()
    try:
        alias = ALIASES[args.model] if args.scenario.endswith("_loop") else None
        with Env(args.build, args.model, alias) as env:
            SCENARIOS[args.scenario](env)
    except Skip as e:
        print("SKIP cookbook %s (%s): %s" % (args.scenario, args.model, e))
        return SKIP
    except Failed as e:
        print("FAIL cookbook %s (%s): %s" % (args.scenario, args.model, e))
        return 1
    print("PASS cookbook %s (%s) in %.1f s" % (args.scenario, args.model, time.monotonic() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
