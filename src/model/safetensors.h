// Read-only, memory-mapped access to Hugging Face safetensors files (single or sharded).
// Owns the mappings; tensors are views into them, valid as long as the SafetensorsFile lives.
// Knows nothing about models or torch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace tinkerd::model {

enum class DType { F32, F16, BF16, F64, I64, I32, U8 };

const char * dtype_name(DType dtype);  // "F32", "BF16", ... as written in safetensors headers
size_t dtype_size(DType dtype);        // bytes per element

// One tensor inside a mapped file: shape, dtype and a pointer into the mapping.
struct TensorView {
    std::string name;
    DType dtype = DType::F32;
    std::vector<int64_t> shape;
    const void * data = nullptr;  // points into a read-only mapping
    size_t n_bytes = 0;

    int64_t numel() const;
};

// A set of safetensors files opened together (one file, or every shard of an index).
class SafetensorsFile {
  public:
    // Opens and validates one .safetensors file: header JSON, offsets inside the file, dtype sizes.
    // Errors name the file and, where relevant, the tensor.
    static Result<std::shared_ptr<SafetensorsFile>> open(const std::string & path);
    // Opens model.safetensors.index.json's shards, or model.safetensors, inside a model directory, and the
    // tensors EXTERNAL_WEIGHTS names in another file, if the directory has that manifest.
    static Result<std::shared_ptr<SafetensorsFile>> open_model_dir(const std::string & dir);

    ~SafetensorsFile();
    SafetensorsFile(const SafetensorsFile &) = delete;
    SafetensorsFile & operator=(const SafetensorsFile &) = delete;

    bool contains(const std::string & name) const { return tensors_.count(name) > 0; }
    // Returns the tensor or NOT_FOUND naming it.
    Result<TensorView> get(const std::string & name) const;
    std::vector<std::string> names() const;
    const std::map<std::string, std::string> & metadata() const { return metadata_; }
    // Drops the resident pages wholly inside [data, data + n_bytes) when that range lies in one of the
    // mappings (a later read faults them back in from the file), so a tensor that was copied elsewhere
    // stops counting twice in RSS. Returns false, and does nothing, for any other range.
    bool release_pages(const void * data, size_t n_bytes) const;

  private:
    SafetensorsFile() = default;
    // Maps the file a manifest names and adds its tensors (external_weights.cpp).
    Result<void> attach_external(const std::string & manifest_path);
    struct Mapping {
        void * addr = nullptr;
        size_t size = 0;
    };
    std::vector<Mapping> mappings_;
    std::map<std::string, TensorView> tensors_;
    std::map<std::string, std::string> metadata_;
};

// A model directory's manifest of tensors kept in another file, as raw byte ranges (a GGUF's quantised blocks,
// used in place): {"file": path, "size": the file's size in bytes, "tensors": {name: {"dtype": "U8",
// "shape": [...], "offset": first byte, "n_bytes": length}}}. Every range is checked against the file.
constexpr const char * EXTERNAL_WEIGHTS = "external_weights.json";

// A tensor to write: dtype, shape and raw little-endian bytes.
struct OwnedTensor {
    DType dtype = DType::F32;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
};

// Writes a safetensors file atomically (to "<path>.tmp", then rename). Keys are written sorted.
Result<void> write_safetensors(const std::string & path, const std::map<std::string, OwnedTensor> & tensors,
                               const std::map<std::string, std::string> & metadata = {});

}  // namespace tinkerd::model
