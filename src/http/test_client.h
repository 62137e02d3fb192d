// Test helpers for src/http: a small blocking HTTP/1.1 client over POSIX sockets (responses with a
// Content-Length, chunked ones, and bodies that end at close), and a server on an ephemeral port.
#pragma once

#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <map>
#include <memory>
#include <netinet/in.h>
#include <optional>
#include <poll.h>
#include <stdexcept>
#include <string>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "http/server.h"

namespace tinkerd::http::test_util {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

inline void raise_open_file_limit() {
    rlimit limit{};
    ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
}

struct Reply {
    int status = 0;
    std::map<std::string, std::string> headers;  // lower-cased names
    std::string body;
};

// A blocking HTTP/1.1 client on one connection. Reads time out after 10 s.
class TestClient {
  public:
    // `receive_buffer_bytes` > 0 shrinks the socket's receive buffer (a slow client fills it soon).
    explicit TestClient(int port, int receive_buffer_bytes = 0) {
        fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
        timeval timeout{10, 0};
        setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
        if (receive_buffer_bytes > 0) {
            setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer_bytes, sizeof receive_buffer_bytes);
        }
        sockaddr_in address{};
        address.sin_family = AF_INET;
        address.sin_port = htons(static_cast<uint16_t>(port));
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (::connect(fd_, reinterpret_cast<sockaddr *>(&address), sizeof address) != 0) {
            ::close(fd_);
            fd_ = -1;
        }
    }
    ~TestClient() { close(); }
    TestClient(const TestClient &) = delete;
    TestClient & operator=(const TestClient &) = delete;

    bool connected() const { return fd_ >= 0; }
    void close() {
        if (fd_ >= 0) {
            ::close(fd_);
            fd_ = -1;
        }
    }

    // Closes the sending side only (the server reads end-of-stream; replies can still be read).
    void shutdown_write() { ::shutdown(fd_, SHUT_WR); }

    bool send_all(const std::string & data) {
        size_t sent = 0;
        while (sent < data.size()) {
            ssize_t n = ::send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
            if (n <= 0) {
                return false;
            }
            sent += static_cast<size_t>(n);
        }
        return true;
    }

    // The status and headers of the next response (its body left unread), or nullopt on close or timeout.
    std::optional<Reply> read_head() {
        size_t header_end;
        while ((header_end = buffer_.find("\r\n\r\n")) == std::string::npos) {
            if (!receive_more()) {
                return std::nullopt;
            }
        }
        Reply reply = parse_head(buffer_.substr(0, header_end));
        buffer_.erase(0, header_end + 4);
        return reply;
    }

    // The next response with a Content-Length body, or nullopt when the connection closes or times out first.
    std::optional<Reply> read_reply() {
        std::optional<Reply> head = read_head();
        if (!head) {
            return std::nullopt;
        }
        Reply reply = std::move(*head);
        size_t length = std::stoul(reply.headers.count("content-length") ? reply.headers["content-length"] : "0");
        while (buffer_.size() < length) {
            if (!receive_more()) {
                return std::nullopt;
            }
        }
        reply.body = buffer_.substr(0, length);
        buffer_.erase(0, length);
        return reply;
    }

    // The data of the next chunk of a chunked body ("" for the last one, whose empty trailer is read too), or
    // nullopt on close, timeout or bad framing.
    std::optional<std::string> read_chunk() {
        size_t line_end;
        while ((line_end = buffer_.find("\r\n")) == std::string::npos) {
            if (!receive_more()) {
                return std::nullopt;
            }
        }
        size_t size = 0;
        try {
            size = std::stoul(buffer_.substr(0, line_end), nullptr, 16);
        } catch (const std::exception &) {
            return std::nullopt;
        }
        const size_t end = line_end + 2 + size + 2;
        while (buffer_.size() < end) {
            if (!receive_more()) {
                return std::nullopt;
            }
        }
        if (buffer_.compare(end - 2, 2, "\r\n") != 0) {
            return std::nullopt;
        }
        std::string data = buffer_.substr(line_end + 2, size);
        buffer_.erase(0, end);
        return data;
    }

    // Every chunk of a chunked body, up to the last one; nullopt when the body is cut short or malformed.
    std::optional<std::vector<std::string>> read_chunks() {
        std::vector<std::string> chunks;
        while (true) {
            std::optional<std::string> chunk = read_chunk();
            if (!chunk) {
                return std::nullopt;
            }
            if (chunk->empty()) {
                return chunks;
            }
            chunks.push_back(std::move(*chunk));
        }
    }

    // What arrives until the server closes the connection (or 10 s pass).
    std::string read_until_close() {
        while (receive_more()) {
        }
        return std::exchange(buffer_, "");
    }

    // True when the server closes the connection within `timeout_ms` (data received meanwhile is kept).
    bool peer_closed(int timeout_ms) {
        auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
        while (Clock::now() < deadline) {
            pollfd entry{fd_, POLLIN, 0};
            int left = static_cast<int>(
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
            if (::poll(&entry, 1, std::max(left, 1)) <= 0) {
                continue;
            }
            char chunk[4096];
            ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
            if (n == 0 || (n < 0 && errno == ECONNRESET)) {
                return true;
            }
            if (n > 0) {
                buffer_.append(chunk, static_cast<size_t>(n));
            }
        }
        return false;
    }

  private:
    bool receive_more() {
        char chunk[16384];
        ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
        if (n <= 0) {
            return false;
        }
        buffer_.append(chunk, static_cast<size_t>(n));
        return true;
    }

    static Reply parse_head(const std::string & head) {
        Reply reply;
        reply.status = std::stoi(head.substr(head.find(' ') + 1, 3));
        size_t line_start = head.find("\r\n");
        while (line_start != std::string::npos) {
            line_start += 2;
            size_t line_end = head.find("\r\n", line_start);
            std::string line = head.substr(line_start, line_end - line_start);
            size_t colon = line.find(':');
            if (colon != std::string::npos) {
                std::string name = line.substr(0, colon);
                for (char & c : name) {
                    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
                }
                reply.headers[name] = line.substr(line.find_first_not_of(' ', colon + 1));
            }
            line_start = line_end;
        }
        return reply;
    }

    int fd_ = -1;
    std::string buffer_;
};

inline std::string make_request(const std::string & method, const std::string & target, const std::string & body = "",
                                const std::string & extra_headers = "") {
    return method + " " + target + " HTTP/1.1\r\nHost: localhost\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n" + extra_headers + "\r\n" + body;
}

inline std::unique_ptr<Server> start_server(Handler handler, ServerOptions options = {}) {
    options.port = 0;
    auto server = std::make_unique<Server>(options, std::move(handler));
    auto started = server->start();
    EXPECT_TRUE(started.ok()) << (started.ok() ? "" : started.error().message);
    EXPECT_GT(server->port(), 0);
    return server;
}

}  // namespace tinkerd::http::test_util
