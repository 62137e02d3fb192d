// Profiles one engine training step (forward_backward + optim_step) with libtorch's legacy profiler and
// prints the time per op kind (self time, top 25). Usage: profile_step MODEL_DIR auto|bf16|fp32 [equal|mixed]
#include <algorithm>
#include <cstdio>
#include <string>

#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include "bench_batches.h"
#include "engine/engine.h"

int main(int argc, char ** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: profile_step MODEL_DIR auto|bf16|fp32 [equal|mixed]\n");
        return 2;
    }
    tinkerd::engine::EngineOptions options;
    options.n_threads = 2;
    const std::string dtype = argv[2];
    options.dtype = dtype == "bf16"   ? tinkerd::engine::ComputeDType::BF16
                    : dtype == "fp32" ? tinkerd::engine::ComputeDType::FP32
                                      : tinkerd::engine::ComputeDType::AUTO;
    auto engine = tinkerd::engine::Engine::load(argv[1], options).value();
    if (!tinkerd::bench::choose_bench_kernels(engine->config(), options.n_threads)) {
        return 2;
    }
    auto id = engine->create_adapter({32, 32.0, true, true, true, 1}).value();
    const bool mixed = argc > 3 && std::string(argv[3]) == "mixed";
    const auto & lengths = mixed ? tinkerd::bench::MIXED_LENGTHS : tinkerd::bench::EQUAL_LENGTHS;
    auto input = tinkerd::bench::make_batch(lengths, engine->config().vocab_size, id, 1);
    (void)engine->forward_backward({input}, true);  // warm-up
    const std::string trace = "/tmp/tinkerd_profile.json";
    {
        torch::autograd::profiler::RecordProfile guard(trace);
        (void)engine->forward_backward({input}, true);
        (void)engine->optim_step(id, {});
    }
    std::fprintf(stderr, "trace written to %s; summarise with bench/summarise_profile.py\n", trace.c_str());
    return 0;
}
