// Products with quantised base weights (quant_matmul.h): blocks of weight rows (or of a column range) are
// dequantised into a thread's fp32 scratch and multiplied there by BLAS, or for few rows of x by the fused
// dequantise-and-dot kernels of quant_kernels.h; the threads split the weight rows (forward) or the input
// columns (backward), so no two threads write the same output.
#include "engine/kernels/quant_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <ATen/Parallel.h>

#include "engine/host_access.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/quant_int8.h"
#include "engine/kernels/quant_kernels.h"
#include "gguf/quantise.h"

namespace tinkerd::engine::kernels {

namespace {

constexpr int64_t kScratchFloats = int64_t{1} << 18;  // 1 MiB of fp32 weights per block: a share of L2
constexpr int64_t kFusedRows = 16;                    // below this many rows of x, the fused kernels

int64_t block_elements(gguf::GgmlType type) {
    gguf::BlockLayout layout;
    gguf::ggml_block_layout(static_cast<uint32_t>(type), layout);
    return layout.elements;
}

const uint8_t * blocks(const torch::Tensor & w) {
    return host_data<const uint8_t>(w, "quantised products");
}

// This thread's fp32 scratch as [rows, cols].
float * scratch(int64_t rows, int64_t cols) {
    thread_local std::vector<float> buffer;
    buffer.resize(std::max<size_t>(buffer.size(), static_cast<size_t>(rows * cols)));
    return buffer.data();
}

torch::Tensor scratch_tensor(float * data, int64_t rows, int64_t cols) {
    return host_wrap(data, {rows, cols}, torch::kFloat);
}

int64_t block_rows(int64_t cols) {
    return std::max<int64_t>(8, kScratchFloats / cols);
}

// y [T, out] = x · wᵀ by blocks of dequantised rows and BLAS (many rows of x).
void forward_blocks(const torch::Tensor & x, const torch::Tensor & w, torch::Tensor & y) {
    const gguf::GgmlType type = quantised_type(w);
    const int64_t out = w.size(0), in = quantised_in(w), row_bytes = quantised_row_bytes(w), step = block_rows(in);
    const uint8_t * wp = blocks(w);
    at::parallel_for(0, out, 16, [&](int64_t begin, int64_t end) {
        torch::NoGradGuard no_grad;  // OpenMP workers start with grad mode on
        for (int64_t o0 = begin; o0 < end; o0 += step) {
            const int64_t rows = std::min(step, end - o0);
            float * wf = scratch(rows, in);  // [rows, in]
            detail::dequant_rows(type, wp + o0 * row_bytes, row_bytes, rows, in, wf, in, detail::quant_isa());
            torch::Tensor y_block = y.narrow(1, o0, rows);  // [T, rows], row stride out
            at::mm_out(y_block, x, scratch_tensor(wf, rows, in).t());
        }
    });
}

// y [T, out] = x · wᵀ by the fused kernels: each weight block is read once for every row of x.
void forward_fused(const torch::Tensor & x, const torch::Tensor & w, torch::Tensor & y) {
    const gguf::GgmlType type = quantised_type(w);
    const int64_t T = x.size(0), out = w.size(0), in = quantised_in(w), row_bytes = quantised_row_bytes(w);
    const float * xp = host_data<const float>(x, "quantised products");
    float * yp = host_data<float>(y, "quantised products");
    const int64_t grain = std::max<int64_t>(4, (int64_t{1} << 16) / std::max<int64_t>(1, row_bytes));
    if (detail::int8_activations_on() && detail::int8_type_supported(type)) {  // sampling's opt-in int8 path
        detail::Int8Rows xq;
        detail::quantise_rows_int8(type, xp, T, in, xq);  // once per product, before the threads split
        const detail::Int8View xv = detail::int8_view(xq, 0, T);
        const detail::Int8Isa isa = detail::int8_isa_for(detail::quant_isa());
        at::parallel_for(0, out, grain, [&](int64_t begin, int64_t end) {
            detail::int8_forward_rows(type, xv, blocks(w), row_bytes, begin, end, yp, out, isa);
        });
        return;
    }
    at::parallel_for(0, out, grain, [&](int64_t begin, int64_t end) {
        detail::quant_forward_rows(type, xp, T, in, blocks(w), row_bytes, begin, end, yp, out, detail::quant_isa());
    });
}

// dx [T, in] = dy · w: each thread owns a range of whole blocks of dx's columns and walks the weight rows.
void backward_blocks(const torch::Tensor & dy, const torch::Tensor & w, torch::Tensor & dx) {
    const gguf::GgmlType type = quantised_type(w);
    const int64_t out = w.size(0), in = quantised_in(w), row_bytes = quantised_row_bytes(w);
    const int64_t elements = block_elements(type), n_blocks = in / elements, block_bytes = w.size(-1);
    const uint8_t * wp = blocks(w);
    at::parallel_for(0, n_blocks, 1, [&](int64_t begin, int64_t end) {
        torch::NoGradGuard no_grad;
        const int64_t c0 = begin * elements, cols = (end - begin) * elements, step = block_rows(cols);
        torch::Tensor dx_cols = dx.narrow(1, c0, cols);  // [T, cols], row stride in
        for (int64_t o0 = 0; o0 < out; o0 += step) {
            const int64_t rows = std::min(step, out - o0);
            float * wf = scratch(rows, cols);  // [rows, cols]
            detail::dequant_rows(type, wp + o0 * row_bytes + begin * block_bytes, row_bytes, rows, cols, wf, cols,
                                 detail::quant_isa());
            const torch::Tensor dy_block = dy.narrow(1, o0, rows);  // [T, rows]
            if (o0 == 0) {
                at::mm_out(dx_cols, dy_block, scratch_tensor(wf, rows, cols));
            } else {
                dx_cols.addmm_(dy_block, scratch_tensor(wf, rows, cols));
            }
        }
    });
}

// a [..., k] -> [T, k] fp32 contiguous, and the result's leading shape.
torch::Tensor as_rows(const torch::Tensor & a, std::vector<int64_t> & leading) {
    leading.assign(a.sizes().begin(), a.sizes().end() - 1);
    return a.to(torch::kFloat).contiguous().view({-1, a.size(-1)});
}

torch::Tensor with_leading(const torch::Tensor & result, std::vector<int64_t> leading) {
    leading.push_back(result.size(1));
    return result.view(leading);
}

}  // namespace

namespace detail {
QuantIsa quant_isa() {
    switch (kernel_isa()) {
        case KernelIsa::avx512:
            return QuantIsa::avx512;
        case KernelIsa::avx2:
            return QuantIsa::avx2;
        default:
            return QuantIsa::scalar;
    }
}
}  // namespace detail

bool is_quantised(const torch::Tensor & w) {
    gguf::GgmlType type;
    return w.defined() && w.scalar_type() == torch::kUInt8 && w.dim() >= 3 &&
           detail::quant_type_from_block_bytes(w.size(-1), type);
}

gguf::GgmlType quantised_type(const torch::Tensor & w) {
    gguf::GgmlType type = gguf::GgmlType::F32;
    TORCH_CHECK(
        w.scalar_type() == torch::kUInt8 && w.dim() >= 3 && detail::quant_type_from_block_bytes(w.size(-1), type),
        "not a quantised weight: ", w.sizes());
    return type;
}

int64_t quantised_in(const torch::Tensor & w) {
    return w.size(-2) * block_elements(quantised_type(w));
}

std::vector<int64_t> logical_shape(const torch::Tensor & w) {
    std::vector<int64_t> shape(w.sizes().begin(), w.sizes().end() - 2);
    shape.push_back(quantised_in(w));
    return shape;
}

namespace {

// One Q8_0 block (34 bytes: d as fp16, 32 int8 q) of v[32]: d = max|v| / 127, q = round(v / d).
void quantise_q8_0_block(const float * v, uint8_t * block) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) {
        amax = std::max(amax, std::abs(v[i]));
    }
    const float d = amax / 127.0f, inv = d > 0 ? 1.0f / d : 0.0f;
    const uint16_t half = c10::Half(d).x;
    std::memcpy(block, &half, 2);
    for (int i = 0; i < 32; ++i) {
        const float q = std::nearbyint(v[i] * inv);
        block[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f)));
    }
}

// w [..., in] as blocks [..., in/values, bytes]: block_fn(x, out) fills one block from `values` fp32 values,
// the blocks split among the threads `grain` at a time.
template <class BlockFn>
torch::Tensor quantise_blocks(const torch::Tensor & w, int64_t values, int64_t bytes, int64_t grain, const char * what,
                              BlockFn block_fn) {
    const torch::Tensor x = w.to(torch::kFloat).contiguous();  // [..., in]
    std::vector<int64_t> shape(w.sizes().begin(), w.sizes().end() - 1);
    shape.push_back(w.size(-1) / values);
    shape.push_back(bytes);
    torch::Tensor blocks = torch::empty(shape, torch::kUInt8);  // [..., in/values, bytes]
    const float * xp = host_data<const float>(x, what);
    uint8_t * out = host_data<uint8_t>(blocks, what);
    at::parallel_for(0, x.numel() / values, grain, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
            block_fn(xp + b * values, out + b * bytes);
        }
    });
    return blocks;
}

}  // namespace

torch::Tensor quantise_q8_0(const torch::Tensor & w) {
    TORCH_CHECK(w.dim() >= 1 && w.size(-1) % 32 == 0, "Q8_0 needs rows of a multiple of 32 values, got ", w.sizes());
    return quantise_blocks(w, 32, 34, 1024, "quantise_q8_0", quantise_q8_0_block);  // [..., in/32, 34]
}

torch::Tensor quantise_q4_k(const torch::Tensor & w) {
    TORCH_CHECK(w.dim() >= 1 && w.size(-1) % gguf::kQ4KBlockValues == 0,
                "Q4_K needs rows of a multiple of 256 values, got ", w.sizes());
    return quantise_blocks(w, gguf::kQ4KBlockValues, gguf::kQ4KBlockBytes, 256, "quantise_q4_k",
                           gguf::quantize_q4_k_block);  // [..., in/256, 144]
}

torch::Tensor dequantise(const torch::Tensor & w) {
    const torch::Tensor rows = w.contiguous().view({-1, w.size(-2), w.size(-1)});  // [R, in/blk, bb]
    torch::Tensor out = torch::empty({rows.size(0), quantised_in(w)}, torch::kFloat);
    detail::dequant_rows(quantised_type(w), blocks(rows), quantised_row_bytes(w), rows.size(0), out.size(1),
                         host_data<float>(out, "dequantise"), out.size(1), detail::quant_isa());
    return out.view(logical_shape(w));
}

torch::Tensor quantised_rows(const torch::Tensor & w, const torch::Tensor & index) {
    const torch::Tensor ids = index.to(torch::kLong).contiguous();
    const int64_t n = ids.numel(), in = quantised_in(w), row_bytes = quantised_row_bytes(w), V = w.size(0);
    torch::Tensor out = torch::empty({n, in}, torch::kFloat);
    const int64_t * ip = host_data<const int64_t>(ids, "quantised_rows");
    float * op = host_data<float>(out, "quantised_rows");
    const gguf::GgmlType type = quantised_type(w);
    const uint8_t * wp = blocks(w);
    for (int64_t i = 0; i < n; ++i) {
        TORCH_CHECK(ip[i] >= 0 && ip[i] < V, "token id ", ip[i], " outside the vocabulary of ", V);
        detail::dequant_rows(type, wp + ip[i] * row_bytes, row_bytes, 1, in, op + i * in, in, detail::quant_isa());
    }
    return out;
}

torch::Tensor quantised_forward(const torch::Tensor & x, const torch::Tensor & w) {
    TORCH_CHECK(x.size(-1) == quantised_in(w), "input of ", x.size(-1), " features for a weight of ", quantised_in(w));
    std::vector<int64_t> leading;
    const torch::Tensor a = as_rows(x, leading);  // [T, in]
    torch::Tensor y = torch::empty({a.size(0), w.size(0)}, a.options());
    if (a.size(0) > 0 && y.size(1) > 0) {
        (a.size(0) < kFusedRows ? forward_fused : forward_blocks)(a, w, y);
    }
    return with_leading(y, leading);
}

torch::Tensor quantised_backward(const torch::Tensor & dy, const torch::Tensor & w) {
    TORCH_CHECK(dy.size(-1) == w.size(0), "gradient of ", dy.size(-1), " features for a weight of ", w.size(0),
                " rows");
    std::vector<int64_t> leading;
    const torch::Tensor a = as_rows(dy, leading);  // [T, out]
    torch::Tensor dx = torch::zeros({a.size(0), quantised_in(w)}, a.options());
    if (a.size(0) > 0 && w.size(0) > 0) {
        backward_blocks(a, w, dx);
    }
    return with_leading(dx, leading);
}

}  // namespace tinkerd::engine::kernels
