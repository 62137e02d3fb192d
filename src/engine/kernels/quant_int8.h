// The opt-in int8-activation products with quantised weights (sampling only, --sample-activations int8):
// each row of x is quantised once per product to int8 blocks (per 32 values for Q8_0 / Q4_1, per 256 with
// per-16 sums for Q4_K / Q6_K), then dotted with the weight blocks in integers (AVX-512-VNNI, or AVX2
// vpmaddubsw + vpmaddwd) and scaled in fp32. Torch-free; quant_int8.cpp holds the activation quantiser, the
// scalar reference and the mode, quant_int8_simd.h the SIMD kernels (built twice in quant_int8_x86.cpp).
//
// Error against the exact product (docs/quantised-base.md): with x̂ = d_x · q, |x - x̂| <= d_x / 2 per value
// (d_x = max|x| / 127 of its block), so |y_int8 - y_exact| <= Σ_blocks d_x/2 · Σ_i |w_i| plus fp32 rounding
// of the scale products and sums.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/kernels/quant_kernels.h"
#include "gguf/ggml_types.h"

namespace tinkerd::engine::kernels::detail {

// scalar: the reference (plain C++); avx2: vpmaddubsw + vpmaddwd; vnni: vpdpbusd / vpdpwssd (AVX-512-VNNI,
// 256-bit). All three give bit-identical results (same integer lane sums, same fp32 operations in order).
enum class Int8Isa { scalar, avx2, vnni };

// Weight types with int8 kernels (Q8_0, Q4_1, Q4_K, Q6_K); the others keep the exact kernels in this mode.
bool int8_type_supported(gguf::GgmlType type);

// The int8 path a QuantIsa cap allows on this CPU: avx512 -> vnni when the CPU has AVX-512-VNNI (else avx2),
// avx2 -> avx2, scalar -> scalar. A capped run never executes VNNI instructions.
Int8Isa int8_isa_for(QuantIsa cap);
const char * int8_isa_name(Int8Isa isa);

// Rows x [T, in] quantised for one weight type's block size (32 or 256 values). Block b = t * blocks + k.
struct Int8Rows {
    int64_t T = 0, in = 0, block = 32, blocks = 0;  // blocks per row = in / block
    std::vector<float> d;                           // [T · blocks] the step d_x = max|x| / 127
    std::vector<float> s;                           // [T · blocks] d_x · Σ q (32-value blocks; Q4_1's min term)
    std::vector<int16_t> bsums;                     // [T · blocks · block/16] Σ q per 16 values (256-value blocks)
    std::vector<int8_t> q;                          // [T · in] round(x / d_x) in [-127, 127]
};

// Quantises x [T, in] (fp32 row-major) for products with `type` (int8_type_supported). A block holding a
// non-finite value gets d_x = NaN, so its products are NaN as the exact path's would be.
void quantise_rows_int8(gguf::GgmlType type, const float * x, int64_t T, int64_t in, Int8Rows & out);

// out = rows `rows` of src, in that order (a gathered copy: each source row quantised once, as
// quantise_rows_int8 of the gathered fp32 rows would give, since a row's blocks depend on that row only).
void gather_rows_int8(const Int8Rows & src, const std::vector<int64_t> & rows, Int8Rows & out);

// Rows [r0, r0 + n) of the quantised x and what the kernels read of them (raw pointers: the SIMD files see no
// std::vector code).
struct Int8View {
    const float * d;
    const float * s;
    const int16_t * bsums;
    const int8_t * q;
    int64_t n, in, block, blocks;
};
Int8View int8_view(const Int8Rows & xq, int64_t r0, int64_t n);

// y[t * ldy + o] ≈ Σ_i x[t, i] · deq(w)[o][i] for t < x.n, o in [o0, o1), from the quantised rows.
void int8_forward_rows(gguf::GgmlType type, const Int8View & x, const uint8_t * w, int64_t row_bytes, int64_t o0,
                       int64_t o1, float * y, int64_t ldy, Int8Isa isa);

// The SIMD entry points (quant_int8_x86.cpp), arguments as above.
void int8_forward_rows_avx2(gguf::GgmlType type, const Int8View & x, const uint8_t * w, int64_t row_bytes, int64_t o0,
                            int64_t o1, float * y, int64_t ldy);
void int8_forward_rows_vnni(gguf::GgmlType type, const Int8View & x, const uint8_t * w, int64_t row_bytes, int64_t o0,
                            int64_t o1, float * y, int64_t ldy);

// Whether products on this thread use the int8 path (set by Int8ActivationsScope; off by default).
bool int8_activations_on();

}  // namespace tinkerd::engine::kernels::detail

namespace tinkerd::engine::kernels {

// While alive, quantised products called from this thread (few rows of x, int8-supported types) quantise
// their activations to int8 when `on`. The sampling loop holds one around its steps; training never does.
class Int8ActivationsScope {
  public:
    explicit Int8ActivationsScope(bool on);
    ~Int8ActivationsScope();
    Int8ActivationsScope(const Int8ActivationsScope &) = delete;
    Int8ActivationsScope & operator=(const Int8ActivationsScope &) = delete;

  private:
    bool previous_;
};

// The int8 path the products would take now (kernel cap and CPU), for logs and status: "vnni", "avx2", "scalar".
const char * int8_kernel_path();

}  // namespace tinkerd::engine::kernels
