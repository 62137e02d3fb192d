// The benchmark batches shared by train_bench and profile_step: random token ids (seeded) with
// cross_entropy targets, one datum per sequence length; and the matmul path the benchmarks run
// (TINKERD_MATMUL = auto, exact or bf16, as the server's --matmul).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <vector>

#include "engine/engine.h"
#include "engine/kernel_choice.h"

namespace tinkerd::bench {

// Applies TINKERD_MATMUL (default auto: timed now, no cache) and says on stderr what was chosen.
inline std::optional<engine::KernelChoice> choose_bench_kernels(const model::ModelConfig & config, int threads) {
    const char * word = std::getenv("TINKERD_MATMUL");
    const auto mode = engine::parse_matmul_mode(word != nullptr ? word : "auto");
    if (!mode) {
        std::fprintf(stderr, "bench: TINKERD_MATMUL must be auto, exact or bf16\n");
        return std::nullopt;
    }
    auto choice = engine::choose_kernels(*mode, engine::matmul_shapes_of(config), threads, "");
    std::fprintf(stderr, "bench: %s\n", choice.summary().c_str());
    return choice;
}

inline const std::vector<int64_t> EQUAL_LENGTHS = {256, 256, 256, 256};
inline const std::vector<int64_t> MIXED_LENGTHS = {64, 256, 256, 256, 256, 256, 256, 1024};

inline engine::ForwardBackwardInput make_batch(const std::vector<int64_t> & lengths, int64_t vocab,
                                               engine::AdapterId adapter, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int64_t> token(3, vocab - 1);
    engine::ForwardBackwardInput input;
    input.adapter = adapter;
    for (int64_t len : lengths) {
        engine::Datum d;
        std::vector<int64_t> targets(len);
        for (int64_t i = 0; i < len; ++i) {
            d.tokens.push_back(token(rng));
            targets[i] = token(rng);
        }
        d.loss_inputs["target_tokens"] = engine::make_host_tensor_i64({len}, targets);
        input.datums.push_back(std::move(d));
    }
    return input;
}

}  // namespace tinkerd::bench
