// A request refused with 413 (its body over max_body_bytes): before the 413 is written, the body's first
// bytes (at most refused_prefix_bytes, waited for at most refused_prefix_wait_ms) go to
// ServerOptions::on_refused_body, so the application learns what the request was (Tinker: its seq_id).
// The rest of the body is never buffered: fail_request drains and drops it.

#include <algorithm>
#include <exception>

#include "common/log.h"
#include "http/connection.h"

namespace tinkerd::http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

void Session::refuse_too_large(const std::string & detail, uint64_t content_length) {
    const ServerOptions & options = context_->options;
    const bool waits_for_continue = beast::iequals(parser_->get()[bhttp::field::expect], "100-continue");
    if (!options.on_refused_body || waits_for_continue || options.refused_prefix_bytes == 0) {
        return fail_request(413, detail);  // nothing to look at: the client sends no body before a 100
    }
    refused_detail_ = detail;
    prefix_wanted_ = static_cast<size_t>(std::min<uint64_t>(content_length, options.refused_prefix_bytes));
    reading_prefix_ = true;
    stream_.expires_never();  // the timer bounds this wait (the header's timeout must not close the socket)
    prefix_timer_.expires_after(std::chrono::milliseconds(options.refused_prefix_wait_ms));
    prefix_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
        if (!ec && self->reading_prefix_) {
            beast::error_code ignored;
            self->stream_.socket().cancel(ignored);  // the read ends with what it has (the socket stays open)
        }
    });
    read_refused_prefix();
}

// The raw input is the body here (a Content-Length body has no transfer coding); buffer_ may already hold
// its start, read together with the header.
void Session::read_refused_prefix() {
    if (buffer_.size() >= prefix_wanted_) {
        return on_refused_prefix();
    }
    stream_.async_read_some(buffer_.prepare(prefix_wanted_ - buffer_.size()),
                            [self = shared_from_this()](beast::error_code ec, size_t bytes) {
                                self->buffer_.commit(bytes);
                                if (ec) {
                                    return self->on_refused_prefix();  // cut short, timed out or hung up
                                }
                                self->read_refused_prefix();
                            });
}

void Session::on_refused_prefix() {
    reading_prefix_ = false;
    prefix_timer_.cancel();
    if (closed_) {
        return;  // the server is stopping: nobody to answer, nothing to release
    }
    const auto data = buffer_.data();
    std::string prefix(static_cast<const char *>(data.data()), std::min(data.size(), prefix_wanted_));
    buffer_.consume(buffer_.size());
    refuse_with_prefix(refused_detail_, std::move(prefix));
}

void Session::refuse_with_prefix(const std::string & detail, std::string prefix) {
    std::string note;
    if (context_->options.on_refused_body && !prefix.empty()) {
        Request request = request_head(parser_->get().base());
        request.body = std::move(prefix);
        try {
            note = context_->options.on_refused_body(request);
        } catch (const std::exception & e) {
            LOG_ERR("http", "%s: on_refused_body threw: %s", remote_.c_str(), e.what());
        }
    }
    fail_request(413, detail + note);
}

}  // namespace tinkerd::http
