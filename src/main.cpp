// tinkerd entry point: reads flags, loads the served models and reports what it serves.
// The Tinker HTTP API arrives with issue 3; until then the binary loads models and exits.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/log.h"
#include "engine/engine.h"

namespace {

struct Flags {
    std::vector<std::pair<std::string, std::string>> models;  // NAME=DIR
    std::string dtype = "auto";
    int threads = 0;
};

void print_usage() {
    std::printf(
        "usage: tinkerd --model NAME=DIR [--model NAME=DIR ...] [--dtype auto|bf16|fp32] [--threads N]\n"
        "  --model NAME=DIR  serve the Hugging Face model in DIR under the name NAME (repeatable)\n"
        "  --dtype           base-weight precision: auto (the checkpoint's own), bf16 or fp32\n"
        "  --threads         compute threads (default: every core)\n");
}

bool parse_flags(int argc, char ** argv, Flags & flags) {
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
        if (arg == "--model") {
            std::string spec = value();
            auto eq = spec.find('=');
            if (eq == std::string::npos || eq == 0) {
                std::fprintf(stderr, "error: --model expects NAME=DIR, got '%s'\n", spec.c_str());
                return false;
            }
            flags.models.emplace_back(spec.substr(0, eq), spec.substr(eq + 1));
        } else if (arg == "--dtype") {
            flags.dtype = value();
        } else if (arg == "--threads") {
            flags.threads = std::atoi(value().c_str());
        } else {
            std::fprintf(stderr, "error: unknown flag '%s'\n", arg.c_str());
            return false;
        }
    }
    return true;
}

}  // namespace

int main(int argc, char ** argv) {
    Flags flags;
    if (argc < 2 || !parse_flags(argc, argv, flags)) {
        print_usage();
        return 2;
    }
    tinkerd::engine::EngineOptions options;
    options.n_threads = flags.threads;
    if (flags.dtype == "bf16") {
        options.dtype = tinkerd::engine::ComputeDType::BF16;
    } else if (flags.dtype == "fp32") {
        options.dtype = tinkerd::engine::ComputeDType::FP32;
    } else if (flags.dtype != "auto") {
        std::fprintf(stderr, "error: --dtype must be auto, bf16 or fp32\n");
        return 2;
    }
    for (const auto & [name, dir] : flags.models) {
        LOG_INF("main", "loading model %s from %s", name.c_str(), dir.c_str());
        auto engine = tinkerd::engine::Engine::load(dir, options);
        if (!engine.ok()) {
            LOG_ERR("main", "cannot load %s: %s", name.c_str(), engine.error().message.c_str());
            return 1;
        }
    }
    LOG_WRN("main", "the Tinker HTTP API is not implemented yet (issue 3); models loaded, exiting");
    return 0;
}
