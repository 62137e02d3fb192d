// Base-weight products (matmul.h): dispatch between the CPU kernels (register-blocked for few rows, blocks
// of the weight converted to fp32 for BLAS for many) and the generic torch ops, and the autograd function
// that gives base_linear its backward.
#include "engine/kernels/matmul.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <ATen/Parallel.h>

#include "engine/host_access.h"
#include "engine/kernels/fp32_copies.h"
#include "engine/kernels/gpu_matmul.h"
#include "engine/kernels/matmul_brgemm.h"
#include "engine/kernels/matmul_kernels.h"
#include "engine/kernels/quant_matmul.h"

namespace tinkerd::engine::kernels {

namespace {

constexpr int64_t kScratchBytes = int64_t{1} << 20;  // fp32 weight block for BLAS: a share of L2
constexpr int64_t kColumnGroup = 32;                 // backward kernel columns per task
constexpr int64_t kGrainElements = 1 << 15;          // weight elements per task, at least

// The cap TINKERD_MATMUL_KERNELS asks for: avx512, avx2, generic (or 0); none when unset, avx512bf16 or an
// unknown name.
std::optional<KernelIsa> asked_cap() {
    const char * env = std::getenv("TINKERD_MATMUL_KERNELS");
    const std::string name = env == nullptr ? "" : env;
    if (name == "avx512") {
        return KernelIsa::avx512;
    }
    if (name == "avx2") {
        return KernelIsa::avx2;
    }
    if (name == "0" || name == "generic") {
        return KernelIsa::generic;
    }
    return std::nullopt;
}

KernelIsa initial_isa() {
    const KernelIsa best = cpu_kernel_isa();
    return std::min(asked_cap().value_or(best), best);
}

// The CPU has AVX-512-BF16 and TINKERD_MATMUL_KERNELS sets no cap (any cap, avx512 included, turns it off).
bool bf16_dot_cpu() {
    static const bool allowed = [] {
        __builtin_cpu_init();
        return !asked_cap().has_value() && __builtin_cpu_supports("avx512bf16");
    }();
    return allowed;
}

std::atomic<bool> & bf16_dot_setting() {
    static std::atomic<bool> enabled{true};
    return enabled;
}

std::atomic<KernelIsa> & isa_setting() {
    static std::atomic<KernelIsa> isa{initial_isa()};
    return isa;
}

std::atomic<MatmulInputs> & inputs_setting() {
    static std::atomic<MatmulInputs> inputs{MatmulInputs::fp32};
    return inputs;
}

std::atomic<bool> & brgemm_setting() {
    static std::atomic<bool> enabled{false};
    return enabled;
}

std::atomic<int64_t> & blas_rows_setting() {
    static std::atomic<int64_t> rows{64};
    return rows;
}

// The CPU tensors of a kernel call (kernel_applies admitted them; host_data checks device and layout again).
template <typename T>
T * cpu_data(const torch::Tensor & t) {
    return host_data<T>(t, "matmul kernels");
}

const uint16_t * bf16_data(const torch::Tensor & w) {
    return reinterpret_cast<const uint16_t *>(cpu_data<const c10::BFloat16>(w));
}

// True when the kernels can take a (fp32, contiguous, CPU, last dim = w.size(w_dim)) with w (`weights`: bf16, or
// fp32 for gate_linear; [out, in], contiguous, CPU); w_dim is 1 for the forward (a = x), 0 for the backward (a = dy).
bool kernel_applies(const torch::Tensor & a, const torch::Tensor & w, int64_t w_dim,
                    torch::ScalarType weights = torch::kBFloat16) {
    return kernel_isa() != KernelIsa::generic && a.device().is_cpu() && w.device().is_cpu() &&
           a.scalar_type() == torch::kFloat && w.scalar_type() == weights && w.dim() == 2 && a.dim() >= 1 &&
           a.size(-1) == w.size(w_dim) && a.is_contiguous() && w.is_contiguous() && a.numel() > 0 && w.numel() > 0 &&
           !(torch::GradMode::is_enabled() && a.requires_grad());
}

// scratch [rows, cols] = fp32(w [rows, cols] with row stride ld), on the calling thread.
void convert_block(const uint16_t * w, int64_t ld, int64_t rows, int64_t cols, float * scratch) {
    const auto convert = kernel_isa() == KernelIsa::avx512 ? detail::bf16_to_f32_avx512 : detail::bf16_to_f32_avx2;
    for (int64_t r = 0; r < rows; ++r) {
        convert(w + r * ld, scratch + r * cols, cols);
    }
}

// This thread's fp32 scratch for weight blocks, as [rows, cols] (rows * cols <= kScratchFloats).
torch::Tensor scratch_block(int64_t rows, int64_t cols) {
    thread_local torch::Tensor buffer;
    if (!buffer.defined() || buffer.numel() < rows * cols) {
        buffer = torch::empty({std::max(rows * cols, kScratchBytes / 4)}, torch::kFloat);
    }
    return buffer.narrow(0, 0, rows * cols).view({rows, cols});
}

int64_t block_rows(int64_t cols) {
    return std::max<int64_t>(16, kScratchBytes / (cols * 4));
}

// y [T, out] = x [T, in] · w [out, in]ᵀ. Each thread takes a range of weight rows and walks it by blocks
// converted to fp32, one single-threaded BLAS call per block (MKL runs serially inside the parallel region)
// into y's column block: one synchronisation per call.
void forward_blas(const torch::Tensor & x, const torch::Tensor & w, torch::Tensor & y) {
    const int64_t out = w.size(0), in = w.size(1), step = block_rows(in);
    const uint16_t * wp = bf16_data(w);
    at::parallel_for(0, out, 16, [&](int64_t begin, int64_t end) {
        torch::NoGradGuard no_grad;  // OpenMP workers start with grad mode on; x may require grad (base_linear)
        for (int64_t o0 = begin; o0 < end; o0 += step) {
            const int64_t rows = std::min(step, end - o0);
            torch::Tensor wf = scratch_block(rows, in);  // [rows, in]
            convert_block(wp + o0 * in, in, rows, in, cpu_data<float>(wf));
            torch::Tensor y_block = y.narrow(1, o0, rows);  // [T, rows], row stride out
            at::mm_out(y_block, x, wf.t());
        }
    });
}

// dx [T, in] = dy [T, out] · w [out, in]. Each thread owns a range of dx's columns and accumulates over
// blocks of weight rows (BLAS's K blocking) converted to fp32: no reduction between threads.
void backward_blas(const torch::Tensor & dy, const torch::Tensor & w, torch::Tensor & dx) {
    const int64_t out = w.size(0), in = w.size(1);
    const uint16_t * wp = bf16_data(w);
    at::parallel_for(0, (in + 15) / 16, 1, [&](int64_t begin, int64_t end) {
        torch::NoGradGuard no_grad;  // as in forward_blas
        const int64_t c0 = begin * 16, cols = std::min(in, end * 16) - c0, step = block_rows(cols);
        torch::Tensor dx_cols = dx.narrow(1, c0, cols);  // [T, cols], row stride in
        for (int64_t o0 = 0; o0 < out; o0 += step) {
            const int64_t rows = std::min(step, out - o0);
            torch::Tensor wf = scratch_block(rows, cols);  // [rows, cols]
            convert_block(wp + o0 * in + c0, in, rows, cols, cpu_data<float>(wf));
            const torch::Tensor dy_block = dy.narrow(1, o0, rows);  // [T, rows], row stride out
            if (o0 == 0) {
                at::mm_out(dx_cols, dy_block, wf);
            } else {
                dx_cols.addmm_(dy_block, wf);
            }
        }
    });
}

// The brgemm path on a [T, k] fp32 (not yet rounded): converted to bf16 once, which is the rounding.
void forward_brgemm(const torch::Tensor & x, const torch::Tensor & w, torch::Tensor & y) {
    detail::brgemm_forward(x.to(torch::kBFloat16), w, y);
}

void backward_brgemm(const torch::Tensor & dy, const torch::Tensor & w, torch::Tensor & dx) {
    detail::brgemm_backward(dy.to(torch::kBFloat16), w, dx);
}

// The bf16 dot-product kernel on a [T, k] fp32 (not yet rounded): converted to bf16 once, which is the
// rounding; the weight rows split across threads in blocks of 8.
void forward_dot(const torch::Tensor & x, const torch::Tensor & w, torch::Tensor & y) {
    const torch::Tensor xb = x.to(torch::kBFloat16);  // [T, in]
    const int64_t T = x.size(0), out = w.size(0), in = w.size(1);
    const int64_t grain = std::max<int64_t>(1, kGrainElements / in / 8);
    const uint16_t *xp = bf16_data(xb), *wp = bf16_data(w);
    float * yp = cpu_data<float>(y);
    at::parallel_for(0, (out + 7) / 8, grain, [&](int64_t b, int64_t e) {
        detail::forward_rows_bf16_dot(xp, T, in, wp, b * 8, std::min(out, e * 8), yp, out);
    });
}

// A few-row kernel over weight rows [o0, o1) (matmul_kernels.h); W: uint16_t (bf16 bits) or float.
template <class W>
using RowsKernel = void (*)(const float * x, int64_t T, int64_t in, const W * w, int64_t o0, int64_t o1, float * y,
                            int64_t ldy);

// y [T, out] = x [T, in] · w [out, in]ᵀ by `rows`, the weight rows split across threads in blocks of 4.
template <class W>
void forward_rows_split(const torch::Tensor & x, const W * w, int64_t out, torch::Tensor & y, RowsKernel<W> rows) {
    const int64_t T = x.size(0), in = x.size(1);
    const int64_t grain = std::max<int64_t>(1, kGrainElements / in / 4);  // in blocks of 4 weight rows
    at::parallel_for(0, (out + 3) / 4, grain, [&](int64_t b, int64_t e) {
        rows(cpu_data<const float>(x), T, in, w, b * 4, std::min(out, e * 4), cpu_data<float>(y), out);
    });
}

void forward_small(const torch::Tensor & x, const torch::Tensor & w, torch::Tensor & y) {
    const auto rows = kernel_isa() == KernelIsa::avx512 ? detail::forward_rows_avx512 : detail::forward_rows_avx2;
    forward_rows_split<uint16_t>(x, bf16_data(w), w.size(0), y, rows);
}

void backward_small(const torch::Tensor & dy, const torch::Tensor & w, torch::Tensor & dx) {
    const int64_t T = dy.size(0), out = w.size(0), in = w.size(1);
    const auto cols = kernel_isa() == KernelIsa::avx512 ? detail::backward_cols_avx512 : detail::backward_cols_avx2;
    const int64_t groups = (in + kColumnGroup - 1) / kColumnGroup;
    const int64_t grain = std::max<int64_t>(1, kGrainElements / (out * kColumnGroup));
    at::parallel_for(0, groups, grain, [&](int64_t b, int64_t e) {
        const int64_t c0 = b * kColumnGroup, c1 = std::min(in, e * kColumnGroup);
        cols(cpu_data<const float>(dy), T, out, bf16_data(w), in, c0, c1, cpu_data<float>(dx));
    });
}

// The few-row forward over fp32 weights (gate_linear: MoE routers and gates): the same register blocking, so
// these small products do not take BLAS's per-call overhead and gemv.
void forward_small_f32(const torch::Tensor & x, const torch::Tensor & w, torch::Tensor & y) {
    const auto rows =
        kernel_isa() == KernelIsa::avx512 ? detail::forward_rows_f32_avx512 : detail::forward_rows_f32_avx2;
    forward_rows_split<float>(x, cpu_data<const float>(w), w.size(0), y, rows);
}

// True when x [..., in] fp32 times fp32 w [out, in] takes forward_small_f32: the kernels take them (as bf16
// weights), fewer than blas_min_rows() rows.
bool f32_rows_apply(const torch::Tensor & x, const torch::Tensor & w) {
    return kernel_applies(x, w, 1, torch::kFloat) && x.numel() / x.size(-1) < blas_min_rows();
}

using Product = void (*)(const torch::Tensor & a, const torch::Tensor & w, torch::Tensor & result);

// a [..., k] -> [..., n] with the small-T kernel, or the BLAS path from blas_min_rows() rows of a on.
torch::Tensor run_kernels(const torch::Tensor & a, const torch::Tensor & w, int64_t n, Product small, Product blas) {
    const torch::Tensor a2 = a.view({-1, a.size(-1)});                  // [T, k]
    torch::Tensor result = torch::empty({a2.size(0), n}, a.options());  // [T, n]
    (a2.size(0) >= blas_min_rows() ? blas : small)(a2, w, result);
    std::vector<int64_t> shape(a.sizes().begin(), a.sizes().end() - 1);
    shape.push_back(n);
    return result.view(shape);
}

// True when a's values are rounded to bf16 before the product with w (matmul_inputs() == bf16, w bf16).
bool rounds_inputs(const torch::Tensor & a, const torch::Tensor & w) {
    return matmul_inputs() == MatmulInputs::bf16 && w.scalar_type() == torch::kBFloat16 &&
           a.scalar_type() == torch::kFloat && w.device().is_cpu();
}

// a's values rounded to bf16 (nearest even), kept as fp32: every path multiplies these.
torch::Tensor rounded_to_bf16(const torch::Tensor & a) {
    return a.to(torch::kBFloat16).to(torch::kFloat);
}

// The brgemm path takes a (fp32, not yet rounded) when bf16 inputs and brgemm are on, the kernels apply, a has
// blas_min_rows() rows or more and the reduction (w's dim w_dim) is even, as VNNI pairs need; odd ones go to
// the fp32 BLAS path on the rounded values, which computes the same products.
bool brgemm_applies(const torch::Tensor & a, const torch::Tensor & w, int64_t w_dim) {
    return rounds_inputs(a, w) && brgemm_enabled() && kernel_applies(a, w, w_dim) && w.size(w_dim) % 2 == 0 &&
           a.numel() / a.size(-1) >= blas_min_rows();
}

// One direction of the product: w's reduction dim (1 forward, 0 backward) and its paths (dot: the few-row
// bf16 dot-product kernel, forward only).
struct Direction {
    int64_t w_dim;
    Product small, blas, brgemm, dot;
    torch::Tensor (*generic)(const torch::Tensor & a, const torch::Tensor & w);
};
const Direction FORWARD{1, forward_small, forward_blas, forward_brgemm, forward_dot, matmul_weight_generic};
const Direction BACKWARD{0, backward_small, backward_blas, backward_brgemm, nullptr, matmul_weight_backward_generic};

// The dot-product kernel takes a (fp32, not yet rounded) in direction d when it has one, bf16 inputs and the
// kernel are on, the kernels apply and a has fewer than blas_min_rows() rows.
bool dot_applies(const torch::Tensor & a, const torch::Tensor & w, const Direction & d) {
    return d.dot != nullptr && rounds_inputs(a, w) && bf16_dot_enabled() && kernel_applies(a, w, d.w_dim) &&
           a.numel() / a.size(-1) < blas_min_rows();
}

// A GPU's bf16 weight times fp32 inputs: split_bf16_product (exact inputs, tensor-core rate).
bool split_applies(const torch::Tensor & a, const torch::Tensor & w) {
    return !w.device().is_cpu() && w.scalar_type() == torch::kBFloat16 && a.scalar_type() == torch::kFloat &&
           gpu_fast_paths();
}

// a [..., k] times w in direction d -> [..., n]: brgemm or the dot kernel (both round a themselves), else the
// kernels or the generic ops on a rounded first when the inputs are bf16; exact many-row products take w's fp32
// copy where kernel_choice turned copies on (fp32_copies.h).
torch::Tensor product(const torch::Tensor & x, const torch::Tensor & w, const Direction & d) {
    const int64_t n = w.size(1 - d.w_dim);
    if (split_applies(x, w)) {
        return split_bf16_product(x, d.w_dim == 1 ? w.t() : w);  // w as [k, n]
    }
    if (brgemm_applies(x, w, d.w_dim)) {
        return run_kernels(x, w, n, d.brgemm, d.brgemm);  // brgemm_applies: blas_min_rows() rows or more
    }
    if (dot_applies(x, w, d)) {
        return run_kernels(x, w, n, d.dot, d.dot);  // dot_applies: fewer than blas_min_rows() rows
    }
    const torch::Tensor a = rounds_inputs(x, w) ? rounded_to_bf16(x) : x;  // [..., k]
    if (!kernel_applies(a, w, d.w_dim)) {
        return d.generic(a, w);
    }
    if (a.numel() / a.size(-1) >= blas_min_rows() && !rounds_inputs(x, w)) {
        if (const torch::Tensor w32 = fp32_copy_of(w); w32.defined()) {  // [out, in] fp32: one BLAS call
            return d.generic(a, w32);
        }
    }
    return run_kernels(a, w, n, d.small, d.blas);
}

}  // namespace

MatmulInputs matmul_inputs() {
    return inputs_setting().load(std::memory_order_relaxed);
}
void set_matmul_inputs(MatmulInputs inputs) {
    inputs_setting().store(inputs);
}
bool brgemm_available() {  // AVX-512 code: not under a lower TINKERD_MATMUL_KERNELS cap
    return kernel_isa() == KernelIsa::avx512 && detail::brgemm_bf16_supported();
}
bool bf16_dot_available() {
    return kernel_isa() == KernelIsa::avx512 && bf16_dot_cpu();
}
bool bf16_dot_enabled() {
    return bf16_dot_setting().load(std::memory_order_relaxed) && bf16_dot_available();
}
void set_bf16_dot_enabled(bool enabled) {
    bf16_dot_setting().store(enabled);
}
bool brgemm_enabled() {
    return brgemm_setting().load(std::memory_order_relaxed);
}
void set_brgemm_enabled(bool enabled) {
    brgemm_setting().store(enabled && brgemm_available());
}

KernelIsa cpu_kernel_isa() {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) {
        return KernelIsa::avx512;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        return KernelIsa::avx2;
    }
    return KernelIsa::generic;
}

KernelIsa kernel_isa() {
    return isa_setting().load(std::memory_order_relaxed);
}
void set_kernel_isa(KernelIsa isa) {
    isa_setting().store(std::min(isa, cpu_kernel_isa()));
}
void set_kernels_enabled(bool enabled) {
    set_kernel_isa(enabled ? cpu_kernel_isa() : KernelIsa::generic);
}
int64_t blas_min_rows() {
    return blas_rows_setting().load(std::memory_order_relaxed);
}
void set_blas_min_rows(int64_t rows) {
    blas_rows_setting().store(std::max<int64_t>(1, rows));
}

torch::Tensor matmul_weight_generic(const torch::Tensor & x, const torch::Tensor & w) {
    return torch::matmul(x, w.to(x.scalar_type()).t());  // [T, out]
}

torch::Tensor matmul_weight_backward_generic(const torch::Tensor & dy, const torch::Tensor & w) {
    return torch::matmul(dy, w.to(dy.scalar_type()));  // [T, in]
}

torch::Tensor matmul_weight(const torch::Tensor & x, const torch::Tensor & w) {
    return is_quantised(w) ? quantised_forward(x, w) : product(x, w, FORWARD);  // [..., out]
}

torch::Tensor matmul_weight_backward(const torch::Tensor & dy, const torch::Tensor & w) {
    return is_quantised(w) ? quantised_backward(dy, w) : product(dy, w, BACKWARD);  // [..., in]
}

// brgemm_applies already excludes what product() would route elsewhere first: quantised weights (not bf16) and
// the GPU split (w not on the CPU).
bool backward_takes_rounded(const torch::Tensor & dy, const torch::Tensor & w) {
    return dy.dim() == 2 && brgemm_applies(dy, w, BACKWARD.w_dim);
}

torch::Tensor matmul_weight_backward_rounded(const torch::Tensor & dy, const torch::Tensor & dy_rounded,
                                             const torch::Tensor & w) {
    if (!backward_takes_rounded(dy, w)) {
        return matmul_weight_backward(dy, w);
    }
    TORCH_CHECK(
        dy_rounded.scalar_type() == torch::kBFloat16 && dy_rounded.sizes() == dy.sizes() && dy_rounded.is_contiguous(),
        "matmul_weight_backward_rounded: dy_rounded must be dy's shape, bf16, contiguous");
    torch::Tensor dx = torch::empty({dy.size(0), w.size(1)}, dy.options());  // [T, in]
    detail::brgemm_backward(dy_rounded, w, dx);
    return dx;
}

namespace {

struct BaseLinearFunction : public torch::autograd::Function<BaseLinearFunction> {
    static torch::Tensor forward(torch::autograd::AutogradContext * ctx, const torch::Tensor & x,
                                 const torch::Tensor & w) {
        ctx->saved_data["w"] = w;
        return matmul_weight(x, w);  // [T, out]
    }
    static torch::autograd::tensor_list backward(torch::autograd::AutogradContext * ctx,
                                                 torch::autograd::tensor_list grads) {
        const torch::Tensor w = ctx->saved_data["w"].toTensor();
        return {matmul_weight_backward(grads[0].contiguous(), w), torch::Tensor()};
    }
};

}  // namespace

torch::Tensor gate_linear(const torch::Tensor & x, const torch::Tensor & w) {
    if (!f32_rows_apply(x, w)) {
        return base_linear(x, w);
    }
    return run_kernels(x, w, w.size(0), forward_small_f32, forward_small_f32);  // f32_rows_apply: few rows
}

torch::Tensor exact_linear(const torch::Tensor & x, const torch::Tensor & w) {
    if (w.device().is_cpu() || w.scalar_type() == x.scalar_type()) {
        return base_linear(x, w);
    }
    if (!torch::GradMode::is_enabled() || !x.requires_grad()) {
        return matmul_weight(x, w);  // [..., out]
    }
    return BaseLinearFunction::apply(x, w);
}

torch::Tensor base_linear(const torch::Tensor & x, const torch::Tensor & w) {
    if (w.scalar_type() == x.scalar_type()) {
        return torch::matmul(x, w.t());  // fp32 / fp64 weights: autograd's own matmul
    }
    if (!w.device().is_cpu()) {  // GPUs: bf16 tensor-core products, rounded activations
        if (!rounded_gpu_applies(x, w)) {
            return torch::matmul(x.to(w.scalar_type()), w.t()).to(x.scalar_type());
        }
        return rounded_gpu_linear(x, w);  // [..., out]
    }
    if (!torch::GradMode::is_enabled() || !x.requires_grad()) {  // no node to record: the product alone
        return matmul_weight(x, w);
    }
    return BaseLinearFunction::apply(x, w);
}

RowRangeProduct row_range_product(int64_t T, const torch::Tensor & w) {
    RowRangeProduct p;
    const torch::Tensor x = torch::empty({T, w.dim() == 2 ? w.size(1) : 0});  // [T, in]: product()'s tests read x's
    if (T <= 0 || w.dim() != 2 || is_quantised(w) || !kernel_applies(x, w, FORWARD.w_dim) || split_applies(x, w) ||
        brgemm_applies(x, w, FORWARD.w_dim) || T >= blas_min_rows()) {
        return p;  // matmul_weight takes another path
    }
    if (dot_applies(x, w, FORWARD)) {
        p.kind = RowRangeProduct::Kind::bf16_dot;
        return p;
    }
    p.kind = RowRangeProduct::Kind::fp32_rows;
    p.rounds_inputs = rounds_inputs(x, w);
    p.fp32_rows_ = kernel_isa() == KernelIsa::avx512 ? detail::forward_rows_avx512 : detail::forward_rows_avx2;
    return p;
}

void RowRangeProduct::run(const uint16_t * x16, const float * x32, int64_t T, int64_t in, const uint16_t * w,
                          int64_t o0, int64_t o1, float * y, int64_t ldy) const {
    if (kind == Kind::bf16_dot) {
        detail::forward_rows_bf16_dot(x16, T, in, w, o0, o1, y, ldy);
    } else if (kind == Kind::fp32_rows) {
        fp32_rows_(x32, T, in, w, o0, o1, y, ldy);
    }
}

}  // namespace tinkerd::engine::kernels
