#!/usr/bin/python3
# Gloo all-reduce cost of one step's LoRA gradients (issue 15 §5): rank-32 adapters on every target of
# SmolLM2-135M, Qwen3-8B and Qwen3-30B-A3B (parameter counts per rank from the cookbook's table, which
# lora_layout_test pins to our layout), summed in fp32 over W processes on loopback with torch's
# ProcessGroupGloo (the backend tinkerd's DataParallelGroup uses). Prints bytes and seconds per step.
# Usage: .venv/bin/python bench/allreduce_bench.py [--world 2] [--repeats 3] [--models smollm2,qwen3-8b]
import argparse
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

RANK = 32
PER_RANK_PARAMS = {  # mlp + attn + unembed LoRA parameters per unit of rank
    # 30 layers x (q 576+576, k/v 576+192, o 576+576, gate/up 576+1536, down 1536+576) + lm_head 576+49152
    "smollm2-135m": 30 * 10_176 + 49_728,
    "qwen3-8b": 1_769_472 + 958_464 + 156_032,
    "qwen3-30b-a3b": 14_450_688 + 835_584 + 153_984,
}


def worker(rank, world, store_path, models, repeats, out):
    dist.init_process_group("gloo", init_method="file://" + store_path, rank=rank, world_size=world)
    for name in models:
        buf = torch.ones(PER_RANK_PARAMS[name] * RANK, dtype=torch.float32)
        dist.all_reduce(buf)  # warm-up
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(repeats):
            dist.all_reduce(buf)
        seconds = (time.perf_counter() - t0) / repeats
        if rank == 0:
            out[name] = (buf.numel() * 4, seconds)
        del buf
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--models", default=",".join(PER_RANK_PARAMS))
    args = ap.parse_args()
    models = args.models.split(",")
    with tempfile.TemporaryDirectory() as d, mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(worker, args=(args.world, os.path.join(d, "store"), models, args.repeats, out), nprocs=args.world)
        for name in models:
            nbytes, seconds = out[name]
            print("%-14s rank %d: %8.1f MiB per step, all-reduce over %d processes: %.3f s (%.2f GB/s algorithmic)"
                  % (name, RANK, nbytes / 2**20, args.world, seconds, nbytes / seconds / 1e9))


if __name__ == "__main__":
    main()
