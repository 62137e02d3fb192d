// delta_rule_tool IN.safetensors OUT.safetensors: runs the Gated DeltaNet blocks (engine/arch/delta_rule.h) on
// the inputs check_delta_rule.py wrote (fp64) and writes our outputs for it to compare with transformers':
// the chunked rule + final states, the recurrent step run token by token, the conv (full and stepped), the gated
// RMSNorm and the whole mixer with plain projections. Exit 1 on any failure.
#include <cstdio>

#include "engine/arch/delta_rule.h"
#include "engine/torch_convert.h"

namespace tinkerd::testing {
namespace {

using engine::SequenceLayout;

class Inputs {
  public:
    explicit Inputs(const std::string & path) {
        auto file = model::SafetensorsFile::open(path);
        if (!file.ok()) {
            throw std::runtime_error(file.error().message);
        }
        file_ = std::move(file).value();
    }
    torch::Tensor operator[](const std::string & name) const {
        auto view = file_->get(name);
        if (!view.ok()) {
            throw std::runtime_error(view.error().message);
        }
        return engine::view_as_tensor(view.value()).clone();
    }

  private:
    std::shared_ptr<model::SafetensorsFile> file_;
};

SequenceLayout layout_of(const torch::Tensor & lengths) {
    SequenceLayout layout;
    int64_t offset = 0;
    for (int64_t i = 0; i < lengths.numel(); ++i) {
        layout.offsets.push_back(offset);
        layout.lengths.push_back(lengths[i].item<int64_t>());
        offset += layout.lengths.back();
    }
    return layout;
}

// The recurrent step over [B, L, H, D] batches, one token at a time -> outputs [B, L, H, Dv], states.
void recurrent(const Inputs & in, std::map<std::string, torch::Tensor> & out) {
    const torch::Tensor q = in["rec_q"], k = in["rec_k"], v = in["rec_v"], g = in["rec_g"], beta = in["rec_beta"];
    torch::Tensor state = torch::zeros({q.size(0), q.size(2), q.size(3), v.size(3)}, q.options());
    std::vector<torch::Tensor> steps;
    for (int64_t t = 0; t < q.size(1); ++t) {
        steps.push_back(engine::recurrent_gated_delta_step(q.select(1, t), k.select(1, t), v.select(1, t),
                                                           g.select(1, t), beta.select(1, t), state));
    }
    out["rec_out"] = torch::stack(steps, 1);
    out["rec_state"] = state;
}

// Full conv over the packed prompts, then conv_step_x [N, S, Cc] one step at a time from the prompts' states.
void conv(const Inputs & in, std::map<std::string, torch::Tensor> & out) {
    const torch::Tensor x = in["conv_x"], w = in["conv_w"], steps = in["conv_step_x"];
    const SequenceLayout layout = layout_of(in["conv_lengths"]);
    out["conv_out"] = engine::causal_conv1d_silu(x, w, layout);
    torch::Tensor state = engine::conv_state_from_prompt(x, layout, w.size(1));
    std::vector<torch::Tensor> step_out;
    for (int64_t n = 0; n < steps.size(0); ++n) {
        step_out.push_back(engine::causal_conv1d_silu_step(steps[n], w, state));
    }
    out["conv_step_out"] = torch::stack(step_out);
}

// The mixer with plain projections: dn_x [T, C] packed by dn_lengths -> out_proj output [T, C].
void mixer(const Inputs & in, std::map<std::string, torch::Tensor> & out) {
    const torch::Tensor dims = in["dn_dims"], x = in["dn_x"];
    engine::DeltaNetDims d{dims[0].item<int64_t>(), dims[1].item<int64_t>(), dims[2].item<int64_t>(),
                           dims[3].item<int64_t>(), dims[4].item<int64_t>(), in["dn_eps"][0].item<double>()};
    engine::DeltaNetWeights w{in["conv1d.weight"].squeeze(1), in["dt_bias"], in["A_log"], in["norm.weight"]};
    auto proj = [&](const std::string & name) { return x.matmul(in[name + ".weight"].t()); };
    const engine::DeltaNetInputs inputs{proj("in_proj_qkv"), proj("in_proj_z"), proj("in_proj_b"), proj("in_proj_a")};
    const torch::Tensor mixed = engine::deltanet_mix(w, d, inputs, layout_of(in["dn_lengths"]));
    out["dn_out"] = mixed.matmul(in["out_proj.weight"].t());
}

void run(const std::string & in_path, const std::string & out_path) {
    const Inputs in(in_path);
    std::map<std::string, torch::Tensor> out;
    torch::Tensor state;
    out["rule_out"] =
        engine::gated_delta_rule(in["q"], in["k"], in["v"], in["g"], in["beta"], layout_of(in["lengths"]), &state);
    out["rule_state"] = state;
    recurrent(in, out);
    conv(in, out);
    out["norm_out"] =
        engine::gated_rms_norm(in["norm_x"], in["norm_w"], in["norm_z"], in["norm_eps"][0].item<double>());
    mixer(in, out);
    std::map<std::string, model::OwnedTensor> host;
    for (const auto & [name, t] : out) {
        host[name] = engine::tensor_to_host(t, model::DType::F64);
    }
    auto written = model::write_safetensors(out_path, host);
    if (!written.ok()) {
        throw std::runtime_error(written.error().message);
    }
}

}  // namespace
}  // namespace tinkerd::testing

int main(int argc, char ** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: delta_rule_tool IN.safetensors OUT.safetensors\n");
        return 2;
    }
    try {
        tinkerd::testing::run(argv[1], argv[2]);
    } catch (const std::exception & e) {
        std::fprintf(stderr, "delta_rule_tool: %s\n", e.what());
        return 1;
    }
    return 0;
}
