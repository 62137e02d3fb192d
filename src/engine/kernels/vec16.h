// 16-lane fp32 vector helpers (GCC vector types) for the kernels built as target clones (AVX-512, AVX2, baseline):
// loads and stores, a dot product, and the transposing reduction of 16 vectors' lane sums. Always inlined, so the
// clones compile them for their own ISA and no call passes a vector through the baseline ABI (hence -Wpsabi off).
#pragma once

#include <cstdint>
#include <cstring>

#pragma GCC diagnostic ignored "-Wpsabi"

namespace tinkerd::engine::kernels::vec16 {

typedef float v16f __attribute__((vector_size(64)));
constexpr int64_t kLanes = 16;

#define TINKERD_VEC16_INLINE __attribute__((always_inline)) inline

TINKERD_VEC16_INLINE v16f load(const float * p) {
    v16f v;
    std::memcpy(&v, p, sizeof(v));
    return v;
}

TINKERD_VEC16_INLINE void store(float * p, v16f v) {
    std::memcpy(p, &v, sizeof(v));
}

// Σ_i a[i]·b[i] over n floats: 16 lanes at a time, then the tail, then the lanes added to it in order.
TINKERD_VEC16_INLINE float dot(const float * a, const float * b, int64_t n) {
    v16f acc = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
        acc += load(a + i) * load(b + i);
    }
    float sum = 0;
    for (; i < n; ++i) {
        sum += a[i] * b[i];
    }
    for (int j = 0; j < kLanes; ++j) {
        sum += acc[j];
    }
    return sum;
}

// The 16 lane sums of a[0..15] as one vector (out[j] = Σ_lanes a[j]): four levels of pairwise shuffles and adds,
// 45 operations for 16 sums instead of 15 each.
TINKERD_VEC16_INLINE v16f sum16(const v16f (&a)[kLanes]) {
    v16f h[8], q[4], e[2];
    for (int i = 0; i < 8; ++i) {  // h[i] = [a[2i] lanes 0-7 + 8-15 | a[2i+1] likewise]
        h[i] = __builtin_shufflevector(a[2 * i], a[2 * i + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
               __builtin_shufflevector(a[2 * i], a[2 * i + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30,
                                       31);
    }
    for (int i = 0; i < 4; ++i) {  // q[i]: 4 partial sums of each of a[4i .. 4i+3]
        q[i] =
            __builtin_shufflevector(h[2 * i], h[2 * i + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
            __builtin_shufflevector(h[2 * i], h[2 * i + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
    }
    for (int i = 0; i < 2; ++i) {  // e[i]: 2 partial sums of each of a[8i .. 8i+7]
        e[i] =
            __builtin_shufflevector(q[2 * i], q[2 * i + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29) +
            __builtin_shufflevector(q[2 * i], q[2 * i + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
    }
    return __builtin_shufflevector(e[0], e[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30) +
           __builtin_shufflevector(e[0], e[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
}

}  // namespace tinkerd::engine::kernels::vec16
