// Safetensors reading and writing. A file is an 8-byte little-endian header length, a JSON header
// mapping tensor names to {dtype, shape, data_offsets}, then the data section. Files are mmapped
// read-only (no copy), every header entry is validated against the data section, and shards listed
// in model.safetensors.index.json are merged into one SafetensorsFile.
#include "model/safetensors.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/json_depth.h"
#include "common/log.h"

namespace tinkerd::model {

namespace {

using nlohmann::json;

constexpr size_t HEADER_LENGTH_BYTES = 8;
constexpr size_t DATA_ALIGNMENT = 8;
constexpr const char * METADATA_KEY = "__metadata__";
constexpr DType ALL_DTYPES[] = {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64, DType::I32, DType::U8};

std::optional<DType> parse_dtype(const std::string & name) {
    for (DType dtype : ALL_DTYPES) {
        if (name == dtype_name(dtype)) {
            return dtype;
        }
    }
    return std::nullopt;
}

std::string errno_text() {
    return std::strerror(errno);
}

// Maps the whole file read-only. The descriptor is closed right away; the mapping keeps the file alive.
Result<std::pair<void *, size_t>> map_file(const std::string & path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) {
            return not_found(path + ": no such file");
        }
        return internal_error(path + ": cannot open: " + errno_text());
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        std::string msg = path + ": cannot stat: " + errno_text();
        ::close(fd);
        return internal_error(msg);
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        return invalid_argument(path + ": not a regular file");
    }
    size_t size = static_cast<size_t>(st.st_size);
    if (size < HEADER_LENGTH_BYTES) {
        ::close(fd);
        return invalid_argument(path + ": file is too small (" + std::to_string(size) + " bytes) to be safetensors");
    }
    void * addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    std::string mmap_error = addr == MAP_FAILED ? errno_text() : "";
    ::close(fd);
    if (addr == MAP_FAILED) {
        return internal_error(path + ": mmap failed: " + mmap_error);
    }
    return std::make_pair(addr, size);
}

uint64_t read_u64_le(const uint8_t * p) {
    uint64_t value = 0;
    for (int i = 7; i >= 0; --i) {
        value = (value << 8) | p[i];
    }
    return value;
}

// Reads a shape array; every dimension must be a non-negative integer and the element count must fit.
Result<std::vector<int64_t>> parse_shape(const std::string & where, const json & entry) {
    auto it = entry.find("shape");
    if (it == entry.end() || !it->is_array()) {
        return invalid_argument(where + " has no 'shape' array");
    }
    std::vector<int64_t> shape;
    uint64_t numel = 1;
    for (const json & dim : *it) {
        if (!dim.is_number_integer() || dim.get<int64_t>() < 0) {
            return invalid_argument(where + " has an invalid shape " + it->dump());
        }
        uint64_t d = dim.get<uint64_t>();
        if (d != 0 && numel > std::numeric_limits<uint64_t>::max() / 16 / d) {
            return invalid_argument(where + " has a shape too large " + it->dump());
        }
        numel *= d;
        shape.push_back(static_cast<int64_t>(d));
    }
    return shape;
}

Result<std::pair<uint64_t, uint64_t>> parse_offsets(const std::string & where, const json & entry) {
    auto it = entry.find("data_offsets");
    if (it == entry.end() || !it->is_array() || it->size() != 2 || !(*it)[0].is_number_unsigned() ||
        !(*it)[1].is_number_unsigned()) {
        return invalid_argument(where + " needs 'data_offsets' as two non-negative integers");
    }
    uint64_t begin = (*it)[0].get<uint64_t>();
    uint64_t end = (*it)[1].get<uint64_t>();
    if (end < begin) {
        return invalid_argument(where + " has data_offsets " + it->dump() + " that end before they begin");
    }
    return std::make_pair(begin, end);
}

// Builds the view of one header entry, checking dtype, shape and that its bytes lie inside the data section.
Result<TensorView> parse_tensor_entry(const std::string & path, const std::string & name, const json & entry,
                                      const uint8_t * data, size_t data_size) {
    const std::string where = path + ": tensor '" + name + "'";
    if (!entry.is_object()) {
        return invalid_argument(where + " has a header entry that is not an object");
    }
    auto dtype_it = entry.find("dtype");
    if (dtype_it == entry.end() || !dtype_it->is_string()) {
        return invalid_argument(where + " has no 'dtype' string");
    }
    std::optional<DType> dtype = parse_dtype(dtype_it->get<std::string>());
    if (!dtype) {
        return unsupported(where + " has unsupported dtype '" + dtype_it->get<std::string>() +
                           "' (supported: F32, F16, BF16, F64, I64, I32, U8)");
    }
    auto shape = parse_shape(where, entry);
    TRY_STATUS(shape);
    auto offsets = parse_offsets(where, entry);
    TRY_STATUS(offsets);
    auto [begin, end] = offsets.value();

    TensorView view;
    view.name = name;
    view.dtype = *dtype;
    view.shape = std::move(shape.value());
    uint64_t needed = static_cast<uint64_t>(view.numel()) * dtype_size(view.dtype);
    if (end - begin != needed) {
        return invalid_argument(where + " needs " + std::to_string(needed) + " bytes but data_offsets give " +
                                std::to_string(end - begin));
    }
    if (end > data_size) {
        return invalid_argument(path + ": file is truncated: tensor '" + name + "' ends at byte " +
                                std::to_string(end) + " but the data section has " + std::to_string(data_size) +
                                " bytes");
    }
    view.data = data + begin;
    view.n_bytes = static_cast<size_t>(needed);
    return view;
}

Result<std::map<std::string, std::string>> parse_metadata(const std::string & path, const json & value) {
    if (!value.is_object()) {
        return invalid_argument(path + ": __metadata__ must be an object of strings");
    }
    std::map<std::string, std::string> metadata;
    for (const auto & [key, item] : value.items()) {
        if (!item.is_string()) {
            return invalid_argument(path + ": __metadata__ value for '" + key + "' is not a string");
        }
        metadata[key] = item.get<std::string>();
    }
    return metadata;
}

// Parses the JSON header; nlohmann exceptions become INVALID_ARGUMENT errors naming the file.
Result<json> parse_header_json(const std::string & path, const char * text, size_t length) {
    json header;
    TRY_STATUS(check_json_depth(std::string_view(text, length), path + ": header"));
    try {
        header = json::parse(text, text + length);
    } catch (const json::exception & e) {
        return invalid_argument(path + ": header is not valid JSON: " + e.what());
    }
    if (!header.is_object()) {
        return invalid_argument(path + ": header JSON is not an object");
    }
    return header;
}

std::string read_text_file(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

// Checks a shard file name from an index: a plain relative name inside the model directory.
bool is_safe_shard_name(const std::string & name) {
    std::filesystem::path p(name);
    if (name.empty() || p.is_absolute()) {
        return false;
    }
    for (const auto & part : p) {
        if (part == "..") {
            return false;
        }
    }
    return true;
}

// Reads the index's weight_map: tensor name -> shard file name.
Result<std::map<std::string, std::string>> read_weight_map(const std::string & index_path) {
    json index;
    const std::string index_text = read_text_file(index_path);
    TRY_STATUS(check_json_depth(index_text, index_path));
    try {
        index = json::parse(index_text);
    } catch (const json::exception & e) {
        return invalid_argument(index_path + ": not valid JSON: " + e.what());
    }
    auto it = index.is_object() ? index.find("weight_map") : index.end();
    if (it == index.end() || !it->is_object() || it->empty()) {
        return invalid_argument(index_path + ": missing or empty 'weight_map' object");
    }
    std::map<std::string, std::string> weight_map;
    for (const auto & [name, shard] : it->items()) {
        if (!shard.is_string() || !is_safe_shard_name(shard.get<std::string>())) {
            return invalid_argument(index_path + ": tensor '" + name + "' has an invalid shard name " + shard.dump());
        }
        weight_map[name] = shard.get<std::string>();
    }
    return weight_map;
}

}  // namespace

const char * dtype_name(DType dtype) {
    switch (dtype) {
        case DType::F32:
            return "F32";
        case DType::F16:
            return "F16";
        case DType::BF16:
            return "BF16";
        case DType::F64:
            return "F64";
        case DType::I64:
            return "I64";
        case DType::I32:
            return "I32";
        case DType::U8:
            return "U8";
    }
    return "?";
}

size_t dtype_size(DType dtype) {
    switch (dtype) {
        case DType::F32:
        case DType::I32:
            return 4;
        case DType::F64:
        case DType::I64:
            return 8;
        case DType::F16:
        case DType::BF16:
            return 2;
        case DType::U8:
            return 1;
    }
    return 0;
}

int64_t TensorView::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) {
        n *= d;
    }
    return n;
}

SafetensorsFile::~SafetensorsFile() {
    for (const Mapping & m : mappings_) {
        if (m.addr != nullptr) {
            ::munmap(m.addr, m.size);
        }
    }
}

Result<std::shared_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string & path) {
    auto mapped = map_file(path);
    TRY_STATUS(mapped);
    // Owning the mapping from here on means every early return below unmaps it.
    std::shared_ptr<SafetensorsFile> file(new SafetensorsFile());
    file->mappings_.push_back({mapped->first, mapped->second});
    const auto * bytes = static_cast<const uint8_t *>(mapped->first);
    const size_t file_size = mapped->second;

    uint64_t header_len = read_u64_le(bytes);
    if (header_len > file_size - HEADER_LENGTH_BYTES) {
        return invalid_argument(path + ": header length " + std::to_string(header_len) + " exceeds the file size " +
                                std::to_string(file_size));
    }
    auto header = parse_header_json(path, reinterpret_cast<const char *>(bytes) + HEADER_LENGTH_BYTES, header_len);
    TRY_STATUS(header);
    const uint8_t * data = bytes + HEADER_LENGTH_BYTES + header_len;
    const size_t data_size = file_size - HEADER_LENGTH_BYTES - header_len;

    for (const auto & [name, entry] : header->items()) {
        if (name == METADATA_KEY) {
            auto metadata = parse_metadata(path, entry);
            TRY_STATUS(metadata);
            file->metadata_ = std::move(metadata.value());
            continue;
        }
        auto view = parse_tensor_entry(path, name, entry, data, data_size);
        TRY_STATUS(view);
        file->tensors_.emplace(name, std::move(view.value()));
    }
    LOG_DBG("model", "opened %s: %zu tensors, %zu bytes", path.c_str(), file->tensors_.size(), file_size);
    return file;
}

Result<std::shared_ptr<SafetensorsFile>> SafetensorsFile::open_model_dir(const std::string & dir) {
    namespace fs = std::filesystem;
    const std::string index_path = (fs::path(dir) / "model.safetensors.index.json").string();
    const std::string single_path = (fs::path(dir) / "model.safetensors").string();
    const std::string external_path = (fs::path(dir) / EXTERNAL_WEIGHTS).string();
    std::error_code ec;
    if (!fs::exists(index_path, ec)) {
        if (!fs::exists(single_path, ec)) {
            return not_found("no model.safetensors or model.safetensors.index.json in " + dir);
        }
        auto file = open(single_path);
        if (file.ok() && fs::exists(external_path, ec)) {
            TRY_STATUS((*file)->attach_external(external_path));
        }
        return file;
    }

    auto weight_map = read_weight_map(index_path);
    TRY_STATUS(weight_map);
    std::set<std::string> shard_names;
    for (const auto & [name, shard] : weight_map.value()) {
        shard_names.insert(shard);
    }
    std::map<std::string, std::shared_ptr<SafetensorsFile>> shards;
    for (const std::string & shard : shard_names) {
        auto opened = open((fs::path(dir) / shard).string());
        TRY_STATUS(opened);
        shards[shard] = std::move(opened.value());
    }

    std::shared_ptr<SafetensorsFile> merged(new SafetensorsFile());
    for (const auto & [name, shard] : weight_map.value()) {
        auto it = shards[shard]->tensors_.find(name);
        if (it == shards[shard]->tensors_.end()) {
            return invalid_argument(index_path + ": tensor '" + name + "' is mapped to shard '" + shard +
                                    "' which does not contain it");
        }
        merged->tensors_.emplace(name, it->second);
    }
    // Move the mappings into the merged file so they outlive the per-shard objects.
    for (auto & [shard, file] : shards) {
        merged->metadata_.insert(file->metadata_.begin(), file->metadata_.end());
        merged->mappings_.insert(merged->mappings_.end(), file->mappings_.begin(), file->mappings_.end());
        file->mappings_.clear();
    }
    LOG_DBG("model", "opened %s: %zu shards, %zu tensors", dir.c_str(), shards.size(), merged->tensors_.size());
    return merged;
}

Result<TensorView> SafetensorsFile::get(const std::string & name) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) {
        return not_found("tensor '" + name + "' not found");
    }
    return it->second;
}

std::vector<std::string> SafetensorsFile::names() const {
    std::vector<std::string> result;
    result.reserve(tensors_.size());
    for (const auto & [name, view] : tensors_) {
        result.push_back(name);
    }
    return result;
}

namespace {

// Builds the header JSON (keys sorted by nlohmann's std::map-backed object), padded with spaces so
// that the data section starts at a multiple of 8 bytes.
Result<std::string> build_header(const std::map<std::string, OwnedTensor> & tensors,
                                 const std::map<std::string, std::string> & metadata) {
    json header = json::object();
    if (!metadata.empty()) {
        header[METADATA_KEY] = metadata;
    }
    uint64_t offset = 0;
    for (const auto & [name, tensor] : tensors) {
        uint64_t numel = 1;
        for (int64_t d : tensor.shape) {
            if (d < 0) {
                return invalid_argument("write_safetensors: tensor '" + name + "' has a negative dimension");
            }
            numel *= static_cast<uint64_t>(d);
        }
        uint64_t needed = numel * dtype_size(tensor.dtype);
        if (name == METADATA_KEY || needed != tensor.bytes.size()) {
            return invalid_argument("write_safetensors: tensor '" + name + "' needs " + std::to_string(needed) +
                                    " bytes but has " + std::to_string(tensor.bytes.size()));
        }
        header[name] = {
            {"dtype", dtype_name(tensor.dtype)}, {"shape", tensor.shape}, {"data_offsets", {offset, offset + needed}}};
        offset += needed;
    }
    std::string text = header.dump();
    while ((HEADER_LENGTH_BYTES + text.size()) % DATA_ALIGNMENT != 0) {
        text.push_back(' ');
    }
    return text;
}

Result<void> write_all(std::FILE * out, const void * data, size_t size, const std::string & path) {
    if (size > 0 && std::fwrite(data, 1, size, out) != size) {
        return internal_error(path + ": write failed: " + errno_text());
    }
    return {};
}

Result<void> write_file_contents(std::FILE * out, const std::string & path, const std::string & header,
                                 const std::map<std::string, OwnedTensor> & tensors) {
    uint8_t length_bytes[HEADER_LENGTH_BYTES];
    uint64_t header_len = header.size();
    for (size_t i = 0; i < HEADER_LENGTH_BYTES; ++i) {
        length_bytes[i] = static_cast<uint8_t>(header_len >> (8 * i));
    }
    TRY_STATUS(write_all(out, length_bytes, sizeof(length_bytes), path));
    TRY_STATUS(write_all(out, header.data(), header.size(), path));
    for (const auto & [name, tensor] : tensors) {
        TRY_STATUS(write_all(out, tensor.bytes.data(), tensor.bytes.size(), path));
    }
    if (std::fflush(out) != 0 || ::fsync(fileno(out)) != 0) {
        return internal_error(path + ": flush failed: " + errno_text());
    }
    return {};
}

}  // namespace

Result<void> write_safetensors(const std::string & path, const std::map<std::string, OwnedTensor> & tensors,
                               const std::map<std::string, std::string> & metadata) {
    auto header = build_header(tensors, metadata);
    TRY_STATUS(header);
    const std::string tmp_path = path + ".tmp";
    std::FILE * out = std::fopen(tmp_path.c_str(), "wb");
    if (out == nullptr) {
        return internal_error(tmp_path + ": cannot open for writing: " + errno_text());
    }
    Result<void> written = write_file_contents(out, tmp_path, header.value(), tensors);
    if (std::fclose(out) != 0 && written.ok()) {
        written = internal_error(tmp_path + ": close failed: " + errno_text());
    }
    if (written.ok() && std::rename(tmp_path.c_str(), path.c_str()) != 0) {
        written = internal_error("cannot rename " + tmp_path + " to " + path + ": " + errno_text());
    }
    if (!written.ok()) {
        std::remove(tmp_path.c_str());
    }
    return written;
}

bool SafetensorsFile::release_pages(const void * data, size_t n_bytes) const {
    const auto begin = reinterpret_cast<uintptr_t>(data);
    const auto end = begin + n_bytes;
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    for (const Mapping & m : mappings_) {
        const auto map_begin = reinterpret_cast<uintptr_t>(m.addr);
        if (begin < map_begin || end > map_begin + m.size) {
            continue;
        }
        const uintptr_t first = (begin + page - 1) / page * page;  // whole pages only
        const uintptr_t last = end / page * page;
        if (last > first) {
            madvise(reinterpret_cast<void *>(first), last - first, MADV_DONTNEED);
        }
        return true;
    }
    return false;
}

}  // namespace tinkerd::model
