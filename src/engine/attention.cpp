// RoPE tables and packed causal attention (see attention.h). Written with matmul + softmax because
// libtorch 1.13 has no scaled_dot_product_attention.
#include "engine/attention.h"

#include <cmath>
#include <limits>

namespace tinkerd::engine {

int64_t SequenceLayout::n_tokens() const {
    int64_t n = 0;
    for (int64_t len : lengths) {
        n += len;
    }
    return n;
}

torch::Tensor rope_inv_freq(const model::ModelConfig & c) {
    const int64_t dim = c.head_dim;
    torch::Tensor exponent = torch::arange(0, dim, 2, torch::kFloat64) / static_cast<double>(dim);
    torch::Tensor inv_freq = 1.0 / torch::pow(c.rope_theta, exponent);  // [D/2]
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
}

void RopeTables::grow(int64_t n_positions) {
    torch::Tensor pos = torch::arange(n_positions, torch::kFloat64);  // [n]
    torch::Tensor freqs = torch::outer(pos, inv_freq_);               // [n, D/2]
    torch::Tensor emb = torch::cat({freqs, freqs}, -1);               // [n, D]
    cos_ = emb.cos().to(device_, dtype_);
    sin_ = emb.sin().to(device_, dtype_);
}

std::pair<torch::Tensor, torch::Tensor> RopeTables::lookup(const torch::Tensor & positions) {
    const int64_t max_pos = positions.numel() ? positions.max().item<int64_t>() : 0;
    if (max_pos >= cos_.size(0)) {
        grow(max_pos + 1);  // beyond the trained context: allowed, the caller decided the limit
    }
    return {cos_.index_select(0, positions).unsqueeze(1), sin_.index_select(0, positions).unsqueeze(1)};
}

torch::Tensor apply_rope(const torch::Tensor & x, const torch::Tensor & cos, const torch::Tensor & sin) {
    const int64_t half = x.size(-1) / 2;
    torch::Tensor x1 = x.narrow(-1, 0, half);
    torch::Tensor x2 = x.narrow(-1, half, half);
    return x * cos + torch::cat({-x2, x1}, -1) * sin;
}

// Upper-triangular -inf mask [L, L], cached per (L, dtype).
static torch::Tensor causal_mask(int64_t len, torch::ScalarType dtype, torch::Device device) {
    thread_local std::map<std::pair<int64_t, int>, torch::Tensor> cache;
    auto key = std::make_pair(len, static_cast<int>(dtype));
    auto it = cache.find(key);
    if (it != cache.end() && it->second.device() == device) {
        return it->second;
    }
    if (cache.size() > 64) {
        cache.clear();
    }
    torch::Tensor mask = torch::full({len, len}, -std::numeric_limits<double>::infinity(),
                                     torch::TensorOptions().dtype(dtype).device(device))
                             .triu(1);
    cache[key] = mask;
    return mask;
}

// Attention for B sequences of the same length L. q [B, L, H, D], k/v [B, L, KV, D] -> [B, L, H*D].
static torch::Tensor attend_equal_lengths(const torch::Tensor & q, const torch::Tensor & k, const torch::Tensor & v) {
    const int64_t B = q.size(0), L = q.size(1), H = q.size(2), D = q.size(3), KV = k.size(2);
    const int64_t G = H / KV;
    // Group query heads by their kv head: [B*KV, G*L, D].
    torch::Tensor qg = q.view({B, L, KV, G, D}).permute({0, 2, 3, 1, 4}).reshape({B * KV, G * L, D});
    torch::Tensor kg = k.permute({0, 2, 1, 3}).reshape({B * KV, L, D});
    torch::Tensor vg = v.permute({0, 2, 1, 3}).reshape({B * KV, L, D});
    torch::Tensor scores = torch::bmm(qg, kg.transpose(1, 2)) * (1.0 / std::sqrt(static_cast<double>(D)));
    scores = scores.view({B * KV, G, L, L}) + causal_mask(L, scores.scalar_type(), scores.device());
    torch::Tensor probs = torch::softmax(scores, -1).view({B * KV, G * L, L});
    torch::Tensor out = torch::bmm(probs, vg);  // [B*KV, G*L, D]
    return out.view({B, KV, G, L, D}).permute({0, 3, 1, 2, 4}).reshape({B, L, H * D});
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
