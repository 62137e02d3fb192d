// Row-wise LoRA for sampling (lora_rows.h): two small dot-product loops per row, written with 16
// independent accumulator lanes so the compiler vectorises them without reordering any one lane's sum.
#include "engine/lora_rows.h"

#include <vector>

#include <ATen/Parallel.h>

#include "engine/host_access.h"

namespace tinkerd::engine {

namespace {

constexpr int64_t MAX_ROWS_PER_SEGMENT = 16;
constexpr int LANES = 16;

// Σ_i a[i]·b[i] over n floats.
float dot(const float * a, const float * b, int64_t n) {
    float lanes[LANES] = {};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        for (int l = 0; l < LANES; ++l) {
            lanes[l] += a[i + l] * b[i + l];
        }
    }
    float sum = 0.0F;
    for (float lane : lanes) {
        sum += lane;
    }
    for (; i < n; ++i) {
        sum += a[i] * b[i];
    }
    return sum;
}

// One row: u [R] = scale·A·x, then y += B·u. A [R, in], B [out, R], both contiguous fp32.
void lora_row(float * y, const float * x, const float * a, const float * b, int64_t in, int64_t out, int64_t rank,
              float scale) {
    std::vector<float> u(static_cast<size_t>(rank));  // [R]; any rank the API allows (up to 4096)
    for (int64_t k = 0; k < rank; ++k) {
        u[k] = dot(a + k * in, x, in) * scale;
    }
    for (int64_t j = 0; j < out; ++j) {
        y[j] += dot(b + j * rank, u.data(), rank);
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

void add_lora_rows(torch::Tensor & y, const torch::Tensor & x, const std::vector<RowSegment> & segments, int64_t layer,
                   LoraTarget target) {
    for (const RowSegment & s : segments) {
        TORCH_CHECK(adapter_usable(s.adapter, layer, target), "add_lora_rows: unsupported LoRA tensors");
    }
    std::vector<const Adapter *> row_adapter(static_cast<size_t>(y.size(0)), nullptr);  // [T]
    for (const RowSegment & s : segments) {
        for (int64_t r = s.begin; r < s.end; ++r) {
            row_adapter[r] = s.adapter && s.adapter->lora_a(layer, target) ? s.adapter : nullptr;
        }
    }
    const int64_t in = x.size(1), out = y.size(1), y_stride = y.stride(0);
    float * y_data = host_strided_data<float>(y, "add_lora_rows");  // rows y_stride apart, each contiguous
    const float * x_data = host_data<const float>(x, "add_lora_rows");
    at::parallel_for(0, y.size(0), 1, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            const Adapter * adapter = row_adapter[r];
            if (!adapter) {
                continue;
            }
            const torch::Tensor & a = *adapter->lora_a(layer, target);  // [R, in]
            const torch::Tensor & b = *adapter->lora_b(layer, target);  // [out, R]
            lora_row(y_data + r * y_stride, x_data + r * in, host_data<const float>(a, "add_lora_rows"),
                     host_data<const float>(b, "add_lora_rows"), in, out, a.size(0),
                     static_cast<float>(adapter->scale));
        }
    });
}

}  // namespace tinkerd::engine
