// Parsing of GGUF files (see gguf_file.h): a bounds-checked cursor over the mapped bytes reads the
// header, the metadata and the tensor infos; the tensors' data are checked to lie inside the file.
#include "gguf/gguf_file.h"

#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tinkerd::gguf {

constexpr uint64_t MAX_DIMS = 4;
constexpr uint64_t MAX_STRING_BYTES = 1ull << 30;

int64_t TensorInfo::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) {
        n *= d;
    }
    return n;
}

const char * value_type_name(ValueType type) {
    static const char * const NAMES[] = {"uint8", "int8",   "uint16", "int16",  "uint32", "int32",  "float32",
                                         "bool",  "string", "array",  "uint64", "int64",  "float64"};
    const auto i = static_cast<uint32_t>(type);
    return i < sizeof(NAMES) / sizeof(NAMES[0]) ? NAMES[i] : "unknown";
}

// Reads little-endian fields from [bytes, bytes + size); every read is checked against the end.
class Parser {
  public:
    Parser(const uint8_t * bytes, size_t size, GgufFile & file) : bytes_(bytes), size_(size), file_(file) {}

    Result<void> run() {
        TRY_STATUS(header());
        for (uint64_t k = 0; k < kv_count_; ++k) {
            TRY_STATUS(key_value(k));
        }
        for (uint64_t t = 0; t < tensor_count_; ++t) {
            TRY_STATUS(tensor_info(t));
        }
        return data_section();
    }

  private:
    Error fail(const std::string & what) const {
        return invalid_argument(file_.name_ + ": " + what + " (at byte " + std::to_string(pos_) + " of " +
                                std::to_string(size_) + ")");
    }

    template <typename T>
    Result<T> read(const char * what) {
        if (size_ - pos_ < sizeof(T)) {
            return fail(std::string("file truncated reading ") + what);
        }
        T v;
        std::memcpy(&v, bytes_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }

    Result<std::string> read_string(const char * what) {
        auto len = read<uint64_t>(what);
        TRY_STATUS(len);
        if (*len > MAX_STRING_BYTES || *len > size_ - pos_) {
            return fail(std::string("length ") + std::to_string(*len) + " of " + what + " runs past the end");
        }
        std::string s(reinterpret_cast<const char *>(bytes_ + pos_), *len);
        pos_ += *len;
        return s;
    }

    Result<void> header() {
        if (size_ < 4 || std::memcmp(bytes_, "GGUF", 4) != 0) {
            return fail("not a GGUF file (bad magic)");
        }
        pos_ = 4;
        auto version = read<uint32_t>("the version");
        TRY_STATUS(version);
        if (*version != 2 && *version != 3) {
            return unsupported(file_.name_ + ": GGUF version " + std::to_string(*version) +
                               " is not supported (only 2 and 3)");
        }
        file_.version_ = *version;
        auto tensors = read<uint64_t>("the tensor count");
        TRY_STATUS(tensors);
        auto kvs = read<uint64_t>("the metadata count");
        TRY_STATUS(kvs);
        // Every tensor info takes at least 24 bytes and every key/value at least 13.
        if (*tensors > (size_ - pos_) / 24 || *kvs > (size_ - pos_) / 13) {
            return fail("tensor count " + std::to_string(*tensors) + " or metadata count " + std::to_string(*kvs) +
                        " cannot fit in the file");
        }
        tensor_count_ = *tensors;
        kv_count_ = *kvs;
        return {};
    }

    // One scalar of `type` into v (numbers as both int64 and double).
    Result<void> scalar(ValueType type, Value & v, const char * what) {
        switch (type) {
            case ValueType::UINT8:
                return number<uint8_t>(v, what);
            case ValueType::INT8:
                return number<int8_t>(v, what);
            case ValueType::UINT16:
                return number<uint16_t>(v, what);
            case ValueType::INT16:
                return number<int16_t>(v, what);
            case ValueType::UINT32:
                return number<uint32_t>(v, what);
            case ValueType::INT32:
                return number<int32_t>(v, what);
            case ValueType::FLOAT32:
                return number<float>(v, what);
            case ValueType::BOOL:
                return number<uint8_t>(v, what);
            case ValueType::UINT64:
                return number<uint64_t>(v, what);
            case ValueType::INT64:
                return number<int64_t>(v, what);
            case ValueType::FLOAT64:
                return number<double>(v, what);
            case ValueType::STRING: {
                auto s = read_string(what);
                TRY_STATUS(s);
                v.s = std::move(s).value();
                return {};
            }
            case ValueType::ARRAY:
                break;
        }
        return fail(std::string("unknown value type ") + std::to_string(static_cast<uint32_t>(type)) + " in " + what);
    }

    // A float metadata value's integer view: truncated, clamped to int64 (NaN is 0); a plain cast of an
    // out-of-range float is undefined behaviour.
    static int64_t saturating_int64(double x) {
        if (std::isnan(x)) {
            return 0;
        }
        if (x >= 0x1p63) {
            return INT64_MAX;
        }
        return x <= -0x1p63 ? INT64_MIN : static_cast<int64_t>(x);
    }

    template <typename T>
    Result<void> number(Value & v, const char * what) {
        auto x = read<T>(what);
        TRY_STATUS(x);
        v.f = static_cast<double>(*x);
        if constexpr (std::is_floating_point_v<T>) {
            v.i = saturating_int64(static_cast<double>(*x));
        } else if constexpr (std::is_same_v<T, uint64_t>) {
            v.i = *x > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(*x);
        } else {
            v.i = static_cast<int64_t>(*x);
        }
        return {};
    }

    Result<void> array(Value & v, const std::string & key) {
        auto elem = read<uint32_t>("an array's element type");
        TRY_STATUS(elem);
        auto count = read<uint64_t>("an array's length");
        TRY_STATUS(count);
        v.elem_type = static_cast<ValueType>(*elem);
        if (v.elem_type == ValueType::ARRAY || *elem > static_cast<uint32_t>(ValueType::FLOAT64)) {
            return fail("array '" + key + "' has element type " + std::to_string(*elem) + " (nested or unknown)");
        }
        if (*count > size_ - pos_) {  // every element takes at least one byte
            return fail("array '" + key + "' of " + std::to_string(*count) + " elements runs past the end");
        }
        Value item;
        for (uint64_t i = 0; i < *count; ++i) {
            TRY_STATUS(scalar(v.elem_type, item, key.c_str()));
            if (v.elem_type == ValueType::STRING) {
                v.strings.push_back(std::move(item.s));
            } else {
                v.numbers.push_back(item.f);
            }
        }
        return {};
    }

    Result<void> key_value(uint64_t index) {
        auto key = read_string("a metadata key");
        TRY_STATUS(key);
        auto type = read<uint32_t>("a metadata value type");
        TRY_STATUS(type);
        Value v;
        v.type = static_cast<ValueType>(*type);
        if (v.type == ValueType::ARRAY) {
            TRY_STATUS(array(v, *key));
        } else {
            TRY_STATUS(scalar(v.type, v, key->c_str()));
        }
        if (!file_.metadata_.emplace(*key, std::move(v)).second) {
            return fail("metadata key '" + *key + "' appears twice");
        }
        return {};
    }

    Result<void> tensor_info(uint64_t index) {
        auto name = read_string("a tensor name");
        TRY_STATUS(name);
        auto n_dims = read<uint32_t>("a tensor's dimension count");
        TRY_STATUS(n_dims);
        if (*n_dims == 0 || *n_dims > MAX_DIMS) {
            return fail("tensor '" + *name + "' has " + std::to_string(*n_dims) + " dimensions (1 to 4 allowed)");
        }
        TensorInfo info;
        info.name = std::move(name).value();
        for (uint32_t d = 0; d < *n_dims; ++d) {
            auto dim = read<uint64_t>("a tensor dimension");
            TRY_STATUS(dim);
            if (*dim == 0 || *dim > (1ull << 40)) {
                return fail("tensor '" + info.name + "' has dimension " + std::to_string(*dim));
            }
            info.shape.insert(info.shape.begin(), static_cast<int64_t>(*dim));
        }
        auto type = read<uint32_t>("a tensor type");
        TRY_STATUS(type);
        auto offset = read<uint64_t>("a tensor offset");
        TRY_STATUS(offset);
        info.type = static_cast<GgmlType>(*type);
        info.offset = *offset;
        TRY_STATUS(tensor_size(info, *type));
        if (!file_.tensor_index_.emplace(info.name, file_.tensors_.size()).second) {
            return fail("tensor '" + info.name + "' appears twice");
        }
        file_.tensors_.push_back(std::move(info));
        return {};
    }

    Result<void> tensor_size(TensorInfo & info, uint32_t type) {
        BlockLayout layout;
        if (!ggml_block_layout(type, layout)) {
            return unsupported(file_.name_ + ": tensor '" + info.name + "' has unsupported type " +
                               ggml_type_name(type));
        }
        int64_t numel = 1;
        for (int64_t d : info.shape) {
            if (numel > std::numeric_limits<int64_t>::max() / d) {
                return fail("tensor '" + info.name + "' has too many elements");
            }
            numel *= d;
        }
        if (info.shape.back() % layout.elements != 0) {
            return fail("tensor '" + info.name + "' row of " + std::to_string(info.shape.back()) +
                        " elements is not a whole number of " + ggml_type_name(type) + " blocks");
        }
        info.n_bytes = static_cast<size_t>(numel / layout.elements) * layout.bytes;
        return {};
    }

    Result<void> data_section() {
        uint64_t alignment = 32;
        if (const Value * a = file_.find("general.alignment")) {
            if (!a->is_number() || a->i <= 0 || a->i > (1 << 20) || (a->i & (a->i - 1)) != 0) {
                return fail("general.alignment must be a power of two");
            }
            alignment = static_cast<uint64_t>(a->i);
        }
        const uint64_t start = (pos_ + alignment - 1) / alignment * alignment;
        for (TensorInfo & t : file_.tensors_) {
            if (t.offset % alignment != 0) {
                return fail("tensor '" + t.name + "' offset " + std::to_string(t.offset) + " is not aligned");
            }
            if (start > size_ || t.offset > size_ - start || t.n_bytes > size_ - start - t.offset) {
                return fail("tensor '" + t.name + "' data (offset " + std::to_string(t.offset) + ", " +
                            std::to_string(t.n_bytes) + " bytes) lies past the end of the file");
            }
            t.data = bytes_ + start + t.offset;
        }
        return {};
    }

    const uint8_t * bytes_;
    size_t size_;
    GgufFile & file_;
    size_t pos_ = 0;
    uint64_t tensor_count_ = 0;
    uint64_t kv_count_ = 0;
};

Result<std::shared_ptr<GgufFile>> GgufFile::parse(const uint8_t * bytes, size_t size, const std::string & name) {
    std::shared_ptr<GgufFile> file(new GgufFile());
    file->name_ = name;
    file->base_ = bytes;
    file->byte_size_ = size;
    Parser parser(bytes, size, *file);
    TRY_STATUS(parser.run());
    return file;
}

Result<std::shared_ptr<GgufFile>> GgufFile::open(const std::string & path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return not_found("cannot open GGUF file " + path + ": " + std::strerror(errno));
    }
    struct stat st {};
    if (fstat(fd, &st) != 0 || st.st_size == 0) {
        ::close(fd);
        return invalid_argument(path + ": empty or unreadable GGUF file");
    }
    const size_t size = static_cast<size_t>(st.st_size);
    void * addr = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (addr == MAP_FAILED) {
        return internal_error("cannot map " + path + ": " + std::strerror(errno));
    }
    auto file = parse(static_cast<const uint8_t *>(addr), size, path);
    if (!file.ok()) {
        munmap(addr, size);
        return file.error();
    }
    (*file)->mapping_ = addr;
    (*file)->mapping_size_ = size;
    return file;
}

GgufFile::~GgufFile() {
    if (mapping_) {
        munmap(mapping_, mapping_size_);
    }
}

const Value * GgufFile::find(const std::string & key) const {
    const auto it = metadata_.find(key);
    return it == metadata_.end() ? nullptr : &it->second;
}

const TensorInfo * GgufFile::find_tensor(const std::string & name) const {
    const auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Result<std::string> GgufFile::get_string(const std::string & key) const {
    const Value * v = find(key);
    if (!v) {
        return not_found(name_ + ": metadata key '" + key + "' is missing");
    }
    if (v->type != ValueType::STRING) {
        return invalid_argument(name_ + ": metadata key '" + key + "' is a " + value_type_name(v->type) +
                                ", expected a string");
    }
    return v->s;
}

Result<int64_t> GgufFile::get_int(const std::string & key) const {
    const Value * v = find(key);
    if (!v) {
        return not_found(name_ + ": metadata key '" + key + "' is missing");
    }
    if (!v->is_number() || v->type == ValueType::FLOAT32 || v->type == ValueType::FLOAT64) {
        return invalid_argument(name_ + ": metadata key '" + key + "' is a " + value_type_name(v->type) +
                                ", expected an integer");
    }
    return v->i;
}

Result<double> GgufFile::get_float(const std::string & key) const {
    const Value * v = find(key);
    if (!v) {
        return not_found(name_ + ": metadata key '" + key + "' is missing");
    }
    if (!v->is_number()) {
        return invalid_argument(name_ + ": metadata key '" + key + "' is a " + value_type_name(v->type) +
                                ", expected a number");
    }
    return v->f;
}

}  // namespace tinkerd::gguf
