// run_decode_layers (decode_layers.h) against the torch path it replaces, on tiny wide bf16 llama, qwen3 (q/k
// norms) and qwen2 (biases) models: after prefills of different lengths, three decode steps of B sequences
// must give bit-identical hidden states and K/V cache rows with the fused path on and off, under each few-row
// product kernel (exact fp32 inputs, bf16-rounded inputs, the bf16 dot products where the CPU has them), with
// rows of several LoRA adapters (ranks 5 and 20, one without MLP factors) and base rows mixed, and with enough rows
// that the SiLU's sigmoid is split as torch splits it, on 1, 3 and the default number of threads. Bit equality
// holds on any CPU and team size: both paths run the same per-element code. Also: the fused path is really taken
// (not under the generic cap: no few-row kernels), and not for a prompt row or an adapter's 17-row segment.
#include "engine/decode_layers.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include "engine/kernels/matmul.h"
#include "engine/lora.h"
#include "engine/lora_rows.h"
#include "engine/prompt_logits.h"
#include "engine/transformer.h"
#include "sample_test_helpers.h"
#include "test_models.h"

namespace tinkerd::testing {
namespace {

using engine::Adapter;
using engine::CachedBatch;
using engine::SequenceCache;
using engine::Transformer;
namespace kernels = engine::kernels;

struct KernelSetting {
    const char * name;
    kernels::MatmulInputs inputs;
    bool bf16_dot;
};

const KernelSetting SETTINGS[] = {
    {"fp32 inputs", kernels::MatmulInputs::fp32, false},
    {"bf16 inputs", kernels::MatmulInputs::bf16, false},
    {"bf16 dot products", kernels::MatmulInputs::bf16, true},
};

// Restores the process-wide product and decode settings a test changes.
struct SettingsGuard {
    kernels::MatmulInputs inputs = kernels::matmul_inputs();
    bool dot = kernels::bf16_dot_enabled();
    int64_t blas_rows = kernels::blas_min_rows();
    int threads = at::get_num_threads();
    ~SettingsGuard() {
        at::set_num_threads(threads);
        kernels::set_matmul_inputs(inputs);
        kernels::set_bf16_dot_enabled(dot);
        kernels::set_blas_min_rows(blas_rows);
        engine::set_decode_layers_enabled(true);
    }
};

std::unique_ptr<Transformer> load_wide(TinyFamily family, const ScopedTempDir & dir) {
    write_model_dir(dir.path(), tiny_config_json(family, true),
                    tiny_model_tensors(family, model::DType::BF16, 7, true));
    auto t = Transformer::load(dir.path(), std::nullopt, torch::kCPU);
    if (!t.ok()) {
        throw std::runtime_error(t.error().message);
    }
    return std::move(t).value();
}

// An adapter of the model whose B factors are random too (a fresh adapter's B is zero: its delta would be 0).
Adapter random_adapter(const Transformer & t, engine::AdapterId id, int64_t rank, bool train_mlp, uint64_t seed) {
    engine::LoraSpec spec;
    spec.rank = rank;
    spec.alpha = 2.0 * static_cast<double>(rank);
    spec.train_mlp = train_mlp;
    spec.seed = seed;
    Adapter a = engine::make_adapter(id, spec, t.config(), torch::kFloat32, torch::kCPU, seed);
    torch::NoGradGuard no_grad;
    torch::manual_seed(seed);
    for (torch::Tensor & p : a.params) {
        p.copy_(torch::randn_like(p) * 0.05);
    }
    return a;
}

// One cached forward of `lengths[s]` new tokens per cache (rows of row_adapters[s] when given, one row each);
// returns the hidden states [T, C].
torch::Tensor forward(Transformer & t, std::vector<SequenceCache> & caches, const std::vector<int64_t> & lengths,
                      uint64_t seed, const std::vector<const Adapter *> & row_adapters = {}) {
    CachedBatch batch;
    std::vector<int64_t> tokens;
    for (size_t s = 0; s < caches.size(); ++s) {
        const auto part = random_tokens(lengths[s], seed + s, t.config().vocab_size);
        tokens.insert(tokens.end(), part.begin(), part.end());
        batch.lengths.push_back(lengths[s]);
        batch.caches.push_back(&caches[s]);
    }
    batch.tokens = torch::tensor(tokens, torch::kInt64);
    batch.segments = {{0, static_cast<int64_t>(tokens.size()), nullptr}};
    if (!row_adapters.empty()) {
        batch.segments = engine::segments_of(row_adapters);
    }
    torch::NoGradGuard no_grad;  // as sampling runs it (autograd on, adapters take the matmul path)
    return t.hidden_states_cached(batch);
}

// B sequences prefilled with 1 + (3·s mod 11) tokens each.
std::vector<SequenceCache> prefilled(Transformer & t, int64_t B) {
    std::vector<SequenceCache> caches;
    std::vector<int64_t> lengths;
    for (int64_t s = 0; s < B; ++s) {
        caches.push_back(t.make_cache());
        lengths.push_back(1 + (3 * s) % 11);
    }
    forward(t, caches, lengths, 100);
    return caches;
}

// Every attention layer's cached K and V of two caches of equal length, bitwise.
void expect_same_caches(const Transformer & t, const std::vector<SequenceCache> & a,
                        const std::vector<SequenceCache> & b) {
    for (size_t s = 0; s < a.size(); ++s) {
        ASSERT_EQ(a[s].length(), b[s].length());
        for (int64_t layer = 0; layer < t.config().n_layers; ++layer) {
            EXPECT_TRUE(torch::equal(a[s].keys(layer, a[s].length()), b[s].keys(layer, b[s].length())))
                << "sequence " << s << " layer " << layer << " keys";
            EXPECT_TRUE(torch::equal(a[s].values(layer, a[s].length()), b[s].values(layer, b[s].length())))
                << "sequence " << s << " layer " << layer << " values";
        }
    }
}

// Three decode steps of B sequences (rows of row_adapters when given) with the fused path and without: the same
// bits, and the path taken (except under the generic cap, which has no few-row kernels for it) when `fused`.
void expect_fused_equals_torch(Transformer & t, int64_t B, const std::vector<const Adapter *> & row_adapters = {},
                               bool expect_fused = true) {
    const int64_t taken = kernels::kernel_isa() == kernels::KernelIsa::generic || !expect_fused ? 0 : 1;
    std::vector<SequenceCache> fused = prefilled(t, B), plain;
    for (const SequenceCache & c : fused) {
        plain.push_back(c.fork());
    }
    const std::vector<int64_t> ones(static_cast<size_t>(B), 1);
    for (int step = 0; step < 3; ++step) {
        engine::set_decode_layers_enabled(true);
        const int64_t runs = engine::decode_layers_runs();
        const torch::Tensor h_fused = forward(t, fused, ones, 200 + step, row_adapters);  // [B, C]
        EXPECT_EQ(engine::decode_layers_runs(), runs + taken) << "the fused path was not taken";
        engine::set_decode_layers_enabled(false);
        const torch::Tensor h_plain = forward(t, plain, ones, 200 + step, row_adapters);
        EXPECT_EQ(engine::decode_layers_runs(), runs + taken);
        ASSERT_EQ(h_fused.sizes(), h_plain.sizes());
        EXPECT_TRUE(torch::equal(h_fused, h_plain))
            << "step " << step << ": max |diff| " << (h_fused - h_plain).abs().max().item<double>();
    }
    expect_same_caches(t, fused, plain);
}

class DecodeLayersTest : public ::testing::TestWithParam<TinyFamily> {};

TEST_P(DecodeLayersTest, BitIdenticalToTheTorchPathUnderEveryFewRowKernel) {
    SettingsGuard guard;
    ScopedTempDir dir;
    auto t = load_wide(GetParam(), dir);
    for (const KernelSetting & k : SETTINGS) {
        if (k.bf16_dot && !kernels::bf16_dot_available()) {
            std::cout << "[ NOTE ] " << k.name << ": not on this CPU (or capped), not run\n";
            continue;
        }
        SCOPED_TRACE(k.name);
        kernels::set_matmul_inputs(k.inputs);
        kernels::set_bf16_dot_enabled(k.bf16_dot);
        for (int64_t B : {1, 5}) {
            SCOPED_TRACE("B = " + std::to_string(B));
            expect_fused_equals_torch(*t, B);
        }
    }
}

// Rows of three adapters and of the base model in one step, under every few-row kernel (fp32 inputs rounded for the
// base product are read exact by the factors): ranks 5 (one partial rank block) and 20 (a full and a partial one),
// an adapter without MLP factors, a Qwen2 bias added before the delta. The delta really changes the states.
TEST_P(DecodeLayersTest, BitIdenticalWithAdapterRowsUnderEveryFewRowKernel) {
    SettingsGuard guard;
    ScopedTempDir dir;
    auto t = load_wide(GetParam(), dir);
    const Adapter a = random_adapter(*t, 1, 5, true, 11), b = random_adapter(*t, 2, 20, true, 12),
                  attn_only = random_adapter(*t, 3, 20, false, 13);
    const std::vector<const Adapter *> rows = {&a, &a, nullptr, &b, &attn_only, &a};
    for (const KernelSetting & k : SETTINGS) {
        if (k.bf16_dot && !kernels::bf16_dot_available()) {
            continue;
        }
        SCOPED_TRACE(k.name);
        kernels::set_matmul_inputs(k.inputs);
        kernels::set_bf16_dot_enabled(k.bf16_dot);
        expect_fused_equals_torch(*t, 6, rows);
        expect_fused_equals_torch(*t, 1, {&b});
    }
    std::vector<SequenceCache> caches = prefilled(*t, 2), copies;
    for (const SequenceCache & c : caches) {
        copies.push_back(c.fork());
    }
    const torch::Tensor base = forward(*t, caches, {1, 1}, 400), adapted = forward(*t, copies, {1, 1}, 400, {&a, &b});
    EXPECT_FALSE(torch::equal(base, adapted)) << "the adapters' deltas changed nothing";
}

// An adapter's segment of 17 rows takes matmuls in the torch path (add_lora_shared_input), so the fused path
// declines it; 16 rows still run fused, on 1 and 3 threads.
TEST_P(DecodeLayersTest, AdapterRowsBitIdenticalOnOneAndThreeThreadsAndLongSegmentsDeclined) {
    SettingsGuard guard;
    ScopedTempDir dir;
    auto t = load_wide(GetParam(), dir);
    const Adapter a = random_adapter(*t, 1, 32, true, 21);
    ASSERT_EQ(engine::LORA_ROWS_MAX_SEGMENT, 16);
    for (int threads : {1, 3}) {
        SCOPED_TRACE(std::to_string(threads) + " threads");
        at::set_num_threads(threads);
        expect_fused_equals_torch(*t, 16, std::vector<const Adapter *>(16, &a));
    }
    expect_fused_equals_torch(*t, 17, std::vector<const Adapter *>(17, &a), false);
}

// The team's size changes how rows, heads and the sigmoid are split, never a value: 1 and 3 threads.
TEST_P(DecodeLayersTest, BitIdenticalWithOneAndThreeThreads) {
    SettingsGuard guard;
    ScopedTempDir dir;
    auto t = load_wide(GetParam(), dir);
    for (int threads : {1, 3}) {
        SCOPED_TRACE(std::to_string(threads) + " threads");
        at::set_num_threads(threads);
        expect_fused_equals_torch(*t, 5);
    }
}

// Past torch's grain of 32768 SiLU elements the sigmoid runs in torch's parallel_for chunks, whose ends (scalar
// tails) the fused split must keep: 260 rows x F 256 = 66560 elements on 3 threads make chunks of 22187, not a
// whole number of vectors; 130 rows on the default team.
TEST_P(DecodeLayersTest, BitIdenticalWhenTheSigmoidIsSplitAsTorchSplitsIt) {
    SettingsGuard guard;
    kernels::set_blas_min_rows(1000);  // so that 260 rows still take the few-row kernels
    ScopedTempDir dir;
    auto t = load_wide(GetParam(), dir);
    ASSERT_EQ(t->config().intermediate_size, 256);
    expect_fused_equals_torch(*t, 130);
    at::set_num_threads(3);
    expect_fused_equals_torch(*t, 260);
}

TEST_P(DecodeLayersTest, APromptRowKeepsTheTorchPath) {
    if (kernels::kernel_isa() == kernels::KernelIsa::generic) {
        GTEST_SKIP() << "no few-row kernels under the generic cap: the fused path never applies";
    }
    SettingsGuard guard;
    ScopedTempDir dir;
    auto t = load_wide(GetParam(), dir);
    std::vector<SequenceCache> caches = prefilled(*t, 2);
    const int64_t runs = engine::decode_layers_runs();
    forward(*t, caches, {1, 2}, 300);  // the second sequence adds two tokens
    EXPECT_EQ(engine::decode_layers_runs(), runs);
    forward(*t, caches, {1, 1}, 301);
    EXPECT_EQ(engine::decode_layers_runs(), runs + 1);
}

// Qwen3-MoE (sparse MLP layers) and Qwen3.5 (recurrent DeltaNet layers, partial rotary) keep the torch path:
// a decode step of theirs never enters the region, and still decodes.
TEST(DecodeLayers, MoeAndHybridModelsKeepTheTorchPath) {
    if (kernels::kernel_isa() == kernels::KernelIsa::generic) {
        GTEST_SKIP() << "no few-row kernels under the generic cap: the fused path never applies";
    }
    SettingsGuard guard;
    for (TinyFamily family : {TinyFamily::QWEN3_MOE, TinyFamily::QWEN3_5}) {
        SCOPED_TRACE(family == TinyFamily::QWEN3_MOE ? "qwen3_moe" : "qwen3_5");
        ScopedTempDir dir;
        auto t = load_wide(family, dir);
        std::vector<SequenceCache> caches = prefilled(*t, 2);
        const int64_t runs = engine::decode_layers_runs();
        const torch::Tensor h = forward(*t, caches, {1, 1}, 500);  // [2, C]
        EXPECT_EQ(engine::decode_layers_runs(), runs) << "the region ran a model it does not cover";
        EXPECT_EQ(h.size(0), 2);
        EXPECT_TRUE(torch::isfinite(h).all().item<bool>());
    }
}

std::string family_name(const ::testing::TestParamInfo<TinyFamily> & info) {
    return info.param == TinyFamily::LLAMA ? "llama" : info.param == TinyFamily::QWEN3 ? "qwen3" : "qwen2";
}

INSTANTIATE_TEST_SUITE_P(Families, DecodeLayersTest,
                         ::testing::Values(TinyFamily::LLAMA, TinyFamily::QWEN3, TinyFamily::QWEN2), family_name);

}  // namespace
}  // namespace tinkerd::testing
