// Internal to src/wire (not for other modules): turning wire tensor pieces (little-endian bytes or JSON
// numbers, dense or sparse CSR) into validated host tensors (F32 / I64) with size limits, plus small
// little-endian byte helpers shared by the request and output codecs.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/engine.h"

namespace tinkerd::wire::detail {

static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");

// 2^27 elements (1 GiB of int64): a tiny sparse body cannot make the server allocate more than this.
inline constexpr int64_t kMaxTensorElements = int64_t{1} << 27;
inline constexpr int64_t kMaxDatumTokens = 1'000'000;

// The element types a tensor may arrive in on the wire.
enum class WireDType { F32, I64, I32, BF16 };

// Values already converted to their host dtype (F32 or I64): `count` elements as little-endian bytes.
struct HostValues {
    model::DType dtype = model::DType::F32;
    std::vector<uint8_t> bytes;
    int64_t count = 0;
};

// Little-endian bytes in `dtype` -> host values (I32 widened to I64, BF16 to F32). The byte count must be
// a multiple of the element width.
Result<HostValues> values_from_bytes(std::string_view raw, WireDType dtype, const std::string & where);
// Little-endian int64 bytes -> integers (CSR index arrays).
Result<std::vector<int64_t>> int64s_from_bytes(std::string_view raw, const std::string & where);

// The element count of a shape: every dimension >= 0 and the product <= kMaxTensorElements (checked
// without overflow).
Result<int64_t> checked_numel(const std::vector<int64_t> & shape, const std::string & where);

// A dense tensor: an empty shape means 1-D [count]; otherwise the shape's element count must equal count.
Result<engine::HostTensor> make_dense(HostValues values, std::vector<int64_t> shape, const std::string & where);

// How the two CSR index arrays are named in error messages (appended to `where`).
struct CsrFieldNames {
    std::string crow = ".sparse_csr.crow_indices";
    std::string cols = ".sparse_csr.col_indices";
};

// A CSR tensor densified into `shape`, which must be 2-D [R, C]: crow has R + 1 non-decreasing entries
// from 0 to nnz, cols has nnz entries in [0, C) with no column repeated within a row, values has nnz.
Result<engine::HostTensor> make_sparse(const HostValues & values, const std::vector<int64_t> & crow,
                                       const std::vector<int64_t> & cols, const std::vector<int64_t> & shape,
                                       const std::string & where, const CsrFieldNames & names = {});

// "[3, 4]" for error messages.
std::string shape_string(const std::vector<int64_t> & shape);

// memcpy that accepts n == 0 with null pointers (empty vectors), which memcpy itself does not.
inline void copy_bytes(void * dst, const void * src, size_t n) {
    if (n != 0) {
        std::memcpy(dst, src, n);
    }
}

// Appends / reads one little-endian value of a trivially copyable type.
template <typename T>
void append_le(std::string & out, T value) {
    char raw[sizeof(T)];
    std::memcpy(raw, &value, sizeof(T));
    out.append(raw, sizeof(T));
}
template <typename T>
T read_le(const void * at) {
    T value;
    std::memcpy(&value, at, sizeof(T));
    return value;
}

}  // namespace tinkerd::wire::detail
