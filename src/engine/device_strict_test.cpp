// Device-strict mode (EngineOptions::device = "meta"): the engine's device-generic paths run on tensors whose
// memory the host cannot read, so a host read that bypasses host_access.h throws, as it would crash on a GPU.
// For the built-in model and the tiny bf16 llama, qwen3_moe, qwen3_5 and qwen3_5_moe: load, last_logits, each
// loss with backward, forward with [N] and [N, K] targets, gradients, optim_step, export/import, sampling
// (greedy, temperature with top-k/top-p, num_samples, prompt and top-k prompt logprobs, top logprobs), a KV
// budget that preempts, cancellation and adapter removal all succeed with the shapes a CPU engine gives.
// And host_access.h itself: zeros for meta, aliases on the CPU, errors that name the caller.
#include <algorithm>
#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/host_access.h"
#include "model/builtin_model.h"
#include "sample_test_helpers.h"
#include "test_models.h"

namespace tinkerd::testing {
namespace {

using engine::AdapterId;
using engine::Datum;
using engine::Engine;
using engine::SampleRequest;

// What one run produced, as "what: shape" lines; a meta run must produce the CPU run's lines.
using Trace = std::vector<std::string>;

std::string shape_of(const std::vector<int64_t> & shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) {
        s += (i ? "," : "") + std::to_string(shape[i]);
    }
    return s + "]";
}

template <typename T>
bool ok(const Result<T> & r, const std::string & what) {
    EXPECT_TRUE(r.ok()) << what << ": " << (r.ok() ? "" : r.error().message);
    return r.ok();
}

std::vector<int64_t> tokens(int64_t n, uint64_t seed) {
    return random_tokens(n, seed, 50);  // inside every test vocabulary
}

// A datum of n tokens for the loss: [n] targets (k = 0) or [n, k], plus the loss's other inputs.
Datum datum(int64_t n, uint64_t seed, const std::string & loss, int64_t k = 0) {
    Datum d{tokens(n, seed), {}, {}};
    const std::vector<int64_t> targets = tokens(k ? n * k : n, seed + 1);
    d.loss_inputs["target_tokens"] =
        engine::make_host_tensor_i64(k ? std::vector<int64_t>{n, k} : std::vector{n}, targets);
    if (loss == "cross_entropy" && k == 0) {
        d.loss_inputs["weights"] = engine::make_host_tensor_f32({n}, std::vector<float>(n, 0.5f));
    } else if (loss != "cross_entropy") {
        d.loss_inputs["logprobs"] = engine::make_host_tensor_f32({n}, std::vector<float>(n, -2.0f));
        d.loss_inputs["advantages"] = engine::make_host_tensor_f32({n}, std::vector<float>(n, 1.0f));
    }
    return d;
}

AdapterId adapter(Engine & e, int64_t rank, bool unembed) {
    engine::LoraSpec spec;
    spec.rank = rank;
    spec.train_unembed = unembed;
    spec.seed = 7;
    return e.create_adapter(spec).value();
}

void note_outputs(Trace & trace, const std::string & what,
                  const std::vector<Result<engine::ForwardBackwardOutput>> & results) {
    for (size_t i = 0; i < results.size(); ++i) {
        if (ok(results[i], what + " input " + std::to_string(i))) {
            for (const engine::HostTensor & lp : results[i]->logprobs) {
                trace.push_back(what + " " + std::to_string(i) + " logprobs " + shape_of(lp.shape));
            }
            trace.push_back(what + " " + std::to_string(i) + " loss:sum " +
                            std::to_string(results[i]->metrics.count("loss:sum")));
        }
    }
}

void note_tensors(Trace & trace, const std::string & what, const std::map<std::string, engine::HostTensor> & tensors) {
    for (const auto & [key, t] : tensors) {
        trace.push_back(what + " " + key + " " + shape_of(t.shape));
    }
}

// Each loss with backward (adapter a, two datums each; b next to it), then forward with the base model and
// [N, K] targets, the gradients (exported and visited in place) and one AdamW step of each adapter.
void train(Engine & e, Trace & trace, AdapterId a, AdapterId b) {
    std::vector<engine::ForwardBackwardInput> inputs;
    uint64_t seed = 10;
    for (const char * loss : {"cross_entropy", "importance_sampling", "ppo", "cispo", "dro"}) {
        inputs.push_back({a, {datum(5, seed, loss), datum(9, seed + 2, loss)}, loss, {}});
        seed += 4;
    }
    inputs.push_back({b, {datum(6, 90, "cross_entropy")}, "cross_entropy", {}});
    note_outputs(trace, "backward", e.forward_backward(inputs, true));
    const std::vector<engine::ForwardBackwardInput> forward = {
        {engine::BASE_MODEL, {datum(7, 100, "cross_entropy")}, "cross_entropy", {}},
        {a, {datum(4, 110, "cross_entropy", 3), datum(3, 120, "cross_entropy")}, "cross_entropy", {}}};
    note_outputs(trace, "forward", e.forward_backward(forward, false));
    if (auto grads = e.export_gradients(a); ok(grads, "export_gradients")) {
        note_tensors(trace, "gradient", *grads);
    }
    int64_t visited = -1;
    ok(e.visit_gradients(a, [&](float *, int64_t count) { visited = count; }), "visit_gradients");
    trace.push_back("visited " + std::to_string(visited));
    for (AdapterId id : {a, b}) {
        if (auto step = e.optim_step(id, {}); ok(step, "optim_step")) {
            trace.push_back("optim_step grad_norm " + std::to_string(step->metrics.count("grad_norm:mean")));
        }
    }
}

// Export with and without the optimizer, import both ways into a fresh adapter of the same spec, export that.
AdapterId save_and_load(Engine & e, Trace & trace, AdapterId a) {
    const AdapterId c = adapter(e, 4, true);
    for (bool with_optimizer : {true, false}) {
        auto saved = e.export_adapter(a, with_optimizer);
        if (ok(saved, "export_adapter")) {
            note_tensors(trace, with_optimizer ? "saved+optimizer" : "saved", *saved);
            ok(e.import_adapter(c, *saved, with_optimizer), "import_adapter");
        }
    }
    if (auto loaded = e.export_adapter(c, true); ok(loaded, "export_adapter after import")) {
        note_tensors(trace, "loaded", *loaded);
    }
    return c;
}

SampleRequest request(AdapterId id, int64_t prompt, int64_t max_tokens, double temperature, int64_t samples) {
    SampleRequest r = sample_request(id, tokens(prompt, 200 + prompt), max_tokens, temperature, 5, samples);
    r.params.stop_at_eos = false;  // every sequence runs to max_tokens, whatever the (meta: zero) logits
    return r;
}

void note_sample(Trace & trace, const std::string & what, const engine::SampleOutput & out) {
    trace.push_back(what + " sequences " + std::to_string(out.sequences.size()) + " prompt_logprobs " +
                    std::to_string(out.prompt_logprobs.size()) + " topk_prompt " +
                    std::to_string(out.topk_prompt_logprobs.size()));
    for (const auto & top : out.topk_prompt_logprobs) {
        trace.push_back(what + " topk_prompt position " + std::to_string(top.size()));
    }
    for (const auto & s : out.sequences) {
        trace.push_back(what + " tokens " + std::to_string(s.tokens.size()) + " logprobs " +
                        std::to_string(s.logprobs.size()) + " top " + std::to_string(s.top_logprobs.size()));
        for (const auto & top : s.top_logprobs) {
            trace.push_back(what + " top alternatives " + std::to_string(top.size()));
        }
    }
}

// One batch of adapter and base rows: greedy, temperature with top-k/top-p and three samples (forked caches),
// prompt and top-k prompt logprobs (over more than one 64-row chunk where the model's context allows), top
// logprobs of generated tokens.
void sample(Engine & e, Trace & trace, AdapterId a, AdapterId c) {
    const int64_t long_prompt = std::min<int64_t>(70, e.config().max_position_embeddings - 3);
    std::vector<SampleRequest> requests = {request(a, 6, 5, 0.0, 1), request(engine::BASE_MODEL, 9, 4, 1.0, 3),
                                           request(c, long_prompt, 3, 0.7, 1), request(a, 5, 4, 1.0, 2)};
    requests[1].params.top_k = 5;
    requests[1].params.top_p = 0.9;
    requests[2].prompt_logprobs = true;
    requests[2].topk_prompt_logprobs = 3;
    requests[3].top_logprobs = 2;
    auto outputs = e.sample(requests);
    for (size_t i = 0; i < outputs.size(); ++i) {
        if (ok(outputs[i], "sample " + std::to_string(i))) {
            note_sample(trace, "sample " + std::to_string(i), *outputs[i]);
        }
    }
    if (auto logits = e.last_logits(a, tokens(4, 300)); ok(logits, "last_logits of an adapter")) {
        trace.push_back("adapter last_logits " + std::to_string(logits->size()));
    }
}

// Five requests under a budget for about 2.5 of them: admission waits, caches grow and the newest are
// preempted and re-prefilled; then a cancelled request and one whose adapter goes away mid-run.
void continuous(Engine & tight, Trace & trace) {
    std::vector<engine::SampleHandle> handles;
    for (int64_t i = 0; i < 5; ++i) {
        handles.push_back(tight.sample_submit(request(engine::BASE_MODEL, 6 + i, 50, 1.0, 2)).value());
    }
    size_t finished = 0;
    for (int guard = 0; finished < handles.size() && guard < 1000; ++guard) {
        for (auto & f : tight.sample_step()) {
            finished += ok(f.output, "preempted request") ? 1 : 0;
            if (f.output.ok()) {
                note_sample(trace, "tight " + std::to_string(f.handle), *f.output);
            }
        }
    }
    trace.push_back("preempted " + std::to_string(tight.sample_stats().preemptions > 0));
    const AdapterId gone = adapter(tight, 2, false);
    const auto cancelled = tight.sample_submit(request(engine::BASE_MODEL, 8, 20, 1.0, 1)).value();
    const auto orphan = tight.sample_submit(request(gone, 8, 20, 1.0, 1)).value();
    tight.sample_step();
    trace.push_back("cancelled " + std::to_string(tight.sample_cancel(cancelled)));
    ok(tight.remove_adapter(gone), "remove_adapter");
    for (auto & f : tight.sample_step()) {
        trace.push_back("after removal " + std::to_string(f.handle == orphan) + " failed " +
                        std::to_string(!f.output.ok()));
    }
}

struct StrictModel {
    std::string name;
    std::function<void(const std::string & dir)> write;
};

void PrintTo(const StrictModel & model, std::ostream * os) {
    *os << model.name;
}

class DeviceStrictTest : public ::testing::TestWithParam<StrictModel> {
  protected:
    void SetUp() override { GetParam().write(dir_.path()); }
    std::unique_ptr<Engine> load(const std::string & device, int64_t kv_bytes = int64_t{1} << 30) {
        engine::EngineOptions options;
        options.n_threads = 1;
        options.kv_cache_bytes = kv_bytes;
        options.device = device;
        auto loaded = Engine::load(dir_.path(), options);
        EXPECT_TRUE(loaded.ok()) << device << ": " << (loaded.ok() ? "" : loaded.error().message);
        return loaded.ok() ? std::move(loaded).value() : nullptr;
    }
    Trace run_all(const std::string & device) {
        Trace trace;
        auto e = load(device);
        if (!e) {
            return trace;
        }
        if (auto logits = e->last_logits(engine::BASE_MODEL, {0}); ok(logits, "last_logits (the start-up probe)")) {
            trace.push_back("last_logits " + std::to_string(logits->size()));
        }
        const AdapterId a = adapter(*e, 4, true), b = adapter(*e, 2, false);
        train(*e, trace, a, b);
        const AdapterId c = save_and_load(*e, trace, a);
        sample(*e, trace, a, c);
        auto tight = load(device, kv_bytes_per_token(*e) * 2 * (10 + 50 + kv_state_tokens(*e)) * 5 / 2);
        if (tight) {
            continuous(*tight, trace);
        }
        return trace;
    }
    ScopedTempDir dir_{"device_strict_test"};
};

// The start-up probe that crashed on a GPU (issue 22): on meta the host sees zeros of the vocabulary's size.
TEST_P(DeviceStrictTest, LastLogitsOnMetaAreHostZerosOfTheVocabulary) {
    auto e = load("meta");
    ASSERT_TRUE(e);
    auto logits = e->last_logits(engine::BASE_MODEL, {0, 5, 9});
    ASSERT_TRUE(logits.ok()) << logits.error().message;
    ASSERT_EQ(static_cast<int64_t>(logits->size()), e->config().vocab_size);
    EXPECT_EQ(*std::max_element(logits->begin(), logits->end()), 0.0f);
    EXPECT_EQ(*std::min_element(logits->begin(), logits->end()), 0.0f);
}

TEST_P(DeviceStrictTest, EveryEnginePathRunsOnMetaWithTheCpuShapes) {
    const Trace cpu = run_all("cpu");
    const Trace meta = run_all("meta");
    ASSERT_GT(cpu.size(), 40u) << "the CPU run should have traced every path";
    for (size_t i = 0; i < std::max(cpu.size(), meta.size()); ++i) {
        ASSERT_EQ(i < meta.size() ? meta[i] : "(missing)", i < cpu.size() ? cpu[i] : "(missing)") << "line " << i;
    }
}

INSTANTIATE_TEST_SUITE_P(
    Models, DeviceStrictTest,
    ::testing::Values(
        StrictModel{"builtin", [](const std::string & dir) { ASSERT_TRUE(model::ensure_builtin_model(dir).ok()); }},
        StrictModel{"llama_bf16",
                    [](const std::string & dir) { write_tiny_model(dir, TinyFamily::LLAMA, model::DType::BF16, 3); }},
        StrictModel{
            "qwen3_moe",
            [](const std::string & dir) { write_tiny_model(dir, TinyFamily::QWEN3_MOE, model::DType::F32, 3); }},
        StrictModel{"qwen3_5",
                    [](const std::string & dir) { write_tiny_model(dir, TinyFamily::QWEN3_5, model::DType::F32, 3); }},
        StrictModel{
            "qwen3_5_moe",
            [](const std::string & dir) { write_tiny_model(dir, TinyFamily::QWEN3_5_MOE, model::DType::F32, 3); }}),
    [](const ::testing::TestParamInfo<StrictModel> & info) { return info.param.name; });

// The premise of the strict mode: a raw host read of a meta tensor throws instead of reading memory.
TEST(HostAccess, RawReadsOfMetaTensorsThrowAndTheHelperGivesZeros) {
    const torch::Tensor meta = torch::ones({2, 3}, torch::TensorOptions().device(torch::kMeta));  // [2, 3]
    EXPECT_THROW(meta.data_ptr<float>(), c10::Error);
    EXPECT_THROW(meta.sum().item<float>(), c10::Error);
    EXPECT_THROW(meta.to(torch::kCPU), c10::Error);
    const torch::Tensor host = engine::to_host(meta, torch::kFloat64);
    EXPECT_TRUE(host.device().is_cpu());
    EXPECT_EQ(host.sizes(), meta.sizes());
    EXPECT_EQ(host.scalar_type(), torch::kFloat64);
    EXPECT_EQ(host.abs().sum().item<double>(), 0.0);
    EXPECT_EQ(engine::host_value<double>(meta.sum(), "test"), 0.0);
}

TEST(HostAccess, AccessorsRefuseNonCpuWrongTypeAndStridedTensorsNamingTheCaller) {
    const torch::Tensor meta = torch::zeros({4}, torch::TensorOptions().device(torch::kMeta));
    try {
        engine::host_data<float>(meta, "the caller");
        ADD_FAILURE() << "host_data accepted a meta tensor";
    } catch (const c10::Error & e) {
        const std::string what = e.what_without_backtrace();
        EXPECT_NE(what.find("the caller"), std::string::npos) << what;
        EXPECT_NE(what.find("meta"), std::string::npos) << what;
    }
    const torch::Tensor cpu = torch::arange(12, torch::kFloat32).view({3, 4});  // [3, 4]
    EXPECT_THROW(engine::host_data<double>(cpu, "test"), c10::Error);
    EXPECT_THROW(engine::host_data<float>(cpu.t(), "test"), c10::Error);
    const float * strided = engine::host_strided_data<float>(cpu.t(), "test");  // [4, 3] with strides (1, 4)
    EXPECT_EQ(strided[cpu.t().stride(1)], 4.0f);                                // the transpose's [0, 1]
    EXPECT_EQ(engine::host_data<float>(cpu, "test")[5], 5.0f);
    EXPECT_TRUE(engine::to_host(cpu).is_alias_of(cpu)) << "a CPU contiguous tensor is not copied";
    const torch::Tensor copied = engine::to_host(cpu.t());
    EXPECT_TRUE(copied.is_contiguous());
    EXPECT_FALSE(copied.is_alias_of(cpu));
    EXPECT_EQ(engine::host_values<int64_t>(cpu.narrow(1, 1, 1).squeeze(1)), (std::vector<int64_t>{1, 5, 9}));
}

}  // namespace
}  // namespace tinkerd::testing
