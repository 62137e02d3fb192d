// HTTP/1.1 server on Boost.Beast/Asio: keep-alive connections, a request-size limit (413), and
// asynchronous responses, so a handler can hold a request (a long-poll) without holding a thread.
// Knows nothing about Tinker: it parses requests, calls one Handler, writes Responses, logs each one.
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

struct Response {
    int status = 200;
    std::string content_type = "application/json";
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;  // extra headers (Location, Expires, ...)
    std::string log_tag;  // appended to the request's log line, e.g. "model=sess-1:train:0"

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
    int idle_timeout_seconds = 600;     // an idle keep-alive connection is closed after this
    size_t max_connections = 10000;     // further connections are accepted and closed at once
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
    // Stops accepting, closes every connection, joins the I/O threads. Idempotent.
    void stop();

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// Percent-decodes a URL component ("a%3Ab" -> "a:b"; '+' stays '+'). Invalid escapes are kept as is.
std::string percent_decode(const std::string & text);

}  // namespace tinkerd::http
