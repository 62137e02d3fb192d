// Handlers for the SDK's start-up and background calls: client/config, dynamic_config, capabilities,
// healthz, create_session, session_heartbeat, sessions/{id}/finish and telemetry (logged as lines, never
// with header values), and the 400 for SDK 0.38 endpoints this server does not implement.
#include <map>

#include "api/event_streams.h"
#include "api/tinker_routes.h"
#include "common/log.h"

namespace tinkerd::api {

Result<json> TinkerRoutes::client_config(Call & call) {
    // pyqwest cannot be installed from Debian; plain httpx works. JWT exchange off; chunks in parallel
    // (the scheduler orders them by seq_id); protobuf bodies uncompressed (zstd is still accepted).
    // SDK 0.38 flags: one retrieve_futures long poll per sampling session clone (completion_queues.h); custom
    // losses run client-side through forward_backward (no create_custom_loss); random sampler clone ids (no
    // join_sampling_session).
    // retrieve_futures queues live in this process: with several front ends on one database a poll could
    // reach another one, so shared databases keep per-request polls.
    return json{{"use_pyqwest_transport", false},
                {"pjwt_auth_enabled", false},
                {"proto_compress_fwdbwd", false},
                {"parallel_fwdbwd_chunks", true},
                {"create_model_via_load_weights", false},
                {"sample_no_retries", false},
                {"sample_use_retrieve_futures", !db_->shared()},
                {"custom_loss_server_side", false},
                {"sample_join_sampling_session", false}};
}

Result<json> TinkerRoutes::dynamic_config(Call & call) {
    // SDK 0.38: abandoned samples are cancelled (cancel_future), up to 64 per batch.
    return json{{"refresh_interval_sec", 300}, {"sample_cancel_enabled", true}, {"sample_cancel_max_batch_size", 64}};
}

// POST /sessions/{id}/finish (SDK 0.38 ServiceClient.close / `with ServiceClient()`): the session ends
// now, as if its heartbeat had stopped: its models leave memory, its checkpoints stay.
Result<json> TinkerRoutes::finish_session(Call & call) {
    const std::string session_id = call.params["session_id"];
    auto session = registry_->find_session(call.tenant, session_id);
    if (!session.ok()) {
        return session.error();
    }
    const json reason = call.body.value("reason", json::object());
    const std::string status = reason.is_object() ? reason.value("type", "success") : "success";
    if (status != "success" && status != "errored" && status != "interrupted") {
        return invalid_argument("reason.type: expected success, errored or interrupted, got '" + status + "'");
    }
    if (!session->expired) {
        TRY_STATUS(db_->set_session_finish_reason(session_id, status));
        end_session(session_id, "finished (" + status + ")");
    }
    return json::object();
}

// Endpoints of SDK 0.38 that this server does not implement: 400 naming the feature (never a bare 404,
// which the SDK reports like a missing object).
Result<json> TinkerRoutes::unsupported_endpoint(Call & call) {
    static const std::map<std::string, std::string> features = {
        {"copy_weights", "copy_weights (copying checkpoints between projects)"},
        {"save_weights_external", "save_weights_external (external / Hugging Face format checkpoints)"},
        {"external_weights_urls", "external_weights_urls (external checkpoint downloads)"},
        {"create_custom_loss", "create_custom_loss (server-side custom losses; they run client-side here)"},
        {"join_sampling_session", "join_sampling_session"},
        {"search", "sessions/search (session search)"},
        {"current", "billing/usage/checkpoints/current (checkpoint storage usage)"},
        {"events", "billing/usage/events (billing)"},
        {"audit", "audit (audit log)"},
    };
    if (call.body.is_object() && call.body.contains("model_id") && call.body.contains("seq_id")) {
        // save_weights_external takes a seq_id: release it so the run's later operations still run.
        release_refused_seq(call.tenant, call.body.value("model_id", ""), call.body["seq_id"]);
    }
    const std::string last = Router<Route>::split(call.req.path).back();
    auto it = features.find(last);
    const std::string feature = it != features.end() ? it->second : call.req.path;
    return unsupported(feature + " is not supported by this server");
}

Result<json> TinkerRoutes::healthz(Call & call) {
    return json{{"status", "ok"}};
}

Result<json> TinkerRoutes::server_capabilities(Call & call) {
    json models = json::array();
    for (const auto & model : registry_->models()) {
        models.push_back({{"model_name", model->name},
                          {"max_context_length", model->engine->config().max_position_embeddings},
                          {"trainable", true},
                          {"sampleable", true}});
    }
    return json{{"supported_models", models}};
}

Result<json> TinkerRoutes::create_session(Call & call) {
    auto tags = call.body.value("tags", json::array());
    if (!tags.is_array()) {
        return invalid_argument("tags: expected a list of strings");
    }
    for (size_t i = 0; i < tags.size(); ++i) {
        if (!tags[i].is_string()) {
            return invalid_argument("tags[" + std::to_string(i) + "]: expected a string, got " + tags[i].dump());
        }
    }
    auto metadata = get_string_map(call.body, "user_metadata");
    if (!metadata.ok()) {
        return metadata.error();
    }
    auto project = get_optional_string(call.body, "project_id");
    auto display_name = get_optional_string(call.body, "display_name");
    if (const Error * e = first_error(project, display_name)) {
        return *e;
    }
    store::SessionRow row;
    row.session_id = "sess-" + random_hex(12);
    row.tenant = call.tenant;
    row.tags_json = tags.dump();
    row.user_metadata_json = metadata->dump();
    row.project_id = project->value_or("");
    row.sdk_version = call.body.value("sdk_version", "");
    row.display_name = display_name->value_or("");
    row.created_at = now_seconds();
    row.last_heartbeat = row.created_at;
    TRY_STATUS(db_->insert_session(row));
    registry_->note_session_activity(row.session_id);
    events_->wake({row.session_id});  // the console's sessions view (a stream on every topic) shows it now
    LOG_INF("api", "session %s created (tenant %s, sdk %s)", row.session_id.c_str(), call.tenant.c_str(),
            row.sdk_version.c_str());
    return json{{"session_id", row.session_id}, {"type", "create_session"}};
}

Result<json> TinkerRoutes::session_heartbeat(Call & call) {
    auto session_id = get_string(call.body, "session_id");
    if (!session_id.ok()) {
        return session_id.error();
    }
    auto session = registry_->find_session(call.tenant, *session_id);
    if (!session.ok()) {
        return session.error();
    }
    if (session->expired) {
        return not_found("session '" + *session_id + "' expired (no heartbeat for " +
                         std::to_string(static_cast<int>(options_.session_timeout_seconds)) +
                         " s); its models were unloaded, its checkpoints are kept");
    }
    registry_->note_session_activity(*session_id);
    TRY_STATUS(db_->touch_session(*session_id, now_seconds()));
    return json{{"type", "session_heartbeat"}};
}

// One log line per telemetry event: kind, severity and, for errors, the type and message. Event
// payloads may carry request headers (API keys), so nothing else is logged.
Result<json> TinkerRoutes::telemetry(Call & call) {
    const std::string session = call.body.value("session_id", "?");
    auto events = call.body.value("events", json::array());
    if (!events.is_array()) {
        return json{{"status", "accepted"}};
    }
    for (const auto & event : events) {
        if (!event.is_object()) {
            continue;
        }
        const std::string kind = event.value("event", "?");
        const std::string severity = event.value("severity", "INFO");
        std::string detail;
        if (kind == "UNHANDLED_EXCEPTION") {
            detail = event.value("error_type", "") + ": " + event.value("error_message", "").substr(0, 200);
        } else if (kind == "GENERIC_EVENT") {
            detail = event.value("event_name", "");
        }
        LOG_INF("telemetry", "session=%s event=%s severity=%s %s", session.c_str(), kind.c_str(), severity.c_str(),
                detail.c_str());
    }
    return json{{"status", "accepted"}};
}

}  // namespace tinkerd::api
