// tinkerd entry point: reads flags (design.md §2), loads the served models (or generates the built-in
// one), opens the data dir, and serves the Tinker API over HTTP until SIGINT/SIGTERM.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <pthread.h>
#include <set>
#include <string>
#include <vector>

#include "api/app.h"
#include "common/log.h"
#include "dist/launch.h"
#include "dist/replica_launch.h"
#include "engine/engine.h"
#include "gguf/convert.h"
#include "http/server.h"
#include "model/builtin_model.h"
#include "model/hf_cache.h"
#include "store/database.h"
#include "tokenizer/stop_strings.h"
#include "tokenizer/tokenizer.h"
#include "usage.h"
#include "wire/forward_backward_codec.h"

namespace {

struct Flags {
    std::vector<std::pair<std::string, std::string>> models;  // NAME=DIR
    std::set<std::string> quantised_gguf;                     // NAMEs loaded from a quantised GGUF
    std::string host = "127.0.0.1";
    int port = 8000;
    std::string data_dir;
    std::string database;
    std::string api_keys_file;
    std::string dtype = "auto";
    std::string device = "cpu";
    int threads = 0;
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
    tinkerd::dist::DistFlags dist;
    tinkerd::dist::ReplicaFlags replicas;
};

bool parse_value(const std::string & flag, const std::string & value, Flags & flags) {
    std::string dist_error;
    if (tinkerd::dist::parse_dist_flag(flag, value, flags.dist, dist_error) ||
        tinkerd::dist::parse_replica_flag(flag, value, flags.replicas, dist_error)) {
        if (!dist_error.empty()) {
            std::fprintf(stderr, "%s\n", dist_error.c_str());
        }
        return dist_error.empty();
    }
    if (flag == "--model") {
        const auto eq = value.find('=');
        if (eq == 0 || (eq != std::string::npos && eq + 1 == value.size())) {
            std::fprintf(stderr, "error: --model expects NAME=DIR or ORG/NAME, got '%s'\n", value.c_str());
            return false;
        }
        flags.models.emplace_back(eq == std::string::npos ? value : value.substr(0, eq),
                                  eq == std::string::npos ? "" : value.substr(eq + 1));
    } else if (flag == "--host") {
        flags.host = value;
    } else if (flag == "--port") {
        flags.port = std::atoi(value.c_str());
    } else if (flag == "--data-dir") {
        flags.data_dir = value;
    } else if (flag == "--database") {
        if (!tinkerd::store::is_postgres_uri(value)) {
            std::fprintf(stderr, "error: --database expects postgresql://USER@HOST:PORT/DB, got '%s'\n", value.c_str());
            return false;
        }
        flags.database = value;
    } else if (flag == "--api-keys") {
        flags.api_keys_file = value;
    } else if (flag == "--dtype") {
        flags.dtype = value;
    } else if (flag == "--device") {
        flags.device = value;
    } else if (flag == "--threads") {
        flags.threads = std::atoi(value.c_str());
    } else if (flag == "--io-threads") {
        flags.io_threads = std::max(1, std::atoi(value.c_str()));
    } else if (flag == "--session-timeout-seconds") {
        flags.session_timeout_seconds = std::atof(value.c_str());
    } else if (flag == "--poll-timeout-seconds") {
        flags.poll_timeout_seconds = std::atof(value.c_str());
    } else if (flag == "--max-body-bytes") {
        flags.max_body_bytes = std::atoll(value.c_str());
    } else if (flag == "--kv-cache-mib") {
        flags.kv_cache_mib = std::atoll(value.c_str());
    } else if (flag == "--max-sampler-adapters") {
        flags.max_sampler_adapters = std::atoll(value.c_str());
    } else if (flag == "--disk-reserve-mib") {
        flags.disk_reserve_mib = std::atoll(value.c_str());
    } else if (flag == "--seq-gap-timeout-seconds") {
        flags.seq_gap_timeout_seconds = std::atof(value.c_str());
    } else if (flag == "--header-timeout-seconds") {
        flags.header_timeout_seconds = std::atoi(value.c_str());
    } else if (flag == "--body-timeout-seconds") {
        flags.body_timeout_seconds = std::atoi(value.c_str());
    } else if (flag == "--max-connections") {
        flags.max_connections = std::atoll(value.c_str());
    } else if (flag == "--snapshot-ttl-seconds") {
        flags.snapshot_ttl_seconds = std::atof(value.c_str());
    } else if (flag == "--snapshot-disk-mib") {
        flags.snapshot_disk_mib = std::atoll(value.c_str());
    } else if (flag == "--max-metric-points") {
        flags.max_metric_points = std::atoll(value.c_str());
    } else {
        std::fprintf(stderr, "error: unknown flag '%s'\n", flag.c_str());
        return false;
    }
    return true;
}

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
        if (!parse_value(arg, argv[++i], flags)) {
            return false;
        }
    }
    if (flags.port < 0 || flags.port > 65535 || flags.session_timeout_seconds <= 0 || flags.poll_timeout_seconds <= 0 ||
        flags.seq_gap_timeout_seconds <= 0 || flags.max_body_bytes < 1024 || flags.kv_cache_mib < 1 ||
        flags.max_sampler_adapters < 1 || flags.header_timeout_seconds < 1 || flags.body_timeout_seconds < 1 ||
        flags.max_connections < 1 || flags.snapshot_ttl_seconds < 0 || flags.snapshot_disk_mib < 0 ||
        flags.disk_reserve_mib < 0 || flags.max_metric_points < 4) {
        std::fprintf(stderr,
                     "error: --port must be 0-65535, timeouts > 0, --max-body-bytes >= 1024, "
                     "--kv-cache-mib, --max-sampler-adapters and --max-connections >= 1, "
                     "--snapshot-ttl-seconds, --snapshot-disk-mib and --disk-reserve-mib >= 0, "
                     "--max-metric-points >= 4\n");
        return false;
    }
    auto dist = tinkerd::dist::finish_dist_flags(flags.dist);
    if (!dist.ok()) {
        std::fprintf(stderr, "error: %s\n", dist.error().message.c_str());
        return false;
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

// Fills in DIR for ORG/NAME models from the HF cache, and the built-in model when none is given.
bool resolve_model_dirs(Flags & flags) {
    if (flags.models.empty()) {
        const std::string dir = flags.data_dir + "/builtin-model";
        LOG_INF("main", "no --model given: using the built-in model in %s", dir.c_str());
        auto status = tinkerd::model::ensure_builtin_model(dir);
        if (!status.ok()) {
            LOG_ERR("main", "cannot create the built-in model: %s", status.error().message.c_str());
            return false;
        }
        flags.models.emplace_back(tinkerd::model::BUILTIN_MODEL_NAME, dir);
    }
    for (auto & [name, dir] : flags.models) {
        if (!dir.empty() && tinkerd::gguf::looks_like_gguf(dir)) {
            auto converted = tinkerd::gguf::ensure_converted(dir, flags.data_dir + "/models");
            if (!converted.ok()) {
                LOG_ERR("main", "cannot load %s from %s: %s", name.c_str(), dir.c_str(),
                        converted.error().message.c_str());
                return false;
            }
            if (converted->quantised) {
                flags.quantised_gguf.insert(name);
            }
            dir = converted->dir;
        }
        if (!dir.empty()) {
            continue;
        }
        auto snapshot = tinkerd::model::resolve_hf_snapshot(tinkerd::model::hf_hub_cache_dir(), name);
        if (!snapshot.ok()) {
            LOG_ERR("main", "%s", snapshot.error().message.c_str());
            return false;
        }
        dir = *snapshot;
    }
    return true;
}

using EngineList = std::vector<std::unique_ptr<tinkerd::engine::Engine>>;
using TokenizerList = std::vector<std::unique_ptr<tinkerd::tokenizer::Tokenizer>>;
using ReplicaEngines = std::vector<std::vector<std::unique_ptr<tinkerd::dist::SamplingReplicaEngine>>>;

// Each model's tokenizer.json when its directory has one (stop strings need it); nullptr otherwise.
TokenizerList load_tokenizers(const Flags & flags) {
    TokenizerList tokenizers;
    for (const auto & [name, dir] : flags.models) {
        auto tok = tinkerd::tokenizer::Tokenizer::load(dir);
        if (tok.ok()) {
            LOG_INF("main", "tokenizer of %s: %lld tokens", name.c_str(), static_cast<long long>((*tok)->vocab_size()));
            tokenizers.push_back(std::move(tok).value());
        } else {
            LOG_INF("main", "no usable tokenizer for %s (%s): stop strings unavailable, token ids work", name.c_str(),
                    tok.error().message.c_str());
            tokenizers.push_back(nullptr);
        }
    }
    return tokenizers;
}

// The bytes of a model directory's *.safetensors files (what loading maps), for the load log line.
double safetensors_bytes(const std::string & dir) {
    std::error_code ec;
    double total = 0;
    for (const auto & entry : std::filesystem::directory_iterator(dir, ec)) {
        if (entry.path().extension() == ".safetensors") {
            total += static_cast<double>(entry.file_size(ec));
        }
    }
    return total;
}

bool load_engines(const Flags & flags, const tinkerd::engine::EngineOptions & options, EngineList & engines) {
    for (const auto & [name, dir] : flags.models) {
        LOG_INF("main", "loading model %s from %s ...", name.c_str(), dir.c_str());
        tinkerd::engine::EngineOptions model_options = options;
        if (flags.quantised_gguf.count(name) && options.dtype == tinkerd::engine::ComputeDType::AUTO) {
            // bf16 rounding is far below a 4- to 8-bit quantisation's error, and bf16 runs twice as fast
            model_options.dtype = tinkerd::engine::ComputeDType::BF16;
        }
        const auto started = std::chrono::steady_clock::now();
        auto engine = tinkerd::engine::Engine::load(dir, model_options);
        if (!engine.ok()) {
            LOG_ERR("main", "cannot load %s: %s", name.c_str(), engine.error().message.c_str());
            return false;
        }
        auto logits = (*engine)->last_logits(tinkerd::engine::BASE_MODEL, {0});
        if (!logits.ok()) {
            LOG_ERR("main", "self-check forward of %s failed: %s", name.c_str(), logits.error().message.c_str());
            return false;
        }
        LOG_INF("main", "loaded %s (%s, %lld layers, vocab %lld, %s weights; %.1f MiB of safetensors) in %.1f s",
                name.c_str(), (*engine)->config().architecture.c_str(),
                static_cast<long long>((*engine)->config().n_layers),
                static_cast<long long>((*engine)->config().vocab_size), (*engine)->compute_dtype_name().c_str(),
                safetensors_bytes(dir) / 1048576.0,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
        engines.push_back(std::move(engine).value());
    }
    return true;
}

// Pins this process to its share of the cores when --dp / --sampling-replicas run several processes here.
void pin_local_process(const Flags & flags) {
    tinkerd::dist::pin_to_slot(tinkerd::dist::local_process_slot(flags.dist, flags.replicas),
                               tinkerd::dist::local_process_count(flags.dist, flags.replicas));
}

// Rank 0: starts the --dp followers and the sampling replicas (before loading: small forks), loads the
// engines, wraps them for data parallelism and joins the replicas' groups.
bool start_processes(int argc, char ** argv, Flags & flags, const tinkerd::engine::EngineOptions & options,
                     EngineList & engines, ReplicaEngines & replicas) {
    if (flags.dist.dp > 1) {
        auto started = tinkerd::dist::start_local_followers(argc, argv, flags.dist);
        if (!started.ok()) {
            LOG_ERR("main", "%s", started.error().message.c_str());
            return false;
        }
    }
    if (flags.replicas.count > 0) {
        auto started = tinkerd::dist::start_sampling_replicas(argc, argv, flags.replicas);
        if (!started.ok()) {
            LOG_ERR("main", "%s", started.error().message.c_str());
            return false;
        }
    }
    pin_local_process(flags);  // after the forks: the others take their own slices
    if (!load_engines(flags, options, engines)) {
        return false;
    }
    if (flags.dist.enabled()) {
        auto wrapped = tinkerd::dist::wrap_engines(engines, flags.dist);
        if (!wrapped.ok()) {
            LOG_ERR("main", "%s", wrapped.error().message.c_str());
            return false;
        }
    }
    if (flags.replicas.count > 0) {
        auto joined = tinkerd::dist::join_sampling_replicas(engines, flags.replicas, flags.dist.timeout_seconds);
        if (!joined.ok()) {
            LOG_ERR("main", "%s", joined.error().message.c_str());
            return false;
        }
        replicas = std::move(joined).value();
        tinkerd::dist::supervise_sampling_replicas(replicas, flags.dist.timeout_seconds);
    }
    return true;
}

// A sampling replica process: its models and tokenizers (stop strings are checked here), then its loops.
int run_sampling_replica(Flags & flags, const tinkerd::engine::EngineOptions & options) {
    pin_local_process(flags);
    EngineList engines;
    if (!resolve_model_dirs(flags) || !load_engines(flags, options, engines)) {
        return 1;
    }
    const TokenizerList tokenizers = load_tokenizers(flags);
    std::vector<tinkerd::dist::StopCheckFactory> stops;
    for (const auto & tok : tokenizers) {
        stops.push_back([tok = tok.get()](const std::vector<std::string> & strings)
                            -> tinkerd::Result<tinkerd::tokenizer::StopCheck> {
            if (tok == nullptr) {
                return tinkerd::invalid_argument("sampling_params.stop: this model has no tokenizer.json");
            }
            return tinkerd::tokenizer::stop_string_matcher(*tok, strings);
        });
    }
    return tinkerd::dist::run_replica_process(engines, stops, flags.replicas, flags.dist.timeout_seconds);
}

// Opens the data dir, starts the API and the HTTP server, and runs until SIGINT/SIGTERM.
int serve(const Flags & flags, const EngineList & engines, const ReplicaEngines & replicas, tinkerd::api::Auth auth,
          sigset_t & signals) {
    const TokenizerList tokenizers = load_tokenizers(flags);
    std::vector<tinkerd::api::ServedModelSpec> served;
    for (size_t i = 0; i < engines.size(); ++i) {
        const auto & [name, dir] = flags.models[i];
        auto chat = tinkerd::chat_template::load_model_chat_template(dir);
        if (chat.chat_template) {
            LOG_INF("main", "chat template of %s loaded", name.c_str());
        } else {
            LOG_INF("main", "%s: /v1/chat/completions unavailable: %s", name.c_str(), chat.missing_reason.c_str());
        }
        served.push_back({name, engines[i].get(), tokenizers[i].get(), std::move(chat), {}});
        for (size_t r = 0; i < replicas.size() && r < replicas[i].size(); ++r) {
            auto * replica = replicas[i][r].get();
            served.back().sampling_replicas.push_back(
                {replica, [replica] { return replica->healthy(); }, [replica] { return replica->failures(); }});
        }
    }
    tinkerd::api::AppOptions app_options;
    app_options.data_dir = flags.data_dir;
    app_options.database = flags.database;
    app_options.session_timeout_seconds = flags.session_timeout_seconds;
    app_options.poll_timeout = std::chrono::milliseconds(static_cast<long long>(flags.poll_timeout_seconds * 1000));
    app_options.max_cached_sampler_adapters = static_cast<size_t>(flags.max_sampler_adapters);
    app_options.disk_reserve_bytes = static_cast<uint64_t>(flags.disk_reserve_mib) << 20;
    app_options.seq_gap_timeout =
        std::chrono::milliseconds(static_cast<long long>(flags.seq_gap_timeout_seconds * 1000));
    app_options.snapshot_ttl_seconds = flags.snapshot_ttl_seconds;
    app_options.snapshot_disk_bytes = static_cast<int64_t>(flags.snapshot_disk_mib) << 20;
    app_options.max_metric_points = static_cast<int64_t>(flags.max_metric_points);
    auto app = tinkerd::api::App::create(app_options, std::move(auth), served);
    if (!app.ok()) {
        LOG_ERR("main", "cannot open data dir %s: %s", flags.data_dir.c_str(), app.error().message.c_str());
        return 1;
    }
    (*app)->start();
    tinkerd::http::ServerOptions server_options;
    server_options.host = flags.host;
    server_options.port = flags.port;
    server_options.io_threads = flags.io_threads;
    server_options.max_body_bytes = static_cast<size_t>(flags.max_body_bytes);
    server_options.header_timeout_seconds = flags.header_timeout_seconds;
    server_options.body_timeout_seconds = flags.body_timeout_seconds;
    server_options.max_connections = static_cast<size_t>(flags.max_connections);
    tinkerd::api::App * app_ptr = app->get();
    server_options.on_refused_body = [app_ptr](const tinkerd::http::Request & request) {
        return app_ptr->refused_body(request);  // a 413'd training op releases its seq_id
    };
    tinkerd::http::Server server(server_options,
                                 [app_ptr](tinkerd::http::Request && request, tinkerd::http::Respond respond) {
                                     app_ptr->handle(std::move(request), std::move(respond));
                                 });
    auto started = server.start();
    if (!started.ok()) {
        LOG_ERR("main", "cannot listen on %s:%d: %s", flags.host.c_str(), flags.port, started.error().message.c_str());
        return 1;
    }
    LOG_INF("main", "tinkerd listening on http://%s:%d (data dir %s)", flags.host.c_str(), server.port(),
            flags.data_dir.c_str());
    LOG_INF("main", "point the SDK at it: export TINKER_BASE_URL=http://%s:%d TINKER_API_KEY=tml-%s",
            flags.host.c_str(), server.port(), flags.api_keys_file.empty() ? "anything" : "<your key>");
    int received = 0;
    sigwait(&signals, &received);
    LOG_INF("main", "signal %d: shutting down", received);
    server.stop();
    (*app)->stop();
    return 0;
}

}  // namespace

int main(int argc, char ** argv) {
    Flags flags;
    if (!parse_flags(argc, argv, flags)) {
        std::fputs(tinkerd::USAGE, stderr);
        return 2;
    }
    tinkerd::engine::EngineOptions engine_options;
    engine_options.n_threads = tinkerd::dist::threads_per_process(
        flags.threads, tinkerd::dist::local_process_count(flags.dist, flags.replicas));
    engine_options.device = flags.device;
    engine_options.kv_cache_bytes = static_cast<int64_t>(flags.kv_cache_mib) << 20;
    engine_options.device_slot = tinkerd::dist::local_process_slot(flags.dist, flags.replicas);
    if (!parse_dtype(flags.dtype, engine_options.dtype)) {
        std::fprintf(stderr, "error: --dtype must be auto, bf16 or fp32, got '%s'\n", flags.dtype.c_str());
        return 2;
    }
    if (flags.data_dir.empty()) {
        const char * home = std::getenv("HOME");
        flags.data_dir = std::string(home ? home : ".") + "/.local/share/tinkerd";
    }
    tinkerd::wire::route_protobuf_logs_to_debug();
    if (flags.replicas.replica()) {  // a sampling replica started by rank 0: no HTTP, no database
        return run_sampling_replica(flags, engine_options);
    }
    if (flags.dist.follower()) {  // a rank > 0 of a data-parallel group: no HTTP, no database
        pin_local_process(flags);
        EngineList engines;
        if (!resolve_model_dirs(flags) || !load_engines(flags, engine_options, engines)) {
            return 1;
        }
        return tinkerd::dist::run_follower_process(engines, flags.dist);
    }
    tinkerd::api::Auth auth;
    if (!flags.api_keys_file.empty()) {
        auto loaded = tinkerd::api::Auth::from_file(flags.api_keys_file);
        if (!loaded.ok()) {
            LOG_ERR("main", "%s", loaded.error().message.c_str());
            return 2;
        }
        auth = std::move(loaded).value();
        LOG_INF("main", "%zu API key(s) from %s", auth.key_count(), flags.api_keys_file.c_str());
    }
    // Every thread started from here on inherits the blocked signals; serve() waits for them.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    EngineList engines;
    if (!resolve_model_dirs(flags)) {
        return 1;
    }
    ReplicaEngines replicas;
    if (!start_processes(argc, argv, flags, engine_options, engines, replicas)) {
        tinkerd::dist::reap_local_followers();  // no-ops without --dp / --sampling-replicas
        tinkerd::dist::reap_sampling_replicas();
        return 1;
    }
    const int code = serve(flags, engines, replicas, std::move(auth), signals);
    tinkerd::dist::stop_supervising_sampling_replicas();
    replicas.clear();  // tells the replicas to stop
    engines.clear();   // tells the followers to stop
    tinkerd::dist::reap_local_followers();
    tinkerd::dist::reap_sampling_replicas();
    return code;
}
