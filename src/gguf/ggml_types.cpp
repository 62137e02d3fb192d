// Names and block layouts of the ggml tensor types (see ggml_types.h).
#include "gguf/ggml_types.h"

#include <array>

namespace tinkerd::gguf {
namespace {

struct TypeRow {
    uint32_t id;
    const char * name;
    int64_t elements;  // 0: layout unknown to us
    size_t bytes;
};

// Block sizes: 32-element blocks for the legacy quants, 256-element super-blocks for the K-quants.
constexpr std::array<TypeRow, 31> TYPES = {{
    {0, "F32", 1, 4},       {1, "F16", 1, 2},       {2, "Q4_0", 32, 18},    {3, "Q4_1", 32, 20},
    {6, "Q5_0", 32, 22},    {7, "Q5_1", 32, 24},    {8, "Q8_0", 32, 34},    {9, "Q8_1", 32, 36},
    {10, "Q2_K", 256, 84},  {11, "Q3_K", 256, 110}, {12, "Q4_K", 256, 144}, {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210}, {15, "Q8_K", 256, 292}, {16, "IQ2_XXS", 0, 0},  {17, "IQ2_XS", 0, 0},
    {18, "IQ3_XXS", 0, 0},  {19, "IQ1_S", 0, 0},    {20, "IQ4_NL", 0, 0},   {21, "IQ3_S", 0, 0},
    {22, "IQ2_S", 0, 0},    {23, "IQ4_XS", 0, 0},   {24, "I8", 1, 1},       {25, "I16", 1, 2},
    {26, "I32", 1, 4},      {27, "I64", 1, 8},      {28, "F64", 1, 8},      {29, "IQ1_M", 0, 0},
    {30, "BF16", 1, 2},     {34, "TQ1_0", 0, 0},    {35, "TQ2_0", 0, 0},
}};

const TypeRow * find_row(uint32_t type) {
    for (const TypeRow & row : TYPES) {
        if (row.id == type) {
            return &row;
        }
    }
    return nullptr;
}

}  // namespace

std::string ggml_type_name(uint32_t type) {
    const TypeRow * row = find_row(type);
    return row ? std::string(row->name) : "type " + std::to_string(type);
}

bool ggml_block_layout(uint32_t type, BlockLayout & out) {
    const TypeRow * row = find_row(type);
    if (!row || row->elements == 0) {
        return false;
    }
    out = {row->elements, row->bytes};
    return true;
}

}  // namespace tinkerd::gguf
