// Streamed responses: StreamState (the queue a StreamWriter fills from any thread, bounded by
// max_stream_buffer_bytes) and the Session side that sends it on the strand, one async write at a time,
// as HTTP/1.1 chunks (HTTP/1.0: raw bytes, then close), and logs the request when the stream ends.

#include <algorithm>
#include <boost/asio/write.hpp>
#include <cctype>
#include <cstdio>
#include <exception>
#include <sstream>
#include <utility>

#include "common/log.h"
#include "http/connection.h"

namespace tinkerd::http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

namespace {

constexpr char LAST_CHUNK[] = "0\r\n\r\n";

// Keeps a log line on one line whatever the client put in its path.
std::string printable(std::string text) {
    for (char & c : text) {
        if (std::iscntrl(static_cast<unsigned char>(c))) {
            c = '?';
        }
    }
    return text;
}

class StreamHandle final : public StreamWriter {
  public:
    explicit StreamHandle(std::shared_ptr<StreamState> state) : state_(std::move(state)) {}
    ~StreamHandle() override { state_->abandon(); }
    StreamHandle(const StreamHandle &) = delete;
    StreamHandle & operator=(const StreamHandle &) = delete;

    bool write(std::string data) override { return state_->write(std::move(data)); }
    void finish() override { state_->finish(); }
    bool closed() const override { return state_->closed(); }
    void on_close(std::function<void()> callback) override { state_->on_close(std::move(callback)); }

  private:
    std::shared_ptr<StreamState> state_;
};

}  // namespace

std::shared_ptr<StreamWriter> make_stream_writer(std::shared_ptr<StreamState> state) {
    return std::make_shared<StreamHandle>(std::move(state));
}

void refuse_stream(const std::function<void(std::shared_ptr<StreamWriter>)> & stream, const std::string & reason) {
    if (!stream) {
        return;
    }
    auto state = std::make_shared<StreamState>(std::weak_ptr<Session>(), std::weak_ptr<ServerContext>(), false, 0, "");
    state->close(reason);
    try {
        stream(make_stream_writer(std::move(state)));
    } catch (const std::exception & e) {
        LOG_ERR("http", "stream callback threw (on a refused stream): %s", e.what());
    }
}

// ---- StreamState ----

StreamState::StreamState(std::weak_ptr<Session> session, std::weak_ptr<ServerContext> context, bool chunked,
                         size_t max_unsent_bytes, std::string head)
    : session_(std::move(session)),
      context_(std::move(context)),
      chunked_(chunked),
      max_unsent_bytes_(max_unsent_bytes),
      pending_(std::move(head)),
      unsent_bytes_(pending_.size()) {}

bool StreamState::write(std::string data) {
    std::function<void()> callback;
    bool overflow = false;
    bool wake = false;
    {
        std::lock_guard lock(mutex_);
        if (closed_ || finished_) {
            return false;
        }
        if (data.empty()) {
            return true;
        }
        char size_line[24];
        const int size_length = chunked_ ? std::snprintf(size_line, sizeof size_line, "%zx\r\n", data.size()) : 0;
        const size_t framed = static_cast<size_t>(size_length) + data.size() + (chunked_ ? 2 : 0);
        if (unsent_bytes_ + framed > max_unsent_bytes_) {
            overflow = true;
            callback = close_locked("client too slow: over " + std::to_string(max_unsent_bytes_) + " bytes unsent");
        } else {
            pending_.append(size_line, static_cast<size_t>(size_length)).append(data);
            pending_.append(chunked_ ? "\r\n" : "");
            unsent_bytes_ += framed;
            body_bytes_ += data.size();
            wake = !session_busy_;
            session_busy_ = true;
        }
    }
    if (overflow) {
        wake_session();  // it drops the connection
        if (callback) {
            callback();
        }
        return false;
    }
    if (wake && !wake_session()) {
        close(gone_reason());
        return false;
    }
    return true;
}

void StreamState::finish() {
    std::function<void()> dropped;  // destroyed unlocked: it may hold the last StreamWriter
    bool wake = false;
    {
        std::lock_guard lock(mutex_);
        if (closed_ || finished_) {
            return;
        }
        finished_ = true;
        if (chunked_) {
            pending_ += LAST_CHUNK;
            unsent_bytes_ += sizeof LAST_CHUNK - 1;
        }
        dropped = std::move(on_close_);
        on_close_ = nullptr;
        wake = !session_busy_;
        session_busy_ = true;
    }
    if (wake) {
        wake_session();  // if the server is stopping, stop() closes the connection
    }
}

bool StreamState::closed() const {
    std::lock_guard lock(mutex_);
    return closed_;
}

void StreamState::on_close(std::function<void()> callback) {
    bool run_now = false;
    {
        std::lock_guard lock(mutex_);
        if (!closed_ && !finished_) {
            std::swap(on_close_, callback);  // the earlier one, if any, is destroyed unlocked
            return;
        }
        run_now = !finished_;  // closed before finish(); after finish() the callback is dropped
    }
    if (run_now && callback) {
        callback();
    }
}

// Like finish() without the last chunk: what was written is sent, then the connection is closed (so the
// client sees the body cut short). The on_close callback is dropped: its owner let go of the stream.
void StreamState::abandon() {
    std::function<void()> dropped;
    bool wake = false;
    {
        std::lock_guard lock(mutex_);
        if (closed_ || finished_) {
            return;
        }
        finished_ = true;
        abandoned_ = true;
        dropped = std::move(on_close_);
        on_close_ = nullptr;
        wake = !session_busy_;
        session_busy_ = true;
    }
    if (wake) {
        wake_session();
    }
}

bool StreamState::abandoned() const {
    std::lock_guard lock(mutex_);
    return abandoned_;
}

StreamState::Take StreamState::take(std::string & out) {
    std::lock_guard lock(mutex_);
    if (closed_) {
        return Take::CLOSED;
    }
    if (!pending_.empty()) {
        out.swap(pending_);
        return Take::DATA;
    }
    if (finished_) {
        return Take::DONE;
    }
    session_busy_ = false;
    return Take::IDLE;
}

void StreamState::sent(size_t bytes) {
    std::lock_guard lock(mutex_);
    unsent_bytes_ -= std::min(bytes, unsent_bytes_);
}

bool StreamState::close(const std::string & reason) {
    std::function<void()> callback;
    {
        std::lock_guard lock(mutex_);
        if (closed_) {
            return false;
        }
        callback = close_locked(reason);
    }
    if (callback) {
        callback();
    }
    return true;
}

std::string StreamState::close_reason() const {
    std::lock_guard lock(mutex_);
    return close_reason_;
}

size_t StreamState::body_bytes() const {
    std::lock_guard lock(mutex_);
    return body_bytes_;
}

std::function<void()> StreamState::close_locked(const std::string & reason) {
    closed_ = true;
    close_reason_ = reason;
    pending_.clear();
    std::function<void()> callback = std::move(on_close_);
    on_close_ = nullptr;
    return finished_ ? nullptr : callback;
}

std::string StreamState::gone_reason() const {
    auto context = context_.lock();
    if (!context) {
        return "server stopped";
    }
    std::lock_guard lock(context->mutex);
    return context->stopped ? "server stopped" : "connection closed";
}

bool StreamState::wake_session() {
    return post_to_session(context_, session_,
                           [self = shared_from_this()](Session & session) { session.pump_stream(self); });
}

// ---- the Session's side ----

void Session::start_stream(Response response, bool keep_alive) {
    const bool chunked = request_version_ >= 11;  // HTTP/1.0: the body ends when the connection closes
    stream_keep_alive_ = chunked && keep_alive;
    auto state =
        std::make_shared<StreamState>(weak_from_this(), context_, chunked, context_->options.max_stream_buffer_bytes,
                                      stream_head(response, chunked, stream_keep_alive_));
    stream_state_ = state;
    stream_close_reason_.clear();
    response_status_ = response.status;
    response_log_tag_ = std::move(response.log_tag);
    pump_stream(state);  // sends the head
    try {
        response.stream(make_stream_writer(state));
    } catch (const std::exception & e) {
        LOG_ERR("http", "stream callback threw on %s %s: %s", request_method_.c_str(), printable(request_path_).c_str(),
                e.what());
        state->close(std::string("the stream callback threw: ") + e.what());
        pump_stream(state);  // drops the connection
    }
}

std::string Session::stream_head(const Response & response, bool chunked, bool keep_alive) const {
    bhttp::response<bhttp::empty_body> message;
    message.version(request_version_);
    message.result(static_cast<unsigned>(response.status));
    message.set(bhttp::field::server, "tinkerd");
    message.set(bhttp::field::content_type, response.content_type);
    for (const auto & [name, value] : response.headers) {
        message.insert(name, value);
    }
    if (chunked) {
        message.chunked(true);
        message.keep_alive(keep_alive);
    } else {
        message.set(bhttp::field::connection, "close");
    }
    std::ostringstream out;
    out << message.base();
    return out.str();
}

void Session::pump_stream(const std::shared_ptr<StreamState> & state) {
    if (closed_ || state != stream_state_) {
        return;  // an old wake-up
    }
    if (state->closed()) {
        return on_stream_closed();  // even with a write pending: a slow client's may never end
    }
    if (stream_writing_) {
        return;  // on_stream_write() comes back here
    }
    switch (state->take(stream_out_)) {
        case StreamState::Take::IDLE:
            return;
        case StreamState::Take::DONE:
            return on_stream_done();
        case StreamState::Take::CLOSED:
            return on_stream_closed();
        case StreamState::Take::DATA:
            break;
    }
    stream_writing_ = true;
    stream_.expires_after(std::chrono::seconds(context_->options.idle_timeout_seconds));
    net::async_write(stream_, net::buffer(stream_out_),
                     [self = shared_from_this(), state](beast::error_code ec, size_t bytes) {
                         self->on_stream_write(state, ec, bytes);
                     });
}

void Session::on_stream_write(const std::shared_ptr<StreamState> & state, beast::error_code ec, size_t bytes) {
    stream_writing_ = false;
    stream_out_.clear();
    if (closed_ || state != stream_state_) {
        return;
    }
    if (ec) {
        stream_close_reason_ = "write failed: " + ec.message();
        return close();
    }
    state->sent(bytes);
    pump_stream(state);
}

// Finished and sent: the next request, or close (HTTP/1.0, Connection: close, an abandoned writer).
void Session::on_stream_done() {
    const bool abandoned = stream_state_->abandoned();
    if (abandoned) {
        LOG_WRN("http", "%s: the StreamWriter of %s %s was dropped before finish(); closing the connection",
                remote_.c_str(), request_method_.c_str(), printable(request_path_).c_str());
    }
    log_stream_end(abandoned ? " (abandoned before finish())" : "");
    if (abandoned || !stream_keep_alive_) {
        return close();
    }
    beast::error_code ignored;
    stream_.socket().cancel(ignored);  // ends watch_for_disconnect()
    read_header();
}

// Closed by the writer's side (too slow a client, the stream callback threw): drop the connection.
void Session::on_stream_closed() {
    LOG_WRN("http", "%s: closing the stream of %s %s: %s", remote_.c_str(), request_method_.c_str(),
            printable(request_path_).c_str(), stream_state_->close_reason().c_str());
    close();
}

// From close(): the connection is gone, so is the stream (its on_close runs here, unless finished).
void Session::close_stream() {
    if (!stream_state_) {
        return;
    }
    std::string reason = stream_close_reason_;
    if (reason.empty()) {
        std::lock_guard lock(context_->mutex);
        reason = context_->stopped ? "server stopped" : "connection closed";
    }
    std::shared_ptr<StreamState> state = stream_state_;
    state->close(reason);
    log_stream_end(" (" + state->close_reason() + ")");
}

void Session::log_stream_end(const std::string & outcome) {
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - request_start_).count();
    LOG_INF("http", "%s %s %d %.1fms stream bytes=%zu %s%s", request_method_.c_str(), printable(request_path_).c_str(),
            response_status_, ms, stream_state_->body_bytes(), printable(response_log_tag_).c_str(), outcome.c_str());
    stream_state_.reset();
}

}  // namespace tinkerd::http
