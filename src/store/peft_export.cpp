// peft_loadable_adapter: merges Qwen3.5's in_proj_q/k/v LoRAs into one block-diagonal LoRA on in_proj_qkv (byte
// copies, so the values are exact in any dtype) and rewrites target_modules / rank_pattern / alpha_pattern.
#include "store/peft_export.h"

#include <algorithm>
#include <array>
#include <cstring>

namespace tinkerd::store {
namespace {

const std::string kQSuffix = ".linear_attn.in_proj_q.lora_A.weight";
const std::array<const char *, 3> kParts = {"in_proj_q", "in_proj_k", "in_proj_v"};

bool is_split_qkv_key(const std::string & key) {
    for (const char * part : kParts) {
        const std::string module = std::string(".linear_attn.") + part + ".lora_";
        if (key.find(module) != std::string::npos) {
            return true;
        }
    }
    return false;
}

bool is_expert_module(const std::string & module) {
    return module.rfind("experts.", 0) == 0;
}

// The three factors (A or B) of one layer, checked 2-D, one dtype, rank R (A's rows / B's columns).
Result<std::array<const model::OwnedTensor *, 3>> layer_factors(const Tensors & tensors, const std::string & prefix,
                                                                const char * ab, int64_t rank) {
    std::array<const model::OwnedTensor *, 3> out{};
    for (size_t i = 0; i < kParts.size(); ++i) {
        const std::string key = prefix + kParts[i] + ".lora_" + ab + ".weight";
        auto it = tensors.find(key);
        if (it == tensors.end()) {
            return invalid_argument("adapter: missing '" + key + "' (in_proj_q/k/v are trained together)");
        }
        const model::OwnedTensor & t = it->second;
        const bool is_a = ab[0] == 'A';
        if (t.shape.size() != 2 || t.shape[is_a ? 0 : 1] != rank) {
            return invalid_argument("adapter: '" + key + "' is not a rank-" + std::to_string(rank) + " factor");
        }
        out[i] = &t;
    }
    if (out[1]->dtype != out[0]->dtype || out[2]->dtype != out[0]->dtype) {
        return invalid_argument("adapter: the in_proj_q/k/v factors of " + prefix + " differ in dtype");
    }
    return out;
}

// A = [A_q; A_k; A_v]: [3R, C] (the same C each: row blocks back to back).
Result<model::OwnedTensor> stack_a(const std::array<const model::OwnedTensor *, 3> & a, const std::string & prefix) {
    model::OwnedTensor out{a[0]->dtype, {0, a[0]->shape[1]}, {}};
    for (const model::OwnedTensor * t : a) {
        if (t->shape[1] != out.shape[1]) {
            return invalid_argument("adapter: the in_proj_q/k/v A factors of " + prefix + " differ in width");
        }
        out.shape[0] += t->shape[0];
        out.bytes.insert(out.bytes.end(), t->bytes.begin(), t->bytes.end());
    }
    return out;
}

// B = blockdiag(B_q, B_k, B_v): [Kd + Kd + Vd, 3R], part i's rows in columns [i·R, (i+1)·R), zeros elsewhere.
model::OwnedTensor block_diagonal_b(const std::array<const model::OwnedTensor *, 3> & b, int64_t rank) {
    const size_t elem = model::dtype_size(b[0]->dtype);
    int64_t rows = 0;
    for (const model::OwnedTensor * t : b) {
        rows += t->shape[0];
    }
    model::OwnedTensor out{b[0]->dtype, {rows, 3 * rank}, std::vector<uint8_t>(rows * 3 * rank * elem, 0)};
    int64_t row0 = 0;
    for (size_t i = 0; i < b.size(); ++i) {
        for (int64_t r = 0; r < b[i]->shape[0]; ++r) {
            uint8_t * dst = out.bytes.data() + ((row0 + r) * 3 * rank + static_cast<int64_t>(i) * rank) * elem;
            std::memcpy(dst, b[i]->bytes.data() + r * rank * elem, rank * elem);
        }
        row0 += b[i]->shape[0];
    }
    return out;
}

// target_modules with in_proj_q/k/v replaced by in_proj_qkv (where in_proj_q was) and expert modules dropped.
std::vector<std::string> peft_modules(const std::vector<std::string> & modules) {
    std::vector<std::string> out;
    for (const std::string & m : modules) {
        if (m == "in_proj_q") {
            out.push_back("in_proj_qkv");
        } else if (m != "in_proj_k" && m != "in_proj_v" && !is_expert_module(m)) {
            out.push_back(m);
        }
    }
    return out;
}

}  // namespace

Result<PeftAdapter> peft_loadable_adapter(const AdapterConfig & config, const Tensors & tensors) {
    PeftAdapter out{config, {}};
    bool merged = false;
    for (const auto & [key, tensor] : tensors) {
        if (!is_split_qkv_key(key)) {
            out.tensors[key] = tensor;
            continue;
        }
        if (key.size() < kQSuffix.size() || key.compare(key.size() - kQSuffix.size(), kQSuffix.size(), kQSuffix) != 0) {
            continue;  // in_proj_k/v and the B factors are merged with their layer's in_proj_q A
        }
        const std::string prefix = key.substr(0, key.size() - std::string("in_proj_q.lora_A.weight").size());
        auto a = layer_factors(tensors, prefix, "A", config.rank);
        TRY_STATUS(a);
        auto b = layer_factors(tensors, prefix, "B", config.rank);
        TRY_STATUS(b);
        auto stacked = stack_a(*a, prefix);
        TRY_STATUS(stacked);
        out.tensors[prefix + "in_proj_qkv.lora_A.weight"] = std::move(stacked).value();
        out.tensors[prefix + "in_proj_qkv.lora_B.weight"] = block_diagonal_b(*b, config.rank);
        merged = true;
    }
    out.config.target_modules = peft_modules(config.target_modules);
    if (merged) {
        out.config.rank_pattern["in_proj_qkv"] = 3 * config.rank;
        out.config.alpha_pattern["in_proj_qkv"] = 3 * config.alpha;  // PEFT's scale (3α)/(3R) = α/R, as ours
    }
    return out;
}

}  // namespace tinkerd::store
