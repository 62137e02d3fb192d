// SDK 0.38's session search (POST sessions/search: filters on id, display name, user_metadata and status,
// newest first, cursor paging) and checkpoint storage usage (GET billing/usage/checkpoints/current). A
// tenant sees only its own sessions: "own" and "accessible" owners are the same here.
#include <algorithm>
#include <cctype>
#include <sstream>

#include "api/tinker_routes.h"

namespace tinkerd::api {

namespace {

// What a search asks for, checked.
struct SessionQuery {
    std::optional<std::string> session_id;
    std::optional<std::string> display_words_text;
    std::vector<std::string> display_words;  // lower case; each must appear in the name
    json user_metadata = json::object();
    std::optional<json> statuses;  // the request's list, or every status
    int64_t limit = 50;
    std::optional<std::string> cursor_session;
};

std::string lower(std::string text) {
    std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
    return text;
}

Result<void> check_owner(const json & body) {
    auto it = body.find("owner");
    if (it == body.end() || it->is_null()) {
        return {};
    }
    const std::string type = it->is_object() ? it->value("type", "") : "";
    if (type == "own" || type == "accessible") {
        return {};
    }
    if (type == "user") {
        return unsupported("owner.type 'user' is not supported: this server has no user URNs (use 'own')");
    }
    return invalid_argument("owner.type: expected own, accessible or user");
}

Result<std::optional<json>> parse_statuses(const json & body) {
    auto it = body.find("statuses");
    if (it == body.end() || it->is_null()) {
        return std::optional<json>();
    }
    if (!it->is_array() || it->empty()) {
        return invalid_argument("statuses: expected a non-empty list");
    }
    for (size_t i = 0; i < it->size(); ++i) {
        const json & s = (*it)[i];
        const std::string type = s.is_object() ? s.value("type", "") : "";
        if (type != "active" && type != "cancelled" && type != "failed" && type != "client_finished") {
            return invalid_argument("statuses[" + std::to_string(i) +
                                    "].type: expected active, cancelled, failed or client_finished");
        }
    }
    return std::optional<json>(*it);
}

Result<SessionQuery> parse_query(const json & body) {
    SessionQuery query;
    auto session_id = get_optional_string(body, "session_id");
    auto display = get_optional_string(body, "display_name");
    auto metadata = get_string_map(body, "user_metadata");
    auto limit = get_optional_int(body, "limit");
    auto statuses = parse_statuses(body);
    auto owner = check_owner(body);
    if (const Error * e = first_error(session_id, display, metadata, limit, statuses, owner)) {
        return *e;
    }
    if (limit->value_or(50) < 1 || limit->value_or(50) > 200) {
        return invalid_argument("limit: expected 1..200, got " + std::to_string(**limit));
    }
    if (body.contains("project_ids") && !body["project_ids"].is_null() && !body["project_ids"].is_array()) {
        return invalid_argument("project_ids: expected a list of strings");
    }
    query.session_id = *session_id;
    query.display_words_text = *display;
    if (*display) {
        std::istringstream words(lower(**display));
        for (std::string word; words >> word;) {
            query.display_words.push_back(word);
        }
    }
    query.user_metadata = *metadata;
    query.statuses = *statuses;
    query.limit = limit->value_or(50);
    const json cursor = body.value("cursor", json());
    if (!cursor.is_null()) {
        if (!cursor.is_object() || !cursor.contains("last_session_id") || !cursor["last_session_id"].is_string()) {
            return invalid_argument("cursor: expected the next_cursor of a previous page");
        }
        query.cursor_session = cursor["last_session_id"].get<std::string>();
    }
    return query;
}

// The session's SessionStatus: active, finished by its client, or none (ended by an idle heartbeat).
json session_status(const store::SessionRow & row) {
    if (!row.expired) {
        return json{{"type", "active"}};
    }
    if (!row.finish_reason.empty()) {
        return json{{"type", "client_finished"}, {"reason", {{"type", row.finish_reason}}}};
    }
    return nullptr;
}

bool status_matches(const std::optional<json> & statuses, const store::SessionRow & row) {
    if (!statuses) {
        return true;
    }
    const json status = session_status(row);
    for (const auto & wanted : *statuses) {
        if (status.is_null() || wanted["type"] != status["type"]) {
            continue;
        }
        const json reasons = wanted.value("reasons", json());
        if (!reasons.is_array() || std::find(reasons.begin(), reasons.end(), row.finish_reason) != reasons.end()) {
            return true;
        }
    }
    return false;
}

bool session_matches(const SessionQuery & query, const store::SessionRow & row) {
    const std::string name = lower(row.display_name);
    const bool words_match =
        query.display_words_text &&
        std::all_of(query.display_words.begin(), query.display_words.end(),
                    [&](const std::string & word) { return name.find(word) != std::string::npos; });
    const bool id_match = query.session_id && *query.session_id == row.session_id;
    if ((query.session_id || query.display_words_text) && !words_match && !id_match) {
        return false;
    }
    const json metadata = json::parse(row.user_metadata_json, nullptr, false);
    for (const auto & [key, value] : query.user_metadata.items()) {
        if (!metadata.is_object() || !metadata.contains(key) || metadata[key] != value) {
            return false;
        }
    }
    return status_matches(query.statuses, row);
}

}  // namespace

// Walks the tenant's sessions newest first in batches until a page is full; next_cursor names the last one
// returned when more may follow.
Result<json> TinkerRoutes::search_sessions(Call & call) {
    auto query = parse_query(call.body);
    if (!query.ok()) {
        return query.error();
    }
    std::optional<store::SessionCursor> after;
    if (query->cursor_session) {
        auto last = registry_->find_session(call.tenant, *query->cursor_session);
        if (!last.ok()) {
            return invalid_argument("cursor.last_session_id: no such session '" + *query->cursor_session + "'");
        }
        after = store::SessionCursor{last->created_at, last->session_id};
    }
    json sessions = json::array();
    bool more = true;
    while (more && static_cast<int64_t>(sessions.size()) < query->limit) {
        auto batch = db_->sessions_after(call.tenant, after, 500);
        TRY_STATUS(batch);
        more = batch->size() == 500;
        for (const auto & row : *batch) {
            after = store::SessionCursor{row.created_at, row.session_id};
            if (!session_matches(*query, row)) {
                continue;
            }
            auto summary = session_summary(row);
            TRY_STATUS(summary);
            sessions.push_back(std::move(summary).value());
            if (static_cast<int64_t>(sessions.size()) == query->limit) {
                more = true;  // the next page may hold more
                break;
            }
        }
    }
    json next = nullptr;
    if (more && !sessions.empty()) {
        next = json{{"last_created_at", sessions.back()["created_at"]},
                    {"last_session_id", sessions.back()["session_id"]}};
    }
    return json{{"sessions", sessions}, {"next_cursor", next}};
}

// A session as the SDK's SessionSummary.
Result<json> TinkerRoutes::session_summary(const store::SessionRow & row) {
    auto usage = db_->session_checkpoint_usage(row.session_id);
    TRY_STATUS(usage);
    const json metadata = json::parse(row.user_metadata_json, nullptr, false);
    return json{{"session_id", row.session_id},
                {"created_at", iso_time(row.created_at)},
                {"owner", row.tenant},
                {"project_id", row.project_id},
                {"status", session_status(row)},
                {"checkpoints_count", usage->count},
                {"display_name", row.display_name.empty() ? json(nullptr) : json(row.display_name)},
                {"user_metadata", metadata.is_discarded() ? json(nullptr) : metadata},
                {"checkpoint_storage_bytes", usage->size_bytes}};
}

// The caller's named checkpoints, grouped by the project of the session that made them. There is no price:
// the cost fields are null.
Result<json> TinkerRoutes::checkpoint_storage_usage(Call & call) {
    std::optional<std::string> project;
    if (auto it = call.req.query.find("project_id"); it != call.req.query.end()) {
        project = it->second;
    }
    auto usage = db_->checkpoint_usage_by_project(call.tenant, project);
    TRY_STATUS(usage);
    json data = json::array();
    for (const auto & item : *usage) {
        data.push_back({{"project_id", item.project_id.empty() ? json(nullptr) : json(item.project_id)},
                        {"org_user_urn", nullptr},
                        {"user_name", call.tenant},
                        {"checkpoint_count", item.count},
                        {"size_bytes", item.size_bytes},
                        {"size_gigabytes", static_cast<double>(item.size_bytes) / 1e9},
                        {"estimated_monthly_cost_usd", nullptr}});
    }
    return json{{"effective_rate_usd_per_gigabyte_month", nullptr}, {"data", data}};
}

}  // namespace tinkerd::api
