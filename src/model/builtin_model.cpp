// Deterministic generation of the built-in model (see builtin_model.h).
#include "model/builtin_model.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "model/safetensors.h"

namespace tinkerd::model {
namespace {

constexpr const char * GENERATOR_VERSION = "1";

struct Shape {
    int64_t vocab = 260;  // 256 bytes + <bos> <eos> <pad> <unk>
    int64_t hidden = 64;
    int64_t intermediate = 176;
    int64_t layers = 4;
    int64_t heads = 4;
    int64_t kv_heads = 2;
    int64_t max_positions = 2048;
};

OwnedTensor random_tensor(std::vector<int64_t> shape, float stddev, float mean, std::mt19937_64 & rng) {
    int64_t n = 1;
    for (int64_t d : shape)
        n *= d;
    std::normal_distribution<float> dist(mean, stddev);
    std::vector<float> values(n);
    for (float & v : values)
        v = stddev == 0 ? mean : dist(rng);
    OwnedTensor t{DType::F32, std::move(shape), {}};
    t.bytes.resize(values.size() * sizeof(float));
    std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
    return t;
}

std::map<std::string, OwnedTensor> make_weights(const Shape & s, uint64_t seed) {
    std::mt19937_64 rng(seed);
    const int64_t head_dim = s.hidden / s.heads;
    std::map<std::string, OwnedTensor> w;
    w["model.embed_tokens.weight"] = random_tensor({s.vocab, s.hidden}, 0.5f, 0, rng);
    for (int64_t l = 0; l < s.layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        w[p + "input_layernorm.weight"] = random_tensor({s.hidden}, 0, 1, rng);
        w[p + "post_attention_layernorm.weight"] = random_tensor({s.hidden}, 0, 1, rng);
        w[p + "self_attn.q_proj.weight"] = random_tensor({s.heads * head_dim, s.hidden}, 0.1f, 0, rng);
        w[p + "self_attn.k_proj.weight"] = random_tensor({s.kv_heads * head_dim, s.hidden}, 0.1f, 0, rng);
        w[p + "self_attn.v_proj.weight"] = random_tensor({s.kv_heads * head_dim, s.hidden}, 0.1f, 0, rng);
        w[p + "self_attn.o_proj.weight"] = random_tensor({s.hidden, s.heads * head_dim}, 0.1f, 0, rng);
        w[p + "mlp.gate_proj.weight"] = random_tensor({s.intermediate, s.hidden}, 0.1f, 0, rng);
        w[p + "mlp.up_proj.weight"] = random_tensor({s.intermediate, s.hidden}, 0.1f, 0, rng);
        w[p + "mlp.down_proj.weight"] = random_tensor({s.hidden, s.intermediate}, 0.1f, 0, rng);
    }
    w["model.norm.weight"] = random_tensor({s.hidden}, 0, 1, rng);
    return w;
}

nlohmann::json make_config(const Shape & s) {
    return {{"architectures", {"LlamaForCausalLM"}},
            {"model_type", "llama"},
            {"vocab_size", s.vocab},
            {"hidden_size", s.hidden},
            {"intermediate_size", s.intermediate},
            {"num_hidden_layers", s.layers},
            {"num_attention_heads", s.heads},
            {"num_key_value_heads", s.kv_heads},
            {"max_position_embeddings", s.max_positions},
            {"rms_norm_eps", 1e-5},
            {"rope_theta", 10000.0},
            {"hidden_act", "silu"},
            {"tie_word_embeddings", true},
            {"torch_dtype", "float32"},
            {"bos_token_id", 256},
            {"eos_token_id", 257},
            {"tinkerd_builtin_version", GENERATOR_VERSION}};
}

bool is_current(const std::string & dir) {
    std::ifstream in(dir + "/config.json");
    if (!in || !std::filesystem::exists(dir + "/model.safetensors")) {
        return false;
    }
    auto config = nlohmann::json::parse(in, nullptr, false);
    return !config.is_discarded() && config.value("tinkerd_builtin_version", "") == GENERATOR_VERSION;
}

}  // namespace

Result<void> ensure_builtin_model(const std::string & dir, uint64_t seed) {
    if (is_current(dir)) {
        return {};
    }
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
        return internal_error("cannot create " + dir + ": " + ec.message());
    }
    Shape shape;
    TRY_STATUS(write_safetensors(dir + "/model.safetensors", make_weights(shape, seed),
                                 {{"format", "pt"}, {"tinkerd_builtin_seed", std::to_string(seed)}}));
    const std::string tmp = dir + "/config.json.tmp";
    {
        std::ofstream out(tmp);
        out << make_config(shape).dump(2) << "\n";
        if (!out) {
            return internal_error("cannot write " + tmp);
        }
    }
    std::filesystem::rename(tmp, dir + "/config.json", ec);
    if (ec) {
        return internal_error("cannot rename " + tmp + ": " + ec.message());
    }
    return {};
}

}  // namespace tinkerd::model
