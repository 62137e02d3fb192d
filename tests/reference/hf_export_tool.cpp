// hf_export_tool FIXTURES_DIR: for every HF reference case, trains the PEFT-initialised adapter one AdamW
// step in the engine (fp32), writes it as a sampler checkpoint (store::write_checkpoint: PEFT
// adapter_model.safetensors + adapter_config.json) to <case>/export/, and our outputs on the probe sequence
// (full log-softmax [N, V], last-position logits [V]) to <case>/export_ours.safetensors for
// check_hf_export.py, which loads the adapter with PeftModel.from_pretrained. Exit 1 on any failure.
#include <cstdio>
#include <numeric>

#include "hf_case.h"
#include "store/checkpoint_files.h"

namespace tinkerd::testing {
namespace {

store::AdapterConfig checkpoint_config(const HfCase & c) {
    store::AdapterConfig config;
    config.base_model = c.name;
    config.rank = c.spec.rank;
    config.alpha = c.spec.alpha;
    config.train_attn = c.spec.train_attn;
    config.train_mlp = c.spec.train_mlp;
    config.train_unembed = c.spec.train_unembed;
    if (c.spec.train_attn) {
        config.target_modules.insert(config.target_modules.end(), {"q_proj", "k_proj", "v_proj", "o_proj"});
    }
    if (c.spec.train_mlp) {
        config.target_modules.insert(config.target_modules.end(), {"gate_proj", "up_proj", "down_proj"});
    }
    if (c.spec.train_unembed) {
        config.target_modules.push_back("lm_head");
    }
    return config;
}

template <typename T>
T check(Result<T> r, const std::string & what) {
    if (!r.ok()) {
        throw std::runtime_error(what + ": " + r.error().message);
    }
    return std::move(r).value();
}

void check(Result<void> r, const std::string & what) {
    if (!r.ok()) {
        throw std::runtime_error(what + ": " + r.error().message);
    }
}

void export_case(const std::string & name) {
    const HfCase c = load_hf_case(name);
    auto eng = check(engine::Engine::load(c.compat_dir, {engine::ComputeDType::FP32, 2}), c.compat_dir);
    const engine::AdapterId id = check(eng->create_adapter(c.spec), "create_adapter");
    auto status = eng->import_adapter(id, c.under("init"), false);
    if (!status.ok()) {
        throw std::runtime_error("import_adapter: " + status.error().message);
    }
    engine::ForwardBackwardInput train{id, c.datums, "cross_entropy", {}};
    check(std::move(eng->forward_backward({train}, true)[0]), "forward_backward");
    engine::AdamParams adam;
    adam.learning_rate = 1e-3;  // every weight moves by ~lr, so the export differs from the import
    check(eng->optim_step(id, adam), "optim_step");
    auto weights = check(eng->export_adapter(id, false), "export_adapter");
    check(store::write_checkpoint(c.dir + "/export", checkpoint_config(c), weights, true), "write_checkpoint");

    // Every vocabulary id as a 2-D target at every probe position gives the full log-softmax.
    const int64_t n = static_cast<int64_t>(c.probe.size()), vocab = eng->config().vocab_size;
    std::vector<int64_t> all(static_cast<size_t>(n * vocab));
    for (int64_t i = 0; i < n; ++i) {
        std::iota(all.begin() + i * vocab, all.begin() + (i + 1) * vocab, int64_t{0});
    }
    engine::Datum probe{c.probe, {{"target_tokens", engine::make_host_tensor_i64({n, vocab}, all)}}};
    auto fwd = check(std::move(eng->forward_backward({{id, {probe}, "cross_entropy", {}}}, false)[0]), "forward");
    auto last = check(eng->last_logits(id, c.probe), "last_logits");
    std::map<std::string, model::OwnedTensor> ours;
    ours["logprobs"] = fwd.logprobs[0];
    ours["last_logits"] = engine::make_host_tensor_f32({vocab}, last);
    ours["probe"] = engine::make_host_tensor_i64({n}, c.probe);
    check(model::write_safetensors(c.dir + "/export_ours.safetensors", ours), "write export_ours.safetensors");
    std::printf("[%s] exported %zu LoRA tensors to %s/export\n", name.c_str(), weights.size(), c.dir.c_str());
}

}  // namespace
}  // namespace tinkerd::testing

int main(int argc, char ** argv) {
    if (argc > 1) {
        setenv("TINKERD_FIXTURES_DIR", argv[1], 1);
    }
    int failures = 0;
    for (const std::string & name : tinkerd::testing::HF_CASES) {
        try {
            tinkerd::testing::export_case(name);
        } catch (const std::exception & e) {
            std::fprintf(stderr, "hf_export_tool: %s: %s\n", name.c_str(), e.what());
            ++failures;
        }
    }
    return failures == 0 ? 0 : 1;
}
