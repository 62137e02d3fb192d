// Base-weight products with fp32 math over bf16-stored weights ("bf16 storage, fp32 math"): the weights
// stay bf16 in memory (half the bytes to read while decoding; many-row products may use fp32 copies where
// kernel_choice timed them faster, fp32_copies.h) and every product accumulates in fp32 on fp32 activations,
// so a bf16 checkpoint computes what fp32 would on the bf16-rounded weights.
#pragma once

#include <torch/torch.h>

namespace tinkerd::engine::kernels {

// y [T, out] fp32 = x [T, in] fp32 · w [out, in]ᵀ, w bf16 (or fp32: plain matmul). fp32 accumulation.
torch::Tensor matmul_weight(const torch::Tensor & x, const torch::Tensor & w);

// dx [T, in] fp32 = dy [T, out] fp32 · w [out, in], w bf16 (or fp32). The backward of matmul_weight.
torch::Tensor matmul_weight_backward(const torch::Tensor & dy, const torch::Tensor & w);

// Whether matmul_weight_backward(dy, w) would round dy to bf16 and take the brgemm path: then a caller that
// already holds dy rounded (it wrote the bf16 copy while dy was in its cache) can pass it to the function below
// and skip the product's own rounding pass over dy.
bool backward_takes_rounded(const torch::Tensor & dy, const torch::Tensor & w);

// matmul_weight_backward(dy, w) with dy_rounded [T, out] bf16 = dy rounded to nearest even (what that product
// rounds it to): the brgemm path multiplies dy_rounded directly, every other path ignores it. Bit-identical.
torch::Tensor matmul_weight_backward_rounded(const torch::Tensor & dy, const torch::Tensor & dy_rounded,
                                             const torch::Tensor & w);

// y = x · wᵀ with autograd for x only (w is a frozen base weight): the op the transformer calls.
torch::Tensor base_linear(const torch::Tensor & x, const torch::Tensor & w);

// base_linear for a MoE router or expert gate: an fp32 w with fewer than blas_min_rows() rows of x and no
// gradient wanted takes the same register-blocked few-row kernels as bf16 weights (fp32 math; another summation
// order than BLAS, whose gemv it replaces: 0.075 against 0.120 ms for a [256, 2048] router on 2 Zen 4 cores).
// Only these small products: an fp32 model's other products keep BLAS, whose results the reference tier's bounds
// were measured with.
torch::Tensor gate_linear(const torch::Tensor & x, const torch::Tensor & w);

// Which CPU kernels matmul_weight / matmul_weight_backward use for fp32 activations on contiguous bf16
// weights (everything else takes the generic ops). The default is the best the CPU supports, or what the
// environment variable TINKERD_MATMUL_KERNELS names (generic, avx2, avx512, avx512bf16; 0 = generic), a cap:
// avx512 keeps the AVX-512F kernels but not the AVX-512-BF16 one (bf16_dot_available).
enum class KernelIsa { generic, avx2, avx512 };
KernelIsa cpu_kernel_isa();              // the best this CPU supports
KernelIsa kernel_isa();                  // the one in use
void set_kernel_isa(KernelIsa isa);      // clamped to cpu_kernel_isa(); for tests and benchmarks
void set_kernels_enabled(bool enabled);  // false = set_kernel_isa(generic); true = the CPU's best

// The build of a loop body that kernel_isa() allows (the kernels compile one body per ISA with target attributes).
template <class Fn>
Fn for_isa(Fn avx512, Fn avx2, Fn generic) {
    switch (kernel_isa()) {
        case KernelIsa::avx512:
            return avx512;
        case KernelIsa::avx2:
            return avx2;
        default:
            return generic;
    }
}

// From this many rows of x (or dy) on, the products convert blocks of the weight to fp32 and call BLAS;
// below it the register-blocked kernels read each weight row once. Settable for tests and benchmarks.
int64_t blas_min_rows();
void set_blas_min_rows(int64_t rows);

// How products with bf16 weights treat their fp32 inputs, process-wide. fp32 (the default): exact fp32 math on
// the bf16 weights. bf16: each input is rounded to bf16 first (round to nearest even, as autocast rounds),
// then multiplied in fp32 with fp32 sums and fp32 results; every path (small-row kernels, BLAS, brgemm,
// the generic ops) computes the same products, so results differ only in summation order. But a last-bit fp32
// difference upstream can flip a later input's bf16 rounding: through a deep model two paths (trainer and
// sampler, or one datum alone and in a bigger batch) differ about as much as bf16 differs from exact (SmolLM2-135M:
// ~0.02 nats mean, up to ~0.1 per token), not by fp32 rounding. Products with fp32 weights are always exact.
// kernel_choice.h chooses by measurement.
enum class MatmulInputs { fp32, bf16 };
MatmulInputs matmul_inputs();
void set_matmul_inputs(MatmulInputs inputs);

// With bf16 inputs, whether products from blas_min_rows() rows on run as bf16 dot products through oneDNN's
// brgemm (only where detail::brgemm_bf16_supported()) instead of fp32 BLAS on widened weight blocks.
bool brgemm_enabled();
void set_brgemm_enabled(bool enabled);  // ignored (stays false) where the CPU cannot
bool brgemm_available();                // the CPU has bf16 dot products and brgemm computes them right

// With bf16 inputs, whether few-row forward products (fewer than blas_min_rows() rows) run as bf16 dot products
// (AVX-512-BF16 VDPBF16PS on the rounded inputs and the stored weights, fp32 sums) instead of the AVX-512F
// kernel on the rounded inputs widened to fp32: the same products, another summation order (VDPBF16PS reads
// bf16 subnormals, below 2^-126, as zero, as brgemm's bf16 products do). Available where
// the CPU has AVX-512-BF16, kernel_isa() is avx512 and TINKERD_MATMUL_KERNELS does not cap below avx512bf16;
// on by default there.
bool bf16_dot_available();
bool bf16_dot_enabled();
void set_bf16_dot_enabled(bool enabled);  // takes effect only where available

// y = x · wᵀ with fp32 sums on x's own fp32 values on every device (the lm_head's product: logits stay exact).
// base_linear, except on GPUs, where base_linear rounds x to bf16 and this takes split_bf16_product
// (gpu_matmul.h).
torch::Tensor exact_linear(const torch::Tensor & x, const torch::Tensor & w);

// matmul_weight's few-row CPU forward as a kernel over ranges of output rows, for code that runs its own parallel
// region (decode_layers.h) and must compute the same values. For x of T fp32 rows and w [out, in] bf16:
// kind none where matmul_weight would take another path (BLAS or brgemm rows, quantised, GPU or fp32 weights, the
// generic ops). Otherwise the caller rounds x as `kind` and `rounds_inputs` say, once, then calls run() on any
// disjoint row ranges (each output row's sum does not depend on the range it is computed in).
struct RowRangeProduct {
    enum class Kind { none, bf16_dot, fp32_rows } kind = Kind::none;
    // bf16_dot: x as bf16 bits (round to nearest even). fp32_rows: x as fp32, rounded to bf16 values first when
    // rounds_inputs (matmul_inputs() == bf16), else as is.
    bool rounds_inputs = false;
    // Output rows [o0, o1) of y [T, ldy]; x16 for bf16_dot, x32 for fp32_rows.
    void run(const uint16_t * x16, const float * x32, int64_t T, int64_t in, const uint16_t * w, int64_t o0, int64_t o1,
             float * y, int64_t ldy) const;
    // fp32_rows' kernel (AVX-512F or AVX2, by kernel_isa()), set by row_range_product.
    void (*fp32_rows_)(const float *, int64_t, int64_t, const uint16_t *, int64_t, int64_t, float *, int64_t) = nullptr;
};
RowRangeProduct row_range_product(int64_t T, const torch::Tensor & w);

// The generic ops the kernels replace (the reference in tests, and the path on GPUs and other CPUs).
torch::Tensor matmul_weight_generic(const torch::Tensor & x, const torch::Tensor & w);
torch::Tensor matmul_weight_backward_generic(const torch::Tensor & dy, const torch::Tensor & w);

}  // namespace tinkerd::engine::kernels
