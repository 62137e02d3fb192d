// GET /api/v1/training_runs/{run_id}/events: a run's live events as Server-Sent Events, for the console's
// run page (docs/console.md). The handler checks the run (the caller's, else 404), the resume point
// (Last-Event-ID or since_step) and a slot (429 when none is free), then hands the stream to EventStreams,
// whose thread calls refresh_run_feed: new metric points, the checkpoint list and the run when they change.
#include <algorithm>
#include <utility>

#include "api/event_streams.h"
#include "api/json_util.h"
#include "api/tinker_routes.h"

namespace tinkerd::api {

// What one stream has sent: the points up to after_id, and the last run and checkpoint list (as JSON text).
struct RunFeed {
    std::string tenant;
    std::string run_id;
    int64_t after_id = 0;               // the last point sent (Last-Event-ID on a reconnect)
    std::optional<int64_t> since_step;  // the first batch only: points from this step on
    bool first = true;
    std::string run_sent;
    std::string checkpoints_sent;
};

namespace {

constexpr const char * RETRY_AFTER_SECONDS = "30";

// JSON on one line, invalid UTF-8 replaced (never throws).
std::string compact(const json & value) {
    return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

// One event: "event: NAME\n[id: ID\n]data: JSON\n\n".
std::string sse_text(const std::string & name, const std::string & data, std::optional<int64_t> id = std::nullopt) {
    std::string out = "event: " + name + "\n";
    if (id) {
        out += "id: " + std::to_string(*id) + "\n";
    }
    return out + "data: " + data + "\n\n";
}

// Last-Event-ID: the number of the last point the client holds (this stream's `metrics` ids).
Result<std::optional<int64_t>> last_event_id_of(const http::Request & req) {
    const std::string & text = req.header("last-event-id");
    if (text.empty()) {
        return std::optional<int64_t>{};
    }
    if (text.size() <= 18 && text.find_first_not_of("0123456789") == std::string::npos) {
        return std::optional<int64_t>{std::stoll(text)};
    }
    return invalid_argument("Last-Event-ID: expected the id of a metrics event (digits), got '" + text.substr(0, 64) +
                            "'");
}

// Every slot taken (or push turned off): 429, as the server's other capacity refusals, and poll instead.
http::Response no_slot_response(size_t max_streams) {
    const std::string why =
        max_streams == 0 ? "push streams are off (--max-event-streams 0)"
                         : "too many event streams open (" + std::to_string(max_streams) + ", --max-event-streams)";
    http::Response busy =
        error_response(unavailable(why + "; poll GET /api/v1/training_runs/{run_id}/metrics instead"));
    busy.headers = {{"Retry-After", RETRY_AFTER_SECONDS}};
    return busy;
}

}  // namespace

void TinkerRoutes::run_events(Call & call, http::Respond respond) {
    auto row = registry_->find_run_row(call.tenant, call.params["run_id"], false);
    if (!row.ok()) {
        return respond(error_response(row.error()));
    }
    auto since_step = since_step_of(call.req);
    auto last_id = last_event_id_of(call.req);
    if (!since_step.ok() || !last_id.ok()) {
        return respond(error_response(since_step.ok() ? last_id.error() : since_step.error()));
    }
    auto feed = std::make_shared<RunFeed>();
    feed->tenant = call.tenant;
    feed->run_id = row->run_id;
    feed->after_id = last_id->value_or(0);
    if (!*last_id && call.req.query.count("since_step")) {
        feed->since_step = *since_step;
    }
    auto stream = events_->reserve(row->run_id, [this, feed] { return refresh_run_feed(*feed); });
    if (!stream) {
        return respond(no_slot_response(events_->max_streams()));
    }
    http::Response response;
    response.content_type = "text/event-stream";
    response.headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
    response.log_tag = "run=" + row->run_id + " events";
    response.stream = [events = events_, stream](std::shared_ptr<http::StreamWriter> writer) {
        events->attach(stream, std::move(writer));
    };
    respond(std::move(response));
}

// On the EventStreams thread: the events this stream has not seen yet (metrics, checkpoints, run).
std::string TinkerRoutes::refresh_run_feed(RunFeed & feed) {
    std::string out = metrics_event(feed);
    auto checkpoints = db_->list_run_checkpoints(feed.run_id);
    if (checkpoints.ok()) {
        json list = json::array();
        for (const auto & c : *checkpoints) {
            list.push_back(checkpoint_json(c, feed.tenant));
        }
        json data = {{"checkpoints", list}};
        if (std::string text = compact(data); text != feed.checkpoints_sent) {
            out += sse_text("checkpoints", text);
            feed.checkpoints_sent = std::move(text);
        }
    }
    auto row = db_->get_run(feed.run_id);
    if (row.ok() && row->has_value()) {
        json run = training_run_json(**row, feed.tenant);
        const RunPtr live = registry_->find_run(feed.run_id);
        run["loaded"] = live != nullptr && live->loaded.load();
        if (std::string text = compact(run); text != feed.run_sent) {
            out += sse_text("run", text);
            feed.run_sent = std::move(text);
        }
    }
    return out;
}

// The points written since the last event (the first one: since Last-Event-ID, or from since_step on, or
// all), as one `metrics` event whose id is the last point's number; "" when there is none.
std::string TinkerRoutes::metrics_event(RunFeed & feed) {
    auto upto = db_->last_metric_point_id(feed.run_id);
    if (!upto.ok() || (*upto <= feed.after_id && !feed.first)) {
        return "";
    }
    auto points =
        db_->metric_points_after(feed.run_id, feed.after_id, *upto, feed.first ? feed.since_step.value_or(0) : 0);
    if (!points.ok()) {
        return "";
    }
    const std::optional<int64_t> since_step = feed.first ? feed.since_step : std::nullopt;
    feed.first = false;
    feed.after_id = std::max(feed.after_id, *upto);
    if (points->empty()) {
        return "";
    }
    json list = json::array();
    for (const auto & p : *points) {
        list.push_back(metric_point_json(p.point));
    }
    auto downsampled = db_->metrics_downsampled(feed.run_id);
    json data = {{"points", list},
                 {"downsampled", downsampled.ok() && *downsampled},
                 {"since_step", since_step ? json(*since_step) : json(nullptr)}};
    return sse_text("metrics", compact(data), feed.after_id);
}

}  // namespace tinkerd::api
