// One HTTP/1.1 connection: reads a request (header first, so an oversized body is refused with 413
// before it is read; refused_body.cpp), hands it to the Handler, writes the Response whenever Respond is called (from
// any thread, via the strand), then reads the next request or closes. Logs one line per response.
// A streamed response (Response::stream) is sent by stream.cpp.

#include "http/connection.h"

#include <algorithm>
#include <boost/asio/write.hpp>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <exception>
#include <limits>
#include <sys/socket.h>
#include <utility>

#include "common/log.h"
#include "http/target.h"

namespace tinkerd::http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;

namespace {

constexpr uint32_t HEADER_LIMIT_BYTES = 64 * 1024;
constexpr int DRAIN_SECONDS = 5;  // how long a refused request's remaining body is read and dropped
constexpr size_t DRAIN_CHUNK_BYTES = 64 * 1024;

bool is_http_error(const beast::error_code & ec) {
    return ec.category() == beast::error_code(bhttp::error::bad_method).category();
}

// Errors that mean the peer went away or timed out: close without answering.
bool is_disconnect(const beast::error_code & ec) {
    return !is_http_error(ec) || ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message;
}

std::string json_escape(const std::string & text) {
    std::string out;
    for (char c : text) {
        if (c == '"' || c == '\\') {
            out.push_back('\\');
            out.push_back(c);
        } else if (static_cast<unsigned char>(c) < 0x20) {
            char escaped[8];
            std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
            out += escaped;
        } else {
            out.push_back(c);
        }
    }
    return out;
}

// Keeps a log line on one line whatever the client put in its path.
std::string printable(const std::string & text) {
    std::string out = text;
    for (char & c : out) {
        if (std::iscntrl(static_cast<unsigned char>(c))) {
            c = '?';
        }
    }
    return out;
}

std::string to_string(beast::string_view text) {
    return std::string(text.data(), text.size());
}

std::string lower_case(beast::string_view text) {
    std::string out = to_string(text);
    for (char & c : out) {
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    return out;
}

}  // namespace

bool ServerContext::add_session(uint64_t id, std::shared_ptr<Session> session) {
    std::lock_guard lock(mutex);
    if (stopped) {
        return false;
    }
    if (sessions.size() >= max_connections && !evict_one_locked()) {
        return false;
    }
    sessions.emplace(id, std::move(session));
    return true;
}

void ServerContext::remove_session(uint64_t id) {
    std::lock_guard lock(mutex);
    sessions.erase(id);
}

bool ServerContext::evict_one() {
    std::lock_guard lock(mutex);
    return !stopped && evict_one_locked();
}

bool ServerContext::evict_one_locked() {
    auto oldest = sessions.end();
    int64_t oldest_since = 0;
    for (auto it = sessions.begin(); it != sessions.end(); ++it) {
        const int64_t since = it->second->waiting_header_since();
        if (since != 0 && (oldest_since == 0 || since < oldest_since)) {
            oldest = it;
            oldest_since = since;
        }
    }
    if (oldest == sessions.end()) {
        return false;
    }
    std::shared_ptr<Session> session = std::move(oldest->second);
    sessions.erase(oldest);
    boost::asio::post(session->executor(), [session] { session->evict(); });
    return true;
}

Session::Session(tcp::socket socket, std::shared_ptr<ServerContext> context, uint64_t id)
    : stream_(std::move(socket)), context_(std::move(context)), id_(id), prefix_timer_(stream_.get_executor()) {
    beast::error_code ec;
    tcp::endpoint peer = stream_.socket().remote_endpoint(ec);
    remote_ = ec ? "unknown" : peer.address().to_string() + ":" + std::to_string(peer.port());
}

Session::~Session() {
    if (stream_state_) {
        stream_state_->close("connection closed");  // (close() normally did this already)
    }
}

void Session::start() {
    read_header();
}

void Session::close() {
    if (closed_) {
        return;
    }
    closed_ = true;
    waiting_header_since_ = 0;
    prefix_timer_.cancel();
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
    context_->remove_session(id_);
    close_stream();  // last: it runs the stream's on_close callback
}

void Session::evict() {
    if (closed_) {
        return;
    }
    if (waiting_header_since_ == 0) {
        // A request header arrived meanwhile: keep it (the registry is over the cap by one for a while).
        std::lock_guard lock(context_->mutex);
        if (!context_->stopped) {
            context_->sessions.emplace(id_, shared_from_this());
            return;
        }
    }
    LOG_DBG("http", "%s: closed at the connection limit of %zu (it sent no request)", remote_.c_str(),
            context_->max_connections);
    close();
}

// ---- reading a request ----

void Session::read_header() {
    request_method_ = "-";
    request_path_ = "-";
    parser_.emplace();
    parser_->header_limit(HEADER_LIMIT_BYTES);
    // Checked by hand in on_header, so the 413 can name the length (boost::none misbehaves in 1.74).
    parser_->body_limit(std::numeric_limits<uint64_t>::max());
    // Seconds, not minutes: a connection that sends nothing (or a header byte at a time) must not hold a
    // descriptor for long. Evictable at the connection cap until the header is complete.
    stream_.expires_after(std::chrono::seconds(context_->options.header_timeout_seconds));
    waiting_header_since_ = std::max<int64_t>(1, Clock::now().time_since_epoch().count());
    bhttp::async_read_header(stream_, buffer_, *parser_,
                             [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
}

void Session::on_header(beast::error_code ec) {
    waiting_header_since_ = 0;
    if (ec) {
        if (ec == beast::error::timeout) {
            LOG_DBG("http", "%s: no complete request header within %d s; closing", remote_.c_str(),
                    context_->options.header_timeout_seconds);
        }
        if (is_disconnect(ec)) {
            return close();
        }
        if (ec == bhttp::error::header_limit) {
            return fail_request(431, "request header exceeds " + std::to_string(HEADER_LIMIT_BYTES) + " bytes");
        }
        return fail_request(400, "malformed HTTP request: " + ec.message());
    }
    const auto & header = parser_->get();
    request_method_ = to_string(header.method_string());
    request_path_ = to_string(header.target().substr(0, header.target().find('?')));
    const size_t limit = context_->options.max_body_bytes;
    auto length = parser_->content_length();
    if (length && *length > limit) {
        return refuse_too_large("request body of " + std::to_string(*length) + " bytes exceeds the limit of " +
                                    std::to_string(limit) + " bytes",
                                *length);
    }
    parser_->body_limit(limit);                                                           // for chunked bodies
    stream_.expires_after(std::chrono::seconds(context_->options.body_timeout_seconds));  // 100-continue and body
    if (parser_->is_done()) {
        return dispatch();
    }
    if (beast::iequals(header[bhttp::field::expect], "100-continue")) {
        return send_continue();
    }
    read_body();
}

void Session::send_continue() {
    static const std::string CONTINUE = "HTTP/1.1 100 Continue\r\n\r\n";
    net::async_write(stream_, net::buffer(CONTINUE), [self = shared_from_this()](beast::error_code ec, size_t) {
        if (ec) {
            return self->close();
        }
        self->read_body();
    });
}

void Session::read_body() {
    bhttp::async_read(stream_, buffer_, *parser_,
                      [self = shared_from_this()](beast::error_code ec, size_t) { self->on_body(ec); });
}

void Session::on_body(beast::error_code ec) {
    if (ec == bhttp::error::body_limit) {
        std::string & so_far = parser_->get().body();  // a chunked body: what was decoded before the limit
        return refuse_with_prefix(
            "request body exceeds the limit of " + std::to_string(context_->options.max_body_bytes) + " bytes",
            so_far.substr(0, context_->options.refused_prefix_bytes));
    }
    if (ec == bhttp::error::partial_message && parser_->content_length()) {
        // The client closed its sending side before the body its Content-Length announced: say so (it may
        // still read), rather than dropping the connection without a word.
        const uint64_t announced = *parser_->content_length();
        const uint64_t missing = parser_->content_length_remaining().value_or(0);
        return fail_request(400, "request body ended after " + std::to_string(announced - missing) + " of the " +
                                     std::to_string(announced) + " bytes its Content-Length announced");
    }
    if (ec) {
        if (is_disconnect(ec)) {
            return close();
        }
        return fail_request(400, "malformed HTTP request body: " + ec.message());
    }
    dispatch();
}

// ---- handing the request over and waiting for Respond ----

void Session::dispatch() {
    auto message = parser_->release();
    parser_.reset();
    Request request = request_head(message.base());
    request.body = std::move(message.body());

    request_keep_alive_ = message.keep_alive();
    request_version_ = message.version();
    request_method_ = request.method;
    request_path_ = request.path;
    request_start_ = Clock::now();
    ++request_seq_;
    awaiting_response_ = true;
    stream_.expires_never();  // a held request (long-poll) is not idle
    watch_for_disconnect();
    try {
        context_->handler(std::move(request), make_respond());
    } catch (const std::exception & e) {
        LOG_ERR("http", "handler threw on %s %s: %s", request_method_.c_str(), printable(request_path_).c_str(),
                e.what());
        send(request_seq_, Response::json(500, "{\"detail\":\"internal error: " + json_escape(e.what()) + "\"}"));
    }
}

Request Session::request_head(const HttpHeader & header) const {
    Request request;
    request.method = to_string(header.method_string());
    parse_target(to_string(header.target()), request.path, request.query);
    for (const auto & field : header) {
        std::string & value = request.headers[lower_case(field.name_string())];
        value += value.empty() ? "" : ", ";
        value += to_string(field.value());
    }
    request.remote = remote_;
    return request;
}

Respond Session::make_respond() {
    // Weak references only: a kept Respond holds neither the connection nor the Handler alive.
    std::weak_ptr<Session> weak_session = weak_from_this();
    std::weak_ptr<ServerContext> weak_context = context_;
    uint64_t seq = request_seq_;
    return [weak_session, weak_context, seq](Response response) {
        auto stream = response.stream;
        const bool posted = post_to_session(
            weak_context, weak_session,
            [seq, response = std::move(response)](Session & self) mutable { self.send(seq, std::move(response)); });
        if (!posted) {
            refuse_stream(stream, "connection closed");  // the server is stopping, or the connection gone
        }
    };
}

// While a request is held or its response streamed, notices a client that hangs up, so its connection
// is freed (and the stream closed) at once.
void Session::watch_for_disconnect() {
    stream_.socket().async_wait(tcp::socket::wait_read,
                                [self = shared_from_this(), seq = request_seq_](beast::error_code ec) {
                                    const bool pending = self->awaiting_response_ || self->stream_state_;
                                    if (!ec && !self->closed_ && pending && seq == self->request_seq_) {
                                        self->on_readable();
                                    }
                                });
}

// Wake-ups can be spurious (Asio reads speculatively, so an edge may arrive after its data was
// consumed): peek without blocking and tell end-of-stream, data, and nothing apart.
void Session::on_readable() {
    char byte = 0;
    ssize_t n = ::recv(stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        return watch_for_disconnect();
    }
    if (n <= 0) {
        LOG_DBG("http", "%s hung up before the response to %s %s", remote_.c_str(), request_method_.c_str(),
                printable(request_path_).c_str());
        stream_close_reason_ = "client gone";
        return close();
    }
    // The client sent more (a pipelined request): it is read after this response.
}

// ---- writing the response ----

void Session::send(uint64_t request_seq, Response response) {
    if (closed_ || !awaiting_response_ || request_seq != request_seq_) {
        return refuse_stream(response.stream, "connection closed");  // gone, or Respond was called twice
    }
    awaiting_response_ = false;
    if (response.stream) {
        if (response.status >= 100 && response.status <= 999) {
            return start_stream(std::move(response), request_keep_alive_);  // watch_for_disconnect() goes on
        }
        refuse_stream(response.stream, "invalid response status");  // write() sends a 500
    }
    beast::error_code ignored;
    stream_.socket().cancel(ignored);  // ends watch_for_disconnect()
    write(std::move(response), request_keep_alive_);
}

void Session::write(Response response, bool keep_alive) {
    if (response.status < 100 || response.status > 999) {
        LOG_ERR("http", "invalid response status %d for %s", response.status, printable(request_path_).c_str());
        response = Response::json(500, "{\"detail\":\"internal error: invalid response status\"}");
    }
    auto message = std::make_shared<HttpResponse>();
    message->version(request_version_);
    message->result(static_cast<unsigned>(response.status));
    message->set(bhttp::field::server, "tinkerd");
    message->set(bhttp::field::content_type, response.content_type);
    for (const auto & [name, value] : response.headers) {
        message->insert(name, value);
    }
    message->body() = std::move(response.body);
    message->keep_alive(keep_alive);
    message->prepare_payload();
    response_ = message;
    response_status_ = response.status;
    response_log_tag_ = std::move(response.log_tag);
    stream_.expires_after(std::chrono::seconds(context_->options.idle_timeout_seconds));
    bhttp::async_write(stream_, *message, [self = shared_from_this(), keep_alive](beast::error_code ec, size_t) {
        self->on_write(ec, keep_alive);
    });
}

void Session::on_write(beast::error_code ec, bool keep_alive) {
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - request_start_).count();
    LOG_INF("http", "%s %s %d %.1fms %s%s", request_method_.c_str(), printable(request_path_).c_str(), response_status_,
            ms, printable(response_log_tag_).c_str(), ec ? " (write failed)" : "");
    response_.reset();
    if (ec) {
        return close();
    }
    if (drain_before_close_) {
        return drain_then_close();
    }
    if (!keep_alive) {
        return close();
    }
    read_header();
}

// ---- refusing a request ----

// Answers a request that cannot be served (400, 413, 431) with a JSON body, then closes.
void Session::fail_request(int status, const std::string & detail) {
    parser_.reset();
    awaiting_response_ = false;
    drain_before_close_ = true;
    request_start_ = Clock::now();
    write(Response::json(status, "{\"detail\":\"" + json_escape(detail) + "\"}"), false);
}

// Reads and drops what the client still sends (e.g. the refused body) for a few seconds before
// closing, so the client is not reset before it has read the error response.
void Session::drain_then_close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(std::chrono::seconds(DRAIN_SECONDS));
    drain_buffer_.resize(DRAIN_CHUNK_BYTES);
    drain_some();
}

void Session::drain_some() {
    stream_.async_read_some(net::buffer(drain_buffer_), [self = shared_from_this()](beast::error_code ec, size_t) {
        if (ec) {
            return self->close();
        }
        self->drain_some();
    });
}

}  // namespace tinkerd::http
