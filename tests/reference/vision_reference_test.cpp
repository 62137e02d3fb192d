// Vision reference (docs/vision.md): the engine replays make_vision_fixtures.py's tiny random Qwen3-VL, Qwen3-VL-MoE,
// Qwen3.5 and Qwen3.5-MoE with pixel_values from transformers' own image processor, in fp32, and must give
// transformers' float64 per-token logprobs (datums with 0-2 images of different grids packed in one batch) within
// 1e-4, PEFT's LoRA gradients within 1e-4 of each tensor's largest entry (Qwen3.5: 3e-4, see logprob_tolerance),
// generate()'s greedy tokens for image prompts, the same tokens after a preemption, and run in device-strict mode.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "hf_case.h"

namespace tinkerd::testing {
namespace {

struct VisionCase {
    nlohmann::json json;
    std::shared_ptr<model::SafetensorsFile> tensors;
    std::vector<double> values(const std::string & name) const {
        return engine::host_tensor_values(host_copy(tensors->get(name).value()));
    }
};

VisionCase load_case(const std::string & name) {
    const std::string dir = fixtures_dir() + "/vision/" + name;
    std::ifstream in(dir + "/case.json");
    if (!in) {
        throw std::runtime_error("missing vision fixture " + dir +
                                 "/case.json: run `make fixtures` (tests/reference/make_vision_fixtures.py)");
    }
    VisionCase c{nlohmann::json::parse(in), nullptr};
    c.tensors = model::SafetensorsFile::open(dir + "/tensors.safetensors").value();
    return c;
}

std::vector<engine::ImageInput> images_of(const VisionCase & c, const nlohmann::json & placements) {
    std::vector<engine::ImageInput> images;
    for (const auto & p : placements) {
        const int index = p.at("image");
        const auto grid = c.json.at("grids").at(index).get<std::vector<int64_t>>();
        engine::ImageInput image;
        image.token_offset = p.at("token_offset");
        image.grid_t = grid[0], image.grid_h = grid[1], image.grid_w = grid[2];
        for (double v : c.values("pixels/" + std::to_string(index))) {
            image.pixel_values.push_back(static_cast<float>(v));
        }
        images.push_back(std::move(image));
    }
    return images;
}

engine::ForwardBackwardInput ce_input(const VisionCase & c, engine::AdapterId id) {
    engine::ForwardBackwardInput in;
    in.adapter = id;
    in.loss_fn = "cross_entropy";
    for (const auto & d : c.json.at("datums")) {
        engine::Datum datum = ce_datum(d);
        datum.images = images_of(c, d.at("images"));
        in.datums.push_back(std::move(datum));
    }
    return in;
}

class VisionReference : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override {
        c_ = load_case(GetParam());
        auto loaded = engine::Engine::load(c_.json.at("model_dir"), {engine::ComputeDType::FP32, 2});
        ASSERT_TRUE(loaded.ok()) << loaded.error().message;
        engine_ = std::move(loaded).value();
    }
    engine::AdapterId imported_adapter() {
        const auto targets = c_.json.at("targets").get<std::vector<std::string>>();
        auto has = [&](const char * t) { return std::find(targets.begin(), targets.end(), t) != targets.end(); };
        engine::LoraSpec spec;
        spec.rank = c_.json.at("rank");
        spec.alpha = c_.json.at("alpha");
        spec.train_attn = has("q_proj");
        spec.train_mlp = has("gate_proj");
        spec.train_unembed = has("lm_head");
        const engine::AdapterId id = engine_->create_adapter(spec).value();
        std::map<std::string, engine::HostTensor> init;
        for (const std::string & name : c_.tensors->names()) {
            if (name.rfind("init/", 0) == 0) {
                init[name.substr(5)] = host_copy(c_.tensors->get(name).value());
            }
        }
        auto status = engine_->import_adapter(id, init, false);
        EXPECT_TRUE(status.ok()) << status.error().message;
        return id;
    }
    // 1e-4, as the issue asks. Qwen3.5's reference is itself only fp32-accurate: transformers' torch Gated DeltaNet
    // (torch_chunk_gated_delta_rule) computes in float32 even in a float64 model; the engine in fp64 differs from it
    // by up to 2.5e-5 in logprobs and 6e-5 relative in gradients (vision_qwen3_5_moe_tiny): those cases get 3e-4.
    bool reference_has_fp32_delta_rule() const { return !engine_->config().linear_attention_layers.empty(); }
    double logprob_tolerance() const { return reference_has_fp32_delta_rule() ? 3e-4 : 1e-4; }
    double gradient_tolerance() const { return reference_has_fp32_delta_rule() ? 3e-4 : 1e-4; }
    VisionCase c_;
    std::unique_ptr<engine::Engine> engine_;
};

TEST_P(VisionReference, BaseLogprobsMatchTransformers) {
    auto out = engine_->forward_backward({ce_input(c_, engine::BASE_MODEL)}, false);
    ASSERT_TRUE(out[0].ok()) << out[0].error().message;
    const auto & datums = c_.json.at("datums");
    const int64_t vocab = engine_->config().vocab_size;
    double worst = 0;
    for (size_t d = 0; d < datums.size(); ++d) {
        const auto full = c_.values("base_logprobs/" + std::to_string(d));  // [N, V]
        const auto targets = datums[d].at("targets").get<std::vector<int64_t>>();
        const auto got = engine::host_tensor_values(out[0]->logprobs[d]);
        for (size_t i = 0; i < targets.size(); ++i) {
            worst = std::max(worst, std::fabs(got[i] - full[i * vocab + targets[i]]));
        }
    }
    std::printf("[vision] %s base logprobs: max |fp32 - transformers fp64| = %.3g\n", GetParam().c_str(), worst);
    EXPECT_LE(worst, logprob_tolerance());
}

TEST_P(VisionReference, LoraLogprobsAndGradientsMatchPeft) {
    const engine::AdapterId id = imported_adapter();
    auto out = engine_->forward_backward({ce_input(c_, id)}, true);
    ASSERT_TRUE(out[0].ok()) << out[0].error().message;
    double lp_worst = 0, grad_worst = 0;
    std::string worst_name;
    for (size_t d = 0; d < out[0]->logprobs.size(); ++d) {
        lp_worst = std::max(lp_worst, max_abs_diff(engine::host_tensor_values(out[0]->logprobs[d]),
                                                   c_.values("logprobs/" + std::to_string(d))));
    }
    auto grads = engine_->export_gradients(id);
    ASSERT_TRUE(grads.ok()) << grads.error().message;
    size_t compared = 0;
    for (const std::string & name : c_.tensors->names()) {
        if (name.rfind("grad/", 0) != 0) {
            continue;
        }
        auto it = grads->find(name.substr(5));
        ASSERT_NE(it, grads->end()) << "the engine has no gradient " << name.substr(5);
        const double rel = max_rel_diff(engine::host_tensor_values(it->second), c_.values(name));
        if (rel > grad_worst) {
            grad_worst = rel;
            worst_name = name.substr(5);
        }
        ++compared;
    }
    std::printf("[vision] %s LoRA: logprobs max abs %.3g, %zu gradients max rel %.3g (%s), loss %.6f vs %.6f\n",
                GetParam().c_str(), lp_worst, compared, grad_worst, worst_name.c_str(), -out[0]->metrics.at("loss:sum"),
                -c_.json.at("expected_loss").get<double>());
    EXPECT_LE(lp_worst, logprob_tolerance());
    EXPECT_LE(grad_worst, gradient_tolerance());
    EXPECT_GT(compared, 0u);
    EXPECT_NEAR(out[0]->metrics.at("loss:sum"), c_.json.at("expected_loss").get<double>(), 1e-3);
}

TEST_P(VisionReference, GreedySamplesMatchGenerate) {
    const engine::AdapterId id = imported_adapter();
    std::vector<engine::SampleRequest> requests;
    for (const auto & s : c_.json.at("samples")) {
        engine::SampleRequest r;
        r.adapter = s.at("adapted").get<bool>() ? id : engine::BASE_MODEL;
        r.prompt = s.at("tokens").get<std::vector<int64_t>>();
        r.prompt_images = images_of(c_, s.at("images"));
        r.params.max_tokens = 8;
        r.params.temperature = 0;
        r.params.stop_at_eos = false;
        r.num_samples = 2;  // the prompt's cache (and its position offset) forked into two sequences
        requests.push_back(std::move(r));
    }
    auto results = engine_->sample(requests);
    const auto & samples = c_.json.at("samples");
    for (size_t i = 0; i < results.size(); ++i) {
        ASSERT_TRUE(results[i].ok()) << results[i].error().message;
        for (const engine::SampledSequence & seq : results[i]->sequences) {
            EXPECT_EQ(seq.tokens, samples[i].at("generated").get<std::vector<int64_t>>())
                << "sample " << i << " (smallest top-2 logit gap " << samples[i].at("min_gap").get<double>() << ")";
        }
    }
}

// Two image prompts under a KV budget that forces the newer one out when both caches grow: it resumes later by
// re-prefilling its prompt (images recomputed) and tokens, and must continue exactly as without the preemption.
TEST_P(VisionReference, PreemptedImageRequestContinuesWithTheSameTokens) {
    const model::ModelConfig & c = engine_->config();
    if (c.linear_attention_layers.size() > 0) {
        GTEST_SKIP() << "the budget below counts attention-only caches";
    }
    std::vector<engine::SampleRequest> requests;
    for (size_t i : {0, 2}) {  // the two prompts, base model
        const auto & s = c_.json.at("samples").at(i);
        engine::SampleRequest r;
        r.prompt = s.at("tokens").get<std::vector<int64_t>>();
        r.prompt_images = images_of(c_, s.at("images"));
        r.params.max_tokens = 40;
        r.params.temperature = 0;
        r.params.stop_at_eos = false;
        requests.push_back(std::move(r));
    }
    // prompts of 23 and 38 tokens: admitted together with 39 + 54 tokens of cache; each grows by 17 after 16 tokens
    const int64_t bytes_per_token = c.n_layers * 2 * c.n_kv_heads * c.head_dim * 4;
    auto tight = engine::Engine::load(c_.json.at("model_dir"), {engine::ComputeDType::FP32, 2, 100 * bytes_per_token});
    ASSERT_TRUE(tight.ok()) << tight.error().message;
    auto free_run = engine_->sample(requests);
    auto tight_run = (*tight)->sample(requests);
    EXPECT_GT((*tight)->sample_stats().preemptions, 0);
    for (size_t i = 0; i < requests.size(); ++i) {
        ASSERT_TRUE(free_run[i].ok() && tight_run[i].ok());
        EXPECT_EQ(tight_run[i]->sequences[0].tokens, free_run[i]->sequences[0].tokens) << "request " << i;
        EXPECT_EQ(free_run[i]->sequences[0].tokens.size(), 40u);
    }
}

// The image paths in device-strict mode (tensors on torch's meta device: any host read outside host_access.h
// throws, as it would crash on a GPU): a forward_backward with images and an image prompt's sampling run and
// give results of the right shapes.
TEST_P(VisionReference, ImagePathsRunInDeviceStrictMode) {
    auto meta =
        engine::Engine::load(c_.json.at("model_dir"), {engine::ComputeDType::FP32, 2, int64_t{1} << 30, "meta"});
    ASSERT_TRUE(meta.ok()) << meta.error().message;
    auto out = (*meta)->forward_backward({ce_input(c_, engine::BASE_MODEL)}, false);
    ASSERT_TRUE(out[0].ok()) << out[0].error().message;
    EXPECT_EQ(out[0]->logprobs.size(), c_.json.at("datums").size());
    engine::SampleRequest r;
    r.prompt = c_.json.at("samples").at(0).at("tokens").get<std::vector<int64_t>>();
    r.prompt_images = images_of(c_, c_.json.at("samples").at(0).at("images"));
    r.params.max_tokens = 3;
    r.params.temperature = 0;
    auto sampled = (*meta)->sample({r});
    ASSERT_TRUE(sampled[0].ok()) << sampled[0].error().message;
    EXPECT_EQ(sampled[0]->sequences[0].tokens.size(), 3u);
}

INSTANTIATE_TEST_SUITE_P(Cases, VisionReference,
                         ::testing::Values("vision_qwen3_vl_tiny", "vision_qwen3_vl_moe_tiny", "vision_qwen3_5_tiny",
                                           "vision_qwen3_5_moe_tiny"));

}  // namespace
}  // namespace tinkerd::testing
