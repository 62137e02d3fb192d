// Futures: submitting a training operation in seq_id order under a new future (with idempotent resends),
// releasing the seq_id of one refused unread (413), and retrieve_future, the long-poll that answers a
// result, an error, or try_again after the poll timeout.
#include "api/tinker_routes.h"
#include "common/log.h"
#include "scheduler/run_queue.h"

namespace tinkerd::api {

Result<RunPtr> TinkerRoutes::find_live_run(const std::string & tenant, const std::string & model_id) {
    RunPtr run = registry_->find_tenant_run(tenant, model_id);
    if (!run) {
        auto row = registry_->find_run_row(tenant, model_id, false);
        if (!row.ok()) {
            return not_found("model '" + model_id + "' not found");
        }
        return not_found("model '" + model_id +
                         "' is not loaded (the server restarted, the model was unloaded or its session expired); "
                         "resume from a checkpoint with create_training_client_from_state");
    }
    if (!run->loaded) {
        return not_found("model '" + model_id + "' was unloaded (unload_model or an expired session)");
    }
    if (!run->ready) {
        return invalid_argument("model '" + model_id + "' is still being created; wait for create_model's result");
    }
    registry_->note_session_activity(run->row.session_id);
    return run;
}

Result<RunPtr> TinkerRoutes::run_of_body(Call & call) {
    auto model_id = get_string(call.body, "model_id");
    if (!model_id.ok()) {
        return model_id.error();
    }
    return find_live_run(call.tenant, *model_id);
}

Result<TinkerRoutes::OrderedTarget> TinkerRoutes::ordered_target(Call & call) {
    auto run = run_of_body(call);
    if (!run.ok()) {
        return run.error();
    }
    auto seq_id = get_int(call.body, "seq_id");
    if (!seq_id.ok()) {
        return seq_id.error();
    }
    return OrderedTarget{*run, *seq_id};
}

void TinkerRoutes::skip_seq(const RunPtr & run, const std::optional<int64_t> & seq_id) {
    if (seq_id) {
        run->model->worker->skip(run->row.run_id, *seq_id);
    }
}

// A training op refused unread (413: over --max-body-bytes). The SDK never sends that seq_id again (it
// raises the 413 to the user and numbers the next op seq_id + 1), so the run would wait for it until
// --seq-gap-timeout-seconds: when the body's first bytes name the run and seq_id (protobuf puts both
// first; JSON when its keys lead), it is released now and the 413 says so. A zstd body's prefix is not
// decoded (the server tells the SDK not to compress): its gap waits for the timeout.
std::string TinkerRoutes::release_refused_body(const std::string & tenant, const http::Request & request) {
    const std::string & encoding = request.header("content-encoding");
    const bool protobuf = request.header("content-type").find("application/x-protobuf") != std::string::npos;
    auto ids = encoding.empty() || encoding == "identity" ? wire::request_ids_from_prefix(request.body, protobuf)
                                                          : std::nullopt;
    if (!ids) {
        LOG_WRN("api",
                "%s refused unread (413) before its seq_id could be read: if it was a run's next operation, the "
                "run's later operations wait %.0f s (--seq-gap-timeout-seconds) for it",
                request.path.c_str(), options_.seq_gap_timeout.count() / 1000.0);
        return "";
    }
    auto run = find_live_run(tenant, ids->model_id);
    if (!run.ok() || !(*run)->model->worker->skip((*run)->row.run_id, ids->seq_id)) {
        return "";  // not this tenant's live run, or a seq_id already consumed or admitted: nothing waits for it
    }
    const std::string released = "seq_id " + std::to_string(ids->seq_id) + " of model " + ids->model_id;
    LOG_WRN("api",
            "%s released: its %s request was refused unread (413, body over --max-body-bytes); the model's "
            "later operations run without it",
            released.c_str(), request.path.c_str());
    return "; " + released + " is released: the model's later operations run without it";
}

Result<json> TinkerRoutes::submit_ordered(
    Call & call, const RunPtr & run, int64_t seq_id, const std::string & request_type,
    const std::function<scheduler::Op(const std::string & request_id)> & make_op) {
    if (seq_id < 0) {  // every ordered op passes here, whichever body format carried its seq_id
        return invalid_argument("seq_id: must be >= 0 (got " + std::to_string(seq_id) + ")");
    }
    const std::string request_id = futures_->create(call.tenant, request_type);
    scheduler::Op op = make_op(request_id);
    op.on_cancel = [this, request_id](const std::string & reason) {  // unload, expiry (user) or shutdown (server)
        futures_->fail(request_id, "request cancelled: " + reason, shutting_down_ ? "server" : "user");
    };
    const std::string digest = body_digest(call.req.body);
    // Recorded before the op can run, so its completion always finds the row.
    store::FutureRow row;
    row.request_id = request_id;
    row.tenant = call.tenant;
    row.request_type = request_type;
    row.run_id = run->row.run_id;
    row.seq_id = seq_id;
    row.body_hash = digest;
    row.state = "pending";
    row.created_at = now_seconds();
    (void)db_->insert_future(row);
    auto admission = run->model->worker->submit(run->row.run_id, seq_id, digest, request_id, std::move(op));
    if (!admission.ok()) {
        futures_->fail(request_id, admission.error().message, "user");
        return admission.error();
    }
    using Kind = scheduler::Admission::Kind;
    if (admission->kind != Kind::ACCEPTED) {
        futures_->fail(request_id, "superseded", "user");  // nobody knows this id
    }
    if (admission->kind == Kind::CONFLICT) {
        return invalid_argument("seq_id " + std::to_string(seq_id) + " of model " + run->row.run_id +
                                " was already used by a different request");
    }
    if (admission->kind == Kind::STALE) {
        return invalid_argument("seq_id " + std::to_string(seq_id) + " of model " + run->row.run_id +
                                " is older than the operations already run (or was released when a request "
                                "carrying it was refused, or given up after --seq-gap-timeout-seconds)");
    }
    if (admission->kind == Kind::QUEUE_FULL) {
        return unavailable("model " + run->row.run_id +
                           " already has its maximum of queued operations waiting; "
                           "retry when earlier ones have finished");
    }
    if (admission->kind == Kind::TOO_FAR) {
        return invalid_argument("seq_id " + std::to_string(seq_id) + " of model " + run->row.run_id + " is more than " +
                                std::to_string(scheduler::RunQueue::kMaxAhead) + " ahead of the run's next operation");
    }
    if (admission->kind == Kind::ACCEPTED) {
        (void)db_->touch_run(run->row.run_id, now_seconds());
    }
    return json{{"request_id", admission->request_id}, {"model_id", run->row.run_id}};
}

void TinkerRoutes::retrieve_future(Call & call, http::Respond respond) {
    auto request_id = get_string(call.body, "request_id");
    if (!request_id.ok()) {
        respond(error_response(request_id.error()));
        return;
    }
    const std::string id = *request_id;
    const auto peeked = futures_->peek(id);
    if (peeked.state == scheduler::FutureOutcome::State::UNKNOWN || peeked.tenant != call.tenant) {
        respond(error_response(404, "unknown request_id '" + id + "'"));
        return;
    }
    const bool wants_proto = call.req.header("accept").find("application/x-protobuf") != std::string::npos;
    futures_->wait(id, options_.poll_timeout, [id, wants_proto, respond](scheduler::FutureOutcome outcome) {
        using State = scheduler::FutureOutcome::State;
        http::Response response;
        response.log_tag = "request=" + id;
        if (outcome.state == State::PENDING) {
            response = json_response(json{{"type", "try_again"}, {"request_id", id}, {"queue_state", "active"}});
        } else if (outcome.state == State::FAILED) {
            response = json_response(json{{"error", outcome.error}, {"category", outcome.category}});
        } else if (outcome.state == State::DONE && wants_proto && !outcome.proto.empty()) {
            response.status = 200;
            response.content_type = "application/x-protobuf";
            response.body = std::move(outcome.proto);
        } else if (outcome.state == State::DONE && outcome.json.empty() && !outcome.proto.empty()) {
            auto decoded = wire::decode_forward_backward_output_proto(outcome.proto);  // legacy JSON poll
            response = decoded.ok() ? json_response(wire::encode_forward_backward_output_json(*decoded))
                                    : error_response(decoded.error());
        } else if (outcome.state == State::DONE) {
            response = http::Response::json(200, std::move(outcome.json));
        } else {
            response = error_response(404, "unknown request_id '" + id + "'");
        }
        response.log_tag = "request=" + id;
        respond(std::move(response));
    });
}

}  // namespace tinkerd::api
