// REST handlers (the SDK's RestClient): training runs, checkpoints (list, delete, publish, TTL, archive),
// sessions and samplers, straight from the database; plus the one-time archive download itself.
#include <chrono>

#include "api/event_streams.h"
#include "api/tinker_routes.h"
#include "common/log.h"
#include "common/redact.h"

namespace tinkerd::api {

namespace {

Result<store::Page> parse_page(const http::Request & req, int64_t default_limit) {
    store::Page page;
    page.limit = default_limit;
    for (auto [key, dst] : {std::pair<const char *, int64_t *>{"limit", &page.limit}, {"offset", &page.offset}}) {
        auto it = req.query.find(key);
        if (it == req.query.end()) {
            continue;
        }
        try {
            size_t used = 0;
            *dst = std::stoll(it->second, &used);
            if (used != it->second.size() || *dst < 0) {
                throw std::invalid_argument("negative");
            }
        } catch (const std::exception &) {
            return invalid_argument(std::string(key) + ": expected a non-negative integer, got '" + it->second + "'");
        }
    }
    page.limit = std::min<int64_t>(page.limit, 1000);
    return page;
}

json cursor_json(const store::Page & page, int64_t total) {
    return json{{"offset", page.offset}, {"limit", page.limit}, {"total_count", total}};
}

bool accessible_scope(const http::Request & req) {
    auto it = req.query.find("access_scope");
    return it != req.query.end() && it->second == "accessible";
}

}  // namespace

// The checkpoint named by the URL's {run_id}/{kind}/{name}, which the caller must own.
Result<TinkerPath> TinkerRoutes::owned_checkpoint_path(Call & call) {
    auto path = parse_checkpoint_id(call.params["run_id"], call.params["kind"] + "/" + call.params["name"]);
    if (!path.ok()) {
        return path.error();
    }
    TRY_STATUS(registry_->find_checkpoint(call.tenant, *path, false));
    return path;
}

json TinkerRoutes::checkpoint_json(const store::CheckpointRow & row, const std::string & tenant) {
    json metadata = row.tenant == tenant ? json::parse(row.user_metadata_json, nullptr, false) : json(nullptr);
    return json{{"checkpoint_id", row.checkpoint_id},
                {"checkpoint_type", row.checkpoint_type},
                {"time", iso_time(row.created_at)},
                {"tinker_path", "tinker://" + row.run_id + "/" + row.checkpoint_id},
                {"size_bytes", row.size_bytes},
                {"public", row.is_public},
                {"user_metadata", metadata.is_discarded() ? json(nullptr) : metadata},
                {"expires_at", row.expires_at ? json(iso_time(*row.expires_at)) : json(nullptr)}};
}

json TinkerRoutes::training_run_json(const store::TrainingRunRow & row, const std::string & tenant) {
    const bool owner = row.tenant == tenant;
    json out = {{"training_run_id", row.run_id},
                {"base_model", row.base_model},
                {"model_owner", row.tenant},
                {"is_lora", true},
                {"corrupted", false},
                {"lora_rank", row.lora_rank},
                {"last_request_time", iso_time(row.last_request_time)},
                {"last_checkpoint", nullptr},
                {"last_sampler_checkpoint", nullptr},
                {"user_metadata", json::parse(row.user_metadata_json, nullptr, false)}};
    if (out["user_metadata"].is_discarded() || !owner) {
        out["user_metadata"] = nullptr;  // another tenant sees a published run, not its metadata
    }
    if (!owner) {
        return out;
    }
    // the run's LoRA configuration (create_model's), for its owner: targets, rank, seed, optimizer
    out["lora_config"] = {{"rank", row.lora_rank},
                          {"train_attn", row.train_attn},
                          {"train_mlp", row.train_mlp},
                          {"train_unembed", row.train_unembed},
                          {"seed", row.seed ? json(*row.seed) : json(nullptr)},
                          {"optimizer_config", optimizer_config_json(row.optimizer)}};
    auto last = db_->last_checkpoint(row.run_id, "training");
    if (last.ok() && last->has_value()) {
        out["last_checkpoint"] = checkpoint_json(**last, tenant);
    }
    auto last_sampler = db_->last_checkpoint(row.run_id, "sampler");
    if (last_sampler.ok() && last_sampler->has_value()) {
        out["last_sampler_checkpoint"] = checkpoint_json(**last_sampler, tenant);
    }
    return out;
}

Result<json> TinkerRoutes::list_training_runs(Call & call) {
    auto page = parse_page(call.req, 20);
    if (!page.ok()) {
        return page.error();
    }
    auto runs = db_->list_runs(call.tenant, *page);
    if (!runs.ok()) {
        return runs.error();
    }
    json list = json::array();
    for (const auto & row : runs->first) {
        list.push_back(training_run_json(row, call.tenant));
    }
    return json{{"training_runs", list}, {"cursor", cursor_json(*page, runs->second)}};
}

Result<json> TinkerRoutes::get_training_run(Call & call) {
    auto row = registry_->find_run_row(call.tenant, call.params["run_id"], accessible_scope(call.req));
    if (!row.ok()) {
        return row.error();
    }
    return training_run_json(*row, call.tenant);
}

Result<json> TinkerRoutes::list_run_checkpoints(Call & call) {
    auto row = registry_->find_run_row(call.tenant, call.params["run_id"], true);
    if (!row.ok()) {
        return row.error();
    }
    auto checkpoints = db_->list_run_checkpoints(row->run_id);
    if (!checkpoints.ok()) {
        return checkpoints.error();
    }
    json list = json::array();
    for (const auto & c : *checkpoints) {
        if (c.tenant == call.tenant || c.is_public) {
            list.push_back(checkpoint_json(c, call.tenant));
        }
    }
    return json{{"checkpoints", list}, {"cursor", nullptr}};
}

Result<json> TinkerRoutes::list_user_checkpoints(Call & call) {
    auto page = parse_page(call.req, 100);
    if (!page.ok()) {
        return page.error();
    }
    auto checkpoints = db_->list_tenant_checkpoints(call.tenant, *page);
    if (!checkpoints.ok()) {
        return checkpoints.error();
    }
    json list = json::array();
    for (const auto & c : checkpoints->first) {
        list.push_back(checkpoint_json(c, call.tenant));
    }
    return json{{"checkpoints", list}, {"cursor", cursor_json(*page, checkpoints->second)}};
}

Result<json> TinkerRoutes::delete_checkpoint(Call & call) {
    auto path = parse_checkpoint_id(call.params["run_id"], call.params["checkpoint_id"]);
    if (!path.ok()) {
        return path.error();
    }
    auto checkpoint = registry_->find_checkpoint(call.tenant, *path, false);
    if (!checkpoint.ok()) {
        return checkpoint.error();
    }
    auto deleted = db_->delete_checkpoint(path->run_id, path->checkpoint_id());  // row first, then files
    if (!deleted.ok() && store::is_disk_full(deleted.error())) {
        // A full disk (reserve spent): the files go first, which frees the room the row's delete needs.
        LOG_WRN("api", "disk full: removing %s's files before its database row", path->str().c_str());
        TRY_STATUS(store::remove_checkpoint(checkpoint->dir));
        deleted = db_->delete_checkpoint(path->run_id, path->checkpoint_id());
    }
    TRY_STATUS(deleted);
    TRY_STATUS(store::remove_checkpoint(checkpoint->dir));
    LOG_INF("api", "deleted checkpoint %s", path->str().c_str());
    events_->wake({path->run_id});
    return json::object();
}

Result<json> TinkerRoutes::publish_checkpoint(Call & call) {
    auto path = parse_checkpoint_id(call.params["run_id"], call.params["kind"] + "/" + call.params["name"]);
    auto checkpoint =
        path.ok() ? registry_->find_checkpoint(call.tenant, *path, false) : Result<store::CheckpointRow>(path.error());
    if (!checkpoint.ok()) {
        return checkpoint.error();
    }
    TRY_STATUS(db_->set_checkpoint_public(path->run_id, path->checkpoint_id(), true));
    events_->wake({path->run_id});
    return json::object();
}

Result<json> TinkerRoutes::unpublish_checkpoint(Call & call) {
    auto path = parse_checkpoint_id(call.params["run_id"], call.params["kind"] + "/" + call.params["name"]);
    auto checkpoint =
        path.ok() ? registry_->find_checkpoint(call.tenant, *path, false) : Result<store::CheckpointRow>(path.error());
    if (!checkpoint.ok()) {
        return checkpoint.error();
    }
    TRY_STATUS(db_->set_checkpoint_public(path->run_id, path->checkpoint_id(), false));
    events_->wake({path->run_id});
    return json::object();
}

Result<json> TinkerRoutes::set_checkpoint_ttl(Call & call) {
    auto path = parse_checkpoint_id(call.params["run_id"], call.params["kind"] + "/" + call.params["name"]);
    auto checkpoint =
        path.ok() ? registry_->find_checkpoint(call.tenant, *path, false) : Result<store::CheckpointRow>(path.error());
    if (!checkpoint.ok()) {
        return checkpoint.error();
    }
    auto ttl = get_optional_int(call.body, "ttl_seconds");
    if (!ttl.ok()) {
        return ttl.error();
    }
    if (ttl->has_value() && **ttl <= 0) {
        return invalid_argument("ttl_seconds must be > 0, or null to remove the expiry");
    }
    std::optional<double> expires_at;
    if (ttl->has_value()) {
        expires_at = now_seconds() + static_cast<double>(**ttl);
    }
    TRY_STATUS(db_->set_checkpoint_expiry(path->run_id, path->checkpoint_id(), expires_at));
    events_->wake({path->run_id});
    return json::object();
}

// A one-time URL on this server, valid for archive_url_ttl_seconds, that needs no key.
Result<json> TinkerRoutes::checkpoint_archive(Call & call) {
    auto path = parse_checkpoint_id(call.params["run_id"], call.params["kind"] + "/" + call.params["name"]);
    auto checkpoint =
        path.ok() ? registry_->find_checkpoint(call.tenant, *path, true) : Result<store::CheckpointRow>(path.error());
    if (!checkpoint.ok()) {
        return checkpoint.error();
    }
    const std::string token = random_hex(40);
    const double expires_at = now_seconds() + options_.archive_url_ttl_seconds;
    registry_->add_archive_token(token, checkpoint->dir, expires_at);
    std::string host = call.req.header("host");
    if (host.empty()) {
        host = "127.0.0.1";
    }
    return json{{"url", "http://" + host + "/api/v1/archive_downloads/" + token}, {"expires", iso_time(expires_at)}};
}

void TinkerRoutes::download_archive(Call & call, http::Respond respond) {
    const auto dir = registry_->take_archive_token(call.params["token"], now_seconds());
    if (!dir) {
        respond(error_response(404, "archive link unknown, already used or expired"));
        return;
    }
    const auto started = std::chrono::steady_clock::now();
    auto tar = store::tar_directory(*dir);
    if (!tar.ok()) {
        respond(error_response(tar.error()));
        return;
    }
    LOG_INF("api", "archive of %s built (%.1f MiB, %.1f ms)", redact_paths(*dir).c_str(), tar->size() / 1048576.0,
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count());
    http::Response response;
    response.content_type = "application/x-tar";
    response.body = std::move(tar).value();
    response.headers.emplace_back("Content-Disposition", "attachment; filename=\"checkpoint.tar\"");
    respond(std::move(response));
}

Result<json> TinkerRoutes::list_sessions(Call & call) {
    auto page = parse_page(call.req, 20);
    if (!page.ok()) {
        return page.error();
    }
    auto sessions = db_->list_sessions(call.tenant, *page);
    if (!sessions.ok()) {
        return sessions.error();
    }
    json ids = json::array();
    for (const auto & s : sessions->first) {
        ids.push_back(s.session_id);
    }
    return json{{"sessions", ids}};
}

Result<json> TinkerRoutes::get_session(Call & call) {
    auto session = registry_->find_session(call.tenant, call.params["session_id"]);
    if (!session.ok()) {
        return session.error();
    }
    auto runs = db_->runs_of_session(session->session_id);
    auto samplers = db_->samplers_of_session(session->session_id);
    if (!runs.ok() || !samplers.ok()) {
        return runs.ok() ? samplers.error() : runs.error();
    }
    json run_ids = json::array();
    for (const auto & r : *runs) {
        run_ids.push_back(r.run_id);
    }
    json sampler_ids = json::array();
    for (const auto & s : *samplers) {
        sampler_ids.push_back(s.sampler_id);
    }
    return json{{"training_run_ids", run_ids},
                {"sampler_ids", sampler_ids},
                {"user_metadata", json::parse(session->user_metadata_json, nullptr, false)},
                {"display_name", session->display_name.empty() ? json(nullptr) : json(session->display_name)}};
}

Result<json> TinkerRoutes::set_session_project(Call & call) {
    TRY_STATUS(registry_->find_session(call.tenant, call.params["session_id"]));
    return json::object();
}

Result<json> TinkerRoutes::get_sampler(Call & call) {
    auto row = db_->get_sampler(call.params["sampler_id"]);
    if (!row.ok()) {
        return row.error();
    }
    if (!row->has_value() || (*row)->tenant != call.tenant) {
        return not_found("sampler '" + call.params["sampler_id"] + "' not found");
    }
    const store::SamplerRow & s = **row;
    return json{{"sampler_id", s.sampler_id},
                {"base_model", s.base_model},
                {"model_path", s.model_path.empty() ? json(nullptr) : json(s.model_path)}};
}

}  // namespace tinkerd::api
