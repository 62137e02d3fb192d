// Writing the converted Hugging Face directory of a GGUF file, and its cache (see convert.h): the
// directory is written to a temporary sibling and renamed, and carries a marker naming the source
// file's size, mtime and the converter version, so it is rebuilt only when one of them changes.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "gguf/convert.h"

namespace tinkerd::gguf {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// 2: a Qwen3.5 K-quant ssm_out is kept in its tiled column order (was dequantised to F32).
constexpr int CONVERTER_VERSION = 2;
constexpr const char * MARKER = "gguf_source.json";

Result<void> write_json(const fs::path & path, const json & value) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << value.dump(2) << "\n";
    out.close();
    if (!out) {
        return internal_error("cannot write " + path.string());
    }
    return {};
}

// What identifies the source file: its size and modification time (ns), and our converter version.
Result<json> source_identity(const std::string & path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        return not_found("cannot read GGUF file " + path);
    }
    const int64_t mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    return json{{"size", static_cast<int64_t>(st.st_size)}, {"mtime_ns", mtime_ns}, {"version", CONVERTER_VERSION}};
}

bool marker_matches(const fs::path & dir, const json & identity, bool & quantised) {
    std::ifstream in(dir / MARKER);
    if (!in)
        return false;
    const json marker = json::parse(in, nullptr, false);
    if (!marker.is_object() || marker.value("identity", json()) != identity)
        return false;
    quantised = marker.value("quantised", false);
    return true;
}

json generation_config(const json & config) {
    json gen = {{"_from", "gguf"}};
    for (const char * key : {"bos_token_id", "eos_token_id"}) {
        if (config.contains(key))
            gen[key] = config[key];
    }
    return gen;
}

}  // namespace

bool looks_like_gguf(const std::string & path) {
    if (path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0)
        return true;
    std::error_code ec;
    if (!fs::is_regular_file(path, ec))
        return false;
    std::ifstream in(path, std::ios::binary);
    char magic[4] = {};
    in.read(magic, 4);
    return in.gcount() == 4 && std::string(magic, 4) == "GGUF";
}

Result<void> convert_gguf(const GgufFile & file, const std::string & out_dir, bool & quantised,
                          const std::string & keep_source) {
    auto config = hf_config(file);
    TRY_STATUS(config);
    const bool has_tokenizer = file.find("tokenizer.ggml.model") != nullptr;
    Result<json> tokenizer = json(), tokenizer_config = json();
    if (has_tokenizer) {
        tokenizer = hf_tokenizer(file);
        TRY_STATUS(tokenizer);
        tokenizer_config = hf_tokenizer_config(file);
        TRY_STATUS(tokenizer_config);
    } else {
        LOG_WRN("gguf", "%s has no tokenizer (tokenizer.ggml.model): token ids only", file.name().c_str());
    }
    auto tensors = hf_tensors(file, *config, quantised, !keep_source.empty());
    TRY_STATUS(tensors);
    Result<json> manifest = json();
    if (!keep_source.empty()) {
        manifest = external_manifest(file, *config, keep_source);
        TRY_STATUS(manifest);
    }
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    if (ec) {
        return internal_error("cannot create " + out_dir + ": " + ec.message());
    }
    const fs::path dir(out_dir);
    TRY_STATUS(write_json(dir / "config.json", *config));
    if (has_tokenizer) {
        TRY_STATUS(write_json(dir / "tokenizer.json", *tokenizer));
        TRY_STATUS(write_json(dir / "tokenizer_config.json", *tokenizer_config));
    }
    TRY_STATUS(write_json(dir / "generation_config.json", generation_config(*config)));
    if (!keep_source.empty()) {
        TRY_STATUS(write_json(dir / model::EXTERNAL_WEIGHTS, *manifest));
    }
    return model::write_safetensors((dir / "model.safetensors").string(), *tensors, {{"format", "pt"}});
}

namespace {

// The machine's physical memory in bytes (0 when unknown: AUTO then dequantises).
uint64_t physical_memory() {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

// Writes the converted directory of `file` into dir (through a temporary sibling).
Result<void> write_converted(const GgufFile & file, const std::string & gguf_path, const fs::path & dir,
                             const json & identity, ConvertedModel & result) {
    const fs::path tmp = dir.string() + ".tmp-" + std::to_string(::getpid());
    std::error_code ec;
    fs::remove_all(tmp, ec);
    const std::string keep_source = result.kept_quantised ? fs::absolute(gguf_path).string() : "";
    if (auto converted = convert_gguf(file, tmp.string(), result.quantised, keep_source); !converted.ok()) {
        fs::remove_all(tmp, ec);
        return converted.error();
    }
    TRY_STATUS(
        write_json(tmp / MARKER, {{"identity", identity}, {"source", gguf_path}, {"quantised", result.quantised}}));
    fs::remove_all(dir, ec);
    fs::rename(tmp, dir, ec);
    if (ec) {
        return internal_error("cannot move " + tmp.string() + " to " + dir.string() + ": " + ec.message());
    }
    return {};
}

}  // namespace

Result<ConvertedModel> ensure_converted(const std::string & gguf_path, const std::string & cache_root, BaseQuant mode) {
    auto identity = source_identity(gguf_path);
    TRY_STATUS(identity);
    auto file = GgufFile::open(gguf_path);
    TRY_STATUS(file);
    ConvertedModel result;
    result.kept_quantised = choose_base_quant(**file, mode, physical_memory()) == BaseQuant::GGUF;
    (*identity)["keep_quantised"] = result.kept_quantised;
    const std::string stem = fs::path(gguf_path).stem().string();
    const fs::path dir = fs::path(cache_root) / (stem + "-" + std::to_string((*identity)["size"].get<int64_t>()) +
                                                 (result.kept_quantised ? "-q" : ""));
    result.dir = dir.string();
    if (marker_matches(dir, *identity, result.quantised)) {
        LOG_INF("gguf", "using the converted %s in %s", gguf_path.c_str(), dir.c_str());
        return result;
    }
    const auto start = std::chrono::steady_clock::now();
    LOG_INF("gguf", "converting %s into %s (once; %s) ...", gguf_path.c_str(), dir.c_str(),
            result.kept_quantised ? "quantised weights stay in the GGUF" : "dequantising every tensor");
    TRY_STATUS(write_converted(**file, gguf_path, dir, *identity, result));
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    LOG_INF("gguf", "converted %s in %.1f s", gguf_path.c_str(), secs);
    return result;
}

}  // namespace tinkerd::gguf
