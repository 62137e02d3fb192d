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

// Q4_K's min terms of one block in 4 lanes: lane k = -(dmin · d_x) · (m_2k S_2k + m_2k+1 S_2k+1), S_j = Σ q over
// sub-block j (bsums 2j, 2j + 1).
inline void k4_min_terms(const int (&m)[8], const int16_t * bsums, float dmin, float dx, float (&out)[4]) {
    const float scale = -(dmin * dx);
    for (int k = 0; k < 4; ++k) {
        const int s0 = bsums[4 * k] + bsums[4 * k + 1], s1 = bsums[4 * k + 2] + bsums[4 * k + 3];
        out[k] = static_cast<float>(m[2 * k] * s0 + m[2 * k + 1] * s1) * scale;
    }
}

// The 4 extra lanes' sum in the SIMD order.
inline float reduce4(const float * a) {
    return (a[0] + a[2]) + (a[1] + a[3]);
}

// The 8 lane sums in the order the SIMD code adds them: halves, then pairs, then the last two.
inline float reduce8(const float * a) {
    const float b0 = a[0] + a[4], b1 = a[1] + a[5], b2 = a[2] + a[6], b3 = a[3] + a[7];
    return (b0 + b2) + (b1 + b3);
}

}  // namespace tinkerd::engine::kernels::detail::int8
