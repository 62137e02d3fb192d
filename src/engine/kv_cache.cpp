// SequenceCache (per-sequence K/V slabs and linear-attention states) and attention of new rows against the
// cache (kv_cache.h).
#include "engine/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "engine/kernels/attention_decode.h"

namespace tinkerd::engine {

int64_t CacheShape::attention_layers() const {
    return n_layers - static_cast<int64_t>(std::count(recurrent.begin(), recurrent.end(), true));
}

int64_t CacheShape::kv_bytes_per_token() const {
    return attention_layers() * 2 * n_kv_heads * head_dim * static_cast<int64_t>(torch::elementSize(dtype));
}

int64_t CacheShape::state_bytes() const {
    const int64_t per_layer = conv_dim * conv_width + v_heads * k_head_dim * v_head_dim;
    return (n_layers - attention_layers()) * per_layer * static_cast<int64_t>(torch::elementSize(dtype));
}

SequenceCache::SequenceCache(std::shared_ptr<const CacheShape> shape)
    : shape_(std::move(shape)),
      k_(shape_->n_layers),
      v_(shape_->n_layers),
      conv_(shape_->n_layers),
      recurrent_(shape_->n_layers) {
    const auto options = torch::TensorOptions().dtype(shape_->dtype).device(shape_->device);
    for (int64_t layer = 0; layer < shape_->n_layers; ++layer) {
        if (shape_->is_recurrent(layer)) {  // a fresh sequence starts from zero state
            conv_[layer] = torch::zeros({shape_->conv_dim, shape_->conv_width}, options);  // [Cc, K-1]
            recurrent_[layer] = torch::zeros({shape_->v_heads, shape_->k_head_dim, shape_->v_head_dim},
                                             options);  // [HV, Dk, Dv]
        }
    }
}

void SequenceCache::reserve(int64_t n_tokens) {
    if (n_tokens <= capacity_) {
        return;
    }
    const int64_t grown = n_tokens;  // exact: SampleLoop chooses (and accounts for) the growth steps
    const auto options = torch::TensorOptions().dtype(shape_->dtype).device(shape_->device);
    for (int64_t layer = 0; layer < shape_->n_layers; ++layer) {
        if (shape_->is_recurrent(layer)) {
            continue;
        }
        for (torch::Tensor * slab : {&k_[layer], &v_[layer]}) {
            torch::Tensor bigger =
                torch::empty({shape_->n_kv_heads, grown, shape_->head_dim}, options);  // [KV, grown, D]
            if (length_ > 0) {
                bigger.narrow(1, 0, length_).copy_(slab->narrow(1, 0, length_));
            }
            *slab = bigger;
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
    for (auto * tensors : {&copy.k_, &copy.v_, &copy.conv_, &copy.recurrent_}) {
        for (torch::Tensor & t : *tensors) {
            if (t.defined()) {
                t = t.clone();
            }
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
