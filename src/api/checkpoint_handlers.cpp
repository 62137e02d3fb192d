// Handlers for weights: save_weights (adapter + Adam state), save_weights_for_sampler (a named PEFT
// adapter, or an unnamed snapshot: snapshots.cpp), load_weights (into a live model, or creating one),
// weights_info, and the sampling-session metadata. File writes run on the engine thread, in seq_id order.
#include <chrono>
#include <cstring>

#include "api/event_streams.h"
#include "api/tinker_routes.h"
#include "common/heap_release.h"
#include "common/log.h"

namespace tinkerd::api {

namespace {

std::optional<double> expiry_from_ttl(const std::optional<int64_t> & ttl_seconds, double now) {
    if (!ttl_seconds) {
        return std::nullopt;
    }
    return now + static_cast<double>(*ttl_seconds);
}

// SDK 0.38's kind: "snapshot" (the default: frozen weights) or "inflight" (a sampling client that follows the
// run's latest weights: only unnamed, as the SDK sends it). Returns whether it is inflight.
Result<bool> parse_sampler_kind(const json & body) {
    auto kind = get_optional_string(body, "kind");
    if (!kind.ok()) {
        return kind.error();
    }
    const std::string value = kind->value_or("snapshot");
    if (value != "snapshot" && value != "inflight") {
        return invalid_argument("kind: expected 'snapshot' or 'inflight', got '" + value + "'");
    }
    if (value == "inflight" && body.contains("path") && !body["path"].is_null()) {
        return invalid_argument("kind 'inflight' is a live sampling client, not a checkpoint: send it without path");
    }
    return value == "inflight";
}

}  // namespace

// On the engine thread: writes the checkpoint files, records the row, completes the future with its path.
void TinkerRoutes::store_checkpoint(const RunState & run, const CheckpointSave & save, const std::string & request_id,
                                    const store::Tensors & tensors) {
    const TinkerPath & path = save.path;
    store::CheckpointRow row;
    row.run_id = run.row.run_id;
    row.checkpoint_id = path.checkpoint_id();
    row.checkpoint_type = path.kind == "weights" ? "training" : "sampler";
    row.tenant = save.tenant;
    row.dir = store::checkpoint_dir(options_.data_dir, row.run_id, path.kind, path.name);
    row.created_at = now_seconds();
    row.expires_at = expiry_from_ttl(save.ttl_seconds, row.created_at);
    row.user_metadata_json = save.user_metadata.dump();  // an overwrite replaces the whole mapping, as documented
    auto existing = db_->get_checkpoint(row.run_id, row.checkpoint_id);
    if (!save.overwrite && existing.ok() && existing->has_value()) {
        fail_future(request_id,
                    invalid_argument("checkpoint " + path.str() + " already exists (save with overwrite=true)"));
        return;
    }
    if (auto room = check_disk_room(); !room.ok()) {
        fail_future(request_id, room.error());
        return;
    }
    // A directory without a row is what a crash between writing and recording leaves: replace it.
    const auto started = std::chrono::steady_clock::now();
    auto size = store::write_checkpoint(row.dir, adapter_config(run), tensors, true);
    if (!size.ok()) {
        fail_future(request_id, size.error());
        return;
    }
    row.size_bytes = *size;
    auto stored = db_->upsert_checkpoint(row);
    if (!stored.ok()) {
        fail_future(request_id, stored.error());
        return;
    }
    release_free_heap();  // the serialised copies of a large adapter were just freed
    LOG_INF("api", "checkpoint %s written (%.1f MiB, %.1f ms)", path.str().c_str(), *size / 1048576.0,
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count());
    futures_->complete(request_id, json{{"path", path.str()}, {"type", save.result_type}}.dump());
    events_->wake({path.run_id});  // a push stream on the run sends its new checkpoint list (never blocks)
}

Result<json> TinkerRoutes::save_weights(Call & call) {
    auto target = ordered_target(call);
    if (!target.ok()) {
        return target.error();
    }
    const RunPtr run = target->run;
    const int64_t seq_id = target->seq_id;
    auto name = get_string(call.body, "path");
    auto ttl = get_optional_int(call.body, "ttl_seconds");
    auto overwrite = get_bool(call.body, "overwrite", false);
    Result<void> name_ok = name.ok() ? validate_checkpoint_name(*name) : Result<void>(name.error());
    auto metadata = get_string_map(call.body, "user_metadata");
    if (const Error * e = first_error(name_ok, ttl, overwrite, metadata)) {
        skip_seq(run, seq_id);
        return *e;
    }
    if (ttl->has_value() && **ttl <= 0) {
        skip_seq(run, seq_id);
        return invalid_argument("ttl_seconds must be > 0");
    }
    CheckpointSave save{
        TinkerPath{run->row.run_id, "weights", *name}, *ttl, *overwrite, *metadata, call.tenant, "save_weights"};
    return submit_ordered(call, run, seq_id, "SaveWeights", [this, run, save](const std::string & id) {
        scheduler::Op op;
        op.run = [this, run, save, id](engine::Engine & engine) {
            auto tensors = engine.export_adapter(run->adapter.load(), true);
            if (!tensors.ok()) {
                fail_future(id, tensors.error());
                return;
            }
            store_checkpoint(*run, save, id, *tensors);
        };
        return op;
    });
}

// Named: a PEFT adapter directory and a sampler checkpoint row. Unnamed: a frozen snapshot, registered as
// sampler "<session>:sample:<sampling_session_seq_id>", kept on disk while its session lives (snapshots.cpp).
Result<json> TinkerRoutes::save_weights_for_sampler(Call & call) {
    auto target = ordered_target(call);
    if (!target.ok()) {
        return target.error();
    }
    const RunPtr run = target->run;
    const int64_t seq_id = target->seq_id;
    auto name = get_optional_string(call.body, "path");
    auto sampler_seq = get_optional_int(call.body, "sampling_session_seq_id");
    auto ttl = get_optional_int(call.body, "ttl_seconds");
    auto inflight = parse_sampler_kind(call.body);
    auto metadata = get_string_map(call.body, "user_metadata");
    Result<void> destination =
        Result<void>(invalid_argument("save_weights_for_sampler needs path (a name) or "
                                      "sampling_session_seq_id"));
    if (name.ok() && name->has_value()) {
        destination = validate_checkpoint_name(**name);
    } else if (metadata.ok() && !metadata->empty()) {
        destination = Result<void>(invalid_argument(
            "user_metadata needs a named checkpoint (path): an unnamed sampler snapshot has nowhere to keep it"));
    } else if (sampler_seq.ok() && sampler_seq->has_value()) {
        destination = Result<void>();
    }
    if (const Error * e = first_error(name, sampler_seq, ttl, inflight, metadata, destination)) {
        skip_seq(run, seq_id);
        return *e;
    }
    if (*inflight) {
        return register_inflight_sampler(call, run, seq_id, sampler_seq->value_or(0));
    }
    const std::string tenant = call.tenant;
    const std::optional<std::string> checkpoint_name = *name;
    const std::string sampler_id = run->row.session_id + ":sample:" + std::to_string(sampler_seq->value_or(0));
    const CheckpointSave save{TinkerPath{run->row.run_id, "sampler_weights", checkpoint_name.value_or("")},
                              *ttl,
                              true,
                              *metadata,
                              tenant,
                              "save_weights_for_sampler"};
    return submit_ordered(call, run, seq_id, "SaveWeightsForSampler", [=, this](const std::string & id) {
        scheduler::Op op;
        op.run = [=, this](engine::Engine & engine) {
            auto tensors = engine.export_adapter(run->adapter.load(), false);
            if (!tensors.ok()) {
                fail_future(id, tensors.error());
                return;
            }
            if (!checkpoint_name) {  // the writer thread writes it, records it and completes the future
                SnapshotWrite write;
                write.snapshot = std::make_shared<SamplerSnapshot>();
                write.snapshot->base_model = run->row.base_model;
                write.snapshot->spec = run->spec;
                write.snapshot->tensors = std::move(tensors).value();
                write.snapshot->run_id = run->row.run_id;
                write.row.sampler_id = sampler_id;
                write.row.tenant = tenant;
                write.row.session_id = run->row.session_id;
                write.row.base_model = run->row.base_model;
                write.row.run_id = run->row.run_id;
                write.row.created_at = now_seconds();
                write.row.dir = snapshot_dir(sampler_id);
                write.config = adapter_config(*run);
                write.request_id = id;
                auto queued = queue_snapshot(std::move(write));
                if (!queued.ok()) {
                    fail_future(id, queued.error());
                }
                return;
            }
            store_checkpoint(*run, save, id, *tensors);
        };
        return op;
    });
}

// kind "inflight": sampler "<session>:sample:<n>" samples from the run's live adapter, so each sample sees the
// weights of the last operation before it ran. Registered in seq_id order like any save; no files.
Result<json> TinkerRoutes::register_inflight_sampler(Call & call, const RunPtr & run, int64_t seq_id,
                                                     int64_t sampler_seq) {
    store::SamplerRow row;
    row.sampler_id = run->row.session_id + ":sample:" + std::to_string(sampler_seq);
    row.tenant = call.tenant;
    row.session_id = run->row.session_id;
    row.base_model = run->row.base_model;
    row.run_id = run->row.run_id;
    row.kind = "inflight";
    return submit_ordered(call, run, seq_id, "SaveWeightsForSampler", [this, row](const std::string & id) {
        scheduler::Op op;
        op.run = [this, row, id](engine::Engine &) {
            store::SamplerRow created = row;
            created.created_at = now_seconds();
            auto stored = db_->insert_sampler(created);
            if (!stored.ok()) {
                fail_future(id, stored.error());
                return;
            }
            futures_->complete(
                id, json{{"sampling_session_id", row.sampler_id}, {"type", "save_weights_for_sampler"}}.dump());
        };
        return op;
    });
}

// load_weights into a live model: the checkpoint's optimizer state (with_optimizer) and a named optimizer_config
// must be of the model's optimizer (AdamW moments cannot drive a Dimuon run, nor the reverse).
Result<void> TinkerRoutes::check_same_optimizer(const RunState & run, const store::CheckpointRow & checkpoint,
                                                bool with_optimizer, const std::optional<std::string> & optimizer) {
    const std::string & mine = run.row.optimizer;
    if (optimizer && *optimizer != mine) {
        return invalid_argument("optimizer_config.type '" + *optimizer + "' does not match model " + run.row.run_id +
                                ", which trains with " + mine);
    }
    if (!with_optimizer) {
        return {};
    }
    auto source = db_->get_run(checkpoint.run_id);
    const std::string theirs = source.ok() && source->has_value() ? (*source)->optimizer : "adamw";
    if (theirs != mine) {
        return invalid_argument("tinker://" + checkpoint.run_id + "/" + checkpoint.checkpoint_id + " holds " + theirs +
                                " optimizer state; model " + run.row.run_id + " trains with " + mine +
                                " (load the weights without the optimizer, or create the client from the state)");
    }
    return {};
}

// On the engine thread: reads the checkpoint's files and replaces the run's adapter weights (and Adam
// state). A rank that differs from the model's is a user error naming both.
Result<void> TinkerRoutes::import_checkpoint(engine::Engine & engine, const RunState & run, const std::string & dir,
                                             bool with_optimizer) {
    auto contents = store::read_checkpoint(dir, with_optimizer);
    if (!contents.ok()) {
        return contents.error();
    }
    if (contents->config.rank != run.spec.rank) {
        return invalid_argument("checkpoint has LoRA rank " + std::to_string(contents->config.rank) + " but model " +
                                run.row.run_id + " has rank " + std::to_string(run.spec.rank));
    }
    TRY_STATUS(engine.import_adapter(run.adapter.load(), contents->tensors, with_optimizer));
    auto step = contents->tensors.find("optimizer.step");  // I64 [1]: the resumed run's step count
    if (with_optimizer && step != contents->tensors.end() && step->second.dtype == model::DType::I64 &&
        step->second.bytes.size() == sizeof(int64_t)) {
        int64_t steps = 0;
        std::memcpy(&steps, step->second.bytes.data(), sizeof(steps));
        run.optim_steps = steps;
    }
    return {};
}

// What the official service allows: load_weights as a model's first request only, from a checkpoint
// the caller can read, with optimizer state only from a training checkpoint.
Result<void> TinkerRoutes::check_loadable(int64_t seq_id, const Result<store::CheckpointRow> & checkpoint,
                                          bool with_optimizer) {
    if (seq_id > 1) {
        return invalid_argument("LoadWeights is not permitted with seq_id " + std::to_string(seq_id) +
                                ": load_weights must be a model's first request; create a new training client "
                                "from the checkpoint (create_training_client_from_state[_with_optimizer])");
    }
    if (!checkpoint.ok()) {
        return checkpoint.error();
    }
    if (with_optimizer && checkpoint->checkpoint_type != "training") {
        return invalid_argument("tinker://" + checkpoint->run_id + "/" + checkpoint->checkpoint_id +
                                " is a sampler checkpoint: it has no optimizer state");
    }
    return {};
}

Result<json> TinkerRoutes::load_weights(Call & call) {
    auto path_text = get_string(call.body, "path");
    auto optimizer = get_bool(call.body, "optimizer", false);
    auto family = parse_optimizer_config(call.body);
    if (const Error * e = first_error(path_text, optimizer, family)) {
        return *e;
    }
    auto path = parse_tinker_path(*path_text);
    auto checkpoint =
        path.ok() ? registry_->find_checkpoint(call.tenant, *path, true) : Result<store::CheckpointRow>(path.error());
    if (!call.body.contains("model_id")) {  // the create_model_via_load_weights form: seq 0 of a new model
        if (!checkpoint.ok()) {
            return checkpoint.error();
        }
        return create_model_from_checkpoint(call, *checkpoint, *optimizer, *family);
    }
    auto target = ordered_target(call);
    if (!target.ok()) {
        return target.error();
    }
    const RunPtr run = target->run;
    const int64_t seq_id = target->seq_id;
    auto loadable = check_loadable(seq_id, checkpoint, *optimizer);
    if (loadable.ok()) {
        loadable = check_same_optimizer(*run, *checkpoint, *optimizer, *family);
    }
    if (!loadable.ok()) {
        skip_seq(run, seq_id);
        return loadable.error();
    }
    const std::string dir = checkpoint->dir;
    const bool with_optimizer = *optimizer;
    const std::string path_str = *path_text;
    return submit_ordered(call, run, seq_id, "LoadWeights", [=, this](const std::string & id) {
        scheduler::Op op;
        op.run = [=, this](engine::Engine & engine) {
            auto imported = import_checkpoint(engine, *run, dir, with_optimizer);
            if (!imported.ok()) {
                fail_future(id, imported.error());
                return;
            }
            futures_->complete(
                id, json{{"path", path_str}, {"model_id", run->row.run_id}, {"type", "load_weights"}}.dump());
        };
        return op;
    });
}

// {"session_id", "model_seq_id", "base_model"?, "user_metadata"?, "path", "optimizer"}: a new model with the
// checkpoint's LoRA settings, created and loaded as its seq 0; the SDK assumes "<session>:train:<n>".
Result<json> TinkerRoutes::create_model_from_checkpoint(Call & call, const store::CheckpointRow & checkpoint,
                                                        bool with_optimizer,
                                                        const std::optional<std::string> & optimizer) {
    auto source = db_->get_run(checkpoint.run_id);
    if (!source.ok() || !source->has_value()) {
        return not_found("training run '" + checkpoint.run_id + "' of the checkpoint not found");
    }
    if (with_optimizer && checkpoint.checkpoint_type != "training") {
        return invalid_argument("a sampler checkpoint has no optimizer state");
    }
    json create_body = call.body;
    if (with_optimizer) {  // the restored state keeps its optimizer; a different optimizer_config cannot override it
        if (optimizer && *optimizer != (*source)->optimizer) {
            return invalid_argument("optimizer_config.type '" + *optimizer + "' cannot override the " +
                                    (*source)->optimizer + " optimizer state of tinker://" + checkpoint.run_id + "/" +
                                    checkpoint.checkpoint_id + " (load it without its optimizer to change optimizer)");
        }
        create_body["optimizer_config"] = optimizer_config_json((*source)->optimizer);
    }
    create_body["base_model"] = call.body.value("base_model", (*source)->base_model);
    create_body["lora_config"] = {{"rank", (*source)->lora_rank},
                                  {"train_attn", (*source)->train_attn},
                                  {"train_mlp", (*source)->train_mlp},
                                  {"train_unembed", (*source)->train_unembed}};
    Call create_call{call.req, call.tenant, call.params, create_body};
    auto created = create_model(create_call);
    if (!created.ok()) {
        return created.error();
    }
    const std::string run_id = (*created)["model_id"];
    RunPtr run = registry_->find_run(run_id);
    if (!run) {
        return internal_error("model '" + run_id + "' vanished while it was being created");
    }
    // create_model queued the adapter's creation; the load runs right after it on the engine thread.
    const std::string request_id = create_future(call.tenant, "LoadWeights", run_id);
    const std::string dir = checkpoint.dir;
    const std::string path = "tinker://" + checkpoint.run_id + "/" + checkpoint.checkpoint_id;
    run->model->worker->post([=, this](engine::Engine & engine) {
        if (!run->ready) {
            fail_future(request_id, invalid_argument("model creation failed"));
            return;
        }
        auto imported = guarded_engine_call<bool>([&]() -> Result<bool> {
            auto status = import_checkpoint(engine, *run, dir, with_optimizer);
            return status.ok() ? Result<bool>(true) : Result<bool>(status.error());
        });
        if (!imported.ok()) {
            fail_future(request_id, imported.error());
            registry_->unload_run(run, "load_weights failed");
            return;
        }
        futures_->complete(request_id,
                           json{{"path", path}, {"model_id", run->row.run_id}, {"type", "load_weights"}}.dump());
    });
    return json{{"request_id", request_id}, {"model_id", run_id}};
}

Result<json> TinkerRoutes::weights_info(Call & call) {
    auto path_text = get_string(call.body, "tinker_path");
    if (!path_text.ok()) {
        return path_text.error();
    }
    auto path = parse_tinker_path(*path_text);
    if (!path.ok()) {
        return path.error();
    }
    auto checkpoint = registry_->find_checkpoint(call.tenant, *path, true);
    if (!checkpoint.ok()) {
        return checkpoint.error();
    }
    auto run = db_->get_run(path->run_id);
    if (!run.ok() || !run->has_value()) {
        return not_found("training run of '" + *path_text + "' not found");
    }
    const store::TrainingRunRow & row = **run;
    return json{{"base_model", row.base_model},
                {"is_lora", true},
                {"lora_rank", row.lora_rank},
                {"train_unembed", row.train_unembed},
                {"train_mlp", row.train_mlp},
                {"train_attn", row.train_attn},
                {"optimizer_config", optimizer_config_json(row.optimizer)}};
}

// Sampling sessions are recorded here; sampling itself arrives with the sampling engine.
Result<json> TinkerRoutes::create_sampling_session(Call & call) {
    auto session_id = get_string(call.body, "session_id");
    auto sampler_seq = get_int(call.body, "sampling_session_seq_id");
    auto base_model = get_optional_string(call.body, "base_model");
    auto model_path = get_optional_string(call.body, "model_path");
    if (const Error * e = first_error(session_id, sampler_seq, base_model, model_path)) {
        return *e;
    }
    TRY_STATUS(registry_->find_session(call.tenant, *session_id));
    std::string base = base_model->value_or("");
    if (model_path->has_value()) {
        auto path = parse_tinker_path(**model_path);
        if (!path.ok()) {
            return path.error();
        }
        TRY_STATUS(registry_->find_checkpoint(call.tenant, *path, true));
        auto run = db_->get_run(path->run_id);
        if (run.ok() && run->has_value()) {
            base = (*run)->base_model;
        }
    }
    if (registry_->find_model(base) == nullptr) {
        return invalid_argument("base_model '" + base + "' is not served here (see get_server_capabilities)");
    }
    const std::string sampler_id = *session_id + ":sample:" + std::to_string(*sampler_seq);
    auto existing = db_->get_sampler(sampler_id);
    if (existing.ok() && existing->has_value()) {  // a resend
        if ((*existing)->base_model != base || (*existing)->model_path != model_path->value_or("")) {
            return invalid_argument("sampling_session_seq_id " + std::to_string(*sampler_seq) + " of session " +
                                    *session_id + " was already used for another sampler");
        }
        return json{{"sampling_session_id", sampler_id}, {"type", "create_sampling_session"}};
    }
    store::SamplerRow row;
    row.sampler_id = sampler_id;
    row.tenant = call.tenant;
    row.session_id = *session_id;
    row.base_model = base;
    row.model_path = model_path->value_or("");
    row.created_at = now_seconds();
    TRY_STATUS(db_->insert_sampler(row));
    return json{{"sampling_session_id", sampler_id}, {"type", "create_sampling_session"}};
}

}  // namespace tinkerd::api
