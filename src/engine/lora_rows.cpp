// Row-wise LoRA for sampling (lora_rows.h): per row two matrix-vector products, 16 matrix rows at a time in
// 16-lane vectors with one transposing reduction, up to 8 rows of one adapter sharing each factor row's read,
// compiled for AVX-512, AVX2 and the baseline (target clones).
#include "engine/lora_rows.h"

#include <algorithm>
#include <vector>

#include <ATen/Parallel.h>

#include "engine/host_access.h"
#include "engine/kernels/vec16.h"

namespace tinkerd::engine {

namespace {

constexpr int64_t LANES = kernels::vec16::kLanes;
static_assert(LORA_RANK_BLOCK == LANES, "a rank block is one group of matrix_vectors' rows");

using kernels::vec16::dot;
using kernels::vec16::load;
using kernels::vec16::store;
using kernels::vec16::sum16;
using kernels::vec16::v16f;

#define TINKERD_CLONES __attribute__((target_clones("avx512f", "arch=haswell", "default")))

// out_x[j] = c · Σ_i m[j, i]·v_x[i] for j < rows (m [rows, n] row-major) and each of the NV vectors v_x (rows of
// v, v_stride apart; out likewise), += when add: 16 rows of m at a time, each row's 16-lane partial sums against
// every v_x at once (the row is read once for all of them), then the lane sums reduced together (sum16). Every
// out_x[j] is the same operations in the same order whatever NV is and whichever vectors share the call.
template <int NV>
TINKERD_VEC16_INLINE void matrix_vectors_n(const float * m, int64_t rows, int64_t n, float c, bool add, const float * v,
                                           int64_t v_stride, float * out, int64_t out_stride) {
    const int64_t full = n - n % LANES;
    int64_t j = 0;
    for (; j + LANES <= rows; j += LANES) {
        v16f acc[NV][LANES];
        for (int r = 0; r < LANES; ++r) {
            const float * row = m + (j + r) * n;
            v16f part[NV] = {};
            for (int64_t i = 0; i < full; i += LANES) {
                const v16f w = load(row + i);
                for (int x = 0; x < NV; ++x) {
                    part[x] += w * load(v + x * v_stride + i);
                }
            }
            for (int x = 0; x < NV; ++x) {
                acc[x][r] = part[x];
            }
        }
        for (int x = 0; x < NV; ++x) {
            v16f sums = sum16(acc[x]);
            const float * vx = v + x * v_stride;
            for (int64_t i = full; i < n; ++i) {
                for (int r = 0; r < LANES; ++r) {
                    sums[r] += m[(j + r) * n + i] * vx[i];
                }
            }
            float * o = out + x * out_stride + j;  // 16 outputs at once: c·sums (+ o), the ops the rows' scalars get
            store(o, add ? load(o) + c * sums : c * sums);
        }
    }
    for (; j < rows; ++j) {
        for (int x = 0; x < NV; ++x) {
            const float d = c * dot(m + j * n, v + x * v_stride, n);
            float * o = out + x * out_stride;
            o[j] = add ? o[j] + d : d;
        }
    }
}

TINKERD_CLONES void matrix_vectors(const float * m, int64_t rows, int64_t n, float c, bool add, int64_t nv,
                                   const float * v, int64_t v_stride, float * out, int64_t out_stride) {
    static_assert(LORA_ROW_GROUP == 8, "one case per group size");
    switch (nv) {
        case 1:
            return matrix_vectors_n<1>(m, rows, n, c, add, v, v_stride, out, out_stride);
        case 2:
            return matrix_vectors_n<2>(m, rows, n, c, add, v, v_stride, out, out_stride);
        case 3:
            return matrix_vectors_n<3>(m, rows, n, c, add, v, v_stride, out, out_stride);
        case 4:
            return matrix_vectors_n<4>(m, rows, n, c, add, v, v_stride, out, out_stride);
        case 5:
            return matrix_vectors_n<5>(m, rows, n, c, add, v, v_stride, out, out_stride);
        case 6:
            return matrix_vectors_n<6>(m, rows, n, c, add, v, v_stride, out, out_stride);
        case 7:
            return matrix_vectors_n<7>(m, rows, n, c, add, v, v_stride, out, out_stride);
        case 8:
            return matrix_vectors_n<8>(m, rows, n, c, add, v, v_stride, out, out_stride);
        default:
            TORCH_CHECK(false, "lora_rows: a group of ", nv, " rows");
    }
}

bool adapter_usable(const Adapter * adapter, int64_t layer, LoraTarget target) {
    if (!adapter || !adapter->lora_a(layer, target)) {
        return true;  // no delta for these rows
    }
    const torch::Tensor & a = *adapter->lora_a(layer, target);
    const torch::Tensor & b = *adapter->lora_b(layer, target);
    return a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32 && a.is_contiguous() &&
           b.is_contiguous();
}

}  // namespace

void lora_rank_block(const float * a, int64_t rank, int64_t in, int64_t k0, float scale, const LoraRowGroup & g) {
    matrix_vectors(a + k0 * in, std::min(LORA_RANK_BLOCK, rank - k0), in, scale, false, g.rows, g.x, g.x_stride,
                   g.u + k0, g.u_stride);
}

void lora_out_block(const float * b, int64_t rank, int64_t out, int64_t j0, const LoraRowGroup & g) {
    matrix_vectors(b + j0 * rank, std::min(LORA_OUT_BLOCK, out - j0), rank, 1.0F, true, g.rows, g.u, g.u_stride,
                   g.y + j0, g.y_stride);
}

bool lora_rows_applicable(const torch::Tensor & y, const torch::Tensor & x, const std::vector<RowSegment> & segments) {
    if (torch::GradMode::is_enabled() || !y.device().is_cpu() || y.scalar_type() != torch::kFloat32 ||
        x.scalar_type() != torch::kFloat32 || !x.is_contiguous() || y.stride(1) != 1) {
        return false;
    }
    for (const RowSegment & s : segments) {
        if (s.end - s.begin > LORA_ROWS_MAX_SEGMENT) {
            return false;
        }
    }
    return true;
}

// Two passes, each split across threads: u[r] = scale·A·x[r] in blocks of 16 ranks, then y[r] += B·u[r] in blocks
// of LORA_OUT_BLOCK outputs, for groups of up to 8 rows of one adapter at a time (each factor row read once for
// the group), so one row (batch 1) still uses every thread and many rows share their factors' reads.
void add_lora_rows(torch::Tensor & y, const torch::Tensor & x, const std::vector<RowSegment> & segments, int64_t layer,
                   LoraTarget target) {
    for (const RowSegment & s : segments) {
        TORCH_CHECK(adapter_usable(s.adapter, layer, target), "add_lora_rows: unsupported LoRA tensors");
    }
    const int64_t T = y.size(0), in = x.size(1), out = y.size(1), y_stride = y.stride(0);
    std::vector<const Adapter *> row_adapter(static_cast<size_t>(T), nullptr);  // [T]
    int64_t max_rank = 0;
    for (const RowSegment & s : segments) {
        const torch::Tensor * a = s.adapter ? s.adapter->lora_a(layer, target) : nullptr;  // [R, in]
        if (a == nullptr || s.end <= s.begin) {
            continue;  // no delta for these rows
        }
        std::fill(row_adapter.begin() + s.begin, row_adapter.begin() + s.end, s.adapter);
        max_rank = std::max(max_rank, a->size(0));
    }
    const auto groups = row_groups(T, [&](int64_t r) { return static_cast<const void *>(row_adapter[r]); });
    const int64_t G = static_cast<int64_t>(groups.size());
    float * y_data = host_strided_data<float>(y, "add_lora_rows");  // rows y_stride apart, each contiguous
    const float * x_data = host_data<const float>(x, "add_lora_rows");
    std::vector<float> u(static_cast<size_t>(T * max_rank));  // [T, max rank]; any rank the API allows (<= 4096)
    const auto group = [&](int64_t i) {
        const auto [r0, r1] = groups[i];
        return LoraRowGroup{r1 - r0,  x_data + r0 * in,       in,      u.data() + r0 * max_rank,
                            max_rank, y_data + r0 * y_stride, y_stride};
    };
    const int64_t rank_blocks = (max_rank + LORA_RANK_BLOCK - 1) / LORA_RANK_BLOCK;
    at::parallel_for(0, G * rank_blocks, 1, [&](int64_t begin, int64_t end) {
        for (int64_t item = begin; item < end; ++item) {
            const int64_t i = item % G, k0 = (item / G) * LORA_RANK_BLOCK;  // a block's groups back to back
            const Adapter * adapter = row_adapter[groups[i].first];
            const torch::Tensor * a = adapter ? adapter->lora_a(layer, target) : nullptr;  // [R, in]
            if (a && k0 < a->size(0)) {
                lora_rank_block(host_data<const float>(*a, "add_lora_rows"), a->size(0), in, k0,
                                static_cast<float>(adapter->scale), group(i));
            }
        }
    });
    const int64_t blocks = (out + LORA_OUT_BLOCK - 1) / LORA_OUT_BLOCK;
    at::parallel_for(0, G * blocks, 1, [&](int64_t begin, int64_t end) {
        for (int64_t item = begin; item < end; ++item) {
            const int64_t i = item % G, j0 = (item / G) * LORA_OUT_BLOCK;
            if (const Adapter * adapter = row_adapter[groups[i].first]) {
                const torch::Tensor & b = *adapter->lora_b(layer, target);  // [out, R]
                lora_out_block(host_data<const float>(b, "add_lora_rows"), b.size(1), out, j0, group(i));
            }
        }
    });
}

}  // namespace tinkerd::engine
