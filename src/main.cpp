// tinkerd entry point: reads flags (design.md §2), loads the served models (or generates the built-in
// one) and reports what it serves. The Tinker HTTP API arrives with issue 3; until then tinkerd loads
// the models, checks them with one forward pass, and exits.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/log.h"
#include "engine/engine.h"
#include "model/builtin_model.h"

namespace {

struct Flags {
    std::vector<std::pair<std::string, std::string>> models;  // NAME=DIR
    std::string host = "127.0.0.1";
    int port = 8000;
    std::string data_dir;
    std::string api_keys_file;
    std::string dtype = "auto";
    int threads = 0;
};

const char * USAGE =
    "usage: tinkerd [--model NAME=DIR ...] [--host H] [--port P] [--data-dir D] [--api-keys FILE]\n"
    "               [--dtype auto|bf16|fp32] [--threads N]\n"
    "  --model NAME=DIR  serve the Hugging Face model in DIR as NAME (the clients' base_model); repeatable.\n"
    "                    Without --model, a small built-in model is generated in DATA_DIR/builtin-model.\n"
    "  --host, --port    where to listen (default 127.0.0.1:8000)\n"
    "  --data-dir        database, checkpoints and the built-in model (default ~/.local/share/tinkerd)\n"
    "  --api-keys        file with one API key per line (tenants); without it any tml-... key is accepted\n"
    "  --dtype           base-weight precision: auto (the checkpoint's own), bf16 or fp32 (LoRA is fp32)\n"
    "  --threads         compute threads (default: every core)\n";

bool parse_flags(int argc, char ** argv, Flags & flags) {
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--help" || arg == "-h") {
            return false;
        }
        if (i + 1 >= argc) {
            std::fprintf(stderr, "error: %s needs a value\n", arg.c_str());
            return false;
        }
        const std::string value = argv[++i];
        if (arg == "--model") {
            auto eq = value.find('=');
            if (eq == std::string::npos || eq == 0 || eq + 1 == value.size()) {
                std::fprintf(stderr, "error: --model expects NAME=DIR, got '%s'\n", value.c_str());
                return false;
            }
            flags.models.emplace_back(value.substr(0, eq), value.substr(eq + 1));
        } else if (arg == "--host") {
            flags.host = value;
        } else if (arg == "--port") {
            flags.port = std::atoi(value.c_str());
        } else if (arg == "--data-dir") {
            flags.data_dir = value;
        } else if (arg == "--api-keys") {
            flags.api_keys_file = value;
        } else if (arg == "--dtype") {
            flags.dtype = value;
        } else if (arg == "--threads") {
            flags.threads = std::atoi(value.c_str());
        } else {
            std::fprintf(stderr, "error: unknown flag '%s'\n", arg.c_str());
            return false;
        }
    }
    return true;
}

bool parse_dtype(const std::string & name, tinkerd::engine::ComputeDType & out) {
    using tinkerd::engine::ComputeDType;
    if (name == "auto")
        out = ComputeDType::AUTO;
    else if (name == "bf16")
        out = ComputeDType::BF16;
    else if (name == "fp32")
        out = ComputeDType::FP32;
    else
        return false;
    return true;
}

}  // namespace

int main(int argc, char ** argv) {
    Flags flags;
    if (!parse_flags(argc, argv, flags)) {
        std::fputs(USAGE, stderr);
        return 2;
    }
    tinkerd::engine::EngineOptions options;
    options.n_threads = flags.threads;
    if (!parse_dtype(flags.dtype, options.dtype)) {
        std::fprintf(stderr, "error: --dtype must be auto, bf16 or fp32, got '%s'\n", flags.dtype.c_str());
        return 2;
    }
    if (flags.data_dir.empty()) {
        const char * home = std::getenv("HOME");
        flags.data_dir = std::string(home ? home : ".") + "/.local/share/tinkerd";
    }
    if (flags.models.empty()) {
        const std::string dir = flags.data_dir + "/builtin-model";
        LOG_INF("main", "no --model given: using the built-in model in %s", dir.c_str());
        auto status = tinkerd::model::ensure_builtin_model(dir);
        if (!status.ok()) {
            LOG_ERR("main", "cannot create the built-in model: %s", status.error().message.c_str());
            return 1;
        }
        flags.models.emplace_back(tinkerd::model::BUILTIN_MODEL_NAME, dir);
    }
    for (const auto & [name, dir] : flags.models) {
        LOG_INF("main", "loading model %s from %s", name.c_str(), dir.c_str());
        auto engine = tinkerd::engine::Engine::load(dir, options);
        if (!engine.ok()) {
            LOG_ERR("main", "cannot load %s: %s", name.c_str(), engine.error().message.c_str());
            return 1;
        }
        auto logits = (*engine)->last_logits(tinkerd::engine::BASE_MODEL, {0});
        if (!logits.ok()) {
            LOG_ERR("main", "self-check forward of %s failed: %s", name.c_str(), logits.error().message.c_str());
            return 1;
        }
        LOG_INF("main", "serving %s (%s, vocab %lld, %s weights)", name.c_str(),
                (*engine)->config().architecture.c_str(), static_cast<long long>((*engine)->config().vocab_size),
                (*engine)->compute_dtype_name().c_str());
    }
    LOG_WRN("main", "the Tinker HTTP API (%s:%d) is not implemented yet (issue 3): models verified, exiting",
            flags.host.c_str(), flags.port);
    return 0;
}
