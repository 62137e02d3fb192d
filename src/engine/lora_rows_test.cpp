// Sampling's row-wise LoRA (lora_rows) against the segmented matmul path it replaces: several adapters,
// base-model rows and odd sizes in one batch, every target including the lm_head, ranks 5, 32 and 300; and a row's
// delta the same bits whichever rows share its group.
#include "engine/lora_rows.h"

#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "engine/lora.h"

namespace tinkerd::testing {
namespace {

using engine::Adapter;
using engine::LoraTarget;
using engine::RowSegment;

model::ModelConfig tiny_config() {
    model::ModelConfig c;
    c.vocab_size = 37;
    c.hidden_size = 24;
    c.intermediate_size = 41;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 6;
    return c;
}

// An adapter whose B matrices are random too (a fresh adapter's B is zero: its delta would be 0).
Adapter random_adapter(engine::AdapterId id, int64_t rank, const model::ModelConfig & c, uint64_t seed) {
    engine::LoraSpec spec;
    spec.rank = rank;
    spec.alpha = 3.0 * static_cast<double>(rank);
    spec.seed = seed;
    Adapter a = engine::make_adapter(id, spec, c, torch::kFloat32, torch::kCPU, seed);
    torch::NoGradGuard no_grad;
    torch::manual_seed(static_cast<uint64_t>(seed));
    for (torch::Tensor & p : a.params) {
        p.copy_(torch::randn_like(p) * 0.3);
    }
    return a;
}

// A vocabulary of 600 splits the lm_head's B·u across several blocks of outputs (and threads).
TEST(LoraRows, EqualsTheSegmentedMatmulPathForEveryTarget) {
    model::ModelConfig c = tiny_config();
    for (const auto & [vocab, rank] :
         std::vector<std::pair<int64_t, int64_t>>{{37, 5}, {37, 32}, {37, 300}, {600, 32}}) {
        c.vocab_size = vocab;  // rank 300: beyond any fixed-size buffer
        const Adapter a = random_adapter(1, rank, c, 11), b = random_adapter(2, rank, c, 12);
        // rows: 2 of a, 1 base, 3 of b (two adjacent segments of one adapter), 1 of a
        const std::vector<RowSegment> segments = {{0, 2, &a}, {2, 3, nullptr}, {3, 4, &b}, {4, 6, &b}, {6, 7, &a}};
        for (int t = 0; t <= static_cast<int>(LoraTarget::LM_HEAD); ++t) {
            const auto target = static_cast<LoraTarget>(t);
            if (t >= static_cast<int>(LoraTarget::EXPERT_GATE) && target != LoraTarget::LM_HEAD) {
                continue;  // expert factors are applied by the MoE block, never row-wise
            }
            const int64_t layer = target == LoraTarget::LM_HEAD ? -1 : 1;
            const auto shape = engine::projection_shape(c, target);
            SCOPED_TRACE(std::string(engine::lora_target_name(target)) + " rank " + std::to_string(rank) + " vocab " +
                         std::to_string(vocab));
            const torch::Tensor x = torch::randn({7, shape.in});
            const torch::Tensor y = torch::randn({7, shape.out});
            const torch::Tensor want = engine::add_lora(y.clone(), x, segments, layer, target);  // grad mode: matmuls
            torch::NoGradGuard no_grad;
            ASSERT_TRUE(engine::lora_rows_applicable(y, x, segments));
            torch::Tensor got = y.clone();
            engine::add_lora_rows(got, x, segments, layer, target);
            EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-5)) << (got - want).abs().max().item<double>();
            EXPECT_TRUE(torch::equal(got.narrow(0, 2, 1), y.narrow(0, 2, 1))) << "the base row is untouched";
        }
    }
}

// Rows of one adapter share each factor row's read in groups of up to 8; a row's delta is still bitwise what it
// gets alone (the fused decode step and the torch path may group rows differently): 11 rows of a (groups of 8
// and 3), one base row, 2 of b; every target, ranks 5 (one partial rank block) and 40 (two full, one partial).
TEST(LoraRows, ARowsDeltaIsTheSameBitsInAnyGroup) {
    const model::ModelConfig c = tiny_config();
    torch::NoGradGuard no_grad;
    for (int64_t rank : {5, 40}) {
        const Adapter a = random_adapter(1, rank, c, 31), b = random_adapter(2, rank, c, 32);
        const std::vector<RowSegment> segments = {{0, 11, &a}, {11, 12, nullptr}, {12, 14, &b}};
        for (int t = 0; t <= static_cast<int>(LoraTarget::DOWN); ++t) {
            const auto target = static_cast<LoraTarget>(t);
            SCOPED_TRACE(std::string(engine::lora_target_name(target)) + " rank " + std::to_string(rank));
            const auto shape = engine::projection_shape(c, target);
            const torch::Tensor x = torch::randn({14, shape.in}), y = torch::randn({14, shape.out});
            torch::Tensor together = y.clone();
            engine::add_lora_rows(together, x, segments, 0, target);
            for (int64_t r = 0; r < 14; ++r) {
                torch::Tensor alone = y.narrow(0, r, 1).clone();
                const Adapter * adapter = r < 11 ? &a : r < 12 ? nullptr : &b;
                engine::add_lora_rows(alone, x.narrow(0, r, 1).contiguous(), {{0, 1, adapter}}, 0, target);
                EXPECT_TRUE(torch::equal(alone, together.narrow(0, r, 1))) << "row " << r;
            }
        }
    }
}

TEST(LoraRows, NotUsedWithAutogradLongSegmentsOrOtherDtypes) {
    const model::ModelConfig c = tiny_config();
    const Adapter a = random_adapter(1, 4, c, 3);
    const torch::Tensor x = torch::randn({20, c.hidden_size}), y = torch::randn({20, c.hidden_size});
    EXPECT_FALSE(engine::lora_rows_applicable(y, x, {{0, 20, &a}})) << "autograd on";
    torch::NoGradGuard no_grad;
    EXPECT_FALSE(engine::lora_rows_applicable(y, x, {{0, 20, &a}})) << "a 20-row segment is a prompt";
    EXPECT_TRUE(engine::lora_rows_applicable(y, x, {{0, 10, &a}, {10, 20, &a}}));
    EXPECT_FALSE(engine::lora_rows_applicable(y.to(torch::kFloat64), x.to(torch::kFloat64), {{0, 1, &a}}));
}

}  // namespace
}  // namespace tinkerd::testing
