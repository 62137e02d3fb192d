// GET /api/v1/events: the console's list, compare and status views live, as Server-Sent Events
// (docs/console.md). ?topics= names what to follow: `runs` (the caller's newest runs, summarised: steps, last
// loss, times, loaded), `status` (server_status and the caller's session ids) and `metrics` (new points of up
// to MAX_COMPARED runs named by run_ids). Served by the EventStreams thread under --max-event-streams, as a
// run's own stream (run_events.cpp); each event is sent when its content changed.
#include <algorithm>
#include <set>
#include <utility>

#include "api/event_feeds.h"
#include "api/tinker_routes.h"

namespace tinkerd::api {

namespace {

constexpr size_t MAX_COMPARED = 8;  // run_ids of one stream
constexpr int64_t MAX_LISTED_RUNS = 200;
constexpr int64_t DEFAULT_LISTED_RUNS = 50;
constexpr const char * POLL_INSTEAD =
    "GET /api/v1/training_runs, /api/v1/server_status or /api/v1/training_runs/{run_id}/metrics";

struct ConsoleQuery {
    std::set<std::string> topics;
    std::vector<std::string> run_ids;  // in the order given, without repeats
    int64_t runs_limit = DEFAULT_LISTED_RUNS;
    std::optional<int64_t> since_step;
};

std::vector<std::string> split_list(const std::string & text) {
    std::vector<std::string> out;
    size_t start = 0;
    for (size_t end; (end = text.find(',', start)) != std::string::npos; start = end + 1) {
        out.push_back(text.substr(start, end - start));
    }
    out.push_back(text.substr(start));
    return out;
}

Result<std::set<std::string>> topics_of(const http::Request & req) {
    auto it = req.query.find("topics");
    if (it == req.query.end() || it->second.empty()) {
        return invalid_argument("topics: required, a comma-separated list of runs, status and metrics");
    }
    std::set<std::string> topics;
    for (const auto & topic : split_list(it->second)) {
        if (topic != "runs" && topic != "status" && topic != "metrics") {
            return invalid_argument("topics: unknown topic '" + topic.substr(0, 64) +
                                    "' (expected runs, status or metrics)");
        }
        topics.insert(topic);
    }
    return topics;
}

// A parameter that belongs to one topic only: 400 naming it when given without that topic.
Result<void> only_with(const http::Request & req, const std::string & name, const std::set<std::string> & topics,
                       const std::string & topic) {
    if (req.query.count(name) && !topics.count(topic)) {
        return invalid_argument(name + ": only with topics=" + topic);
    }
    return {};
}

Result<std::vector<std::string>> run_ids_of(const http::Request & req) {
    auto it = req.query.find("run_ids");
    if (it == req.query.end() || it->second.empty()) {
        return invalid_argument("run_ids: required with topics=metrics (a comma-separated list of run ids)");
    }
    std::vector<std::string> ids;
    for (const auto & id : split_list(it->second)) {
        if (id.empty()) {
            return invalid_argument("run_ids: an empty run id in '" + it->second.substr(0, 64) + "'");
        }
        if (std::find(ids.begin(), ids.end(), id) == ids.end()) {
            ids.push_back(id);
        }
    }
    if (ids.size() > MAX_COMPARED) {
        return invalid_argument("run_ids: at most " + std::to_string(MAX_COMPARED) + " runs, got " +
                                std::to_string(ids.size()));
    }
    return ids;
}

Result<int64_t> runs_limit_of(const http::Request & req) {
    auto it = req.query.find("limit");
    if (it == req.query.end()) {
        return DEFAULT_LISTED_RUNS;
    }
    const std::string & text = it->second;
    if (!text.empty() && text.size() <= 4 && text.find_first_not_of("0123456789") == std::string::npos) {
        const int64_t limit = std::stoll(text);
        if (limit >= 1 && limit <= MAX_LISTED_RUNS) {
            return limit;
        }
    }
    return invalid_argument("limit: expected an integer from 1 to " + std::to_string(MAX_LISTED_RUNS) + ", got '" +
                            text.substr(0, 64) + "'");
}

Result<ConsoleQuery> console_query_of(const http::Request & req) {
    ConsoleQuery query;
    auto topics = topics_of(req);
    if (!topics.ok()) {
        return topics.error();
    }
    query.topics = *topics;
    for (auto [name, topic] :
         {std::pair<const char *, const char *>{"run_ids", "metrics"}, {"since_step", "metrics"}, {"limit", "runs"}}) {
        TRY_STATUS(only_with(req, name, query.topics, topic));
    }
    if (query.topics.count("metrics")) {
        auto ids = run_ids_of(req);
        auto since = since_step_of(req);
        if (!ids.ok() || !since.ok()) {
            return ids.ok() ? since.error() : ids.error();
        }
        query.run_ids = *ids;
        if (req.query.count("since_step")) {
            query.since_step = *since;
        }
    }
    auto limit = runs_limit_of(req);
    if (!limit.ok()) {
        return limit.error();
    }
    query.runs_limit = *limit;
    return query;
}

// Adds the points after summary.after_id to the summary.
void update_summary(store::Database & db, const std::string & run_id, RunSummary & summary) {
    auto upto = db.last_metric_point_id(run_id);
    if (!upto.ok() || *upto <= summary.after_id) {
        return;
    }
    auto points = db.metric_points_after(run_id, summary.after_id, *upto, 0);
    if (!points.ok()) {
        return;
    }
    for (const auto & numbered : *points) {
        const store::MetricPoint & p = numbered.point;
        summary.steps = std::max(summary.steps, p.step);
        auto loss = p.values.find("loss:sum");
        if (p.op == "forward_backward" && loss != p.values.end()) {
            summary.last_loss = loss->second;
        }
        summary.first_time = summary.first_time ? std::min(*summary.first_time, p.time) : p.time;
        summary.last_time = p.time;
    }
    summary.after_id = *upto;
}

json optional_json(const std::optional<double> & value) {
    return value ? json(*value) : json(nullptr);
}

}  // namespace

void TinkerRoutes::console_events(Call & call, http::Respond respond) {
    auto query = console_query_of(call.req);
    if (!query.ok()) {
        return respond(error_response(query.error()));
    }
    auto feed = std::make_shared<ConsoleFeed>();
    feed->tenant = call.tenant;
    feed->runs = query->topics.count("runs") > 0;
    feed->status = query->topics.count("status") > 0;
    feed->runs_limit = query->runs_limit;
    std::set<std::string> topics;
    for (const auto & id : query->run_ids) {
        auto row = registry_->find_run_row(call.tenant, id, false);
        if (!row.ok()) {
            return respond(error_response(row.error()));
        }
        RunFeed run;
        run.tenant = call.tenant;
        run.run_id = row->run_id;
        run.since_step = query->since_step;
        feed->metrics.push_back(std::move(run));
        topics.insert(row->run_id);
    }
    if (feed->runs || feed->status) {
        topics = {EventStreams::ANY_TOPIC};  // any run's points or checkpoints, at most once per coalescing gap
    }
    auto stream = events_->reserve(topics, [this, feed] { return refresh_console_feed(*feed); });
    if (!stream) {
        return respond(no_slot_response(events_->max_streams(), POLL_INSTEAD));
    }
    respond(event_stream_response(events_, std::move(stream), "events topics=" + call.req.query.at("topics")));
}

// On the EventStreams thread: each topic's event, where its content changed since it was last sent.
std::string TinkerRoutes::refresh_console_feed(ConsoleFeed & feed) {
    std::string out;
    if (feed.runs) {
        out += runs_event(feed);
    }
    if (feed.status) {
        out += status_event(feed);
    }
    for (auto & run : feed.metrics) {
        if (auto points = new_points(run)) {
            (*points)["training_run_id"] = run.run_id;
            out += sse_text("metrics", compact_json(*points));
        }
    }
    return out;
}

// `runs`: the caller's newest runs (as GET /api/v1/training_runs lists them) with what the runs list shows.
std::string TinkerRoutes::runs_event(ConsoleFeed & feed) {
    auto runs = db_->list_runs(feed.tenant, store::Page{feed.runs_limit, 0});
    if (!runs.ok()) {
        return "";
    }
    std::map<std::string, RunSummary> listed;  // only these are kept: the map stays as long as the list
    json rows = json::array();
    for (const auto & row : runs->first) {
        RunSummary & summary = listed[row.run_id] = std::move(feed.summaries[row.run_id]);
        update_summary(*db_, row.run_id, summary);
        const RunPtr live = registry_->find_run(row.run_id);
        rows.push_back(json{{"training_run_id", row.run_id},
                            {"base_model", row.base_model},
                            {"lora_rank", row.lora_rank},
                            {"last_request_time", iso_time(row.last_request_time)},
                            {"loaded", live != nullptr && live->loaded.load()},
                            {"steps", summary.steps},
                            {"last_loss", optional_json(summary.last_loss)},
                            {"first_time", optional_json(summary.first_time)},
                            {"last_time", optional_json(summary.last_time)}});
    }
    feed.summaries = std::move(listed);
    std::string text = compact_json(json{{"training_runs", rows}, {"total_count", runs->second}});
    if (text == feed.runs_sent) {
        return "";
    }
    feed.runs_sent = text;
    return sse_text("runs", text);
}

// `status`: GET /api/v1/server_status's answer and the caller's session ids (GET /api/v1/sessions), sent
// when more than the clock (uptime, session ages) changed.
std::string TinkerRoutes::status_event(ConsoleFeed & feed) {
    http::Request req;
    req.query["limit"] = "100";
    Call call{req, feed.tenant, {}, json::object()};
    auto status = server_status(call);
    auto sessions = list_sessions(call);
    if (!status.ok() || !sessions.ok()) {
        return "";
    }
    json data = {{"status", *status}, {"session_ids", (*sessions)["sessions"]}};
    json steady = data;
    steady["status"].erase("uptime_s");
    for (auto & session : steady["status"]["sessions"]) {
        session.erase("age_s");
    }
    std::string key = compact_json(steady);
    if (key == feed.status_sent) {
        return "";
    }
    feed.status_sent = std::move(key);
    return sse_text("status", compact_json(data));
}

}  // namespace tinkerd::api
