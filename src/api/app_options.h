// AppOptions (the server's flags as the api sees them) and ServedModelSpec (a base model to serve), the
// inputs of App::create; shared by the parts App wires together.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "chat_template/model_template.h"
#include "engine/engine.h"
#include "engine/kernel_choice.h"
#include "tokenizer/tokenizer.h"
#include "vision/preprocess.h"

namespace tinkerd::api {

struct AppOptions {
    std::string data_dir;
    std::string database;  // --database: "" = DATA_DIR/tinkerd.db (SQLite), or a postgresql:// URI
    std::chrono::milliseconds poll_timeout{25000};  // a retrieve_future poll is held this long at most
    double session_timeout_seconds = 120;           // sessions without a heartbeat for this long expire
    double sweep_interval_seconds = 1.0;
    size_t max_decompressed_bytes = 512u << 20;  // cap on a zstd forward_backward body once decompressed
    int64_t max_queued_samples = 256;            // more queued asample requests get 429 (SDK backpressure)
    size_t max_cached_sampler_adapters = 8;      // per base model: samplers whose weights stay loaded
    double archive_url_ttl_seconds = 900;
    std::chrono::milliseconds seq_gap_timeout{330000};  // a run's missing seq_id is given up after this long
    uint64_t disk_reserve_bytes = 64u << 20;            // --disk-reserve-mib: freed for SQLite when the disk fills
    double snapshot_ttl_seconds = 3600;                 // unnamed sampler snapshots outlive their session this long
    int64_t snapshot_disk_bytes = 10240LL << 20;        // budget of DATA_DIR/snapshots (--snapshot-disk-mib)
    int64_t max_metric_points = 2000;                   // per run and op, before old points are thinned
    size_t max_event_streams = 64;                      // --max-event-streams: open push streams (GET …/events)
    std::chrono::milliseconds event_tick{2000};         // each push stream re-reads its run at least this often
    std::chrono::milliseconds event_heartbeat{15000};   // a keepalive comment after this long without an event
    engine::KernelChoice kernels;                       // --matmul's choice (main sets it), reported by server_status
};

// A base model served under a name; the engine is owned by the caller and outlives the App.
struct ServedModelSpec {
    std::string name;
    engine::Engine * engine = nullptr;
    const tokenizer::Tokenizer * tokenizer = nullptr;  // none when the model directory has no tokenizer.json
    chat_template::ModelChatTemplate chat;             // for /v1/chat/completions
    // Image preprocessing of a vision-language model (src/vision); null: image chunks are refused.
    std::shared_ptr<const vision::ProcessorConfig> vision;
    // Sampling replicas of this model (--sampling-replicas): engines that only sample, each driven by its
    // own worker; `healthy` turns false when the replica is gone. Owned by the caller too.
    struct Replica {
        engine::Engine * engine = nullptr;
        std::function<bool()> healthy;
        std::function<int64_t()> failures;  // calls that failed to reach it since start
    };
    std::vector<Replica> sampling_replicas;
    // Its engine computes on this machine's CPU: several such models take turns on one compute thread (one
    // OpenMP pool; scheduler/compute_thread.h). GPU models keep a thread each.
    bool on_cpu = true;
};

}  // namespace tinkerd::api
