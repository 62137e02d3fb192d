// Internal to src/http: one keep-alive HTTP connection (Session) and the state it shares with the
// Server (ServerContext: options, handler, the registry of open sessions, the stopped flag).
// Session's streamed responses are in stream.cpp.
// Includes Beast, so only src/http/*.cpp may include it.
#pragma once

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "http/server.h"
#include "http/stream.h"

namespace tinkerd::http {

class Session;

// Shared by the Server and every Session (and captured by Respond callbacks), so it outlives both.
struct ServerContext {
    ServerOptions options;
    Handler handler;

    std::atomic<uint64_t> next_session_id{1};

    std::mutex mutex;  // guards everything below
    bool stopped = false;
    std::unordered_map<uint64_t, std::shared_ptr<Session>> sessions;  // open connections

    size_t max_connections = 0;  // the cap in force (options.max_connections lowered to the fd limit)

    // Adds an open session; returns false (adding nothing) once stopped. At max_connections it first evicts
    // the session that has waited longest for a request header; false when there is none.
    bool add_session(uint64_t id, std::shared_ptr<Session> session);
    void remove_session(uint64_t id);
    // Removes the session that has waited longest for a request header from the registry and has it closed
    // on its strand. False when every session has a request in progress (or the server is stopping).
    bool evict_one();

  private:
    bool evict_one_locked();
};

class Session : public std::enable_shared_from_this<Session> {
  public:
    Session(boost::asio::ip::tcp::socket socket, std::shared_ptr<ServerContext> context, uint64_t id);
    ~Session();

    // Starts reading requests; call through the session's strand (see executor()).
    void start();
    // Closes the socket. Call on the session's strand, or after the I/O threads have been joined.
    void close();
    boost::asio::any_io_executor executor() { return stream_.get_executor(); }
    // Sends what `state` has queued (if it is this session's current stream), ends or drops it. On the strand.
    void pump_stream(const std::shared_ptr<StreamState> & state);
    // Since when (steady clock, ns) the session has waited for a request header; 0 while a request is in
    // progress (body read, handler, held response, stream) or once closed. Read from any thread.
    int64_t waiting_header_since() const { return waiting_header_since_.load(std::memory_order_relaxed); }
    // Evicted at the connection cap (ServerContext::evict_one): closes the session if it still waits for a
    // header, else puts it back in the registry. On the strand.
    void evict();

  private:
    using Parser = boost::beast::http::request_parser<boost::beast::http::string_body>;
    using HttpResponse = boost::beast::http::response<boost::beast::http::string_body>;
    using HttpHeader = boost::beast::http::request_header<>;
    using Clock = std::chrono::steady_clock;

    void read_header();
    void on_header(boost::beast::error_code ec);
    void send_continue();
    void read_body();
    void on_body(boost::beast::error_code ec);
    void dispatch();
    Respond make_respond();
    void watch_for_disconnect();
    void on_readable();
    void send(uint64_t request_seq, Response response);
    void write(Response response, bool keep_alive);
    void on_write(boost::beast::error_code ec, bool keep_alive);
    void fail_request(int status, const std::string & detail);
    // The 413 of a body over the limit, after ServerOptions::on_refused_body has seen its first bytes
    // (refused_body.cpp): from the raw input (a Content-Length body) or the body parsed so far (chunked).
    void refuse_too_large(const std::string & detail, uint64_t content_length);
    void read_refused_prefix();
    void on_refused_prefix();
    void refuse_with_prefix(const std::string & detail, std::string prefix);
    Request request_head(const HttpHeader & header) const;  // method, target, headers, remote; no body
    void drain_then_close();
    void drain_some();
    // Streamed responses (stream.cpp).
    void start_stream(Response response, bool keep_alive);
    std::string stream_head(const Response & response, bool chunked, bool keep_alive) const;
    void on_stream_write(const std::shared_ptr<StreamState> & state, boost::beast::error_code ec, size_t bytes);
    void on_stream_done();
    void on_stream_closed();
    void close_stream();
    void log_stream_end(const std::string & outcome);

    boost::beast::tcp_stream stream_;
    boost::beast::flat_buffer buffer_;
    std::shared_ptr<ServerContext> context_;
    uint64_t id_;
    std::string remote_;
    std::optional<Parser> parser_;
    std::shared_ptr<HttpResponse> response_;  // the one being written
    std::string drain_buffer_;                // scratch space for drain_then_close()
    boost::asio::steady_timer prefix_timer_;  // bounds the wait for a refused body's first bytes
    bool reading_prefix_ = false;             // reading them now (the timer then cancels the read)
    size_t prefix_wanted_ = 0;                // how many of them to wait for
    std::string refused_detail_;              // the 413's detail meanwhile

    // State of the current request (all touched on the strand only).
    uint64_t request_seq_ = 0;
    bool awaiting_response_ = false;
    bool request_keep_alive_ = true;
    unsigned request_version_ = 11;
    std::string request_method_ = "-";
    std::string request_path_ = "-";
    Clock::time_point request_start_;
    int response_status_ = 0;
    std::string response_log_tag_;
    bool drain_before_close_ = false;  // after an error response: drain the input, then close
    bool closed_ = false;
    std::atomic<int64_t> waiting_header_since_{0};

    // The streamed response being sent, if any (on the strand too).
    std::shared_ptr<StreamState> stream_state_;
    std::string stream_out_;  // the bytes being written
    bool stream_writing_ = false;
    bool stream_keep_alive_ = false;
    std::string stream_close_reason_;  // why close() is called, for the log line ("client gone", ...)
};

// Runs fn(session) on the session's strand unless the server is stopping or the session is gone; returns
// whether it was posted. Holds the context mutex (so stop() cannot tear the io_context down while we post to
// it) and drops its reference to the session before releasing it.
template <class Fn>
bool post_to_session(const std::weak_ptr<ServerContext> & weak_context, const std::weak_ptr<Session> & weak_session,
                     Fn fn) {
    auto context = weak_context.lock();
    if (!context) {
        return false;  // the server is gone
    }
    std::lock_guard lock(context->mutex);
    if (context->stopped) {
        return false;
    }
    auto session = weak_session.lock();
    if (!session) {
        return false;
    }
    boost::asio::post(session->executor(), [session, fn = std::move(fn)]() mutable { fn(*session); });
    return true;
}

}  // namespace tinkerd::http
