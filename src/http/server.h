// HTTP/1.1 server on Boost.Beast/Asio: keep-alive connections, a request-size limit (413; the refused body's
// first bytes are shown to the application), asynchronous responses (a handler can hold a request, a
// long-poll, without holding a thread) and streamed ones (chunked, for Server-Sent Events). Knows nothing
// about Tinker: parses requests, calls one Handler, logs each response.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tinkerd::http {

struct Request {
    std::string method;                          // "GET", "POST", "PUT", "DELETE", ...
    std::string path;                            // percent-decoded, without the query: "/api/v1/x"
    std::map<std::string, std::string> query;    // percent-decoded query parameters
    std::map<std::string, std::string> headers;  // names lower-cased; repeated headers joined with ", "
    std::string body;
    std::string remote;  // "ip:port" of the peer

    // The header's value, or "" when absent. `lower_name` must be lower case.
    const std::string & header(const std::string & lower_name) const;
};

// Writes one streamed response body piece by piece (HTTP/1.1 chunked transfer encoding; to an HTTP/1.0
// client, the raw bytes and then a close). Thread-safe: every method may be called from any thread. Writes
// are queued and sent in order; once the client has gone, the server stops, or more than
// ServerOptions::max_stream_buffer_bytes are queued unsent (a client too slow), the stream is closed:
// write() returns false and the on_close callback runs once. Dropping the last reference before finish()
// aborts the response: what was written is sent, then the connection closed without the last chunk.
class StreamWriter {
  public:
    virtual ~StreamWriter() = default;
    // Queues one chunk (empty data is ignored). False when closed or finished (the data is dropped).
    virtual bool write(std::string data) = 0;
    // Ends the body (the terminating 0-chunk); the connection then serves the next request (keep-alive).
    virtual void finish() = 0;
    // True once the client disconnected, the server stopped, or the stream was closed for slowness.
    virtual bool closed() const = 0;
    // Runs `callback` once when the stream closes before finish(), at once if it already has (it replaces an
    // earlier callback; after finish() it is dropped). It runs on whichever thread notices the close (an I/O
    // thread, the writer's, or Server::stop()'s), so it must not block nor call Server::stop().
    virtual void on_close(std::function<void()> callback) = 0;
};

struct Response {
    int status = 200;
    std::string content_type = "application/json";
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;  // extra headers (Location, Expires, ...)
    std::string log_tag;  // appended to the request's log line, e.g. "model=sess-1:train:0"
    // When set, the status, content_type and headers are sent at once with Transfer-Encoding: chunked (no
    // Content-Length), `body` is ignored, and `stream` is called once (on an I/O thread: it must not block)
    // with the writer for the body. The log line is written when the stream ends. If the response cannot be
    // sent (the connection is gone, the server stopping), `stream` gets a writer that is already closed.
    std::function<void(std::shared_ptr<StreamWriter>)> stream;

    static Response json(int status, std::string body);
};

// Sends the response. Call it exactly once, from any thread, at any time; if the connection is gone
// by then, the response is dropped. Cheap to copy.
using Respond = std::function<void(Response)>;
// Called on an I/O thread for each complete request. Must not block: hand slow work to other threads
// and call `respond` later.
using Handler = std::function<void(Request &&, Respond)>;

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8000;                    // 0 = an ephemeral port (see Server::port())
    int io_threads = 2;                 // threads running the Asio event loop
    size_t max_body_bytes = 64u << 20;  // larger bodies get 413 with a JSON body
    // A connection that has not sent a complete request header this long after it opened, or after its last
    // response (an idle keep-alive connection), is closed. Held requests and streams are not affected.
    int header_timeout_seconds = 10;
    int body_timeout_seconds = 300;  // a request body must arrive within this after its header
    int idle_timeout_seconds = 600;  // a stalled response write (a client not reading) is closed after this
    // Open connections at most (start() lowers it below the process's open-file limit, keeping room for
    // files). At the cap, the connection that has waited longest for a request header is closed to admit
    // a new one; with none such (every one has a request in progress), the new connection is closed.
    size_t max_connections = 10000;
    size_t max_stream_buffer_bytes = 8u << 20;  // a stream with more bytes queued unsent is closed
    // Told of each request refused with 413 (its body over max_body_bytes), before the 413 is written: the
    // Request has the method, path, headers and, as `body`, the body's first bytes (at most
    // refused_prefix_bytes: those that arrive within refused_prefix_wait_ms; none when the client waits
    // for 100-continue), so the application can release what the request would have held (Tinker: its
    // run's seq_id). Runs on an I/O thread and must not block; what it returns is appended to the 413's
    // detail. Not called when no prefix arrived.
    std::function<std::string(const Request &)> on_refused_body;
    size_t refused_prefix_bytes = 4096;
    int refused_prefix_wait_ms = 2000;
};

class Server {
  public:
    Server(ServerOptions options, Handler handler);
    ~Server();  // stops the server
    Server(const Server &) = delete;
    Server & operator=(const Server &) = delete;

    // Binds, listens and starts the I/O threads. Errors name the address (e.g. port in use).
    Result<void> start();
    // The bound port (useful with port 0); valid after start().
    int port() const;
    // The connection cap in force: ServerOptions::max_connections, lowered by start() to fit the open-file limit.
    size_t max_connections() const;
    // Stops accepting, closes every connection, joins the I/O threads. Idempotent.
    void stop();

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// Percent-decodes a URL component ("a%3Ab" -> "a:b"; '+' stays '+'). Invalid escapes are kept as is.
std::string percent_decode(const std::string & text);

}  // namespace tinkerd::http
