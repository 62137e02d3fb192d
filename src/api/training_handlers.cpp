// Handlers for training models: create_model (a new LoRA adapter on a served base model), get_info,
// unload_model, forward_backward (protobuf, zstd or legacy JSON), forward (legacy) and optim_step.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "api/event_streams.h"
#include "api/telemetry.h"
#include "api/tinker_routes.h"
#include "common/log.h"
#include "engine/adam_params.h"
#include "wire/forward_backward_codec.h"

namespace tinkerd::api {

namespace {

constexpr int64_t MAX_LORA_RANK = 1024;
constexpr int64_t MAX_MODEL_SEQ_ID = (int64_t{1} << 31) - 1;  // the SDK counts up from 0 per session

Result<engine::LoraSpec> parse_lora_config(const json & body) {
    engine::LoraSpec spec;
    const json config = body.value("lora_config", json::object());
    if (!config.is_object()) {
        return invalid_argument("lora_config: expected an object");
    }
    auto rank = get_optional_int(config, "rank", "lora_config");
    auto seed = get_optional_int(config, "seed", "lora_config");
    auto attn = get_bool(config, "train_attn", true, "lora_config");
    auto mlp = get_bool(config, "train_mlp", true, "lora_config");
    auto unembed = get_bool(config, "train_unembed", true, "lora_config");
    if (const Error * e = first_error(rank, seed, attn, mlp, unembed)) {
        return *e;
    }
    spec.rank = rank->value_or(32);
    if (spec.rank < 1 || spec.rank > MAX_LORA_RANK) {
        return invalid_argument("lora_config.rank must be between 1 and " + std::to_string(MAX_LORA_RANK));
    }
    if (seed->has_value()) {
        spec.seed = static_cast<uint64_t>(**seed);
    }
    spec.train_attn = *attn;
    spec.train_mlp = *mlp;
    spec.train_unembed = *unembed;
    if (!spec.train_attn && !spec.train_mlp && !spec.train_unembed) {
        return invalid_argument("lora_config: at least one of train_attn, train_mlp, train_unembed must be true");
    }
    return spec;
}

// A forward_backward's input tokens (tokens trained) and loss-bearing tokens (its point's num_tokens).
struct OpTokens {
    int64_t input = 0;
    int64_t loss_bearing = 0;
};

OpTokens count_tokens(const std::vector<engine::Datum> & datums) {
    OpTokens tokens;
    for (const auto & datum : datums) {
        tokens.input += static_cast<int64_t>(datum.tokens.size());
        tokens.loss_bearing += loss_bearing_tokens(datum);
    }
    return tokens;
}

// A completed op's metric point: every `name:reduction` metric the API returns, timed now.
store::MetricPoint metric_point(const RunState & run, const char * op, int64_t step, double seconds,
                                const std::map<std::string, double> & metrics) {
    store::MetricPoint point;
    point.run_id = run.row.run_id;
    point.op = op;
    point.step = step;
    point.time = now_seconds();
    point.duration_s = seconds;
    point.values = metrics;
    return point;
}

const char * error_category(const Error & error) {
    return error.kind == ErrorKind::INTERNAL ? "server" : "user";
}

// The new run's row from a validated create_model body.
store::TrainingRunRow new_run_row(const std::string & tenant, const std::string & run_id,
                                  const std::string & session_id, const std::string & base_model,
                                  const engine::LoraSpec & spec, const json & metadata) {
    store::TrainingRunRow row;
    row.run_id = run_id;
    row.tenant = tenant;
    row.session_id = session_id;
    row.base_model = base_model;
    row.lora_rank = spec.rank;
    row.train_attn = spec.train_attn;
    row.train_mlp = spec.train_mlp;
    row.train_unembed = spec.train_unembed;
    if (spec.seed) {
        row.seed = static_cast<int64_t>(*spec.seed);
    }
    row.user_metadata_json = metadata.dump();
    row.created_at = row.last_request_time = now_seconds();
    return row;
}

// Numbers of `object` (named `where` in errors) into the given fields; with `strict`, keys outside them are a
// 400 (DimuonParams forbids extras; adam_params' extras are ignored, as they always were).
Result<void> read_numbers(const json & object, const std::string & where, bool strict,
                          std::initializer_list<std::pair<const char *, double *>> fields) {
    if (!object.is_object()) {
        return invalid_argument(where + ": expected an object");
    }
    for (const auto & [key, value] : object.items()) {
        const bool known = !strict || key == "type" ||
                           std::any_of(fields.begin(), fields.end(), [&](const auto & f) { return key == f.first; });
        if (!known) {
            return invalid_argument(where + "." + key + " is not a field of " + where);
        }
    }
    for (const auto & [name, dst] : fields) {
        auto value = get_number(object, name, *dst, where);
        TRY_STATUS(value);
        *dst = *value;
    }
    return {};
}

// An optim_step's hyper-parameters for a run of `optimizer`: adam_params for AdamW, optimizer_params
// {"type": "dimuon", ...} (SDK 0.38's DimuonParams, with the older SDK's damping and exponent) for Dimuon; the
// other family's is a 400 naming both, as are out-of-bounds values.
Result<engine::AdamParams> parse_step_params(const json & body, const std::string & optimizer) {
    engine::AdamParams p;
    const bool dimuon = optimizer == "dimuon";
    const json * other = body.contains("optimizer_params") ? &body["optimizer_params"] : nullptr;
    const std::string other_type = other && other->is_object() ? other->value("type", "?") : "?";
    if (!dimuon && other != nullptr && !body.contains("adam_params")) {
        return unsupported("optimizer_params (type '" + other_type +
                           "') does not fit this model, which trains with adamw: send adam_params");
    }
    if (dimuon && (other == nullptr || other_type != "dimuon")) {
        return invalid_argument(
            "this model trains with dimuon (its optimizer_config): send DimuonParams "
            "(optimizer_params of type 'dimuon'), not adam_params");
    }
    if (dimuon) {
        p.kind = engine::OptimizerKind::DIMUON;
        p.beta1 = 0.9;
        TRY_STATUS(read_numbers(*other, "optimizer_params", true,
                                {{"learning_rate", &p.learning_rate},
                                 {"beta1", &p.beta1},
                                 {"grad_clip_norm", &p.grad_clip_norm},
                                 {"damping", &p.damping},
                                 {"rank_lr_correction_exponent", &p.rank_lr_correction_exponent}}));
    } else {
        TRY_STATUS(read_numbers(body.value("adam_params", json::object()), "adam_params", false,
                                {{"learning_rate", &p.learning_rate},
                                 {"beta1", &p.beta1},
                                 {"beta2", &p.beta2},
                                 {"eps", &p.eps},
                                 {"weight_decay", &p.weight_decay},
                                 {"grad_clip_norm", &p.grad_clip_norm}}));
    }
    TRY_STATUS(engine::validate_adam_params(p));  // 400 now, not a failed future
    return p;
}

}  // namespace

void TinkerRoutes::fail_future(const std::string & request_id, const Error & error) {
    futures_->fail(request_id, error.message, error_category(error));
}

Result<json> TinkerRoutes::create_model(Call & call) {
    auto session_id = get_string(call.body, "session_id");
    auto model_seq = get_int(call.body, "model_seq_id");
    auto base_model = get_string(call.body, "base_model");
    auto metadata = get_string_map(call.body, "user_metadata");
    auto spec = parse_lora_config(call.body);
    auto optimizer = parse_optimizer_config(call.body);
    if (const Error * e = first_error(session_id, model_seq, base_model, metadata, spec, optimizer)) {
        return *e;
    }
    if (*model_seq < 0 || *model_seq > MAX_MODEL_SEQ_ID) {
        return invalid_argument("model_seq_id: must be 0.." + std::to_string(MAX_MODEL_SEQ_ID) + " (got " +
                                std::to_string(*model_seq) + ")");
    }
    auto session = registry_->find_session(call.tenant, *session_id);
    if (!session.ok() || session->expired) {
        return session.ok() ? not_found("session '" + *session_id + "' expired; create a new one") : session.error();
    }
    ServedModel * model = registry_->find_model(*base_model);
    if (model == nullptr) {
        return invalid_argument("base_model '" + *base_model + "' is not served here (see get_server_capabilities)");
    }
    const std::string run_id = *session_id + ":train:" + std::to_string(*model_seq);
    if (RunPtr resent = registry_->find_run(run_id)) {  // a resent create_model: the same future
        return json{{"request_id", resent->create_request_id}, {"model_id", run_id}};
    }
    auto existing = db_->get_run(run_id);
    if (existing.ok() && existing->has_value()) {
        return invalid_argument("model_seq_id " + std::to_string(*model_seq) + " of session " + *session_id +
                                " was already used");
    }
    store::TrainingRunRow row = new_run_row(call.tenant, run_id, *session_id, *base_model, *spec, *metadata);
    row.optimizer = optimizer->value_or("adamw");
    TRY_STATUS(db_->insert_run(row));
    RunPtr run =
        registry_->register_run(std::move(row), model, *spec, create_future(call.tenant, "CreateModel", run_id));
    model->worker->open_run(run_id, 1, call.tenant);
    events_->wake({run_id});  // the console's runs list shows the new run now
    registry_->note_session_activity(*session_id);
    start_adapter_creation(run);
    return json{{"request_id", run->create_request_id}, {"model_id", run_id}};
}

// On the engine thread: creates the run's adapter, then the run accepts operations.
void TinkerRoutes::start_adapter_creation(const RunPtr & run) {
    run->model->worker->post([this, run](engine::Engine & engine) {
        const std::string & request_id = run->create_request_id;
        auto adapter = guarded_engine_call<AdapterId>([&] { return engine.create_adapter(run->spec); });
        if (!adapter.ok()) {
            fail_future(request_id, adapter.error());
            registry_->unload_run(run, "creation failed");
            return;
        }
        if (!run->loaded) {  // unloaded (expired session, shutdown) before this task ran
            (void)engine.remove_adapter(*adapter);
            fail_future(request_id, invalid_argument("model was unloaded before it was created"));
            return;
        }
        run->adapter = *adapter;
        run->ready = true;
        futures_->complete(request_id, json{{"model_id", run->row.run_id}, {"type", "create_model"}}.dump());
        LOG_INF("api", "model %s created on %s (rank %lld)", run->row.run_id.c_str(), run->row.base_model.c_str(),
                static_cast<long long>(run->spec.rank));
    });
}

Result<json> TinkerRoutes::get_info(Call & call) {
    auto model_id = get_string(call.body, "model_id");
    if (!model_id.ok()) {
        return model_id.error();
    }
    auto row = registry_->find_run_row(call.tenant, *model_id, false);
    if (!row.ok()) {
        return row.error();
    }
    // a training client exists only while its model is in memory (REST get_training_run still works)
    if (RunPtr run = registry_->find_run(*model_id); !run || !run->loaded) {
        return not_found("model '" + *model_id + "' is not loaded (unloaded, expired session or restart)");
    }
    std::string arch;
    if (ServedModel * model = registry_->find_model(row->base_model)) {
        arch = model->engine->config().architecture;
    }
    json model_data = {{"arch", arch}, {"model_name", row->base_model}, {"tokenizer_id", row->base_model}};
    return json{{"model_id", row->run_id},
                {"model_data", model_data},
                {"is_lora", true},
                {"lora_rank", row->lora_rank},
                {"model_name", row->base_model},
                {"optimizer_config", optimizer_config_json(row->optimizer)},
                {"type", "get_info"}};
}

Result<json> TinkerRoutes::unload_model(Call & call) {
    auto run = run_of_body(call);
    if (!run.ok()) {
        return run.error();
    }
    const std::string model_id = run.value()->row.run_id;
    const std::string request_id = create_future(call.tenant, "UnloadModel", model_id);
    registry_->unload_run(*run, "unload_model");
    futures_->complete(request_id, json{{"model_id", model_id}, {"type", "unload_model"}}.dump());
    return json{{"request_id", request_id}, {"model_id", model_id}};
}

// Decodes the body by Content-Type / Content-Encoding (protobuf, zstd, or the legacy JSON form).
// A request refused for its data still names its model and seq_id: that seq_id is released (skip_seq)
// so the run's later operations do not wait behind it forever.
Result<wire::ForwardBackwardRequest> TinkerRoutes::decode_forward_backward(Call & call) {
    const http::Request & req = call.req;
    if (req.header("content-type").find("application/x-protobuf") == std::string::npos) {
        auto body = parse_json_body(req.body);
        if (!body.ok()) {
            return body.error();
        }
        call.body = *body;
        const json model_id = body->value("model_id", json());
        auto decoded = wire::decode_forward_backward_json(
            *body, decode_limits(call.tenant, model_id.is_string() ? model_id.get<std::string>() : ""));
        if (!decoded.ok() && body->contains("model_id") && body->contains("seq_id")) {
            release_refused_seq(call.tenant, body->value("model_id", ""), (*body)["seq_id"]);
        }
        return decoded;
    }
    std::string body = req.body;
    const std::string & encoding = req.header("content-encoding");
    if (!encoding.empty() && encoding != "identity" && encoding != "zstd") {
        return invalid_argument("Content-Encoding '" + encoding.substr(0, 64) +
                                "' is not supported (send zstd or an uncompressed body)");
    }
    if (encoding == "zstd") {
        auto plain = wire::zstd_decompress(req.body, options_.max_decompressed_bytes);
        if (!plain.ok()) {
            return plain.error();
        }
        body = std::move(plain).value();
    }
    const auto ids = wire::forward_backward_ids_proto(body);
    auto decoded = wire::decode_forward_backward_proto(body, decode_limits(call.tenant, ids ? ids->model_id : ""));
    if (!decoded.ok() && ids) {
        release_refused_seq(call.tenant, ids->model_id, ids->seq_id);
    }
    return decoded;
}

// The vocabulary of the run's base model bounds token ids and top-K widths; an unknown run gets only the
// element budget (its request is refused as not found right after decoding).
wire::DecodeLimits TinkerRoutes::decode_limits(const std::string & tenant, const std::string & model_id) {
    wire::DecodeLimits limits;
    if (auto run = find_live_run(tenant, model_id); run.ok()) {
        limits.vocab_size = (*run)->model->engine->config().vocab_size;
        limits.vision = (*run)->model->vision;
    }
    return limits;
}

void TinkerRoutes::release_refused_seq(const std::string & tenant, const std::string & model_id, const json & seq_id) {
    if (!seq_id.is_number_integer()) {
        return;
    }
    auto run = find_live_run(tenant, model_id);
    if (run.ok()) {
        skip_seq(*run, seq_id.get<int64_t>());
    }
}

// stable_reinforce: each datum's provenance becomes its sampler_record loss input (the recorded sampler
// logprob of each target) before the engine sees it. The key is the server's: a client cannot send it.
Result<void> TinkerRoutes::attach_sampler_records(const std::string & session_id,
                                                  wire::ForwardBackwardRequest & request) {
    const double now = now_seconds();
    for (size_t d = 0; d < request.data.size(); ++d) {
        const std::string where = "data[" + std::to_string(d) + "]: ";
        engine::Datum & datum = request.data[d];
        if (datum.loss_inputs.count(engine::SAMPLER_RECORD_KEY)) {
            return invalid_argument(where + "loss_fn_inputs key '" + engine::SAMPLER_RECORD_KEY +
                                    "' is reserved for the server");
        }
        auto record = sequence_records_.resolve(session_id, datum, request.provenance[d], now);
        if (!record.ok()) {
            return invalid_argument(where + record.error().message);
        }
        datum.loss_inputs.emplace(engine::SAMPLER_RECORD_KEY, std::move(record).value());
    }
    return {};
}

Result<json> TinkerRoutes::forward_backward(Call & call) {
    auto decoded = decode_forward_backward(call);
    if (!decoded.ok()) {
        return decoded.error();
    }
    auto run = find_live_run(call.tenant, decoded->model_id);
    if (!run.ok()) {
        return run.error();
    }
    if (decoded->loss_fn == "stable_reinforce") {
        auto attached = attach_sampler_records((*run)->row.session_id, *decoded);
        if (!attached.ok()) {
            skip_seq(*run, decoded->seq_id);
            return attached.error();
        }
    }
    call.body = json{{"model_id", decoded->model_id}};
    auto request = std::make_shared<wire::ForwardBackwardRequest>(std::move(decoded).value());
    const std::string type = request->forward_only ? "Forward" : "ForwardBackward";
    return submit_ordered(call, *run, request->seq_id, type, [this, run = *run, request](const std::string & id) {
        scheduler::Op op;
        op.kind = scheduler::Op::Kind::FORWARD_BACKWARD;
        op.fb_input.adapter = run->adapter.load();
        op.fb_input.datums = std::move(request->data);
        op.fb_input.loss_fn = request->loss_fn;
        op.fb_input.loss_fn_config = request->loss_fn_config;
        op.forward_only = request->forward_only;
        const OpTokens tokens = count_tokens(op.fb_input.datums);
        op.on_fb_done = [this, id, run, tokens, forward_only = op.forward_only](
                            Result<engine::ForwardBackwardOutput> out, double batch_seconds) {
            if (!out.ok()) {
                fail_future(id, out.error());
                return;
            }
            // Recorded before the future completes, so a client that saw the result finds its point.
            store::MetricPoint point = metric_point(*run, forward_only ? "forward" : "forward_backward",
                                                    run->optim_steps.load(), batch_seconds, out->metrics);
            point.values["num_tokens"] = static_cast<double>(tokens.loss_bearing);
            telemetry_->record_training_op(point, run->row.base_model, forward_only ? 0 : tokens.input);
            // Only the protobuf is kept; the legacy JSON form is built from it when a poll asks for JSON.
            futures_->complete(id, "", wire::encode_forward_backward_output_proto(*out));
        };
        return op;
    });
}

Result<json> TinkerRoutes::optim_step(Call & call) {
    auto target = ordered_target(call);
    if (!target.ok()) {
        return target.error();
    }
    const RunPtr run = target->run;
    const int64_t seq_id = target->seq_id;
    auto params = parse_step_params(call.body, run->row.optimizer);
    if (!params.ok()) {
        skip_seq(run, seq_id);
        return params.error();
    }
    return submit_ordered(call, run, seq_id, "OptimStep", [this, run, params = *params](const std::string & id) {
        scheduler::Op op;
        op.run = [this, run, params, id](engine::Engine & engine) {
            const auto t0 = std::chrono::steady_clock::now();
            auto out = engine.optim_step(run->adapter.load(), params);
            if (!out.ok()) {
                fail_future(id, out.error());
                return;
            }
            const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            auto step = out->metrics.find("step:max");
            run->optim_steps = step != out->metrics.end() ? static_cast<int64_t>(step->second) : run->optim_steps + 1;
            store::MetricPoint point = metric_point(*run, "optim_step", run->optim_steps.load(), seconds, out->metrics);
            point.values["learning_rate"] = params.learning_rate;
            telemetry_->record_training_op(point, run->row.base_model, 0);
            json metrics = json::object();
            for (const auto & [key, value] : out->metrics) {
                if (std::isfinite(value)) {  // the SDK types metrics as floats: no nulls
                    metrics[key] = value;
                }
            }
            futures_->complete(id, json{{"metrics", metrics}}.dump());
        };
        return op;
    });
}

}  // namespace tinkerd::api
