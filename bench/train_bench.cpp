// Training benchmark: times the engine's forward and forward_backward + optim_step (LoRA rank 32 on
// every target, cross_entropy) on an equal-length and a mixed-length batch, and measures the machine's
// fp32/bf16 matmul ceilings in the same process. Prints a table to stderr and JSON lines to stdout.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <sys/resource.h>
#include <vector>

#include <torch/torch.h>

#include "bench_batches.h"
#include "engine/engine.h"

namespace {

using Clock = std::chrono::steady_clock;
using tinkerd::engine::Engine;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// GFLOP/s of x[M,K] · W[N,K]ᵀ in the given dtype (median of calls over at least 0.5 s).
double matmul_gflops(int64_t m, int64_t k, int64_t n, torch::ScalarType dtype) {
    torch::Tensor x = torch::randn({m, k}).to(dtype);
    torch::Tensor w = torch::randn({n, k}).to(dtype);
    torch::matmul(x, w.t());  // warm-up
    std::vector<double> times;
    auto start = Clock::now();
    while (times.size() < 5 || seconds_since(start) < 0.5) {
        auto t0 = Clock::now();
        torch::Tensor y = torch::matmul(x, w.t());
        times.push_back(seconds_since(t0));
    }
    return 2.0 * m * k * n / median(times) / 1e9;
}

// FLOPs of one forward over sequences of the given lengths (real tokens only; attention as computed:
// the full L×L square per sequence), split into the parts the backward repeats differently.
struct FlopCount {
    double base = 0, lm_head = 0, lora = 0, attention = 0;
    double forward() const { return base + lm_head + lora + attention; }
    // backward with frozen base: dX through base and lm_head, dX + dW for LoRA, 2× attention.
    double train() const { return forward() + base + lm_head + 2 * lora + 2 * attention; }
};

FlopCount count_flops(const tinkerd::model::ModelConfig & c, const std::vector<int64_t> & lengths, int64_t rank) {
    const double C = c.hidden_size, F = c.intermediate_size, q = c.n_heads * c.head_dim, kv = c.n_kv_heads * c.head_dim,
                 V = c.vocab_size, L = c.n_layers;
    const double linear_params = C * q + 2 * C * kv + q * C + 3 * C * F;
    const double lora_params = rank * ((C + q) + 2 * (C + kv) + (q + C) + 2 * (C + F) + (F + C) + (C + V));
    FlopCount f;
    for (int64_t len : lengths) {
        f.base += 2.0 * linear_params * L * len;
        f.lm_head += 2.0 * C * V * len;
        f.lora += 2.0 * lora_params * L * len - 2.0 * rank * (C + V) * (L - 1) * len;  // lm_head LoRA once
        f.attention += 2.0 * 2.0 * len * len * q * L;
    }
    return f;
}

struct Timing {
    double fwd_s = 0, step_s = 0, optim_s = 0;
};

Timing time_batch(Engine & engine, const tinkerd::engine::ForwardBackwardInput & input, int steps) {
    Timing t;
    std::vector<double> fwd, step, optim;
    tinkerd::engine::AdamParams adam;
    for (int i = 0; i <= steps; ++i) {  // iteration 0 warms up
        auto t0 = Clock::now();
        auto r = engine.forward_backward({input}, false);
        const double f = seconds_since(t0);
        t0 = Clock::now();
        auto rb = engine.forward_backward({input}, true);
        auto t1 = Clock::now();
        auto o = engine.optim_step(input.adapter, adam);
        const double s = seconds_since(t0), os = seconds_since(t1);
        if (!r[0].ok() || !rb[0].ok() || !o.ok()) {
            std::fprintf(stderr, "bench: engine call failed\n");
            std::exit(1);
        }
        if (i > 0) {
            fwd.push_back(f);
            step.push_back(s);
            optim.push_back(os);
        }
    }
    return {median(fwd), median(step), median(optim)};
}

double peak_rss_mb() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_maxrss / 1024.0;
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: train_bench MODEL_DIR auto|bf16|fp32 [STEPS] [THREADS] [equal|mixed|both]\n");
        return 2;
    }
    const std::string model_dir = argv[1], dtype = argv[2];
    const int steps = argc > 3 ? std::atoi(argv[3]) : 3;
    const int threads = argc > 4 ? std::atoi(argv[4]) : 2;
    const std::string only = argc > 5 ? argv[5] : "both";  // which batches to time (both: equal, then mixed)
    tinkerd::engine::EngineOptions options;
    options.n_threads = threads;
    options.dtype = dtype == "bf16"   ? tinkerd::engine::ComputeDType::BF16
                    : dtype == "fp32" ? tinkerd::engine::ComputeDType::FP32
                                      : tinkerd::engine::ComputeDType::AUTO;
    auto engine = Engine::load(model_dir, options);
    if (!engine.ok()) {
        std::fprintf(stderr, "bench: %s\n", engine.error().message.c_str());
        return 1;
    }
    const auto & config = (*engine)->config();
    const auto choice = tinkerd::bench::choose_bench_kernels(config, threads);
    if (!choice) {
        return 2;
    }
    std::printf("{\"impl\":\"kernel_choice\",\"inputs\":\"%s\",\"kernel\":\"%s\",\"reason\":\"%s\"}\n",
                choice->inputs.c_str(), choice->kernel.c_str(), choice->reason.c_str());
    const auto adapter = (*engine)->create_adapter({32, 32.0, true, true, true, 1}).value();
    const std::pair<const char *, std::vector<int64_t>> batches[] = {{"equal", tinkerd::bench::EQUAL_LENGTHS},
                                                                     {"mixed", tinkerd::bench::MIXED_LENGTHS}};
    for (const auto & [name, lengths] : batches) {
        if (only != "both" && only != name) {
            continue;
        }
        const auto input = tinkerd::bench::make_batch(lengths, config.vocab_size, adapter, 42);
        // The ceilings are measured next to each timing: this shared VM's speed drifts by 2-4x over minutes.
        const double peak_fp32 = matmul_gflops(4096, 576, 1536, torch::kFloat32);
        const double peak_bf16 = matmul_gflops(4096, 576, 1536, torch::kBFloat16);
        std::printf("{\"impl\":\"gemm\",\"threads\":%d,\"fp32_gflops\":%.1f,\"bf16_gflops\":%.1f}\n", threads,
                    peak_fp32, peak_bf16);
        const Timing t = time_batch(**engine, input, steps);
        const FlopCount flops = count_flops(config, lengths, 32);
        int64_t tokens = 0;
        for (int64_t len : lengths)
            tokens += len;
        const double train_gflops = flops.train() / t.step_s / 1e9;
        std::printf(
            "{\"impl\":\"tinkerd\",\"mode\":\"%s\",\"batch\":\"%s\",\"real_tokens\":%lld,\"fwd_s\":%.4f,"
            "\"step_s\":%.4f,\"optim_s\":%.4f,\"tokens_per_s\":%.1f,\"fwd_tokens_per_s\":%.1f,"
            "\"train_gflops\":%.1f,\"fwd_gflops\":%.1f,\"train_gflop\":%.1f,\"bf16_peak_frac\":%.3f,"
            "\"bf16_gflops\":%.1f,\"peak_rss_mb\":%.0f,\"matmul\":\"%s\"}\n",
            (*engine)->compute_dtype_name().c_str(), name, static_cast<long long>(tokens), t.fwd_s, t.step_s, t.optim_s,
            tokens / t.step_s, tokens / t.fwd_s, train_gflops, flops.forward() / t.fwd_s / 1e9, flops.train() / 1e9,
            train_gflops / peak_bf16, peak_bf16, peak_rss_mb(), choice->inputs.c_str());
        std::fflush(stdout);
    }
    return 0;
}
