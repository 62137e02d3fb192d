// The ggml tensor types a GGUF file can hold: their numbers, names and block layouts (elements per
// block, bytes per block). Which of them we can dequantise is decided in dequant.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tinkerd::gguf {

// Numbered as in the GGUF format; only the types we know the layout of are listed.
enum class GgmlType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    BF16 = 30,
};

struct BlockLayout {
    int64_t elements = 0;  // elements per block (1 for plain types)
    size_t bytes = 0;      // bytes per block
};

// Name of a type number, e.g. "Q4_K", or "IQ2_XXS" for types we know by name only, or "type 99".
std::string ggml_type_name(uint32_t type);
// The block layout of a type number; false when unknown (the type cannot even be skipped over).
bool ggml_block_layout(uint32_t type, BlockLayout & out);

}  // namespace tinkerd::gguf
