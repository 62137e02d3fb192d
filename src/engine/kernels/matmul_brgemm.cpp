// bf16 dot products through oneDNN's brgemm micro-kernel (matmul_brgemm.h): each thread packs blocks of the
// weight (kBlockN output columns × kBlockK reduction terms) into VNNI order in its own scratch, then streams
// every input row through them, kBlockM rows per brgemm call, accumulating over the reduction in fp32.
#include "engine/kernels/matmul_brgemm.h"

#include <algorithm>
#include <vector>

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

// Forward block: B[k][j] = w[j][k] (w's rows are output columns). VNNI keeps the pair (k, k+1) of one
// column together: out[p * n + j] = (w[j][k0 + 2p], w[j][k0 + 2p + 1]) as one 32-bit word.
void pack_rows(const uint16_t * w, int64_t ld, int64_t n, int64_t k0, int64_t kc, uint32_t * out) {
    for (int64_t j = 0; j < n; ++j) {
        const uint16_t * row = w + j * ld + k0;
        for (int64_t p = 0; p < kc / 2; ++p) {
            out[p * n + j] = static_cast<uint32_t>(row[2 * p]) | (static_cast<uint32_t>(row[2 * p + 1]) << 16);
        }
    }
}

// Backward block: B[k][j] = w[k][c0 + j] (w's rows are the reduction): rows k0 + 2p and k0 + 2p + 1
// interleaved column by column.
void pack_columns(const uint16_t * w, int64_t ld, int64_t c0, int64_t n, int64_t k0, int64_t kc, uint32_t * out) {
    for (int64_t p = 0; p < kc / 2; ++p) {
        const uint16_t * even = w + (k0 + 2 * p) * ld + c0;
        const uint16_t * odd = even + ld;
        for (int64_t j = 0; j < n; ++j) {
            out[p * n + j] = static_cast<uint32_t>(even[j]) | (static_cast<uint32_t>(odd[j]) << 16);
        }
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

}  // namespace

void brgemm_forward(const torch::Tensor & xb, const torch::Tensor & w, torch::Tensor & y) {
    const int64_t T = xb.size(0), out = w.size(0), in = w.size(1);
    TORCH_CHECK(in % 2 == 0, "brgemm_forward: the reduction (in = ", in, ") must be even");
    const auto * a = host_data<const c10::BFloat16>(xb, "brgemm kernels");
    const uint16_t * wp = bf16_bits(w);
    float * yp = host_data<float>(y, "brgemm kernels");
    at::parallel_for(0, (out + kBlockN - 1) / kBlockN, 1, [&](int64_t begin, int64_t end) {
        for (int64_t blk = begin; blk < end; ++blk) {
            const int64_t n0 = blk * kBlockN, n = std::min(kBlockN, out - n0);
            stream_rows(a, T, in, yp, out, n0, n,
                        [&](int64_t k0, int64_t kc, uint32_t * dst) { pack_rows(wp + n0 * in, in, n, k0, kc, dst); });
        }
        at::native::cpublas::brgemm_release(true);
    });
}

void brgemm_backward(const torch::Tensor & dyb, const torch::Tensor & w, torch::Tensor & dx) {
    const int64_t T = dyb.size(0), out = w.size(0), in = w.size(1);
    TORCH_CHECK(out % 2 == 0, "brgemm_backward: the reduction (out = ", out, ") must be even");
    const auto * a = host_data<const c10::BFloat16>(dyb, "brgemm kernels");
    const uint16_t * wp = bf16_bits(w);
    float * dxp = host_data<float>(dx, "brgemm kernels");
    at::parallel_for(0, (in + kBlockN - 1) / kBlockN, 1, [&](int64_t begin, int64_t end) {
        for (int64_t blk = begin; blk < end; ++blk) {
            const int64_t c0 = blk * kBlockN, n = std::min(kBlockN, in - c0);
            stream_rows(a, T, out, dxp, in, c0, n,
                        [&](int64_t k0, int64_t kc, uint32_t * dst) { pack_columns(wp, in, c0, n, k0, kc, dst); });
        }
        at::native::cpublas::brgemm_release(true);
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
            const torch::Tensor x = values(70, 2 * kBlockK + 6, 0).to(torch::kBFloat16);
            const torch::Tensor w = values(kBlockN + 3, 2 * kBlockK + 6, 5).to(torch::kBFloat16);
            torch::Tensor y = torch::empty({70, kBlockN + 3});
            brgemm_forward(x, w, y);
            const torch::Tensor want = torch::matmul(x.to(torch::kFloat), w.to(torch::kFloat).t());
            return torch::equal(y, want);
        } catch (const std::exception &) {
            return false;
        }
    }();
    return supported;
}

}  // namespace tinkerd::engine::kernels::detail
