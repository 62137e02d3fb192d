// attention_decode against a float64 reference and against cached_attention (the stacked path) at odd
// lengths, head dims and head counts (GQA included), on slabs with spare capacity; CachedAttention::run on
// a decode step (read in place) against the same sequences through cached_attention.
#include "engine/kernels/attention_decode.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "engine/kv_cache.h"

namespace tinkerd::engine::kernels {
namespace {

struct HeadConfig {
    int64_t H, KV, D;
};

const std::vector<HeadConfig> kHeads = {{1, 1, 8}, {3, 1, 17}, {9, 3, 64}, {4, 2, 33}, {6, 6, 128}, {8, 2, 5}};
const std::vector<int64_t> kLengths = {1, 2, 5, 16, 17, 33, 100, 257};

// Float64 attention of one new row per sequence, q [H, D], k/v [KV, L, D]: the output [H*D] and its scale
// Σ_l p_l·|v_l| [H*D] (what fp32 rounding is relative to).
struct Reference {
    torch::Tensor value, scale;
};

Reference reference(const torch::Tensor & q, const torch::Tensor & k, const torch::Tensor & v) {
    const int64_t H = q.size(0), D = q.size(1), KV = k.size(0);
    const torch::Tensor kh = k.to(torch::kDouble).repeat_interleave(H / KV, 0);  // [H, L, D]
    const torch::Tensor vh = v.to(torch::kDouble).repeat_interleave(H / KV, 0);
    const torch::Tensor scores = torch::bmm(q.to(torch::kDouble).unsqueeze(1), kh.transpose(1, 2)) / std::sqrt(D);
    const torch::Tensor p = torch::softmax(scores, -1);  // [H, 1, L]
    return {torch::bmm(p, vh).reshape({H * D}), torch::bmm(p, vh.abs()).reshape({H * D})};
}

// max |got - want| / max Σ p·|v| (the float64 reference's scale).
double relative_error(const torch::Tensor & got, const torch::Tensor & want, const Reference & ref) {
    const torch::Tensor diff = got.to(torch::kDouble) - want.to(torch::kDouble);
    return (diff.abs().max() / ref.scale.max()).item<double>();
}

double relative_error(const torch::Tensor & got, const Reference & ref) {
    return relative_error(got, ref.value, ref);
}

// Slabs [KV, capacity, D] with random contents; the first `length` positions are the cache.
std::vector<torch::Tensor> slabs(int64_t B, const HeadConfig & c, int64_t capacity) {
    std::vector<torch::Tensor> out;
    for (int64_t b = 0; b < B; ++b) {
        out.push_back(torch::randn({c.KV, capacity, c.D}));
    }
    return out;
}

TEST(AttentionDecode, MatchesFloat64AndCachedAttention) {
    torch::manual_seed(1);
    for (const HeadConfig & c : kHeads) {
        const int64_t B = static_cast<int64_t>(kLengths.size()), capacity = 300;
        SCOPED_TRACE("H=" + std::to_string(c.H) + " KV=" + std::to_string(c.KV) + " D=" + std::to_string(c.D));
        const std::vector<torch::Tensor> k_slabs = slabs(B, c, capacity), v_slabs = slabs(B, c, capacity);
        const torch::Tensor q = torch::randn({B, c.H, c.D});  // [B, H, D]
        std::vector<torch::Tensor> keys, values;
        for (int64_t b = 0; b < B; ++b) {
            keys.push_back(k_slabs[b].narrow(1, 0, kLengths[b]));  // [KV, L, D] views with the slab's strides
            values.push_back(v_slabs[b].narrow(1, 0, kLengths[b]));
        }
        ASSERT_TRUE(attention_decode_applies(q, keys, values));
        const torch::Tensor out = attention_decode(q, keys, values, kLengths);  // [B, H*D]
        ASSERT_EQ(out.sizes(), (std::vector<int64_t>{B, c.H * c.D}));
        for (int64_t b = 0; b < B; ++b) {
            SCOPED_TRACE("L=" + std::to_string(kLengths[b]));
            const Reference ref = reference(q[b], keys[b], values[b]);
            EXPECT_LE(relative_error(out[b], ref), 1e-6);
            const torch::Tensor stacked = cached_attention(q[b].view({1, 1, c.H, c.D}), keys[b].unsqueeze(0),
                                                           values[b].unsqueeze(0));  // [1, 1, H*D]
            EXPECT_LE(relative_error(out[b], stacked.view({c.H * c.D}), ref), 1e-6);
        }
    }
}

TEST(AttentionDecode, LeavesOtherDtypesAndLayoutsToTheStackedPath) {
    const torch::Tensor q = torch::randn({1, 2, 8});
    const torch::Tensor k = torch::randn({1, 4, 8}), v = torch::randn({1, 4, 8});
    EXPECT_TRUE(attention_decode_applies(q, {k}, {v}));
    EXPECT_FALSE(attention_decode_applies(q.to(torch::kDouble), {k}, {v}));
    EXPECT_FALSE(attention_decode_applies(q, {k.to(torch::kBFloat16)}, {v}));
    EXPECT_FALSE(attention_decode_applies(q, {torch::randn({1, 8, 4}).transpose(1, 2)}, {v}));
    EXPECT_FALSE(attention_decode_applies(q, {k, k}, {v, v}));  // one row per sequence
}

// A decode step through CachedAttention (in place) equals cached_attention over the stacked cache.
TEST(AttentionDecode, CachedAttentionDecodeStepReadsInPlace) {
    torch::manual_seed(2);
    const HeadConfig c{9, 3, 64};
    const std::vector<int64_t> prompt = {3, 17, 1, 40};
    auto shape = std::make_shared<CacheShape>();
    shape->n_layers = 2;
    shape->n_kv_heads = c.KV;
    shape->head_dim = c.D;
    shape->recurrent.assign(2, false);
    std::vector<SequenceCache> caches;
    for (int64_t n : prompt) {
        caches.emplace_back(shape);
        caches.back().reserve(n + 10);  // spare capacity: the slabs are read through strided views
        for (int64_t layer = 0; layer < 2; ++layer) {
            caches.back().write(layer, torch::randn({n, c.KV, c.D}), torch::randn({n, c.KV, c.D}));
        }
        caches.back().advance(n);
    }
    std::vector<SequenceCache *> pointers;
    for (SequenceCache & cache : caches) {
        pointers.push_back(&cache);
    }
    const int64_t B = static_cast<int64_t>(prompt.size());
    const CachedAttention attention(std::vector<int64_t>(prompt.size(), 1), pointers, torch::kCPU);
    const torch::Tensor q = torch::randn({B, c.H, c.D}), k = torch::randn({B, c.KV, c.D}),
                        v = torch::randn({B, c.KV, c.D});
    const torch::Tensor out = attention.run(1, q, k, v);  // [B, H*D]
    for (int64_t b = 0; b < B; ++b) {
        const int64_t total = prompt[b] + 1;
        EXPECT_TRUE(torch::equal(caches[b].keys(1, total).select(1, prompt[b]), k[b]));
        const torch::Tensor want = cached_attention(q[b].view({1, 1, c.H, c.D}), caches[b].keys(1, total).unsqueeze(0),
                                                    caches[b].values(1, total).unsqueeze(0));
        const Reference ref = reference(q[b], caches[b].keys(1, total), caches[b].values(1, total));
        EXPECT_LE(relative_error(out[b], ref), 1e-6);
        EXPECT_LE(relative_error(out[b], want.view({c.H * c.D}), ref), 1e-6);
    }
}

}  // namespace
}  // namespace tinkerd::engine::kernels
