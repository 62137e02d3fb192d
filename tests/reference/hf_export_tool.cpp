// hf_export_tool FIXTURES_DIR: for every HF reference case, trains the PEFT-initialised adapter one AdamW
// step in the engine (fp32), writes it as a checkpoint in our native layout to <case>/export_native/ (read back,
// imported and re-exported bit-exactly) and in PEFT's (store::peft_loadable_adapter: Qwen3.5's in_proj_q/k/v
// as one block-diagonal in_proj_qkv LoRA) to <case>/export/, and our outputs on the probe sequence
// (full log-softmax [N, V], last-position logits [V]) to <case>/export_ours.safetensors for
// check_hf_export.py, which loads the adapter with PeftModel.from_pretrained. For the Qwen3-MoE case it also
// writes an adapter with expert LoRA (random non-zero factors) to <case>/export_experts/ and our outputs to
// export_experts_ours.safetensors for check_moe_merge.py (tinker-cookbook's merge). Exit 1 on any failure.
#include <cstdio>
#include <numeric>
#include <random>

#include "hf_case.h"
#include "store/checkpoint_files.h"
#include "store/peft_export.h"

namespace tinkerd::testing {
namespace {

store::AdapterConfig checkpoint_config(const HfCase & c, const model::ModelConfig & model) {
    return store::make_adapter_config(c.name, c.spec.rank, c.spec.alpha, model, c.spec.train_attn, c.spec.train_mlp,
                                      c.spec.train_unembed);
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

// Our outputs on the probe with adapter id: the full log-softmax [N, V] (every vocabulary id as a 2-D target
// at every position) and the last position's logits [V].
void write_outputs(engine::Engine & eng, engine::AdapterId id, const HfCase & c, const std::string & path) {
    const int64_t n = static_cast<int64_t>(c.probe.size()), vocab = eng.config().vocab_size;
    std::vector<int64_t> all(static_cast<size_t>(n * vocab));
    for (int64_t i = 0; i < n; ++i) {
        std::iota(all.begin() + i * vocab, all.begin() + (i + 1) * vocab, int64_t{0});
    }
    engine::Datum probe{c.probe, {{"target_tokens", engine::make_host_tensor_i64({n, vocab}, all)}}};
    auto fwd = check(std::move(eng.forward_backward({{id, {probe}, "cross_entropy", {}}}, false)[0]), "forward");
    auto last = check(eng.last_logits(id, c.probe), "last_logits");
    std::map<std::string, model::OwnedTensor> ours;
    ours["logprobs"] = fwd.logprobs[0];
    ours["last_logits"] = engine::make_host_tensor_f32({vocab}, last);
    ours["probe"] = engine::make_host_tensor_i64({n}, c.probe);
    check(model::write_safetensors(path, ours), "write " + path);
}

// An adapter training every part (experts included) with seeded random factors, B non-zero.
void export_experts(engine::Engine & eng, const HfCase & c) {
    engine::LoraSpec spec = c.spec;
    spec.train_attn = spec.train_mlp = spec.train_unembed = true;
    const engine::AdapterId id = check(eng.create_adapter(spec), "create_adapter (experts)");
    auto weights = check(eng.export_adapter(id, false), "export_adapter");
    std::mt19937 rng(77);
    std::normal_distribution<double> normal(0.0, 1.0);
    for (auto & [key, t] : weights) {
        std::vector<float> v(engine::host_tensor_values(t).size());
        for (float & x : v) {
            x = static_cast<float>((key.find("lora_B") != std::string::npos ? 0.05 : 0.2) * normal(rng));
        }
        t = engine::make_host_tensor_f32(t.shape, v);
    }
    check(eng.import_adapter(id, weights, false), "import_adapter (experts)");
    const store::AdapterConfig config =
        store::make_adapter_config(c.name, spec.rank, spec.alpha, eng.config(), true, true, true);
    check(store::write_checkpoint(c.dir + "/export_experts", config, weights, true), "write_checkpoint (experts)");
    write_outputs(eng, id, c, c.dir + "/export_experts_ours.safetensors");
    std::printf("[%s] exported %zu LoRA tensors with expert factors to %s/export_experts\n", c.name.c_str(),
                weights.size(), c.dir.c_str());
}

// The native checkpoint (Tinker's layout: Qwen3.5's in_proj_q/k/v apart) read back and imported into a fresh
// adapter exports the very same bytes.
void check_native_round_trip(engine::Engine & eng, const HfCase & c, const store::Tensors & exported) {
    const store::CheckpointContents back = check(store::read_checkpoint(c.dir + "/export_native", false), "read");
    const engine::AdapterId id = check(eng.create_adapter(c.spec), "create_adapter (round trip)");
    check(eng.import_adapter(id, back.tensors, false), "import_adapter (round trip)");
    const auto again = check(eng.export_adapter(id, false), "export_adapter (round trip)");
    if (again.size() != exported.size()) {
        throw std::runtime_error("round trip: " + std::to_string(again.size()) + " tensors, exported " +
                                 std::to_string(exported.size()));
    }
    for (const auto & [key, t] : exported) {
        auto it = again.find(key);
        if (it == again.end() || it->second.bytes != t.bytes || it->second.shape != t.shape) {
            throw std::runtime_error("round trip: " + key + " is not bit-exact");
        }
    }
    check(eng.remove_adapter(id), "remove_adapter");
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
    const store::AdapterConfig config = checkpoint_config(c, eng->config());
    check(store::write_checkpoint(c.dir + "/export_native", config, weights, true), "write_checkpoint (native)");
    check_native_round_trip(*eng, c, weights);
    const store::PeftAdapter peft = check(store::peft_loadable_adapter(config, weights), "peft_loadable_adapter");
    check(store::write_checkpoint(c.dir + "/export", peft.config, peft.tensors, true), "write_checkpoint");

    write_outputs(*eng, id, c, c.dir + "/export_ours.safetensors");
    std::printf("[%s] exported %zu LoRA tensors to %s/export\n", name.c_str(), weights.size(), c.dir.c_str());
    if (eng->config().n_experts > 0) {
        export_experts(*eng, c);
    }
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
