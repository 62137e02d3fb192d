// SafetensorsFile::attach_external: the tensors a model directory's EXTERNAL_WEIGHTS manifest names in
// another file (a GGUF's quantised blocks, used where they lie), mapped read-only and checked: the file's
// size is the one recorded, and every tensor's byte range lies inside it and matches its dtype and shape.
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/json_depth.h"
#include "common/log.h"
#include "model/safetensors.h"

namespace tinkerd::model {
namespace {

using nlohmann::json;

Result<json> read_manifest(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) {
        return internal_error("cannot read " + path);
    }
    TRY_STATUS(check_json_depth(text.str(), path));
    json manifest = json::parse(text.str(), nullptr, false);
    if (!manifest.is_object() || !manifest.value("file", json()).is_string() ||
        !manifest.value("size", json()).is_number_unsigned() || !manifest.value("tensors", json()).is_object()) {
        return invalid_argument(path + ": needs 'file' (string), 'size' (bytes) and 'tensors' (object)");
    }
    return manifest;
}

// One manifest entry as a view into [base, base + size).
Result<TensorView> external_view(const std::string & where, const json & entry, const uint8_t * base, size_t size) {
    if (!entry.is_object() || entry.value("dtype", "") != "U8" || !entry.value("shape", json()).is_array() ||
        !entry.value("offset", json()).is_number_unsigned() || !entry.value("n_bytes", json()).is_number_unsigned()) {
        return invalid_argument(where + " needs dtype \"U8\", shape, offset and n_bytes");
    }
    TensorView view;
    view.dtype = DType::U8;
    for (const json & dim : entry["shape"]) {
        if (!dim.is_number_unsigned()) {
            return invalid_argument(where + " has a bad shape " + entry["shape"].dump());
        }
        view.shape.push_back(dim.get<int64_t>());
    }
    const uint64_t offset = entry["offset"].get<uint64_t>(), n_bytes = entry["n_bytes"].get<uint64_t>();
    if (static_cast<uint64_t>(view.numel()) != n_bytes || offset > size || n_bytes > size - offset) {
        return invalid_argument(where + ": bytes [" + std::to_string(offset) + ", +" + std::to_string(n_bytes) +
                                ") do not match its shape or lie outside the file");
    }
    view.data = base + offset;
    view.n_bytes = static_cast<size_t>(n_bytes);
    return view;
}

}  // namespace

Result<void> SafetensorsFile::attach_external(const std::string & manifest_path) {
    auto manifest = read_manifest(manifest_path);
    TRY_STATUS(manifest);
    const std::string path = (*manifest)["file"].get<std::string>();
    const uint64_t expected = (*manifest)["size"].get<uint64_t>();
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != expected || expected == 0) {
        if (fd >= 0) {
            ::close(fd);
        }
        return not_found(manifest_path + ": the weights file " + path + " is missing or is no longer " +
                         std::to_string(expected) + " bytes (delete this directory to convert again)");
    }
    void * addr = ::mmap(nullptr, expected, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (addr == MAP_FAILED) {
        return internal_error(path + ": mmap failed");
    }
    mappings_.push_back({addr, static_cast<size_t>(expected)});  // unmapped by the destructor from here on
    for (const auto & [name, entry] : (*manifest)["tensors"].items()) {
        auto view = external_view(manifest_path + ": tensor '" + name + "'", entry, static_cast<const uint8_t *>(addr),
                                  static_cast<size_t>(expected));
        TRY_STATUS(view);
        view->name = name;
        tensors_[name] = std::move(view).value();
    }
    LOG_DBG("model", "attached %zu tensors of %s", (*manifest)["tensors"].size(), path.c_str());
    return {};
}

}  // namespace tinkerd::model
