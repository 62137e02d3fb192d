// SequenceCache (per-sequence K/V slabs) and attention of new rows against the cache (kv_cache.h).
#include "engine/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "engine/kernels/attention_decode.h"

namespace tinkerd::engine {

SequenceCache::SequenceCache(int64_t n_layers, int64_t n_kv_heads, int64_t head_dim, torch::ScalarType dtype,
                             torch::Device device)
    : k_(n_layers),
      v_(n_layers),
      n_kv_heads_(n_kv_heads),
      head_dim_(head_dim),
      options_(torch::TensorOptions().dtype(dtype).device(device)) {}

void SequenceCache::reserve(int64_t n_tokens) {
    if (n_tokens <= capacity_) {
        return;
    }
    const int64_t grown = n_tokens;  // exact: SampleLoop chooses (and accounts for) the growth steps
    for (auto * slabs : {&k_, &v_}) {
        for (torch::Tensor & slab : *slabs) {
            torch::Tensor bigger = torch::empty({n_kv_heads_, grown, head_dim_}, options_);  // [KV, grown, D]
            if (length_ > 0) {
                bigger.narrow(1, 0, length_).copy_(slab.narrow(1, 0, length_));
            }
            slab = bigger;
        }
    }
    capacity_ = grown;
}

void SequenceCache::write(int64_t layer, const torch::Tensor & k, const torch::Tensor & v) {
    const int64_t n = k.size(0);
    reserve(length_ + n);
    k_[layer].narrow(1, length_, n).copy_(k.transpose(0, 1));  // [n, KV, D] -> [KV, n, D]
    v_[layer].narrow(1, length_, n).copy_(v.transpose(0, 1));
}

SequenceCache SequenceCache::fork() const {
    SequenceCache copy = *this;
    for (auto * slabs : {&copy.k_, &copy.v_}) {
        for (torch::Tensor & slab : *slabs) {
            slab = slab.clone();
        }
    }
    return copy;
}

torch::Tensor cached_attention(const torch::Tensor & q, const torch::Tensor & k, const torch::Tensor & v) {
    const int64_t B = q.size(0), n = q.size(1), H = q.size(2), D = q.size(3);
    const int64_t KV = k.size(1), L = k.size(2), G = H / KV;
    // Group query heads by their kv head, as attend_equal_lengths: [B*KV, G*n, D].
    torch::Tensor qg = q.view({B, n, KV, G, D}).permute({0, 2, 3, 1, 4}).reshape({B * KV, G * n, D});
    torch::Tensor kg = k.reshape({B * KV, L, D});
    torch::Tensor vg = v.reshape({B * KV, L, D});
    torch::Tensor scores = torch::bmm(qg, kg.transpose(1, 2)) * (1.0 / std::sqrt(static_cast<double>(D)));
    if (n > 1) {  // new row i (position L - n + i) must not see keys after it
        torch::Tensor mask =
            torch::full({n, L}, -std::numeric_limits<double>::infinity(), scores.options()).triu(L - n + 1);  // [n, L]
        scores = scores.view({B * KV, G, n, L}) + mask;
    }
    torch::Tensor probs = torch::softmax(scores, -1).view({B * KV, G * n, L});
    torch::Tensor out = torch::bmm(probs, vg);  // [B*KV, G*n, D]
    return out.view({B, KV, G, n, D}).permute({0, 3, 1, 2, 4}).reshape({B, n, H * D});
}

CachedAttention::CachedAttention(const std::vector<int64_t> & lengths, const std::vector<SequenceCache *> & caches,
                                 torch::Device device)
    : lengths_(lengths), caches_(caches) {
    std::map<std::pair<int64_t, int64_t>, size_t> group_of;  // (n, total) -> index in groups_
    int64_t offset = 0;
    for (size_t s = 0; s < lengths.size(); ++s) {
        offsets_.push_back(offset);
        offset += lengths[s];
        const auto key = std::make_pair(lengths[s], caches[s]->length() + lengths[s]);
        auto [it, added] = group_of.emplace(key, groups_.size());
        if (added) {
            groups_.push_back({{}, key.first, key.second, {}});
        }
        groups_[it->second].seqs.push_back(s);
    }
    std::vector<int64_t> order;  // packed row of each row of the concatenated group outputs
    for (Group & g : groups_) {
        std::vector<int64_t> rows;
        for (size_t s : g.seqs) {
            for (int64_t t = 0; t < g.n; ++t) {
                rows.push_back(offsets_[s] + t);
            }
        }
        g.rows = torch::tensor(rows, torch::kInt64).to(device);
        order.insert(order.end(), rows.begin(), rows.end());
    }
    if (groups_.size() > 1) {
        std::vector<int64_t> inverse(order.size());
        for (size_t j = 0; j < order.size(); ++j) {
            inverse[order[j]] = static_cast<int64_t>(j);
        }
        inverse_ = torch::tensor(inverse, torch::kInt64).to(device);
    }
}

torch::Tensor CachedAttention::decode_in_place(int64_t layer, const torch::Tensor & q) const {
    const bool one_row_each = std::all_of(lengths_.begin(), lengths_.end(), [](int64_t n) { return n == 1; });
    if (!one_row_each || caches_.empty()) {
        return {};
    }
    std::vector<torch::Tensor> keys, values;  // [KV, total, D] views of the slabs
    std::vector<int64_t> totals;
    for (SequenceCache * cache : caches_) {
        totals.push_back(cache->length() + 1);
        keys.push_back(cache->keys(layer, totals.back()));
        values.push_back(cache->values(layer, totals.back()));
    }
    if (!kernels::attention_decode_applies(q, keys, values)) {
        return {};
    }
    return kernels::attention_decode(q, keys, values, totals);  // [T, H*D], row s = sequence s
}

torch::Tensor CachedAttention::run(int64_t layer, const torch::Tensor & q, const torch::Tensor & k,
                                   const torch::Tensor & v) const {
    for (size_t s = 0; s < caches_.size(); ++s) {
        caches_[s]->write(layer, k.narrow(0, offsets_[s], lengths_[s]), v.narrow(0, offsets_[s], lengths_[s]));
    }
    if (torch::Tensor out = decode_in_place(layer, q); out.defined()) {
        return out;
    }
    const int64_t H = q.size(1), D = q.size(2);
    std::vector<torch::Tensor> outputs;
    for (const Group & g : groups_) {
        const int64_t B = static_cast<int64_t>(g.seqs.size());
        std::vector<torch::Tensor> ks, vs;
        for (size_t s : g.seqs) {
            ks.push_back(caches_[s]->keys(layer, g.total));  // [KV, total, D]
            vs.push_back(caches_[s]->values(layer, g.total));
        }
        torch::Tensor qg =
            groups_.size() == 1 ? q.view({B, g.n, H, D}) : q.index_select(0, g.rows).view({B, g.n, H, D});
        outputs.push_back(cached_attention(qg, torch::stack(ks), torch::stack(vs)).view({B * g.n, H * D}));
    }
    if (groups_.size() == 1) {  // rows already in order
        return outputs[0];
    }
    return torch::cat(outputs, 0).index_select(0, inverse_);
}

}  // namespace tinkerd::engine
