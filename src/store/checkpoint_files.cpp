// Checkpoint directories on disk: splitting tensors into adapter and optimizer files, the PEFT
// adapter_config.json, the temp-dir-then-rename write protocol with fsyncs, and reading back.
// The tar archive of a checkpoint is in tar.cpp.
#include "store/checkpoint_files.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "model/lora_layout.h"

namespace tinkerd::store {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char * ADAPTER_FILE = "adapter_model.safetensors";
constexpr const char * OPTIMIZER_FILE = "optimizer_state.safetensors";
constexpr const char * CONFIG_FILE = "adapter_config.json";
constexpr const char * COMPLETE_FILE = "checkpoint_complete";

bool ends_with(const std::string & text, const std::string & suffix) {
    return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_optimizer_key(const std::string & key) {
    return key == "optimizer.step" || ends_with(key, ".exp_avg") || ends_with(key, ".exp_avg_sq");
}

// "weights/<name>": how errors name a checkpoint without exposing the data dir.
std::string checkpoint_label(const fs::path & dir) {
    return (dir.parent_path().filename() / dir.filename()).string();
}

std::string random_suffix() {
    std::random_device device;
    std::ostringstream out;
    out << std::hex << device() << device();
    return out.str();
}

// fsync of a file or directory by path.
Result<void> sync_path(const fs::path & path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return internal_error("cannot open " + path.string() + " to sync: " + std::strerror(errno));
    }
    const int rc = ::fsync(fd);
    const int saved_errno = errno;
    ::close(fd);
    if (rc != 0) {
        return internal_error("cannot sync " + path.string() + ": " + std::strerror(saved_errno));
    }
    return {};
}

Result<void> write_text_file(const fs::path & path, const std::string & text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) {
        return internal_error("cannot write " + path.string());
    }
    return sync_path(path);
}

json config_to_json(const AdapterConfig & config) {
    json doc{{"peft_type", "LORA"},
             {"task_type", "CAUSAL_LM"},
             {"r", config.rank},
             {"lora_alpha", config.alpha},
             {"target_modules", config.target_modules},
             {"base_model_name_or_path", config.base_model},
             {"bias", "none"},
             {"lora_dropout", 0.0},
             {"fan_in_fan_out", false},
             {"inference_mode", true},
             {"tinkerd",
              {{"train_attn", config.train_attn},
               {"train_mlp", config.train_mlp},
               {"train_unembed", config.train_unembed}}}};
    if (!config.rank_pattern.empty()) {
        doc["rank_pattern"] = config.rank_pattern;
    }
    if (!config.alpha_pattern.empty()) {
        doc["alpha_pattern"] = config.alpha_pattern;
    }
    return doc;
}

bool has_any_module(const std::vector<std::string> & modules, std::initializer_list<const char *> wanted) {
    for (const std::string & module : modules) {
        for (const char * name : wanted) {
            if (module == name) {
                return true;
            }
        }
    }
    return false;
}

}  // namespace

AdapterConfig make_adapter_config(std::string base_model, int64_t rank, double alpha, const model::ModelConfig & model,
                                  bool train_attn, bool train_mlp, bool train_unembed) {
    AdapterConfig config{std::move(base_model), rank, alpha, {}, {}, {}, train_attn, train_mlp, train_unembed};
    config.target_modules = model::lora_target_modules(model, {train_attn, train_mlp, train_unembed});
    return config;
}

namespace {

// Parses adapter_config.json. Without tinkerd's own section (an adapter from elsewhere) the trained
// parts are inferred from target_modules.
Result<AdapterConfig> config_from_json(const json & doc) {
    AdapterConfig config;
    config.base_model = doc.value("base_model_name_or_path", std::string());
    config.rank = doc.at("r").get<int64_t>();
    config.alpha = doc.value("lora_alpha", static_cast<double>(config.rank));
    if (doc.contains("target_modules") && doc["target_modules"].is_array()) {
        config.target_modules = doc["target_modules"].get<std::vector<std::string>>();
    }
    if (doc.contains("tinkerd") && doc["tinkerd"].is_object()) {
        const json & own = doc["tinkerd"];
        config.train_attn = own.value("train_attn", true);
        config.train_mlp = own.value("train_mlp", true);
        config.train_unembed = own.value("train_unembed", true);
    } else {
        config.train_attn =
            has_any_module(config.target_modules, {"q_proj", "k_proj", "v_proj", "o_proj", "in_proj_q", "in_proj_k",
                                                   "in_proj_v", "in_proj_qkv", "in_proj_z", "out_proj"});
        config.train_mlp = has_any_module(
            config.target_modules, {"gate_proj", "up_proj", "down_proj", "experts.w1", "experts.w2", "experts.w3",
                                    "shared_expert.gate_proj", "shared_expert.up_proj", "shared_expert.down_proj"});
        config.train_unembed = has_any_module(config.target_modules, {"lm_head"});
    }
    return config;
}

Result<AdapterConfig> read_config(const fs::path & path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        return internal_error("cannot read " + path.string());
    }
    try {
        return config_from_json(json::parse(in));
    } catch (const json::exception & e) {
        return internal_error("bad " + path.string() + ": " + e.what());
    }
}

// Copies every tensor of a safetensors file out of its mapping into `out`.
Result<void> read_tensors(const fs::path & path, Tensors & out) {
    auto file = model::SafetensorsFile::open(path.string());
    TRY_STATUS(file);
    for (const std::string & name : file.value()->names()) {
        Result<model::TensorView> view = file.value()->get(name);
        TRY_STATUS(view);
        if (view->dtype == model::DType::U8) {  // quantised base blocks only; never an adapter's
            return invalid_argument(path.string() + ": tensor '" + name + "' has dtype U8, which no adapter holds");
        }
        model::OwnedTensor tensor;
        tensor.dtype = view->dtype;
        tensor.shape = view->shape;
        const auto * bytes = static_cast<const uint8_t *>(view->data);
        tensor.bytes.assign(bytes, bytes + view->n_bytes);
        out[name] = std::move(tensor);
    }
    return {};
}

// Writes every file of the checkpoint into `dir` (already created) and syncs it.
Result<void> write_files(const fs::path & dir, const AdapterConfig & config, const Tensors & tensors) {
    Tensors adapter;
    Tensors optimizer;
    for (const auto & [key, tensor] : tensors) {
        (is_optimizer_key(key) ? optimizer : adapter)[key] = tensor;
    }
    const std::map<std::string, std::string> metadata = {{"format", "pt"}};
    TRY_STATUS(model::write_safetensors((dir / ADAPTER_FILE).string(), adapter, metadata));
    if (!optimizer.empty()) {
        TRY_STATUS(model::write_safetensors((dir / OPTIMIZER_FILE).string(), optimizer, metadata));
    }
    TRY_STATUS(write_text_file(dir / CONFIG_FILE, config_to_json(config).dump(2) + "\n"));
    TRY_STATUS(write_text_file(dir / COMPLETE_FILE, ""));
    return sync_path(dir);
}

Result<int64_t> directory_size(const fs::path & dir) {
    std::error_code ec;
    int64_t total = 0;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        if (it->is_regular_file(ec)) {
            total += static_cast<int64_t>(it->file_size(ec));
        }
    }
    if (ec) {
        return internal_error("cannot list " + dir.string() + ": " + ec.message());
    }
    return total;
}

Result<int64_t> write_and_measure(const fs::path & dir, const AdapterConfig & config, const Tensors & tensors) {
    TRY_STATUS(write_files(dir, config, tensors));
    return directory_size(dir);
}

// Moves the finished temp dir to `target`, replacing an existing one (rename aside, rename in, remove).
Result<void> move_into_place(const fs::path & temp, const fs::path & target) {
    std::error_code ec;
    fs::path old;
    if (fs::exists(target, ec)) {
        old = target.string() + ".old-" + random_suffix();
        fs::rename(target, old, ec);
        if (ec) {
            return internal_error("cannot move aside " + target.string() + ": " + ec.message());
        }
    }
    fs::rename(temp, target, ec);
    if (ec) {
        if (!old.empty()) {
            std::error_code ignored;
            fs::rename(old, target, ignored);  // put the previous checkpoint back
        }
        return internal_error("cannot rename " + temp.string() + " to " + target.string() + ": " + ec.message());
    }
    if (!old.empty()) {
        fs::remove_all(old, ec);
    }
    return sync_path(target.parent_path());
}

}  // namespace

std::string checkpoint_dir(const std::string & data_dir, const std::string & run_id, const std::string & kind,
                           const std::string & name) {
    return (fs::path(data_dir) / "runs" / run_id / kind / name).string();
}

Result<int64_t> write_checkpoint(const std::string & dir, const AdapterConfig & config, const Tensors & tensors,
                                 bool overwrite) {
    const fs::path target = fs::path(dir).lexically_normal();
    if (!overwrite && fs::exists(target)) {
        return invalid_argument("checkpoint " + checkpoint_label(target) + " already exists");
    }
    std::error_code ec;
    fs::create_directories(target.parent_path(), ec);
    if (ec) {
        return internal_error("cannot create " + target.parent_path().string() + ": " + ec.message());
    }
    const fs::path temp = target.string() + ".tmp-" + random_suffix();
    if (!fs::create_directory(temp, ec)) {
        return internal_error("cannot create " + temp.string() + ": " + ec.message());
    }
    Result<int64_t> size = write_and_measure(temp, config, tensors);
    Result<void> moved = size.ok() ? move_into_place(temp, target) : Result<void>(size.error());
    if (!moved.ok()) {
        fs::remove_all(temp, ec);
        return moved.error();
    }
    return size;
}

Result<CheckpointContents> read_checkpoint(const std::string & dir, bool with_optimizer) {
    const fs::path path = fs::path(dir).lexically_normal();
    if (!fs::is_directory(path)) {
        return not_found("checkpoint not found: " + checkpoint_label(path));
    }
    if (!fs::exists(path / COMPLETE_FILE)) {
        return not_found("incomplete checkpoint: " + checkpoint_label(path));
    }
    CheckpointContents contents;
    Result<AdapterConfig> config = read_config(path / CONFIG_FILE);
    TRY_STATUS(config);
    contents.config = std::move(config.value());
    TRY_STATUS(read_tensors(path / ADAPTER_FILE, contents.tensors));
    if (with_optimizer) {
        if (!fs::exists(path / OPTIMIZER_FILE)) {
            return invalid_argument("checkpoint has no optimizer state (saved with save_weights_for_sampler?)");
        }
        TRY_STATUS(read_tensors(path / OPTIMIZER_FILE, contents.tensors));
        contents.has_optimizer = true;
    }
    return contents;
}

Result<void> remove_checkpoint(const std::string & dir) {
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (ec) {
        return internal_error("cannot remove " + dir + ": " + ec.message());
    }
    return {};
}

}  // namespace tinkerd::store
