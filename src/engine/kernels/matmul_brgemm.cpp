// bf16 dot products through oneDNN's brgemm micro-kernel (matmul_brgemm.h): each thread packs blocks of the
// weight (kBlockN output columns × kBlockK reduction terms) into VNNI order in its own scratch, then streams
// every input row through them, kBlockM rows per brgemm call, accumulating over the reduction in fp32.
#include "engine/kernels/matmul_brgemm.h"

#include <algorithm>
#include <immintrin.h>
#include <vector>

// GCC 12's AVX-512 intrinsics self-initialise their "undefined" operands (`__Y = __Y`), a known false
// -Wuninitialized once inlined (as in matmul_avx512.cpp); nothing here reads an uninitialised value.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <ATen/Parallel.h>
#include <ATen/native/CPUBlas.h>

#include "engine/host_access.h"

namespace tinkerd::engine::kernels::detail {

namespace {

constexpr int64_t kBlockN = 64;    // output columns per packed block (brgemm N)
constexpr int64_t kBlockK = 1024;  // reduction terms per packed block (even): 128 KiB of bf16 in L2
constexpr int64_t kBlockM = 64;    // input rows per brgemm call (brgemm M)

using at::native::cpublas::brgemm;

// Scratch of this thread for one packed block: kBlockK / 2 pairs × kBlockN columns.
uint32_t * pack_scratch() {
    thread_local std::vector<uint32_t> buffer(static_cast<size_t>(kBlockK / 2 * kBlockN));
    return buffer.data();
}

// 16 x 16 transpose of 32-bit words: dst[i * ld_dst + j] = src[j * ld_src + i] (i, j < 16). Unpacks pair
// rows 32 then 64 bits at a time; two rounds of 128-bit lane shuffles then gather each column's four lanes.
__attribute__((target("avx512f"))) void transpose16_u32(const uint32_t * src, int64_t ld_src, uint32_t * dst,
                                                        int64_t ld_dst) {
    __m512i r[16], t[16];
    for (int j = 0; j < 16; ++j) {
        r[j] = _mm512_loadu_si512(src + j * ld_src);
    }
    for (int j = 0; j < 16; j += 2) {  // t[j]: words 0,1 of each lane interleaved; t[j+1]: words 2,3
        t[j] = _mm512_unpacklo_epi32(r[j], r[j + 1]);
        t[j + 1] = _mm512_unpackhi_epi32(r[j], r[j + 1]);
    }
    for (int g = 0; g < 16; g += 4) {  // r[g + e]: word e of every lane, rows g..g+3
        r[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
        r[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
        r[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
        r[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
    }
    for (int e = 0; e < 4; ++e) {  // column 4L + e = lane L of r[e], r[4 + e], r[8 + e], r[12 + e]
        const __m512i x0 = _mm512_shuffle_i32x4(r[e], r[4 + e], 0x44), x1 = _mm512_shuffle_i32x4(r[e], r[4 + e], 0xEE);
        const __m512i y0 = _mm512_shuffle_i32x4(r[8 + e], r[12 + e], 0x44);
        const __m512i y1 = _mm512_shuffle_i32x4(r[8 + e], r[12 + e], 0xEE);
        _mm512_storeu_si512(dst + (0 + e) * ld_dst, _mm512_shuffle_i32x4(x0, y0, 0x88));
        _mm512_storeu_si512(dst + (4 + e) * ld_dst, _mm512_shuffle_i32x4(x0, y0, 0xDD));
        _mm512_storeu_si512(dst + (8 + e) * ld_dst, _mm512_shuffle_i32x4(x1, y1, 0x88));
        _mm512_storeu_si512(dst + (12 + e) * ld_dst, _mm512_shuffle_i32x4(x1, y1, 0xDD));
    }
}

// out[p * n + j] = (even[j], odd[j]) as one 32-bit word for j < n: two rows interleaved, 32 columns a step.
__attribute__((target("avx512f,avx512bw"))) void interleave_rows(const uint16_t * even, const uint16_t * odd, int64_t n,
                                                                 uint32_t * out) {
    alignas(64) static const uint16_t low_idx[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                     8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
    alignas(64) static const uint16_t high_idx[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                                      24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
    const __m512i lo = _mm512_load_si512(low_idx), hi = _mm512_load_si512(high_idx);
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
        const __m512i a = _mm512_loadu_si512(even + j), b = _mm512_loadu_si512(odd + j);
        _mm512_storeu_si512(out + j, _mm512_permutex2var_epi16(a, lo, b));
        _mm512_storeu_si512(out + j + 16, _mm512_permutex2var_epi16(a, hi, b));
    }
    for (; j < n; ++j) {
        out[j] = static_cast<uint32_t>(even[j]) | (static_cast<uint32_t>(odd[j]) << 16);
    }
}

// Forward block: B[k][j] = w[j][k] (w's rows are output columns). VNNI keeps the pair (k, k+1) of one
// column together: out[p * n + j] = (w[j][k0 + 2p], w[j][k0 + 2p + 1]) as one 32-bit word.
// That is a transpose of 32-bit words ([n][kc / 2] with row stride ld / 2 -> [kc / 2][n]): 16 x 16 tiles, the
// edges word by word. ld and k0 are even, so the words are aligned pairs.
void pack_rows(const uint16_t * w, int64_t ld, int64_t n, int64_t k0, int64_t kc, uint32_t * out) {
    const auto * src = reinterpret_cast<const uint32_t *>(w + k0);  // word p of row j: src[j * ld / 2 + p]
    const int64_t pairs = kc / 2, ld32 = ld / 2, n16 = n - n % 16, p16 = pairs - pairs % 16;
    for (int64_t j = 0; j < n16; j += 16) {
        for (int64_t p = 0; p < p16; p += 16) {
            transpose16_u32(src + j * ld32 + p, ld32, out + p * n + j, n);
        }
    }
    for (int64_t j = 0; j < n; ++j) {
        for (int64_t p = j < n16 ? p16 : 0; p < pairs; ++p) {
            out[p * n + j] = src[j * ld32 + p];
        }
    }
}

// Backward block: B[k][j] = w[k][c0 + j] (w's rows are the reduction): rows k0 + 2p and k0 + 2p + 1
// interleaved column by column.
void pack_columns(const uint16_t * w, int64_t ld, int64_t c0, int64_t n, int64_t k0, int64_t kc, uint32_t * out) {
    for (int64_t p = 0; p < kc / 2; ++p) {
        const uint16_t * even = w + (k0 + 2 * p) * ld + c0;
        interleave_rows(even, even + ld, n, out + p * n);
    }
}

// c [T, ldc] columns [n0, n0 + n) = a [T, K] (bf16) · B, B packed block by block by `pack(k0, kc, out)`.
template <typename Pack>
void stream_rows(const c10::BFloat16 * a, int64_t T, int64_t K, float * c, int64_t ldc, int64_t n0, int64_t n,
                 Pack pack) {
    uint32_t * packed = pack_scratch();
    const auto * b = reinterpret_cast<const c10::BFloat16 *>(packed);
    for (int64_t k0 = 0; k0 < K; k0 += kBlockK) {
        const int64_t kc = std::min(kBlockK, K - k0);
        pack(k0, kc, packed);
        for (int64_t m0 = 0; m0 < T; m0 += kBlockM) {
            const int64_t mb = std::min(kBlockM, T - m0);
            brgemm(mb, n, kc, K, n, ldc, k0 > 0, a + m0 * K + k0, b, c + m0 * ldc + n0, true);
        }
    }
}

const uint16_t * bf16_bits(const torch::Tensor & t) {
    return reinterpret_cast<const uint16_t *>(host_data<const c10::BFloat16>(t, "brgemm kernels"));
}

// c [T, N] fp32 = ab [T, K] (bf16) · B, blocks of kBlockN columns shared out over the threads;
// pack(n0, n, k0, kc, dst) packs B's columns [n0, n0 + n) × reduction terms [k0, k0 + kc) into dst.
template <typename Pack>
void blocked_product(const torch::Tensor & ab, int64_t K, int64_t N, torch::Tensor & c, Pack pack) {
    const int64_t T = ab.size(0);
    const auto * a = host_data<const c10::BFloat16>(ab, "brgemm kernels");
    float * cp = host_data<float>(c, "brgemm kernels");
    at::parallel_for(0, (N + kBlockN - 1) / kBlockN, 1, [&](int64_t begin, int64_t end) {
        for (int64_t blk = begin; blk < end; ++blk) {
            const int64_t n0 = blk * kBlockN, n = std::min(kBlockN, N - n0);
            stream_rows(a, T, K, cp, N, n0, n,
                        [&](int64_t k0, int64_t kc, uint32_t * dst) { pack(n0, n, k0, kc, dst); });
        }
        at::native::cpublas::brgemm_release(true);
    });
}

}  // namespace

void brgemm_forward(const torch::Tensor & xb, const torch::Tensor & w, torch::Tensor & y) {
    const int64_t out = w.size(0), in = w.size(1);
    TORCH_CHECK(in % 2 == 0, "brgemm_forward: the reduction (in = ", in, ") must be even");
    const uint16_t * wp = bf16_bits(w);
    blocked_product(xb, in, out, y, [&](int64_t n0, int64_t n, int64_t k0, int64_t kc, uint32_t * dst) {
        pack_rows(wp + n0 * in, in, n, k0, kc, dst);
    });
}

void brgemm_backward(const torch::Tensor & dyb, const torch::Tensor & w, torch::Tensor & dx) {
    const int64_t out = w.size(0), in = w.size(1);
    TORCH_CHECK(out % 2 == 0, "brgemm_backward: the reduction (out = ", out, ") must be even");
    const uint16_t * wp = bf16_bits(w);
    blocked_product(dyb, out, in, dx, [&](int64_t c0, int64_t n, int64_t k0, int64_t kc, uint32_t * dst) {
        pack_columns(wp, in, c0, n, k0, kc, dst);
    });
}

bool brgemm_bf16_supported() {
    static const bool supported = [] {
        __builtin_cpu_init();
        if (!__builtin_cpu_supports("avx512bf16")) {
            return false;
        }
        try {
            // A probe at odd sizes (a partial block in every dimension) on small multiples of 1/4, whose products
            // and sums are exact in fp32: the result must equal the fp32 product bit for bit. No RNG is drawn.
            const auto values = [](int64_t rows, int64_t cols, int64_t salt) {
                return ((torch::arange(rows * cols).add(salt).remainder(17) - 8) / 4).view({rows, cols});
            };
            const torch::Tensor x = values(70, 2 * kBlockK + 6, 0).to(torch::kBFloat16);               // [70, in]
            const torch::Tensor w = values(2 * kBlockN + 2, 2 * kBlockK + 6, 5).to(torch::kBFloat16);  // [out, in]
            const torch::Tensor dy = values(70, 2 * kBlockN + 2, 3).to(torch::kBFloat16);              // [70, out]
            torch::Tensor y = torch::empty({70, 2 * kBlockN + 2}), dx = torch::empty({70, 2 * kBlockK + 6});
            brgemm_forward(x, w, y);
            brgemm_backward(dy, w, dx);
            const torch::Tensor wf = w.to(torch::kFloat);
            return torch::equal(y, torch::matmul(x.to(torch::kFloat), wf.t())) &&
                   torch::equal(dx, torch::matmul(dy.to(torch::kFloat), wf));
        } catch (const std::exception &) {
            return false;
        }
    }();
    return supported;
}

}  // namespace tinkerd::engine::kernels::detail
