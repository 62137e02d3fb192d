// Micro-benchmark of optim_step's AdamW (engine/optimizer.h) on a rank-32 LoRA adapter of a real model's
// shape (default SmolLM2-135M: every attention, MLP and lm_head target): median ms of adamw_step over
// repeated steps after an accumulated gradient and after a torch-written one, the bytes it moves (the norm pass
// reads g; the writing pass reads p, g, m, v and writes p, m, v; a checking pass, when the last step's maxima
// cannot skip it, reads p, g, m, v once more) as GB/s,
// next to this machine's read bandwidth, and the process's peak RSS against the adapter's own size.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/resource.h>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "engine/grad_accumulate.h"
#include "engine/lora.h"
#include "engine/optimizer.h"
#include "model/model_config.h"
#include "read_bandwidth.h"

namespace {

using tinkerd::engine::Adapter;

// SmolLM2-135M's shape (the fields of HuggingFaceTB/SmolLM2-135M-Instruct's config.json that size an adapter).
tinkerd::model::ModelConfig smollm2_135m() {
    return tinkerd::model::parse_model_config(R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
        "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64})")
        .value();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Median ms of `steps` adamw_steps (after two warm-up steps), each on a fresh N(0, 1e-3) gradient: accumulated
// as forward_backward does (accumulate_gradients: optim_step reuses its Σ g², no norm pass) or, `accumulated`
// false, written by torch ops (the norm pass runs, as after a data-parallel all-reduce). Prints one table row.
void time_steps(Adapter & a, int steps, int threads, bool accumulated) {
    torch::Tensor scratch;
    torch::Tensor fresh = torch::empty_like(a.flat_grads);  // [N] the new gradient, laid out as the adapter's
    std::vector<torch::Tensor> views;
    int64_t offset = 0;
    for (const torch::Tensor & g : a.grads) {
        views.push_back(fresh.narrow(0, offset, g.numel()).view(g.sizes()));
        offset += g.numel();
    }
    std::vector<double> ms;
    int64_t checked_before = 0;
    for (int i = 0; i < steps + 2; ++i) {
        fresh.normal_(0.0, 1e-3);  // not timed
        if (accumulated) {
            tinkerd::engine::accumulate_gradients(a, views, 0);
        } else {
            a.flat_grads.copy_(fresh);
        }
        const auto start = std::chrono::steady_clock::now();
        if (!tinkerd::engine::adamw_step(a, {}, scratch).ok()) {
            std::fprintf(stderr, "optim_bench: a step was refused\n");
            std::exit(1);
        }
        const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        if (i >= 2) {  // two warm-up steps: the moments' first writes
            ms.push_back(t);
        } else {
            checked_before = a.checked_steps;
        }
    }
    const double checked = static_cast<double>(a.checked_steps - checked_before) / steps;  // share of timed steps
    const double n = static_cast<double>(a.flat_params.numel());
    // norm pass (reads g) unless accumulated, checking pass (reads p, g, m, v), writing pass (reads p, g, m, v;
    // writes p, m, v; the gradient is left consumed, not rewritten)
    const double bytes = n * 4 * ((accumulated ? 0 : 1) + 4 * checked + 4 + 3);
    const double med = median(ms);
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    std::printf("| %s | %.0f | %d | %.2f | %.1f | %.1f | %.0f | %.0f | %.0f | %.0f %% |\n",
                accumulated ? "accumulated (norm recorded)" : "written by torch (norm pass)", n, threads, med,
                bytes / med / 1e6, tinkerd::bench::ReadBandwidth(size_t{1} << 30, threads).measure(3), n * 16 / 1e6,
                scratch.defined() ? scratch.numel() * 4 / 1e6 : 0.0, usage.ru_maxrss / 1024.0, 100 * checked);
}

}  // namespace

// optim_bench [STEPS] [THREADS] [RANK]
int main(int argc, char ** argv) {
    const int steps = argc > 1 ? std::atoi(argv[1]) : 20;
    const int threads = argc > 2 ? std::atoi(argv[2]) : 2;
    tinkerd::engine::LoraSpec spec;
    spec.rank = argc > 3 ? std::atoi(argv[3]) : 32;
    at::set_num_threads(threads);
    torch::NoGradGuard no_grad;
    Adapter a = tinkerd::engine::make_adapter(1, spec, smollm2_135m(), torch::kFloat32, torch::kCPU, 7);
    std::printf(
        "| gradient | params | threads | optim_step ms (median of %d) | GB/s moved | read bandwidth GB/s | adapter "
        "state MB | scratch MB | peak RSS MB | steps checked |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        steps);
    for (bool accumulated : {true, false, true}) {
        time_steps(a, steps, threads, accumulated);
    }
    return 0;
}
