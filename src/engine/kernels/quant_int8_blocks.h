// What the scalar reference (quant_int8.cpp) and the SIMD kernels (quant_int8_simd.h) of the int8-activation
// products share, so both run the same fp32 operations in the same order: the K-quants' integer scales and
// mins, Q4_K's integer min sum, and the final reduction of the 8 fp32 lane sums. Every file including it is
// built with -ffp-contract=off.
#pragma once

#include <cstdint>

namespace tinkerd::engine::kernels::detail::int8 {

// The 6-bit scales and mins of a Q4_K / Q5_K block (gguf's scale_min_k4; s = the block's 12 scale bytes).
inline void k_scale_min(const uint8_t * s, int (&sc)[8], int (&m)[8]) {
    for (int j = 0; j < 4; ++j) {
        sc[j] = s[j] & 63;
        m[j] = s[j + 4] & 63;
        sc[j + 4] = (s[j + 8] & 0x0F) | ((s[j] >> 6) << 4);
        m[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
    }
}

// Σ_j m_j · Σ q over sub-block j (32 values = bsums 2j, 2j + 1).
inline int k4_min_sum(const int (&m)[8], const int16_t * bsums) {
    int sum = 0;
    for (int j = 0; j < 8; ++j) {
        sum += m[j] * (bsums[2 * j] + bsums[2 * j + 1]);
    }
    return sum;
}

// Q4_K's min term of one block: -(dmin · d_x) · Σ_j m_j Σ q_j.
inline float k4_min_term(float dmin, float dx, int min_sum) {
    return -((dmin * dx) * static_cast<float>(min_sum));
}

// The 8 lane sums in the order the SIMD code adds them: halves, then pairs, then the last two.
inline float reduce8(const float * a) {
    const float b0 = a[0] + a[4], b1 = a[1] + a[5], b2 = a[2] + a[6], b3 = a[3] + a[7];
    return (b0 + b2) + (b1 + b3);
}

}  // namespace tinkerd::engine::kernels::detail::int8
