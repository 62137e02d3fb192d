// Tensor decoding shared by the protobuf and JSON request codecs: dtype conversion, shape checks with
// element limits, CSR validation and densification, and the JSON TensorData form (decode_tensor_json).
#include "wire/tensor_codec.h"

#include <limits>

#include "wire/forward_backward_codec.h"

namespace tinkerd::wire {
namespace detail {
namespace {

size_t wire_width(WireDType dtype) {
    switch (dtype) {
        case WireDType::I64:
            return 8;
        case WireDType::BF16:
            return 2;
        case WireDType::F32:
        case WireDType::I32:
            break;
    }
    return 4;
}

model::DType host_dtype(WireDType dtype) {
    return (dtype == WireDType::I64 || dtype == WireDType::I32) ? model::DType::I64 : model::DType::F32;
}

// Converts n elements at `src` (in `dtype`) to host-dtype bytes at `dst`.
void convert_elements(const char * src, WireDType dtype, size_t n, uint8_t * dst) {
    switch (dtype) {
        case WireDType::F32:
        case WireDType::I64:
            copy_bytes(dst, src, n * wire_width(dtype));
            return;
        case WireDType::I32:
            for (size_t i = 0; i < n; ++i) {
                const auto v = static_cast<int64_t>(read_le<int32_t>(src + 4 * i));
                std::memcpy(dst + 8 * i, &v, 8);
            }
            return;
        case WireDType::BF16:
            for (size_t i = 0; i < n; ++i) {
                const uint32_t bits = static_cast<uint32_t>(read_le<uint16_t>(src + 2 * i)) << 16;
                std::memcpy(dst + 4 * i, &bits, 4);
            }
            return;
    }
}

}  // namespace

std::string shape_string(const std::vector<int64_t> & shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) {
        s += (i ? ", " : "") + std::to_string(shape[i]);
    }
    return s + "]";
}

Result<HostValues> values_from_bytes(std::string_view raw, WireDType dtype, const std::string & where) {
    const size_t width = wire_width(dtype);
    if (raw.size() % width != 0) {
        return invalid_argument(where + ": " + std::to_string(raw.size()) + " bytes is not a multiple of " +
                                std::to_string(width));
    }
    const size_t n = raw.size() / width;
    if (n > static_cast<size_t>(kMaxTensorElements)) {
        return invalid_argument(where + ": more than " + std::to_string(kMaxTensorElements) + " elements");
    }
    HostValues values;
    values.dtype = host_dtype(dtype);
    values.count = static_cast<int64_t>(n);
    values.bytes.resize(n * model::dtype_size(values.dtype));
    convert_elements(raw.data(), dtype, n, values.bytes.data());
    return values;
}

Result<std::vector<int64_t>> int64s_from_bytes(std::string_view raw, const std::string & where) {
    auto values = values_from_bytes(raw, WireDType::I64, where);
    if (!values.ok()) {
        return values.error();
    }
    std::vector<int64_t> out(static_cast<size_t>(values->count));
    copy_bytes(out.data(), values->bytes.data(), values->bytes.size());
    return out;
}

Result<int64_t> checked_numel(const std::vector<int64_t> & shape, const std::string & where) {
    int64_t numel = 1;
    for (int64_t dim : shape) {
        if (dim < 0) {
            return invalid_argument(where + ": shape " + shape_string(shape) + " has a negative dimension");
        }
        // numel * dim <= kMaxTensorElements, tested by division so it cannot overflow.
        if (dim != 0 && numel > kMaxTensorElements / dim) {
            return invalid_argument(where + ": shape " + shape_string(shape) + " has more than " +
                                    std::to_string(kMaxTensorElements) + " elements");
        }
        numel *= dim;
    }
    return numel;
}

Result<engine::HostTensor> make_dense(HostValues values, std::vector<int64_t> shape, const std::string & where) {
    if (shape.empty()) {
        shape = {values.count};
    }
    auto numel = checked_numel(shape, where);
    if (!numel.ok()) {
        return numel.error();
    }
    if (*numel != values.count) {
        return invalid_argument(where + ": shape " + shape_string(shape) + " has " + std::to_string(*numel) +
                                " elements but the data has " + std::to_string(values.count));
    }
    return engine::HostTensor{values.dtype, std::move(shape), std::move(values.bytes)};
}

namespace {

// crow: R + 1 entries, crow[0] = 0, non-decreasing, crow[R] = nnz.
Result<void> check_crow(const std::vector<int64_t> & crow, int64_t rows, int64_t nnz, const std::string & where) {
    if (static_cast<int64_t>(crow.size()) != rows + 1) {
        return invalid_argument(where + ": " + std::to_string(crow.size()) + " entries for " + std::to_string(rows) +
                                " rows (expected rows + 1)");
    }
    if (crow.front() != 0) {
        return invalid_argument(where + ": the first entry is " + std::to_string(crow.front()) + ", not 0");
    }
    for (size_t r = 1; r < crow.size(); ++r) {
        if (crow[r] < crow[r - 1]) {
            return invalid_argument(where + ": decreases at entry " + std::to_string(r));
        }
    }
    if (crow.back() != nnz) {
        return invalid_argument(where + ": the last entry is " + std::to_string(crow.back()) + " but there are " +
                                std::to_string(nnz) + " values");
    }
    return {};
}

// cols: each in [0, C), no column twice in one row (`seen` holds, per column, the last row using it).
Result<void> check_cols(const std::vector<int64_t> & crow, const std::vector<int64_t> & cols, int64_t n_cols,
                        const std::string & where) {
    std::vector<int64_t> seen(static_cast<size_t>(n_cols), -1);
    for (size_t r = 0; r + 1 < crow.size(); ++r) {
        for (int64_t k = crow[r]; k < crow[r + 1]; ++k) {
            const int64_t c = cols[static_cast<size_t>(k)];
            if (c < 0 || c >= n_cols) {
                return invalid_argument(where + ": entry " + std::to_string(k) + " is column " + std::to_string(c) +
                                        ", outside [0, " + std::to_string(n_cols) + ")");
            }
            if (seen[static_cast<size_t>(c)] == static_cast<int64_t>(r)) {
                return invalid_argument(where + ": column " + std::to_string(c) + " repeats in row " +
                                        std::to_string(r));
            }
            seen[static_cast<size_t>(c)] = static_cast<int64_t>(r);
        }
    }
    return {};
}

}  // namespace

Result<engine::HostTensor> make_sparse(const HostValues & values, const std::vector<int64_t> & crow,
                                       const std::vector<int64_t> & cols, const std::vector<int64_t> & shape,
                                       const std::string & where, const CsrFieldNames & names) {
    if (shape.size() != 2) {
        return invalid_argument(where + ": a sparse CSR tensor needs a 2-D shape, got " + shape_string(shape));
    }
    auto numel = checked_numel(shape, where);
    if (!numel.ok()) {
        return numel.error();
    }
    const int64_t nnz = values.count;
    if (static_cast<int64_t>(cols.size()) != nnz) {
        return invalid_argument(where + ": " + std::to_string(cols.size()) + " column indices for " +
                                std::to_string(nnz) + " values");
    }
    TRY_STATUS(check_crow(crow, shape[0], nnz, where + names.crow));
    TRY_STATUS(check_cols(crow, cols, shape[1], where + names.cols));

    // dense: [R, C], zero where the CSR has no entry.
    const size_t width = model::dtype_size(values.dtype);
    engine::HostTensor dense{values.dtype, shape, std::vector<uint8_t>(static_cast<size_t>(*numel) * width, 0)};
    for (int64_t r = 0; r < shape[0]; ++r) {
        for (int64_t k = crow[static_cast<size_t>(r)]; k < crow[static_cast<size_t>(r) + 1]; ++k) {
            const auto at = static_cast<size_t>(r * shape[1] + cols[static_cast<size_t>(k)]);
            std::memcpy(dense.bytes.data() + at * width, values.bytes.data() + static_cast<size_t>(k) * width, width);
        }
    }
    return dense;
}

}  // namespace detail

namespace {

using detail::HostValues;

// A JSON list of integers (int64 range).
Result<std::vector<int64_t>> json_int_list(const nlohmann::json & list, const std::string & where) {
    if (!list.is_array()) {
        return invalid_argument(where + ": expected a list of integers");
    }
    std::vector<int64_t> out;
    out.reserve(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
        const auto & v = list[i];
        const bool fits =
            v.is_number_integer() && (!v.is_number_unsigned() ||
                                      v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
        if (!fits) {
            return invalid_argument(where + "[" + std::to_string(i) + "]: expected an int64 integer, got " + v.dump());
        }
        out.push_back(v.get<int64_t>());
    }
    return out;
}

// double -> float without undefined behaviour: out-of-range finite values become +-inf.
float to_f32(double v) {
    constexpr double kMax = std::numeric_limits<float>::max();
    if (v > kMax) {
        return std::numeric_limits<float>::infinity();
    }
    if (v < -kMax) {
        return -std::numeric_limits<float>::infinity();
    }
    return static_cast<float>(v);
}

// JSON "data" in the declared dtype -> host values.
Result<HostValues> json_values(const nlohmann::json & data, bool is_int, const std::string & where) {
    if (!data.is_array()) {
        return invalid_argument(where + ": \"data\" must be a list");
    }
    if (data.size() > static_cast<size_t>(detail::kMaxTensorElements)) {
        return invalid_argument(where + ": more than " + std::to_string(detail::kMaxTensorElements) + " elements");
    }
    HostValues values;
    values.count = static_cast<int64_t>(data.size());
    if (is_int) {
        auto ints = json_int_list(data, where + ".data");
        if (!ints.ok()) {
            return ints.error();
        }
        values.dtype = model::DType::I64;
        values.bytes.resize(ints->size() * 8);
        detail::copy_bytes(values.bytes.data(), ints->data(), values.bytes.size());
        return values;
    }
    values.dtype = model::DType::F32;
    values.bytes.resize(data.size() * 4);
    for (size_t i = 0; i < data.size(); ++i) {
        if (!data[i].is_number()) {
            return invalid_argument(where + ".data[" + std::to_string(i) + "]: expected a number, got " +
                                    data[i].dump());
        }
        const auto v = to_f32(data[i].get<double>());
        std::memcpy(values.bytes.data() + 4 * i, &v, 4);
    }
    return values;
}

// Optional JSON field: absent and null both count as absent.
const nlohmann::json * optional_field(const nlohmann::json & object, const char * key) {
    auto it = object.find(key);
    return (it == object.end() || it->is_null()) ? nullptr : &*it;
}

}  // namespace

Result<engine::HostTensor> decode_tensor_json(const nlohmann::json & tensor, const std::string & where) {
    if (!tensor.is_object()) {
        return invalid_argument(where + ": expected a TensorData object");
    }
    const auto * dtype = optional_field(tensor, "dtype");
    if (!dtype || !dtype->is_string() || (*dtype != "int64" && *dtype != "float32")) {
        return invalid_argument(where + ": \"dtype\" must be \"int64\" or \"float32\"");
    }
    const auto * data = optional_field(tensor, "data");
    if (!data) {
        return invalid_argument(where + ": missing \"data\"");
    }
    auto values = json_values(*data, *dtype == "int64", where);
    if (!values.ok()) {
        return values.error();
    }
    std::vector<int64_t> shape;
    if (const auto * s = optional_field(tensor, "shape")) {
        auto parsed = json_int_list(*s, where + ".shape");
        if (!parsed.ok()) {
            return parsed.error();
        }
        shape = std::move(*parsed);
    }
    const auto * crow = optional_field(tensor, "sparse_crow_indices");
    const auto * cols = optional_field(tensor, "sparse_col_indices");
    if (!crow && !cols) {
        return detail::make_dense(std::move(*values), std::move(shape), where);
    }
    if (!crow || !cols) {
        return invalid_argument(where + ": sparse_crow_indices and sparse_col_indices must come together");
    }
    auto crow_list = json_int_list(*crow, where + ".sparse_crow_indices");
    if (!crow_list.ok()) {
        return crow_list.error();
    }
    auto col_list = json_int_list(*cols, where + ".sparse_col_indices");
    if (!col_list.ok()) {
        return col_list.error();
    }
    return detail::make_sparse(*values, *crow_list, *col_list, shape, where,
                               {".sparse_crow_indices", ".sparse_col_indices"});
}

}  // namespace tinkerd::wire
