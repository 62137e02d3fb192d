// Row-wise LoRA for sampling (lora_rows.h): per row two matrix-vector products, 16 matrix rows at a time in
// 16-lane vectors with one transposing reduction, compiled for AVX-512, AVX2 and the baseline (target clones).
#include "engine/lora_rows.h"

#include <algorithm>
#include <vector>

#include <ATen/Parallel.h>

#include "engine/host_access.h"
#include "engine/kernels/vec16.h"

namespace tinkerd::engine {

namespace {

constexpr int64_t MAX_ROWS_PER_SEGMENT = 16;
constexpr int64_t LANES = kernels::vec16::kLanes;
constexpr int64_t OUT_BLOCK = 256;  // outputs of y per parallel work item (a row's B·u split across threads)

using kernels::vec16::dot;
using kernels::vec16::load;
using kernels::vec16::sum16;
using kernels::vec16::v16f;

#define TINKERD_CLONES __attribute__((target_clones("avx512f", "arch=haswell", "default")))

// out[j] = c · Σ_i m[j, i]·v[i] for j < rows (m [rows, n] row-major) when add is false, out[j] += that when it
// is: 16 rows of m at a time against the same v, their lane sums reduced together (sum16).
TINKERD_CLONES void matrix_vector(const float * m, const float * v, int64_t rows, int64_t n, float c, bool add,
                                  float * out) {
    int64_t j = 0;
    for (; j + LANES <= rows; j += LANES) {
        v16f acc[LANES] = {};
        int64_t i = 0;
        for (; i + LANES <= n; i += LANES) {
            const v16f vv = load(v + i);
            for (int r = 0; r < LANES; ++r) {
                acc[r] += load(m + (j + r) * n + i) * vv;
            }
        }
        v16f sums = sum16(acc);
        for (; i < n; ++i) {
            for (int r = 0; r < LANES; ++r) {
                sums[r] += m[(j + r) * n + i] * v[i];
            }
        }
        for (int r = 0; r < LANES; ++r) {
            out[j + r] = add ? out[j + r] + c * sums[r] : c * sums[r];
        }
    }
    for (; j < rows; ++j) {
        const float d = c * dot(m + j * n, v, n);
        out[j] = add ? out[j] + d : d;
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

bool lora_rows_applicable(const torch::Tensor & y, const torch::Tensor & x, const std::vector<RowSegment> & segments) {
    if (torch::GradMode::is_enabled() || !y.device().is_cpu() || y.scalar_type() != torch::kFloat32 ||
        x.scalar_type() != torch::kFloat32 || !x.is_contiguous() || y.stride(1) != 1) {
        return false;
    }
    for (const RowSegment & s : segments) {
        if (s.end - s.begin > MAX_ROWS_PER_SEGMENT) {
            return false;
        }
    }
    return true;
}

// Two passes, each split across threads: u[r] = scale·A·x[r] in blocks of 16 ranks, then y[r] += B·u[r] in blocks
// of OUT_BLOCK outputs, so one row (batch 1) still uses every thread (the factors are read at the memory's rate).
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
    float * y_data = host_strided_data<float>(y, "add_lora_rows");  // rows y_stride apart, each contiguous
    const float * x_data = host_data<const float>(x, "add_lora_rows");
    std::vector<float> u(static_cast<size_t>(T * max_rank));  // [T, max rank]; any rank the API allows (<= 4096)
    const int64_t rank_blocks = (max_rank + LANES - 1) / LANES;
    at::parallel_for(0, T * rank_blocks, 1, [&](int64_t begin, int64_t end) {
        for (int64_t item = begin; item < end; ++item) {
            const int64_t r = item / rank_blocks, k0 = (item % rank_blocks) * LANES;
            const Adapter * adapter = row_adapter[r];
            const torch::Tensor * a = adapter ? adapter->lora_a(layer, target) : nullptr;  // [R, in]
            if (a && k0 < a->size(0)) {
                matrix_vector(host_data<const float>(*a, "add_lora_rows") + k0 * in, x_data + r * in,
                              std::min(LANES, a->size(0) - k0), in, static_cast<float>(adapter->scale), false,
                              u.data() + r * max_rank + k0);
            }
        }
    });
    const int64_t blocks = (out + OUT_BLOCK - 1) / OUT_BLOCK;
    at::parallel_for(0, T * blocks, 1, [&](int64_t begin, int64_t end) {
        for (int64_t item = begin; item < end; ++item) {
            const int64_t r = item / blocks, j0 = (item % blocks) * OUT_BLOCK, n = std::min(OUT_BLOCK, out - j0);
            if (const Adapter * adapter = row_adapter[r]) {
                const torch::Tensor & b = *adapter->lora_b(layer, target);  // [out, R]
                const int64_t rank = b.size(1);
                matrix_vector(host_data<const float>(b, "add_lora_rows") + j0 * rank, u.data() + r * max_rank, n, rank,
                              1.0F, true, y_data + r * y_stride + j0);
            }
        }
    });
}

}  // namespace tinkerd::engine
