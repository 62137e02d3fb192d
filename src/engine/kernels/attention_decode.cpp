// attention_decode (attention_decode.h): per (sequence, kv head) one pass over the cached keys for the G
// query heads sharing them, an fp32 softmax (max subtracted, vectorised exp), one pass over the values.
// The inner loops use GCC vector types in target clones (AVX-512, AVX2, baseline) picked at load time.
#include "engine/kernels/attention_decode.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <ATen/Parallel.h>

#include "engine/host_access.h"
#include "engine/kernels/vec16.h"

namespace tinkerd::engine::kernels {

namespace {

using vec16::dot;
using vec16::kLanes;
using vec16::load;
using vec16::store;
using vec16::v16f;
typedef int v16i __attribute__((vector_size(64)));

#define TINKERD_INLINE __attribute__((always_inline)) inline

TINKERD_INLINE void axpy(float * y, float a, const float * x, int64_t n) {  // y += a · x
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
        store(y + i, load(y + i) + a * load(x + i));
    }
    for (; i < n; ++i) {
        y[i] += a * x[i];
    }
}

// exp(x) for x <= 0 (Cephes-style: x = n·ln2 + r, degree-6 polynomial in r, 2^n by the exponent bits);
// relative error ~1e-7; below -87 it returns exp(-87) (~1e-38, nothing next to the max term's 1).
TINKERD_INLINE v16f exp_nonpositive(v16f x) {
    const v16f lo = x * 0.0f - 87.0f;
    x = x < lo ? lo : x;
    const v16i n = __builtin_convertvector(x * 1.44269504088896341f - 0.5f, v16i);  // round(x·log2 e), x <= 0
    const v16f nf = __builtin_convertvector(n, v16f);
    const v16f r = x - nf * 0.693359375f + nf * 2.12194440e-4f;
    v16f p = r * 1.9875691500e-4f + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const v16f y = p * r * r + r + 1.0f;
    const v16i bits = (n + 127) << 23;
    v16f scale;
    std::memcpy(&scale, &bits, sizeof(scale));
    return y * scale;
}

// s[l] = exp(s[l] - max s) in place; returns Σ s.
TINKERD_INLINE float softmax_numerators(float * s, int64_t L) {
    float m = s[0];
    for (int64_t l = 1; l < L; ++l) {
        m = std::max(m, s[l]);
    }
    float sum = 0;
    int64_t l = 0;
    for (; l + kLanes <= L; l += kLanes) {
        const v16f e = exp_nonpositive(load(s + l) - m);
        store(s + l, e);
        for (int j = 0; j < kLanes; ++j) {
            sum += e[j];
        }
    }
    for (; l < L; ++l) {
        s[l] = std::exp(s[l] - m);
        sum += s[l];
    }
    return sum;
}

}  // namespace

namespace detail {

// One (sequence, kv head): q, out [G, D]; k, v [L, D] rows; scores [G, L] scratch.
__attribute__((target_clones("avx512f", "arch=haswell", "default"))) void attend_kv_head(
    const float * q, const float * k, const float * v, int64_t L, int64_t G, int64_t D, float scale, float * scores,
    float * out) {
    for (int64_t l = 0; l < L; ++l) {
        for (int64_t g = 0; g < G; ++g) {
            scores[g * L + l] = dot(q + g * D, k + l * D, D) * scale;
        }
    }
    std::vector<float> inverse(static_cast<size_t>(G));
    for (int64_t g = 0; g < G; ++g) {
        inverse[g] = 1.0f / softmax_numerators(scores + g * L, L);
    }
    std::fill(out, out + G * D, 0.0f);
    for (int64_t l = 0; l < L; ++l) {
        for (int64_t g = 0; g < G; ++g) {
            axpy(out + g * D, scores[g * L + l], v + l * D, D);
        }
    }
    for (int64_t g = 0; g < G; ++g) {
        for (int64_t d = 0; d < D; ++d) {
            out[g * D + d] *= inverse[g];
        }
    }
}

}  // namespace detail

bool attention_decode_applies(const torch::Tensor & q, const std::vector<torch::Tensor> & keys,
                              const std::vector<torch::Tensor> & values) {
    if (!q.device().is_cpu() || q.scalar_type() != torch::kFloat || q.dim() != 3 ||
        static_cast<size_t>(q.size(0)) != keys.size() || keys.size() != values.size()) {
        return false;
    }
    for (size_t b = 0; b < keys.size(); ++b) {
        for (const torch::Tensor * t : {&keys[b], &values[b]}) {
            if (!t->device().is_cpu() || t->scalar_type() != torch::kFloat || t->dim() != 3 ||
                t->size(2) != q.size(2) || t->stride(2) != 1 || t->stride(1) != q.size(2) ||
                q.size(1) % t->size(0) != 0) {
                return false;
            }
        }
    }
    return true;
}

torch::Tensor attention_decode(const torch::Tensor & q_in, const std::vector<torch::Tensor> & keys,
                               const std::vector<torch::Tensor> & values, const std::vector<int64_t> & lengths) {
    const torch::Tensor q = q_in.contiguous();  // [B, H, D]
    const int64_t B = q.size(0), H = q.size(1), D = q.size(2);
    const int64_t KV = B > 0 ? keys[0].size(0) : 1, G = H / KV;
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
    torch::Tensor out = torch::empty({B, H * D}, q.options());  // [B, H*D]
    TORCH_CHECK(attention_decode_applies(q, keys, values), "attention_decode: CPU fp32 tensors only");
    const float * qp = host_data<const float>(q, "attention_decode");
    float * op = host_data<float>(out, "attention_decode");
    at::parallel_for(0, B * KV, 1, [&](int64_t begin, int64_t end) {
        std::vector<float> scores;
        for (int64_t item = begin; item < end; ++item) {
            const int64_t b = item / KV, h = item % KV, L = lengths[b];
            scores.resize(static_cast<size_t>(G * L));
            const float * k = host_strided_data<const float>(keys[b], "attention_decode") + h * keys[b].stride(0);
            const float * v = host_strided_data<const float>(values[b], "attention_decode") + h * values[b].stride(0);
            const int64_t row = (b * H + h * G) * D;  // query heads h·G .. h·G + G - 1 of sequence b
            detail::attend_kv_head(qp + row, k, v, L, G, D, scale, scores.data(), op + row);
        }
    });
    return out;
}

}  // namespace tinkerd::engine::kernels
