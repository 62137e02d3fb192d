// TEMPORARY scalar stub (replaced by the quant-kernels branch).
#include <vector>

#include "engine/kernels/quant_kernels.h"
#include "gguf/dequant.h"

namespace tinkerd::engine::kernels::detail {

bool quant_type_supported(gguf::GgmlType type) {
    switch (type) {
        case gguf::GgmlType::Q8_0:
        case gguf::GgmlType::Q4_0:
        case gguf::GgmlType::Q4_1:
        case gguf::GgmlType::Q4_K:
        case gguf::GgmlType::Q5_K:
        case gguf::GgmlType::Q6_K:
            return true;
        default:
            return false;
    }
}

bool quant_type_from_block_bytes(int64_t bb, gguf::GgmlType & type) {
    for (auto t : {gguf::GgmlType::Q8_0, gguf::GgmlType::Q4_0, gguf::GgmlType::Q4_1, gguf::GgmlType::Q4_K,
                   gguf::GgmlType::Q5_K, gguf::GgmlType::Q6_K}) {
        gguf::BlockLayout l;
        gguf::ggml_block_layout(static_cast<uint32_t>(t), l);
        if (static_cast<int64_t>(l.bytes) == bb) {
            type = t;
            return true;
        }
    }
    return false;
}

void dequant_rows(gguf::GgmlType type, const uint8_t * w, int64_t row_bytes, int64_t rows, int64_t n, float * out,
                  int64_t ldo, QuantIsa) {
    gguf::BlockLayout l;
    gguf::ggml_block_layout(static_cast<uint32_t>(type), l);
    for (int64_t r = 0; r < rows; ++r) {
        (void)gguf::dequantize(type, w + r * row_bytes, n / l.elements * l.bytes, n, out + r * ldo);
    }
}

void quant_forward_rows(gguf::GgmlType type, const float * x, int64_t T, int64_t in, const uint8_t * w,
                        int64_t row_bytes, int64_t o0, int64_t o1, float * y, int64_t ldy, QuantIsa isa) {
    std::vector<float> row(in);
    for (int64_t o = o0; o < o1; ++o) {
        dequant_rows(type, w + o * row_bytes, row_bytes, 1, in, row.data(), in, isa);
        for (int64_t t = 0; t < T; ++t) {
            float s = 0;
            for (int64_t i = 0; i < in; ++i)
                s += x[t * in + i] * row[i];
            y[t * ldy + o] = s;
        }
    }
}

}  // namespace tinkerd::engine::kernels::detail
