// tinkerd entry point: start-up orchestration. The command line is read by src/cli (command_line.h); then
// the served models are found (HF cache, GGUF conversion, the built-in model), loaded and checked with one
// forward pass each, the --dp followers and sampling replicas are started, and the Tinker API is served over
// HTTP until SIGINT/SIGTERM.
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <pthread.h>
#include <set>
#include <string>
#include <vector>

#include "api/app.h"
#include "cli/command_line.h"
#include "cli/usage.h"
#include "common/log.h"
#include "common/short_lived_thread.h"
#include "dist/launch.h"
#include "dist/replica_launch.h"
#include "engine/engine.h"
#include "engine/kernel_choice.h"
#include "gguf/convert.h"
#include "http/server.h"
#include "model/builtin_model.h"
#include "model/hf_cache.h"
#include "model/memory_check.h"
#include "tokenizer/stop_strings.h"
#include "tokenizer/tokenizer.h"
#include "vision/preprocess.h"
#include "wire/forward_backward_codec.h"

namespace {

using Flags = tinkerd::cli::Options;
using Quantised = std::set<std::string>;  // names of the models loaded from a quantised GGUF

// --dtype's word (the command line accepts only these three) as the engine's enum.
tinkerd::engine::ComputeDType compute_dtype(const std::string & name) {
    using tinkerd::engine::ComputeDType;
    return name == "bf16" ? ComputeDType::BF16 : name == "fp32" ? ComputeDType::FP32 : ComputeDType::AUTO;
}

// Fills in DIR for ORG/NAME models from the HF cache, converts GGUF files, and adds the built-in model
// when none is given; the models that came from a quantised GGUF, or nothing after a logged error.
std::optional<Quantised> resolve_model_dirs(Flags & flags) {
    Quantised quantised;
    if (flags.models.empty()) {
        const std::string dir = flags.data_dir + "/builtin-model";
        LOG_INF("main", "no --model given: using the built-in model in %s", dir.c_str());
        auto status = tinkerd::model::ensure_builtin_model(dir);
        if (!status.ok()) {
            LOG_ERR("main", "cannot create the built-in model: %s", status.error().message.c_str());
            return std::nullopt;
        }
        flags.models.emplace_back(tinkerd::model::BUILTIN_MODEL_NAME, dir);
    }
    for (auto & [name, dir] : flags.models) {
        if (!dir.empty() && tinkerd::gguf::looks_like_gguf(dir)) {
            tinkerd::gguf::BaseQuant mode = tinkerd::gguf::BaseQuant::DEQUANT;  // q8_0: dequantised, then requantised
            tinkerd::gguf::parse_base_quant(flags.base_quant, mode);
            auto converted = tinkerd::gguf::ensure_converted(dir, flags.data_dir + "/models", mode);
            if (!converted.ok()) {
                LOG_ERR("main", "cannot load %s from %s: %s", name.c_str(), dir.c_str(),
                        converted.error().message.c_str());
                return std::nullopt;
            }
            if (converted->quantised && !converted->kept_quantised) {
                quantised.insert(name);
            }
            dir = converted->dir;
        }
        if (!dir.empty()) {
            continue;
        }
        auto snapshot = tinkerd::model::resolve_hf_snapshot(tinkerd::model::hf_hub_cache_dir(), name);
        if (!snapshot.ok()) {
            LOG_ERR("main", "%s", snapshot.error().message.c_str());
            return std::nullopt;
        }
        dir = *snapshot;
    }
    return quantised;
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

// The start-up check of one loaded model: one forward pass of one token (id 0) through the base model on the
// chosen device, read back to the host, must give `vocab` finite logits. Loading maps the weights and
// checks their names and shapes but runs nothing; this runs every kernel the model's forward needs on this
// device and dtype, so that a model that cannot run here (a CUDA binary without kernels for this GPU, a
// dtype the device lacks, too little device memory, an architecture variant whose forward fails, damaged
// weights giving NaN) stops the start naming the model, instead of failing every client's first request
// after "listening" — or, in a --dp follower or a sampling replica, instead of a restart loop. It costs
// one token's forward pass, small next to the load.
bool check_model_runs(const std::string & name, tinkerd::engine::Engine & engine, const Flags & flags) {
    const std::string device = flags.device;
    const std::string hint = device == "cpu"
                                 ? "the model loaded but cannot run: its files may be damaged, or it uses a variant "
                                   "of its architecture tinkerd does not support (--dtype fp32 rules out bf16)"
                                 : "the model loaded but cannot run on " + device +
                                       ": try --device cpu to tell a device problem from a model problem";
    LOG_INF("main", "start-up check of %s: one token's forward pass on %s must give finite logits", name.c_str(),
            device.c_str());
    const auto started = std::chrono::steady_clock::now();
    std::string failure;
    try {
        auto logits = engine.last_logits(tinkerd::engine::BASE_MODEL, {0});
        const auto vocab = static_cast<size_t>(engine.config().vocab_size);
        if (!logits.ok()) {
            failure = "failed: " + logits.error().message;
        } else if (logits->size() != vocab) {
            failure = "gave " + std::to_string(logits->size()) + " logits for a vocabulary of " + std::to_string(vocab);
        } else if (!std::all_of(logits->begin(), logits->end(), [](float x) { return std::isfinite(x); })) {
            failure = "gave NaN or infinite logits";
        }
    } catch (const std::exception & e) {
        failure = std::string("threw: ") + e.what();
    }
    if (!failure.empty()) {
        LOG_ERR("main", "start-up check of %s failed: its forward pass on %s %s; %s", name.c_str(), device.c_str(),
                failure.c_str(), hint.c_str());
        return false;
    }
    LOG_INF("main", "start-up check of %s passed (%.0f ms)", name.c_str(),
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count());
    return true;
}

// Engine::load with a torch exception (a device error while moving weights) turned into a logged error.
std::unique_ptr<tinkerd::engine::Engine> load_engine(const std::string & name, const std::string & dir,
                                                     const tinkerd::engine::EngineOptions & options) {
    try {
        auto engine = tinkerd::engine::Engine::load(dir, options);
        if (engine.ok()) {
            return std::move(engine).value();
        }
        LOG_ERR("main", "cannot load %s: %s", name.c_str(), engine.error().message.c_str());
    } catch (const std::exception & e) {
        LOG_ERR("main", "cannot load %s: %s", name.c_str(), e.what());
    }
    return nullptr;
}

// Loads and checks every model (in this process: rank 0, a --dp follower or a sampling replica).
bool load_engines(const Flags & flags, const Quantised & quantised, const tinkerd::engine::EngineOptions & options,
                  EngineList & engines) {
    for (const auto & [name, dir] : flags.models) {
        LOG_INF("main", "loading model %s from %s ...", name.c_str(), dir.c_str());
        tinkerd::engine::EngineOptions model_options = options;
        if (quantised.count(name) && options.dtype == tinkerd::engine::ComputeDType::AUTO) {
            // bf16 rounding is far below a 4- to 8-bit quantisation's error, and bf16 runs twice as fast
            model_options.dtype = tinkerd::engine::ComputeDType::BF16;
        }
        // bytes per stored weight: 2 in bf16, 4 in fp32, as stored for AUTO (quantised blocks always as stored)
        const size_t element_bytes = model_options.dtype == tinkerd::engine::ComputeDType::BF16   ? 2
                                     : model_options.dtype == tinkerd::engine::ComputeDType::FP32 ? 4
                                                                                                  : 0;
        if (auto fits = tinkerd::model::check_model_fits(name, dir, element_bytes); !fits.ok()) {
            LOG_ERR("main", "cannot load %s: %s", name.c_str(), fits.error().message.c_str());
            return false;
        }
        const auto started = std::chrono::steady_clock::now();
        auto engine = load_engine(name, dir, model_options);
        if (!engine) {
            return false;
        }
        LOG_INF("main", "loaded %s (%s, %lld layers, vocab %lld, %s weights; %.1f MiB of safetensors) in %.1f s",
                name.c_str(), engine->config().architecture.c_str(), static_cast<long long>(engine->config().n_layers),
                static_cast<long long>(engine->config().vocab_size), engine->compute_dtype_name().c_str(),
                safetensors_bytes(dir) / 1048576.0,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
        if (!check_model_runs(name, *engine, flags)) {
            return false;
        }
        engines.push_back(std::move(engine));
    }
    return true;
}

// --matmul: how the CPU multiplies by bf16 weights, chosen on the first model's shapes (kernel_choice.h).
// Rank 0 chooses before starting the other processes, so that they find its timings in the cache.
void choose_matmul(const Flags & flags, const tinkerd::engine::EngineOptions & options) {
    if (flags.device != "cpu") {
        return;  // GPUs multiply in bf16 anyway
    }
    auto config = tinkerd::model::load_model_config(flags.models.front().second);
    if (!config.ok()) {
        return;  // a model that cannot be read fails its load with the reason
    }
    const auto mode = tinkerd::engine::parse_matmul_mode(flags.matmul).value_or(tinkerd::engine::MatmulMode::AUTO);
    const auto choice = tinkerd::engine::choose_kernels(mode, tinkerd::engine::matmul_shapes_of(*config),
                                                        options.n_threads, flags.data_dir + "/kernel-choice.json");
    LOG_INF("main", "%s", choice.summary().c_str());
}

// Pins this process to its share of the cores when --dp / --sampling-replicas run several processes here.
void pin_local_process(const Flags & flags) {
    tinkerd::dist::pin_to_slot(tinkerd::dist::local_process_slot(flags.dist, flags.replicas),
                               tinkerd::dist::local_process_count(flags.dist, flags.replicas));
}

// A process rank 0 started (a --dp follower, a sampling replica): its share of the cores, then its models.
bool load_helper_models(Flags & flags, const tinkerd::engine::EngineOptions & options, EngineList & engines) {
    pin_local_process(flags);  // before the loading thread starts: it inherits the affinity
    bool loaded = false;
    tinkerd::run_on_short_lived_thread([&] {
        const auto quantised = resolve_model_dirs(flags);
        if (quantised) {
            choose_matmul(flags, options);
        }
        loaded = quantised && load_engines(flags, *quantised, options, engines);
    });
    return loaded;
}

// Rank 0: starts the --dp followers and the sampling replicas (before loading: small forks), loads the
// engines, wraps them for data parallelism, joins the replicas' groups and lets the supervisor restart them.
bool start_processes(int argc, char ** argv, Flags & flags, const Quantised & quantised,
                     const tinkerd::engine::EngineOptions & options, EngineList & engines, ReplicaEngines & replicas) {
    auto started =
        flags.dist.dp > 1 ? tinkerd::dist::start_local_followers(argc, argv, flags.dist) : tinkerd::Result<void>();
    if (started.ok() && flags.replicas.count > 0) {
        started = tinkerd::dist::start_sampling_replicas(argc, argv, flags.replicas);
    }
    if (!started.ok()) {
        LOG_ERR("main", "%s", started.error().message.c_str());
        return false;
    }
    pin_local_process(flags);  // after the forks: the others take their own slices
    bool loaded = false;
    tinkerd::run_on_short_lived_thread([&] { loaded = load_engines(flags, quantised, options, engines); });
    if (!loaded) {
        return false;
    }
    auto wrapped = flags.dist.enabled() ? tinkerd::dist::wrap_engines(engines, flags.dist) : tinkerd::Result<void>();
    if (!wrapped.ok()) {
        LOG_ERR("main", "%s", wrapped.error().message.c_str());
        return false;
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
    EngineList engines;
    if (!load_helper_models(flags, options, engines)) {
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

// The image processor of a model whose engine loaded a vision tower (image chunks are prepared with it);
// null when its processor settings are unusable (logged: image chunks are then refused).
std::shared_ptr<const tinkerd::vision::ProcessorConfig> vision_processor(const std::string & name,
                                                                         const std::string & dir) {
    auto vision = tinkerd::vision::load_processor_config(dir);
    if (!vision.ok()) {
        LOG_WRN("main", "%s: image chunks refused: %s", name.c_str(), vision.error().message.c_str());
        return nullptr;
    }
    if (*vision) {
        LOG_INF("main", "%s: image chunks accepted (patch %lld, merge %lld, %lld..%lld pixels)", name.c_str(),
                static_cast<long long>((*vision)->patch_size), static_cast<long long>((*vision)->merge_size),
                static_cast<long long>((*vision)->min_pixels), static_cast<long long>((*vision)->max_pixels));
    }
    return *vision;
}

// The served models as the api sees them: engine, tokenizer, chat template, sampling replicas.
std::vector<tinkerd::api::ServedModelSpec> served_models(const Flags & flags, const EngineList & engines,
                                                         const TokenizerList & tokenizers,
                                                         const ReplicaEngines & replicas) {
    std::vector<tinkerd::api::ServedModelSpec> served;
    for (size_t i = 0; i < engines.size(); ++i) {
        const auto & [name, dir] = flags.models[i];
        auto chat = tinkerd::chat_template::load_model_chat_template(dir);
        if (chat.chat_template) {
            LOG_INF("main", "chat template of %s loaded", name.c_str());
        } else {
            LOG_INF("main", "%s: /v1/chat/completions unavailable: %s", name.c_str(), chat.missing_reason.c_str());
        }
        auto vision = engines[i]->config().has_vision() ? vision_processor(name, dir) : nullptr;
        served.push_back({name,
                          engines[i].get(),
                          tokenizers[i].get(),
                          std::move(chat),
                          std::move(vision),
                          {},
                          flags.device == "cpu"});
        for (size_t r = 0; i < replicas.size() && r < replicas[i].size(); ++r) {
            auto * replica = replicas[i][r].get();
            served.back().sampling_replicas.push_back(
                {replica, [replica] { return replica->healthy(); }, [replica] { return replica->failures(); }});
        }
    }
    return served;
}

tinkerd::api::AppOptions app_options(const Flags & flags) {
    tinkerd::api::AppOptions o;
    o.data_dir = flags.data_dir;
    o.kernels = tinkerd::engine::current_kernel_choice();
    o.database = flags.database;
    o.session_timeout_seconds = flags.session_timeout_seconds;
    o.poll_timeout = std::chrono::milliseconds(static_cast<long long>(flags.poll_timeout_seconds * 1000));
    o.max_cached_sampler_adapters = static_cast<size_t>(flags.max_sampler_adapters);
    o.disk_reserve_bytes = static_cast<uint64_t>(flags.disk_reserve_mib) << 20;
    o.seq_gap_timeout = std::chrono::milliseconds(static_cast<long long>(flags.seq_gap_timeout_seconds * 1000));
    o.snapshot_ttl_seconds = flags.snapshot_ttl_seconds;
    o.snapshot_disk_bytes = static_cast<int64_t>(flags.snapshot_disk_mib) << 20;
    o.max_metric_points = static_cast<int64_t>(flags.max_metric_points);
    o.max_event_streams = static_cast<size_t>(flags.max_event_streams);
    return o;
}

tinkerd::http::ServerOptions server_options(const Flags & flags) {
    tinkerd::http::ServerOptions o;
    o.host = flags.host;
    o.port = flags.port;
    o.io_threads = flags.io_threads;
    o.max_body_bytes = static_cast<size_t>(flags.max_body_bytes);
    o.header_timeout_seconds = flags.header_timeout_seconds;
    o.body_timeout_seconds = flags.body_timeout_seconds;
    o.max_connections = static_cast<size_t>(flags.max_connections);
    return o;
}

// Opens the data dir, starts the API and the HTTP server, and runs until SIGINT/SIGTERM.
int serve(const Flags & flags, const EngineList & engines, const ReplicaEngines & replicas, tinkerd::api::Auth auth,
          sigset_t & signals) {
    const TokenizerList tokenizers = load_tokenizers(flags);
    auto app = tinkerd::api::App::create(app_options(flags), std::move(auth),
                                         served_models(flags, engines, tokenizers, replicas));
    if (!app.ok()) {
        LOG_ERR("main", "cannot open data dir %s: %s", flags.data_dir.c_str(), app.error().message.c_str());
        return 1;
    }
    (*app)->start();
    tinkerd::api::App * app_ptr = app->get();
    tinkerd::http::ServerOptions http_options = server_options(flags);
    http_options.on_refused_body = [app_ptr](const tinkerd::http::Request & request) {
        return app_ptr->refused_body(request);  // a 413'd training op releases its seq_id
    };
    tinkerd::http::Server server(http_options,
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

tinkerd::engine::EngineOptions engine_options(const Flags & flags) {
    tinkerd::engine::EngineOptions o;
    o.n_threads = tinkerd::dist::threads_per_process(flags.threads,
                                                     tinkerd::dist::local_process_count(flags.dist, flags.replicas));
    o.device = flags.device;
    o.kv_cache_bytes = static_cast<int64_t>(flags.kv_cache_mib) << 20;
    o.device_slot = tinkerd::dist::local_process_slot(flags.dist, flags.replicas);
    o.dtype = compute_dtype(flags.dtype);
    o.quantise_at_load = flags.base_quant == "q8_0"   ? tinkerd::engine::LoadQuant::Q8_0
                         : flags.base_quant == "q4_k" ? tinkerd::engine::LoadQuant::Q4_K
                                                      : tinkerd::engine::LoadQuant::NONE;
    o.sample_int8_activations = flags.sample_activations == "int8";
    return o;
}

// Rank 0 (the process that serves HTTP): API keys, models, the processes it starts, then serve().
int run_rank0(int argc, char ** argv, Flags & flags) {
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
    std::optional<Quantised> quantised;
    tinkerd::run_on_short_lived_thread([&] {
        quantised = resolve_model_dirs(flags);
        if (quantised) {
            choose_matmul(flags, engine_options(flags));
        }
    });
    if (!quantised) {
        return 1;
    }
    EngineList engines;
    ReplicaEngines replicas;
    int code = 1;
    if (start_processes(argc, argv, flags, *quantised, engine_options(flags), engines, replicas)) {
        code = serve(flags, engines, replicas, std::move(auth), signals);
    }
    tinkerd::dist::stop_supervising_sampling_replicas();  // no restarts from here (no-ops without replicas)
    replicas.clear();                                     // tells the replicas to stop
    engines.clear();                                      // tells the followers to stop
    tinkerd::dist::reap_local_followers();
    tinkerd::dist::reap_sampling_replicas();
    return code;
}

}  // namespace

int main(int argc, char ** argv) {
    // A peer that dies in the middle of a write (a sampling replica, a --dp follower, an HTTP client) must fail that
    // write with EPIPE, not end this process with SIGPIPE.
    std::signal(SIGPIPE, SIG_IGN);
    auto parsed = tinkerd::cli::parse_command_line(argc, argv);
    if (!parsed.ok()) {
        std::fprintf(stderr, "error: %s\n`tinkerd --help` lists every flag\n", parsed.error().message.c_str());
        return 2;
    }
    Flags & flags = *parsed;
    if (flags.help) {
        std::fputs(tinkerd::cli::USAGE, stdout);
        return 0;
    }
    tinkerd::wire::route_protobuf_logs_to_debug();
    if (flags.replicas.replica()) {  // a sampling replica started by rank 0: no HTTP, no database
        return run_sampling_replica(flags, engine_options(flags));
    }
    if (flags.dist.follower()) {  // a rank > 0 of a data-parallel group: no HTTP, no database
        EngineList engines;
        if (!load_helper_models(flags, engine_options(flags), engines)) {
            return 1;
        }
        return tinkerd::dist::run_follower_process(engines, flags.dist);
    }
    return run_rank0(argc, argv, flags);
}
