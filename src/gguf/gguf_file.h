// GgufFile: a read-only, memory-mapped GGUF file (versions 2 and 3): the metadata key/values (scalars,
// strings and one-level arrays), the tensor infos and pointers to each tensor's bytes. Every count,
// length and offset is checked against the file, so a truncated or hostile file gives a named error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "gguf/ggml_types.h"

namespace tinkerd::gguf {

// Metadata value types as numbered in the GGUF format.
enum class ValueType : uint32_t {
    UINT8 = 0,
    INT8 = 1,
    UINT16 = 2,
    INT16 = 3,
    UINT32 = 4,
    INT32 = 5,
    FLOAT32 = 6,
    BOOL = 7,
    STRING = 8,
    ARRAY = 9,
    UINT64 = 10,
    INT64 = 11,
    FLOAT64 = 12,
};

const char * value_type_name(ValueType type);

// One metadata value. Numbers (and bools) are kept as double and int64 both; arrays hold either
// strings or numbers, depending on elem_type.
struct Value {
    ValueType type = ValueType::UINT32;
    ValueType elem_type = ValueType::UINT32;  // for ARRAY
    int64_t i = 0;                            // integer / bool value (UINT64 above INT64_MAX saturates)
    double f = 0;                             // the same number as double (floats exact)
    std::string s;                            // STRING
    std::vector<std::string> strings;         // ARRAY of STRING
    std::vector<double> numbers;              // ARRAY of numbers or bools

    bool is_number() const { return type != ValueType::STRING && type != ValueType::ARRAY; }
};

// One tensor: GGUF lists dims innermost first (ne[0] is the contiguous one); `shape` is reversed, the
// row-major order Hugging Face uses. data points into the mapping.
struct TensorInfo {
    std::string name;
    GgmlType type = GgmlType::F32;
    std::vector<int64_t> shape;  // outermost first, e.g. [rows, cols]
    uint64_t offset = 0;         // relative to the data section
    const uint8_t * data = nullptr;
    size_t n_bytes = 0;

    int64_t numel() const;
};

class GgufFile {
  public:
    // Maps and parses the file. Errors name the file and the bad field (magic, version, a key,
    // a tensor), e.g. "tensor 'blk.0.attn_q.weight' has unsupported type Q2_K".
    static Result<std::shared_ptr<GgufFile>> open(const std::string & path);
    // Parses bytes already in memory (kept alive by the caller); used by open and the tests.
    static Result<std::shared_ptr<GgufFile>> parse(const uint8_t * bytes, size_t size, const std::string & name);
    ~GgufFile();
    GgufFile(const GgufFile &) = delete;
    GgufFile & operator=(const GgufFile &) = delete;

    uint32_t version() const { return version_; }
    const std::string & name() const { return name_; }
    const std::map<std::string, Value> & metadata() const { return metadata_; }
    const std::vector<TensorInfo> & tensors() const { return tensors_; }

    // Where a tensor's bytes start, counted from the first byte of the file (or of the parsed buffer).
    uint64_t file_offset(const TensorInfo & t) const { return static_cast<uint64_t>(t.data - base_); }
    uint64_t byte_size() const { return byte_size_; }  // of the file (or the parsed buffer)

    const Value * find(const std::string & key) const;
    const TensorInfo * find_tensor(const std::string & name) const;
    // Typed lookups: NOT_FOUND naming the key when absent, INVALID_ARGUMENT when of the wrong type.
    Result<std::string> get_string(const std::string & key) const;
    Result<int64_t> get_int(const std::string & key) const;
    Result<double> get_float(const std::string & key) const;

  private:
    GgufFile() = default;
    friend class Parser;
    std::string name_;
    uint32_t version_ = 0;
    const uint8_t * base_ = nullptr;  // the first byte parsed
    uint64_t byte_size_ = 0;
    void * mapping_ = nullptr;
    size_t mapping_size_ = 0;
    std::map<std::string, Value> metadata_;
    std::vector<TensorInfo> tensors_;
    std::map<std::string, size_t> tensor_index_;
};

}  // namespace tinkerd::gguf
