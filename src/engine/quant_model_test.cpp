// Quantised base weights (--base-quant gguf) against the same weights dequantised to fp32: tiny wide llama,
// qwen3 and qwen3_moe models whose matrices are random valid GGUF blocks (every kept type, one type for all or
// a different type per tensor so that q/k/v and gate/up cannot be fused), loaded once as U8 blocks (experts
// stacked, as a GGUF holds them) and once as F32. Logprobs, LoRA gradients and greedy samples must agree; with
// --sample-activations int8, sampling stays within a tolerance and training is unchanged.
#include <cmath>
#include <cstring>
#include <random>

#include <c10/util/Half.h>
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/kernels/quant_matmul.h"
#include "gguf/dequant.h"
#include "gguf/qwen35.h"
#include "sample_test_helpers.h"
#include "test_models.h"

namespace tinkerd::testing {
namespace {

using engine::Engine;
using gguf::GgmlType;

const std::vector<GgmlType> KEPT_TYPES = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                                          GgmlType::Q5_1, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

void put_half(uint8_t * p, float value) {
    const uint16_t bits = c10::Half(value).x;
    std::memcpy(p, &bits, 2);
}

// One random valid block: random quants and scale bytes, the fp16 scales chosen for values of about std
// around 0 (the offsets / minimums cancel the quants' mean).
void fill_block(GgmlType type, uint8_t * b, size_t bytes, double std, std::mt19937 & rng) {
    for (size_t i = 0; i < bytes; ++i) {
        b[i] = static_cast<uint8_t>(rng() & 0xff);
    }
    const float s = static_cast<float>(std);
    switch (type) {
        case GgmlType::Q8_0:
            return put_half(b, s / 74.0f);
        case GgmlType::Q4_0:
        case GgmlType::Q5_0:
            return put_half(b, s / (type == GgmlType::Q4_0 ? 4.6f : 9.2f));
        case GgmlType::Q4_1:
        case GgmlType::Q5_1: {
            const float d = s / (type == GgmlType::Q4_1 ? 4.6f : 9.2f);
            put_half(b, d);
            return put_half(b + 2, -(type == GgmlType::Q4_1 ? 7.5f : 15.5f) * d);
        }
        case GgmlType::Q4_K:
        case GgmlType::Q5_K: {
            const float d = s / (type == GgmlType::Q4_K ? 200.0f : 400.0f);
            put_half(b, d);
            return put_half(b + 2, (type == GgmlType::Q4_K ? 7.5f : 15.5f) * d);
        }
        case GgmlType::Q6_K:
            return put_half(b + 208, s / 1370.0f);
        default:
            throw std::runtime_error("not a kept type");
    }
}

// A [..., in] tensor as random blocks of type: U8 [..., in/blk, bb] and its dequantised F32 twin.
std::pair<model::OwnedTensor, model::OwnedTensor> random_quantised(GgmlType type, std::vector<int64_t> shape,
                                                                   double std, std::mt19937 & rng) {
    gguf::BlockLayout layout;
    gguf::ggml_block_layout(static_cast<uint32_t>(type), layout);
    int64_t numel = 1;
    for (int64_t d : shape) {
        numel *= d;
    }
    const int64_t n_blocks = numel / layout.elements;
    model::OwnedTensor blocks{model::DType::U8, shape, std::vector<uint8_t>(n_blocks * layout.bytes)};
    blocks.shape.back() /= layout.elements;
    blocks.shape.push_back(static_cast<int64_t>(layout.bytes));
    for (int64_t i = 0; i < n_blocks; ++i) {
        fill_block(type, blocks.bytes.data() + i * layout.bytes, layout.bytes, std, rng);
    }
    model::OwnedTensor f32{model::DType::F32, shape, std::vector<uint8_t>(numel * 4)};
    auto status = gguf::dequantize(type, blocks.bytes.data(), blocks.bytes.size(), numel,
                                   reinterpret_cast<float *>(f32.bytes.data()));
    if (!status.ok()) {
        throw std::runtime_error(status.error().message);
    }
    return {std::move(blocks), std::move(f32)};
}

int64_t block_elements(GgmlType type) {
    gguf::BlockLayout layout;
    gguf::ggml_block_layout(static_cast<uint32_t>(type), layout);
    return layout.elements;
}

bool is_matrix(const std::string & name, const model::OwnedTensor & t) {
    return t.shape.size() == 2 && name.find("norm") == std::string::npos && name.find("mlp.gate.") == std::string::npos;
}

// The expert number and projection of "model.layers.L.mlp.experts.E.gate_proj.weight", or -1.
int64_t expert_of(const std::string & name, std::string & stacked_name) {
    const size_t at = name.find("mlp.experts.");
    if (at == std::string::npos) {
        return -1;
    }
    const size_t dot = name.find('.', at + 12);
    stacked_name = name.substr(0, at + 12) + name.substr(dot + 1, name.size() - dot - 1 - 7);  // drop ".weight"
    return std::stoll(name.substr(at + 12, dot - at - 12));
}

// Writes the quantised model (U8 blocks, experts stacked [E, out, in/blk, bb]) into qdir and its dequantised
// twin (F32, HF's per-expert names) into fdir. types[i % size] is the i-th matrix's type.
void write_pair(TinyFamily family, const std::vector<GgmlType> & types, const std::string & qdir,
                const std::string & fdir) {
    const auto tensors = tiny_model_tensors(family, model::DType::F32, 11, true);
    std::map<std::string, model::OwnedTensor> quantised, dequantised;
    std::map<std::string, std::vector<model::OwnedTensor>> experts;  // stacked name -> blocks by expert
    std::mt19937 rng(5);
    size_t index = 0;
    for (const auto & [name, t] : tensors) {
        if (!is_matrix(name, t)) {
            quantised[name] = dequantised[name] = t;
            continue;
        }
        std::string stacked;
        const int64_t e = expert_of(name, stacked);
        const GgmlType type = e >= 0 ? types[0] : types[index++ % types.size()];  // one type per stack
        if (t.shape[1] % block_elements(type) != 0) {  // as a GGUF keeps such rows: F32 in both models
            quantised[name] = dequantised[name] = t;
            continue;
        }
        auto [blocks, f32] = random_quantised(type, t.shape, 1.0 / std::sqrt(static_cast<double>(t.shape[1])), rng);
        dequantised[name] = std::move(f32);
        if (e < 0) {
            quantised[name] = std::move(blocks);
            continue;
        }
        experts[stacked].resize(std::max<size_t>(experts[stacked].size(), e + 1));
        experts[stacked][e] = std::move(blocks);
    }
    for (auto & [name, parts] : experts) {
        model::OwnedTensor stack{model::DType::U8, parts[0].shape, {}};
        stack.shape.insert(stack.shape.begin(), static_cast<int64_t>(parts.size()));
        for (const auto & p : parts) {
            stack.bytes.insert(stack.bytes.end(), p.bytes.begin(), p.bytes.end());
        }
        quantised[name] = std::move(stack);
    }
    write_model_dir(qdir, tiny_config_json(family, true), quantised);
    write_model_dir(fdir, tiny_config_json(family, true), dequantised);
}

std::unique_ptr<Engine> load(const std::string & dir, engine::LoadQuant quantise = engine::LoadQuant::NONE,
                             bool int8_sampling = false) {
    engine::EngineOptions options;
    options.n_threads = 2;
    options.quantise_at_load = quantise;
    options.sample_int8_activations = int8_sampling;
    auto loaded = Engine::load(dir, options);
    EXPECT_TRUE(loaded.ok()) << loaded.error().message;
    return loaded.ok() ? std::move(loaded).value() : nullptr;
}

engine::AdapterId adapter(Engine & e) {
    engine::LoraSpec spec;
    spec.rank = 4;
    spec.alpha = 8.0;
    spec.seed = 9;
    return e.create_adapter(spec).value();
}

// A cross_entropy input of datums of these lengths (random tokens and targets, unit weights).
engine::ForwardBackwardInput ce_input(engine::AdapterId id, int64_t vocab, const std::vector<int64_t> & lengths) {
    engine::ForwardBackwardInput in{id, {}, "cross_entropy", {}};
    uint64_t seed = 1;
    for (int64_t n : lengths) {
        const auto tokens = random_tokens(n, seed++, vocab), targets = random_tokens(n, seed++, vocab);
        in.datums.push_back({tokens,
                             {{"target_tokens", engine::make_host_tensor_i64({n}, targets)},
                              {"weights", engine::make_host_tensor_f32({n}, std::vector<float>(n, 1.0f))}}});
    }
    return in;
}

struct StepResult {
    std::vector<double> logprobs, grads;
};

StepResult train_step(Engine & e, const std::vector<int64_t> & lengths) {
    const engine::AdapterId id = adapter(e);
    auto out = e.forward_backward({ce_input(id, e.config().vocab_size, lengths)}, true);
    EXPECT_TRUE(out[0].ok()) << out[0].error().message;
    StepResult r;
    for (const auto & datum : out[0]->logprobs) {
        const auto v = engine::host_tensor_values(datum);
        r.logprobs.insert(r.logprobs.end(), v.begin(), v.end());
    }
    const auto grads = e.export_gradients(id).value();  // named: looping over .value() of a temporary dangles
    for (const auto & [key, g] : grads) {
        const auto v = engine::host_tensor_values(g);
        r.grads.insert(r.grads.end(), v.begin(), v.end());
    }
    return r;
}

double max_abs_diff(const std::vector<double> & a, const std::vector<double> & b, double * scale = nullptr) {
    EXPECT_EQ(a.size(), b.size());
    double diff = 0, s = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
        diff = std::max(diff, std::abs(a[i] - b[i]));
        s = std::max(s, std::abs(b[i]));
    }
    if (scale != nullptr) {
        *scale = s;
    }
    return diff;
}

struct Case {
    TinyFamily family;
    std::vector<GgmlType> types;
    std::string name;
};

// Logprobs, LoRA gradients and greedy samples of q and f agree (the bounds below).
void expect_same_model(Engine & q, Engine & f, const std::string & name);

class QuantisedModel : public ::testing::TestWithParam<Case> {};

// Bounds: both models multiply the same fp32 weight values in fp32; only the summation order differs (blocked
// dequantise-then-BLAS or fused block dots against torch's fp32 products), so each dot of K terms differs by at
// most ~K·u·Σ|x·w| (u = 2^-24). Through 2 layers and the head, with K <= 256 and unit-scale activations that is
// ~1e-5 on a logit; 1e-4 on logprobs and 1e-4 relative on gradients leave room and still catch a wrong block,
// scale or row (those move results by O(1)).
TEST_P(QuantisedModel, AgreesWithTheDequantisedWeights) {
    const Case & c = GetParam();
    ScopedTempDir qdir("quant_q"), fdir("quant_f");
    write_pair(c.family, c.types, qdir.path(), fdir.path());
    auto q = load(qdir.path()), f = load(fdir.path());
    ASSERT_TRUE(q && f);
    expect_same_model(*q, *f, c.name);
}

void expect_same_model(Engine & q, Engine & f, const std::string & name) {
    for (const auto & lengths : std::vector<std::vector<int64_t>>{{9, 5}, {40, 33}}) {  // fused and blocked paths
        const StepResult a = train_step(q, lengths), b = train_step(f, lengths);
        EXPECT_LE(max_abs_diff(a.logprobs, b.logprobs), 1e-4) << name;
        double scale = 0;
        const double g = max_abs_diff(a.grads, b.grads, &scale);
        EXPECT_GT(scale, 0.0);
        EXPECT_LE(g, 1e-4 * scale) << name << " gradient scale " << scale;
    }
    const auto prompt = random_tokens(20, 3, q.config().vocab_size);
    const auto sq = sample_one(q, sample_request(engine::BASE_MODEL, prompt, 8, 0.0, 1));
    const auto sf = sample_one(f, sample_request(engine::BASE_MODEL, prompt, 8, 0.0, 1));
    ASSERT_EQ(sq.sequences.size(), 1u);
    ASSERT_EQ(sf.sequences.size(), 1u);
    EXPECT_EQ(sq.sequences[0].tokens, sf.sequences[0].tokens) << name;
    std::vector<double> lq(sq.sequences[0].logprobs.begin(), sq.sequences[0].logprobs.end());
    std::vector<double> lf(sf.sequences[0].logprobs.begin(), sf.sequences[0].logprobs.end());
    EXPECT_LE(max_abs_diff(lq, lf), 1e-4) << name;
}

// The weights an F32 matrix becomes under --base-quant q8_0 / q4_k (LoadQuant: Q4_K where rows are a multiple
// of 256 values, else Q8_0), and the most rounding may move one of them:
// Q8_0: half its block's step plus the fp16 rounding of the step over up to 127 steps, d·(1/2 + 127·2^-11)
// <= 0.563·max|x| / 127; Q4_K: half a sub-block step, where the step is at most the sub-block's range / 15
// plus one step of d's 6-bit grid (range / 945), plus half of dmin (max|x| / 126): under 0.6·range / 15
// + max|x| / 126 with range <= 2·max|x|.
struct Rounded {
    torch::Tensor values;  // [out, in] as the engine multiplies them
    double bound;
};

Rounded rounded_at_load(const torch::Tensor & w, engine::LoadQuant mode) {
    const double amax = w.abs().max().item<double>();
    if (mode == engine::LoadQuant::Q4_K && w.size(-1) % 256 == 0) {
        return {engine::kernels::dequantise(engine::kernels::quantise_q4_k(w)), 0.6 * 2 * amax / 15 + amax / 126};
    }
    return {engine::kernels::dequantise(engine::kernels::quantise_q8_0(w)), amax / 127.0 * 0.563};
}

// An F32 safetensors model quantised at load computes what the model with the rounded weights does.
void expect_quantised_at_load(engine::LoadQuant mode, const std::string & type) {
    ScopedTempDir src("q_src"), ref("q_ref");
    auto tensors = tiny_model_tensors(TinyFamily::QWEN3_MOE, model::DType::F32, 11, true);
    write_model_dir(src.path(), tiny_config_json(TinyFamily::QWEN3_MOE, true), tensors);
    for (auto & [name, t] : tensors) {
        if (!is_matrix(name, t)) {
            continue;
        }
        const torch::Tensor w = torch::from_blob(t.bytes.data(), t.shape, torch::kFloat).clone();  // [out, in]
        const Rounded rounded = rounded_at_load(w, mode);
        EXPECT_LE((rounded.values - w).abs().max().item<double>(), rounded.bound) << name;
        EXPECT_GT((rounded.values - w).abs().max().item<double>(), 0.0) << name << ": not rounded at all";
        std::memcpy(t.bytes.data(), rounded.values.data_ptr<float>(), t.bytes.size());
    }
    write_model_dir(ref.path(), tiny_config_json(TinyFamily::QWEN3_MOE, true), tensors);
    auto q = load(src.path(), mode), f = load(ref.path());
    ASSERT_TRUE(q && f);
    EXPECT_NE(q->compute_dtype_name().find(type), std::string::npos) << q->compute_dtype_name();
    expect_same_model(*q, *f, "qwen3moe " + type + " at load");
}

TEST(QuantiseAtLoad, Q8_0ModelEqualsItsRoundedWeights) {
    expect_quantised_at_load(engine::LoadQuant::Q8_0, "Q8_0");
}

// The wide tiny model's rows are all multiples of 256, so every matrix takes Q4_K (SmolLM2's 576-wide rows, which
// take Q8_0, are measured in docs/quantised-base.md).
TEST(QuantiseAtLoad, Q4_KModelEqualsItsRoundedWeights) {
    expect_quantised_at_load(engine::LoadQuant::Q4_K, "Q4_K");
}

// Greedy decode with prompt logprobs: prefill (a 12-token prompt: the few-row path) and decode steps.
engine::SampleOutput greedy_with_prompt_logprobs(Engine & e) {
    auto request = sample_request(engine::BASE_MODEL, random_tokens(12, 4, e.config().vocab_size), 6, 0.0, 1);
    request.prompt_logprobs = true;
    request.params.stop_at_eos = false;
    return sample_one(e, request);
}

// The sampled logprobs of a and b over their common prefix of tokens, and the prompt logprobs (but the NaN
// first), in one list each.
std::pair<std::vector<double>, std::vector<double>> comparable_logprobs(const engine::SampleOutput & a,
                                                                        const engine::SampleOutput & b) {
    std::pair<std::vector<double>, std::vector<double>> out;
    for (size_t i = 1; i < a.prompt_logprobs.size() && i < b.prompt_logprobs.size(); ++i) {
        out.first.push_back(a.prompt_logprobs[i]);
        out.second.push_back(b.prompt_logprobs[i]);
    }
    const auto &sa = a.sequences.at(0), &sb = b.sequences.at(0);
    for (size_t i = 0; i < sa.tokens.size() && i < sb.tokens.size() && sa.tokens[i] == sb.tokens[i]; ++i) {
        out.first.push_back(sa.logprobs[i]);
        out.second.push_back(sb.logprobs[i]);
    }
    return out;
}

// --sample-activations int8 (kernels/quant_int8.h) on a qwen3_moe with int8 types (Q4_K, Q6_K, Q8_0, Q4_1) and
// exact-only ones (Q5_K, Q5_0): sampling's logprobs move, but by less than 0.1 (each product moves by at most
// d_x/2 · Σ|w| per block, ~0.4% of the block's largest activation times Σ|w|; through 2 layers and the head that
// is a few 1e-2 on a logprob here, 0.047 measured; a wrong scale or block moves them by O(1)); training's logprobs and
// gradients are bit-identical with the mode on and off; on an unquantised base the flag changes nothing.
TEST(SampleActivationsInt8, SamplingWithinToleranceTrainingUnchanged) {
    const std::vector<GgmlType> mixed = {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0,
                                         GgmlType::Q5_K, GgmlType::Q4_1, GgmlType::Q5_0};
    ScopedTempDir qdir("int8_q"), fdir("int8_f");
    write_pair(TinyFamily::QWEN3_MOE, mixed, qdir.path(), fdir.path());
    auto exact = load(qdir.path()), int8 = load(qdir.path(), engine::LoadQuant::NONE, true);
    ASSERT_TRUE(exact && int8);
    const StepResult a = train_step(*exact, {9, 5}), b = train_step(*int8, {9, 5});  // 14 rows: the fused path
    EXPECT_EQ(a.logprobs, b.logprobs);
    EXPECT_EQ(a.grads, b.grads);
    const engine::SampleOutput se = greedy_with_prompt_logprobs(*exact), si = greedy_with_prompt_logprobs(*int8);
    const auto [le, li] = comparable_logprobs(se, si);
    ASSERT_GE(le.size(), 12u);  // the 11 prompt logprobs and at least the first sampled token
    const double diff = max_abs_diff(li, le);
    EXPECT_GT(diff, 0.0) << "int8 sampling gave the exact logprobs: the mode did not reach the products";
    EXPECT_LE(diff, 0.1);
    std::printf("int8 sampling: max |logprob - exact| = %.3g over %zu logprobs\n", diff, le.size());
    auto plain = load(fdir.path()), plain_int8 = load(fdir.path(), engine::LoadQuant::NONE, true);
    ASSERT_TRUE(plain && plain_int8);
    const engine::SampleOutput pe = greedy_with_prompt_logprobs(*plain), pi = greedy_with_prompt_logprobs(*plain_int8);
    EXPECT_EQ(pe.sequences.at(0).logprobs, pi.sequences.at(0).logprobs);
    EXPECT_EQ(comparable_logprobs(pe, pi).first, comparable_logprobs(pe, pi).second);
}

// out_proj's columns in llama.cpp's tiled V-head order: [C, HK·r·Dv] with grouped head k·r + j at slot j·HK + k.
model::OwnedTensor tiled_columns(const model::OwnedTensor & grouped, int64_t hk, int64_t hv, int64_t dv) {
    const int64_t rows = grouped.shape[0];
    const torch::Tensor w = torch::from_blob(const_cast<uint8_t *>(grouped.bytes.data()), {rows, hv * dv});
    const torch::Tensor t = w.view({rows, hk, hv / hk, dv}).transpose(1, 2).reshape({rows, hv * dv}).contiguous();
    model::OwnedTensor out{model::DType::F32, grouped.shape, std::vector<uint8_t>(grouped.bytes.size())};
    std::memcpy(out.bytes.data(), t.data_ptr<float>(), out.bytes.size());
    return out;
}

// A GGUF's out_proj kept in its tiled column order (name + gguf::kTiledColumnsSuffix, as a K-quant ssm_out is
// kept): the engine moves the input's columns to match, so logprobs, LoRA gradients (out_proj's included) and
// greedy samples equal the model whose out_proj is in Hugging Face's order, within the bounds above (the same
// products; only the order of the base product's sum differs).
TEST(QuantisedModel, TiledOutProjMatchesGroupedColumns) {
    ScopedTempDir tdir("tiled_t"), gdir("tiled_g");
    const std::string config = tiny_config_json(TinyFamily::QWEN3_5_MOE, true);
    const auto c = nlohmann::json::parse(config);
    const int64_t hk = c["linear_num_key_heads"], hv = c["linear_num_value_heads"], dv = c["linear_value_head_dim"];
    ASSERT_GT(hv, hk);  // tiled order differs from grouped order
    const auto grouped = tiny_model_tensors(TinyFamily::QWEN3_5_MOE, model::DType::F32, 11, true);
    std::map<std::string, model::OwnedTensor> tiled;
    int n_tiled = 0;
    for (const auto & [name, t] : grouped) {
        const bool out_proj = name.size() > 27 && name.substr(name.size() - 27) == "linear_attn.out_proj.weight";
        n_tiled += out_proj;
        tiled[out_proj ? name + gguf::kTiledColumnsSuffix : name] = out_proj ? tiled_columns(t, hk, hv, dv) : t;
    }
    ASSERT_GT(n_tiled, 0);
    write_model_dir(tdir.path(), config, tiled);
    write_model_dir(gdir.path(), config, grouped);
    auto t = load(tdir.path()), g = load(gdir.path());
    ASSERT_TRUE(t && g);
    expect_same_model(*t, *g, "tiled out_proj");
}

std::vector<Case> cases() {
    std::vector<Case> out;
    for (GgmlType t : KEPT_TYPES) {
        out.push_back({TinyFamily::LLAMA, {t}, "llama_" + gguf::ggml_type_name(static_cast<uint32_t>(t))});
    }
    const std::vector<GgmlType> mixed = {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0,
                                         GgmlType::Q5_K, GgmlType::Q4_1, GgmlType::Q5_0};
    out.push_back({TinyFamily::LLAMA, mixed, "llama_mixed"});
    out.push_back({TinyFamily::QWEN3, mixed, "qwen3_mixed"});
    out.push_back({TinyFamily::QWEN3_MOE, {GgmlType::Q4_K}, "qwen3moe_Q4_K"});
    out.push_back({TinyFamily::QWEN3_MOE, mixed, "qwen3moe_mixed"});
    // Qwen3.5-MoE: in_proj_qkv / z / b / a of different types cannot be stacked into one w_lin_in (a GGUF keeps
    // qkv and z quantised beside F32 alpha / beta), so they are multiplied one by one.
    out.push_back({TinyFamily::QWEN3_5_MOE, mixed, "qwen35moe_mixed"});
    out.push_back({TinyFamily::QWEN3_5_MOE, {GgmlType::Q8_0}, "qwen35moe_Q8_0"});
    return out;
}

INSTANTIATE_TEST_SUITE_P(Types, QuantisedModel, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case> & info) { return info.param.name; });

}  // namespace
}  // namespace tinkerd::testing
