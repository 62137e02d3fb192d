// RoPE tables and packed causal attention (see attention.h): sequences grouped by length, each group one
// fused scaled_dot_product_attention call.
#include "engine/attention.h"

#include <cmath>
#include <map>

#include "engine/fused_ops.h"

namespace tinkerd::engine {

int64_t SequenceLayout::n_tokens() const {
    int64_t n = 0;
    for (int64_t len : lengths) {
        n += len;
    }
    return n;
}

int64_t rotary_dim(const model::ModelConfig & c) {
    return static_cast<int64_t>(static_cast<double>(c.head_dim) * c.partial_rotary_factor);
}

torch::Tensor rope_inv_freq(const model::ModelConfig & c) {
    const int64_t dim = rotary_dim(c);
    torch::Tensor exponent = torch::arange(0, dim, 2, torch::kFloat64) / static_cast<double>(dim);
    torch::Tensor inv_freq = 1.0 / torch::pow(c.rope_theta, exponent);  // [Dr/2]
    if (c.rope_scaling.type != "llama3") {
        return inv_freq;
    }
    const auto & s = c.rope_scaling;
    const double old_len = static_cast<double>(s.original_max_position_embeddings);
    const double low_wavelen = old_len / s.low_freq_factor;
    const double high_wavelen = old_len / s.high_freq_factor;
    torch::Tensor wavelen = 2.0 * M_PI / inv_freq;
    torch::Tensor scaled = torch::where(wavelen > low_wavelen, inv_freq / s.factor, inv_freq);
    torch::Tensor smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    torch::Tensor smoothed = (1.0 - smooth) * scaled / s.factor + smooth * scaled;
    torch::Tensor is_medium = (wavelen >= high_wavelen).logical_and(wavelen <= low_wavelen);
    return torch::where(is_medium, smoothed, scaled);
}

RopeTables::RopeTables(const model::ModelConfig & config, torch::ScalarType dtype, torch::Device device)
    : inv_freq_(rope_inv_freq(config)), dtype_(dtype), device_(device) {
    grow(std::max<int64_t>(config.max_position_embeddings, 1));
    if (config.mrope_section.size() == 3) {
        const int64_t half = inv_freq_.size(0);
        torch::Tensor j = torch::arange(half).repeat({2});  // [Dr]: each column's frequency
        height_columns_ = ((j % 3 == 1) & (j < 3 * config.mrope_section[1])).to(device_);
        width_columns_ = ((j % 3 == 2) & (j < 3 * config.mrope_section[2])).to(device_);
    }
}

void RopeTables::grow(int64_t n_positions) {
    torch::Tensor pos = torch::arange(n_positions, torch::kFloat64);  // [n]
    torch::Tensor freqs = torch::outer(pos, inv_freq_);               // [n, Dr/2]
    torch::Tensor emb = torch::cat({freqs, freqs}, -1);               // [n, Dr]
    cos_ = emb.cos().to(device_, dtype_);
    sin_ = emb.sin().to(device_, dtype_);
}

std::pair<torch::Tensor, torch::Tensor> RopeTables::lookup(const torch::Tensor & positions, int64_t max_position) {
    if (max_position >= cos_.size(0)) {
        grow(max_position + 1);  // beyond the trained context: allowed, the caller decided the limit
    }
    return {cos_.index_select(0, positions).unsqueeze(1), sin_.index_select(0, positions).unsqueeze(1)};
}

std::pair<torch::Tensor, torch::Tensor> RopeTables::lookup_mrope(const torch::Tensor & positions,
                                                                 int64_t max_position) {
    TORCH_CHECK(height_columns_.defined(), "lookup_mrope: the model has no mrope_section");
    if (max_position >= cos_.size(0)) {
        grow(max_position + 1);
    }
    const auto pick = [&](const torch::Tensor & table) {
        torch::Tensor t = table.index_select(0, positions[0]), h = table.index_select(0, positions[1]);
        torch::Tensor w = table.index_select(0, positions[2]);                                     // [T, Dr] each
        return torch::where(width_columns_, w, torch::where(height_columns_, h, t)).unsqueeze(1);  // [T, 1, Dr]
    };
    return {pick(cos_), pick(sin_)};
}

torch::Tensor apply_rope(const torch::Tensor & x, const torch::Tensor & cos, const torch::Tensor & sin) {
    return fused_rope(x, cos, sin);
}

torch::Tensor apply_partial_rope(const torch::Tensor & x, const torch::Tensor & cos, const torch::Tensor & sin) {
    const int64_t D = x.size(-1), Dr = cos.size(-1);
    if (Dr == D) {
        return fused_rope(x, cos, sin);
    }
    // split (not narrow): the backward is one cat, not a zero-filled [T, heads, D] per part.
    auto parts = x.split_with_sizes({Dr, D - Dr}, -1);
    return torch::cat({fused_rope(parts[0], cos, sin), parts[1]}, -1);  // [T, heads, D]
}

// Attention for B sequences of the same length L. q [B, L, H, D], k/v [B, L, KV, D] -> [B, L, H*D].
// torch's fused scaled_dot_product_attention (a flash kernel on CPU: online softmax, no [L, L] scores kept
// for the backward), query head h reading kv head h / (H / KV).
static torch::Tensor attend_equal_lengths(const torch::Tensor & q, const torch::Tensor & k, const torch::Tensor & v) {
    const int64_t B = q.size(0), L = q.size(1), H = q.size(2), D = q.size(3);
    torch::Tensor out = at::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                         /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true,
                                                         /*scale=*/std::nullopt, /*enable_gqa=*/true);  // [B, H, L, D]
    return out.transpose(1, 2).reshape({B, L, H * D});
}

torch::Tensor packed_causal_attention(const torch::Tensor & q, const torch::Tensor & k, const torch::Tensor & v,
                                      const SequenceLayout & layout) {
    const int64_t H = q.size(1), D = q.size(2), KV = k.size(1);
    std::map<int64_t, std::vector<size_t>> by_length;  // length -> sequence indices
    for (size_t i = 0; i < layout.lengths.size(); ++i) {
        by_length[layout.lengths[i]].push_back(i);
    }
    if (by_length.size() == 1) {  // common case: one shape, rows already in order
        const int64_t L = layout.lengths[0], B = static_cast<int64_t>(layout.lengths.size());
        return attend_equal_lengths(q.view({B, L, H, D}), k.view({B, L, KV, D}), v.view({B, L, KV, D}))
            .view({B * L, H * D});
    }
    std::vector<torch::Tensor> outputs;
    std::vector<int64_t> order;  // packed row of each output row
    for (const auto & [len, seqs] : by_length) {
        std::vector<int64_t> rows;
        for (size_t s : seqs) {
            for (int64_t t = 0; t < len; ++t) {
                rows.push_back(layout.offsets[s] + t);
            }
        }
        const int64_t B = static_cast<int64_t>(seqs.size());
        torch::Tensor index = torch::tensor(rows, torch::TensorOptions().dtype(torch::kInt64)).to(q.device());
        auto gather = [&](const torch::Tensor & x, int64_t heads) {
            return x.index_select(0, index).view({B, len, heads, D});
        };
        outputs.push_back(attend_equal_lengths(gather(q, H), gather(k, KV), gather(v, KV)).view({B * len, H * D}));
        order.insert(order.end(), rows.begin(), rows.end());
    }
    // Row j of the concatenation belongs at packed row order[j]; invert that permutation.
    std::vector<int64_t> inverse(order.size());
    for (size_t j = 0; j < order.size(); ++j) {
        inverse[order[j]] = static_cast<int64_t>(j);
    }
    torch::Tensor inv = torch::tensor(inverse, torch::TensorOptions().dtype(torch::kInt64)).to(q.device());
    return torch::cat(outputs, 0).index_select(0, inv);
}

}  // namespace tinkerd::engine
