// EventStreams: slots (an atomic count each Stream gives back itself, so a client that goes away frees its
// slot at once, from the I/O thread that saw it go), the feeding thread (wake-ups by topic, coalesced for
// ANY_TOPIC streams, a periodic tick, heartbeats) and stop(), which ends every stream with its terminating chunk.
#include "api/event_streams.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "common/log.h"

namespace tinkerd::api {

using Clock = std::chrono::steady_clock;

constexpr char HEARTBEAT[] = ": keepalive\n\n";

struct EventStreams::Stream {
    std::set<std::string> topics;
    bool any = false;  // on ANY_TOPIC
    Refresh refresh;
    std::shared_ptr<std::atomic<size_t>> slots;
    std::shared_ptr<http::StreamWriter> writer;  // set by attach(), before the thread sees the stream
    std::atomic<bool> released{false};
    Clock::time_point last_write = Clock::now();  // the feeding thread's, as the two below
    Clock::time_point last_refresh{};             // when it was last due
    bool pending = false;                         // woken, not refreshed yet (an ANY stream inside its gap)

    ~Stream() { release(); }
    // Gives the slot back (once), from any thread.
    void release() {
        if (!released.exchange(true)) {
            slots->fetch_sub(1);
        }
    }
    // Ends the body cleanly (the client may reconnect) and frees the slot.
    void end() {
        if (writer) {
            writer->finish();
        }
        release();
    }
};

EventStreams::EventStreams(EventStreamOptions options)
    : options_(options), slots_taken_(std::make_shared<std::atomic<size_t>>(0)) {
    thread_ = std::thread([this] { loop(); });
}

EventStreams::~EventStreams() {
    stop();
}

std::shared_ptr<EventStreams::Stream> EventStreams::reserve(std::set<std::string> topics, Refresh refresh) {
    std::lock_guard lock(mutex_);  // only reserve() adds, under the lock; a release may subtract meanwhile
    if (stopping_ || slots_taken_->load() >= options_.max_streams) {
        return nullptr;
    }
    slots_taken_->fetch_add(1);
    auto stream = std::make_shared<Stream>();
    stream->any = topics.count(ANY_TOPIC) > 0;
    stream->topics = std::move(topics);
    stream->refresh = std::move(refresh);
    stream->slots = slots_taken_;
    return stream;
}

void EventStreams::attach(const std::shared_ptr<Stream> & stream, std::shared_ptr<http::StreamWriter> writer) {
    std::weak_ptr<Stream> weak = stream;
    writer->on_close([weak] {  // touches only the stream: it may run after this object is gone
        if (auto s = weak.lock()) {
            s->release();
        }
    });
    stream->writer = std::move(writer);
    {
        std::lock_guard lock(mutex_);
        if (!stopping_ && !stream->writer->closed()) {
            streams_.push_back(stream);
            woken_.insert(stream->topics.begin(), stream->topics.end());
            wake_.notify_one();
            return;
        }
    }
    stream->end();  // stopping, or the client is already gone
}

void EventStreams::wake(const std::set<std::string> & topics) {
    if (topics.empty()) {
        return;
    }
    {
        std::lock_guard lock(mutex_);
        woken_.insert(topics.begin(), topics.end());
    }
    wake_.notify_one();
}

void EventStreams::stop() {
    std::vector<std::shared_ptr<Stream>> left;
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) {
        thread_.join();
    }
    {
        std::lock_guard lock(mutex_);
        left.swap(streams_);
    }
    for (const auto & stream : left) {
        stream->end();
    }
}

size_t EventStreams::open_streams() const {
    return slots_taken_->load();
}

void EventStreams::loop() {
    auto next_tick = Clock::now() + options_.tick;
    auto wake_at = next_tick;
    std::unique_lock lock(mutex_);
    while (!stopping_) {
        wake_.wait_until(lock, wake_at, [&] { return stopping_ || !woken_.empty(); });
        if (stopping_) {
            return;
        }
        const bool tick = Clock::now() >= next_tick;
        if (tick) {
            next_tick = Clock::now() + options_.tick;
        }
        wake_at = next_tick;
        const std::vector<std::shared_ptr<Stream>> due = due_streams(tick, wake_at);
        const std::vector<std::shared_ptr<Stream>> all = streams_;
        lock.unlock();
        feed(due, all);
        lock.lock();
    }
}

std::vector<std::shared_ptr<EventStreams::Stream>> EventStreams::due_streams(bool tick, Clock::time_point & wake_at) {
    std::erase_if(streams_, [](const auto & s) { return s->released.load() || s->writer->closed(); });
    const auto now = Clock::now();
    std::vector<std::shared_ptr<Stream>> due;
    for (const auto & s : streams_) {
        s->pending = s->pending || (s->any && !woken_.empty()) ||
                     std::any_of(s->topics.begin(), s->topics.end(), [&](const auto & t) { return woken_.count(t); });
        const auto ready_at = s->any ? s->last_refresh + options_.coalesce : s->last_refresh;
        if (tick || (s->pending && now >= ready_at)) {
            s->pending = false;
            s->last_refresh = now;
            due.push_back(s);
        } else if (s->pending) {
            wake_at = std::min(wake_at, ready_at);
        }
    }
    woken_.clear();
    return due;
}

void EventStreams::feed(const std::vector<std::shared_ptr<Stream>> & due,
                        const std::vector<std::shared_ptr<Stream>> & all) {
    for (const auto & stream : due) {
        if (stream->released.load()) {
            continue;
        }
        std::string text;
        try {
            text = stream->refresh();
        } catch (const std::exception & e) {
            LOG_WRN("api", "event stream on %s ended: %s",
                    stream->topics.empty() ? "-" : stream->topics.begin()->c_str(), e.what());
            stream->end();
            continue;
        }
        if (text.empty()) {
            continue;
        }
        if (!stream->writer->write(std::move(text))) {
            stream->release();
            continue;
        }
        stream->last_write = Clock::now();
    }
    const auto quiet_since = Clock::now() - options_.heartbeat;
    for (const auto & stream : all) {
        if (!stream->released.load() && stream->last_write <= quiet_since) {
            if (!stream->writer->write(HEARTBEAT)) {
                stream->release();
            }
            stream->last_write = Clock::now();
        }
    }
}

}  // namespace tinkerd::api
