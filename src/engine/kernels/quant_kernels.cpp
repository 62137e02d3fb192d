// Quantised-weight kernels (quant_kernels.h): the supported types, the run-time ISA dispatch and the scalar
// path (rows dequantised by gguf::dequantize into a per-thread scratch row, then fp32 dots). Built with
// -ffp-contract=off like the gguf dequantisers, so no product-sum here is fused behind our back.
#include "engine/kernels/quant_kernels.h"

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "gguf/dequant.h"

namespace tinkerd::engine::kernels::detail {
namespace {

gguf::BlockLayout layout_of(gguf::GgmlType type) {
    gguf::BlockLayout layout;
    gguf::ggml_block_layout(static_cast<uint32_t>(type), layout);
    return layout;
}

QuantIsa detect_isa() {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("f16c")) {
        return QuantIsa::scalar;
    }
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) {
        return QuantIsa::avx512;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        return QuantIsa::avx2;
    }
    return QuantIsa::scalar;
}

QuantIsa effective_isa(QuantIsa asked) {
    const QuantIsa best = quant_cpu_isa();
    return static_cast<int>(asked) < static_cast<int>(best) ? asked : best;
}

// Σ_i a[i] · b[i] in fp32 with 8 interleaved partial sums (n is a multiple of 32).
float dot_scalar(const float * a, const float * b, int64_t n) {
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < n; i += 8) {
        for (int k = 0; k < 8; ++k) {
            s[k] += a[i + k] * b[i + k];
        }
    }
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

void quant_forward_rows_scalar(gguf::GgmlType type, const float * x, int64_t T, int64_t in, const uint8_t * w,
                               int64_t row_bytes, int64_t o0, int64_t o1, float * y, int64_t ldy) {
    float * row = quant_scratch(in);
    for (int64_t o = o0; o < o1; ++o) {
        dequant_rows_reference(type, w + o * row_bytes, row_bytes, 1, in, row, in);
        for (int64_t t = 0; t < T; ++t) {
            y[t * ldy + o] = dot_scalar(x + t * in, row, in);
        }
    }
}

}  // namespace

QuantIsa quant_cpu_isa() {
    static const QuantIsa isa = detect_isa();
    return isa;
}

bool quant_type_supported(gguf::GgmlType type) {
    const std::vector<gguf::GgmlType> & types = gguf::block_quantised_types();
    return std::find(types.begin(), types.end(), type) != types.end();
}

bool quant_type_from_block_bytes(int64_t bb, gguf::GgmlType & type) {
    for (const gguf::GgmlType t : gguf::block_quantised_types()) {
        if (static_cast<int64_t>(layout_of(t).bytes) == bb) {
            type = t;
            return true;
        }
    }
    return false;
}

float * quant_scratch(int64_t n) {
    struct Free {
        void operator()(float * p) const { std::free(p); }
    };
    thread_local std::unique_ptr<float, Free> buffer;
    thread_local int64_t capacity = 0;
    if (n > capacity) {
        const int64_t want = (n + 15) / 16 * 16;
        buffer.reset(static_cast<float *>(std::aligned_alloc(64, static_cast<size_t>(want) * sizeof(float))));
        capacity = want;
    }
    return buffer.get();
}

void dequant_rows(gguf::GgmlType type, const uint8_t * w, int64_t row_bytes, int64_t rows, int64_t n, float * out,
                  int64_t ldo, QuantIsa isa) {
    switch (effective_isa(isa)) {
        case QuantIsa::avx512:
            return dequant_rows_avx512(type, w, row_bytes, rows, n, out, ldo);
        case QuantIsa::avx2:
            return dequant_rows_avx2(type, w, row_bytes, rows, n, out, ldo);
        case QuantIsa::scalar:
            break;
    }
    dequant_rows_reference(type, w, row_bytes, rows, n, out, ldo);
}

void quant_forward_rows(gguf::GgmlType type, const float * x, int64_t T, int64_t in, const uint8_t * w,
                        int64_t row_bytes, int64_t o0, int64_t o1, float * y, int64_t ldy, QuantIsa isa) {
    if (T <= 0 || o1 <= o0) {
        return;
    }
    switch (effective_isa(isa)) {
        case QuantIsa::avx512:
            return quant_forward_rows_avx512(type, x, T, in, w, row_bytes, o0, o1, y, ldy);
        case QuantIsa::avx2:
            return quant_forward_rows_avx2(type, x, T, in, w, row_bytes, o0, o1, y, ldy);
        case QuantIsa::scalar:
            break;
    }
    quant_forward_rows_scalar(type, x, T, in, w, row_bytes, o0, o1, y, ldy);
}

void dequant_rows_reference(gguf::GgmlType type, const uint8_t * w, int64_t row_bytes, int64_t rows, int64_t n,
                            float * out, int64_t ldo) {
    const gguf::BlockLayout layout = layout_of(type);
    const auto bytes = static_cast<size_t>(n / layout.elements) * layout.bytes;
    for (int64_t r = 0; r < rows; ++r) {
        (void)gguf::dequantize(type, w + r * row_bytes, bytes, n, out + r * ldo);  // sizes are ours: cannot fail
    }
}

}  // namespace tinkerd::engine::kernels::detail
