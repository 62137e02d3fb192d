// GET /api/v1/training_runs/{run_id}/events: a run's live events as Server-Sent Events, for the console's
// run page (docs/console.md). The handler checks the run (the caller's, else 404), the resume point
// (Last-Event-ID or since_step) and a slot (429 when none is free), then hands the stream to EventStreams,
// whose thread calls refresh_run_feed: new metric points, the checkpoint list and the run when they change.
// Also the SSE helpers console_events.cpp shares (event_feeds.h).
#include <algorithm>
#include <utility>

#include "api/event_feeds.h"
#include "api/json_util.h"
#include "api/tinker_routes.h"

namespace tinkerd::api {

namespace {

constexpr const char * RETRY_AFTER_SECONDS = "30";

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

}  // namespace

std::string compact_json(const json & value) {
    return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string sse_text(const std::string & name, const std::string & data, std::optional<int64_t> id) {
    std::string out = "event: " + name + "\n";
    if (id) {
        out += "id: " + std::to_string(*id) + "\n";
    }
    return out + "data: " + data + "\n\n";
}

// 429, as the server's other capacity refusals, and poll instead.
http::Response no_slot_response(size_t max_streams, const std::string & poll_instead) {
    const std::string why =
        max_streams == 0 ? "push streams are off (--max-event-streams 0)"
                         : "too many event streams open (" + std::to_string(max_streams) + ", --max-event-streams)";
    http::Response busy = error_response(unavailable(why + "; poll " + poll_instead + " instead"));
    busy.headers = {{"Retry-After", RETRY_AFTER_SECONDS}};
    return busy;
}

http::Response event_stream_response(EventStreams * events, std::shared_ptr<EventStreams::Stream> stream,
                                     std::string log_tag) {
    http::Response response;
    response.content_type = "text/event-stream";
    response.headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
    response.log_tag = std::move(log_tag);
    response.stream = [events, stream](std::shared_ptr<http::StreamWriter> writer) {
        events->attach(stream, std::move(writer));
    };
    return response;
}

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
    auto stream = events_->reserve({row->run_id}, [this, feed] { return refresh_run_feed(*feed); });
    if (!stream) {
        return respond(no_slot_response(events_->max_streams(), "GET /api/v1/training_runs/{run_id}/metrics"));
    }
    respond(event_stream_response(events_, std::move(stream), "run=" + row->run_id + " events"));
}

// On the EventStreams thread: the events this stream has not seen yet (metrics, checkpoints, run).
std::string TinkerRoutes::refresh_run_feed(RunFeed & feed) {
    std::string out;
    if (auto points = new_points(feed)) {
        out = sse_text("metrics", compact_json(*points), feed.after_id);
    }
    auto checkpoints = db_->list_run_checkpoints(feed.run_id);
    if (checkpoints.ok()) {
        json list = json::array();
        for (const auto & c : *checkpoints) {
            list.push_back(checkpoint_json(c, feed.tenant));
        }
        json data = {{"checkpoints", list}};
        if (std::string text = compact_json(data); text != feed.checkpoints_sent) {
            out += sse_text("checkpoints", text);
            feed.checkpoints_sent = std::move(text);
        }
    }
    auto row = db_->get_run(feed.run_id);
    if (row.ok() && row->has_value()) {
        json run = training_run_json(**row, feed.tenant);
        const RunPtr live = registry_->find_run(feed.run_id);
        run["loaded"] = live != nullptr && live->loaded.load();
        if (std::string text = compact_json(run); text != feed.run_sent) {
            out += sse_text("run", text);
            feed.run_sent = std::move(text);
        }
    }
    return out;
}

// The points written since the last event (the first one: since Last-Event-ID, or from since_step on, or
// all), as a `metrics` event's data (feed.after_id is then the last point's number); nullopt when none.
std::optional<json> TinkerRoutes::new_points(RunFeed & feed) {
    auto upto = db_->last_metric_point_id(feed.run_id);
    if (!upto.ok() || (*upto <= feed.after_id && !feed.first)) {
        return std::nullopt;
    }
    auto points =
        db_->metric_points_after(feed.run_id, feed.after_id, *upto, feed.first ? feed.since_step.value_or(0) : 0);
    if (!points.ok()) {
        return std::nullopt;
    }
    const std::optional<int64_t> since_step = feed.first ? feed.since_step : std::nullopt;
    feed.first = false;
    feed.after_id = std::max(feed.after_id, *upto);
    if (points->empty()) {
        return std::nullopt;
    }
    json list = json::array();
    for (const auto & p : *points) {
        list.push_back(metric_point_json(p.point));
    }
    auto downsampled = db_->metrics_downsampled(feed.run_id);
    json data = {{"points", list},
                 {"downsampled", downsampled.ok() && *downsampled},
                 {"since_step", since_step ? json(*since_step) : json(nullptr)}};
    return data;
}

}  // namespace tinkerd::api
