// Options: every value tinkerd's command line sets (design.md §2), with its default. Filled by
// cli::parse_command_line (command_line.h); main.cpp turns it into the modules' own option structs.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "dist/flags.h"

namespace tinkerd::cli {

struct Options {
    bool help = false;                                        // -h / --help: print the usage, run nothing
    std::vector<std::pair<std::string, std::string>> models;  // --model NAME=DIR ("" DIR: ORG/NAME in the HF cache)
    std::string host = "127.0.0.1";
    int port = 8000;
    std::string data_dir;  // "" until parsed: then --data-dir or ~/.local/share/tinkerd
    std::string database;  // "" = DATA_DIR/tinkerd.db, else a postgresql:// URI
    std::string api_keys_file;
    std::string dtype = "auto";       // auto | bf16 | fp32
    std::string matmul = "auto";      // auto | exact | bf16: products with bf16 weights (engine/kernel_choice.h)
    std::string base_quant = "auto";  // auto | gguf | dequant | q8_0 | q4_k: quantised base weights (gguf/convert.h)
    std::string sample_activations = "fp32";  // fp32 | int8: sampling with a quantised base (quant_int8.h)
    std::string device = "cpu";               // a torch device string, checked by the engine
    int threads = 0;                          // 0 = every core (shared out among --dp ranks and replicas)
    int io_threads = 2;
    double session_timeout_seconds = 120;
    double poll_timeout_seconds = 25;
    long long max_body_bytes = 256LL << 20;
    int header_timeout_seconds = 10;
    int body_timeout_seconds = 300;
    long long max_connections = 10000;
    long long kv_cache_mib = 4096;
    long long max_sampler_adapters = 8;
    double seq_gap_timeout_seconds = 330;
    long long disk_reserve_mib = 64;
    double snapshot_ttl_seconds = 3600;
    long long snapshot_disk_mib = 10240;
    long long max_metric_points = 2000;
    long long max_event_streams = 64;
    dist::DistFlags dist;
    dist::ReplicaFlags replicas;
};

}  // namespace tinkerd::cli
