// What each push stream has sent so far (the state its Refresh keeps between calls on the EventStreams
// thread): RunFeed for a run's stream (run_events.cpp) and for each run of a console stream's `metrics`
// topic; ConsoleFeed for GET /api/v1/events (console_events.cpp). Plus the SSE text helpers both share.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/event_streams.h"
#include "api/json_util.h"
#include "http/server.h"

namespace tinkerd::api {

// A run's points sent up to after_id, and the last run and checkpoint list sent (as JSON text).
struct RunFeed {
    std::string tenant;
    std::string run_id;
    int64_t after_id = 0;               // the last point sent (Last-Event-ID on a reconnect)
    std::optional<int64_t> since_step;  // the first batch only: points from this step on
    bool first = true;
    std::string run_sent;
    std::string checkpoints_sent;
};

// What a run's points say for the runs list, updated from the points after after_id only.
struct RunSummary {
    int64_t after_id = 0;
    int64_t steps = 0;                 // the largest step recorded
    std::optional<double> last_loss;   // the last forward_backward loss:sum
    std::optional<double> first_time;  // of the oldest point seen, seconds since the epoch
    std::optional<double> last_time;   // of the newest
};

// GET /api/v1/events: the topics asked for and what each has sent.
struct ConsoleFeed {
    std::string tenant;
    bool runs = false;    // topic runs: the caller's newest `runs_limit` runs, summarised
    bool status = false;  // topic status: server_status and the caller's session ids
    int64_t runs_limit = 50;
    std::map<std::string, RunSummary> summaries;  // of the runs last listed
    std::string runs_sent;
    std::string status_sent;       // without the clock-driven fields (uptime, session ages)
    std::vector<RunFeed> metrics;  // topic metrics: one per run id
};

// JSON on one line, invalid UTF-8 replaced (never throws).
std::string compact_json(const json & value);
// One event: "event: NAME\n[id: ID\n]data: JSON\n\n".
std::string sse_text(const std::string & name, const std::string & data, std::optional<int64_t> id = std::nullopt);
// Every slot taken (or push off): 429 with Retry-After, naming the flag and `poll_instead`.
http::Response no_slot_response(size_t max_streams, const std::string & poll_instead);
// The text/event-stream response that hands `stream` to `events` once its head is written.
http::Response event_stream_response(EventStreams * events, std::shared_ptr<EventStreams::Stream> stream,
                                     std::string log_tag);

}  // namespace tinkerd::api
