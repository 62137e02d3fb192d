// Tests for ServerOptions::on_refused_body: a body over the limit is refused with 413 after the hook saw the
// request's head and the body's first bytes (Content-Length and chunked bodies), the hook's note ends the
// 413's detail, a body that does not come is waited for only refused_prefix_wait_ms, and a client waiting
// for 100-continue (it sends no body) is refused at once without the hook.
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>

#include <gtest/gtest.h>

#include "http/server.h"
#include "http/test_client.h"

namespace tinkerd::http {
namespace {

using namespace test_util;
using Clock = std::chrono::steady_clock;

// Records what the hook saw; the handler must never run for a refused request.
struct Seen {
    std::mutex mutex;
    std::vector<Request> requests;
    std::atomic<int> handled{0};
};

std::unique_ptr<Server> start_refusing_server(Seen & seen, int wait_ms = 2000) {
    ServerOptions options;
    options.max_body_bytes = 1000;
    options.refused_prefix_bytes = 64;
    options.refused_prefix_wait_ms = wait_ms;
    options.on_refused_body = [&seen](const Request & request) {
        std::lock_guard lock(seen.mutex);
        seen.requests.push_back(request);
        return std::string("; seq_id 3 released");
    };
    return start_server(
        [&seen](Request &&, Respond respond) {
            ++seen.handled;
            respond(Response::json(200, "{}"));
        },
        options);
}

// The next reply, which must be a 413 (its body: the JSON detail); "" when none came.
std::string read_413(TestClient & client) {
    auto reply = client.read_reply();
    if (!reply) {
        ADD_FAILURE() << "no reply";
        return "";
    }
    EXPECT_EQ(reply->status, 413);
    return reply->body;
}

std::string body_of(size_t size) {
    std::string body;
    for (size_t i = 0; i < size; ++i) {
        body.push_back(static_cast<char>('a' + i % 26));
    }
    return body;
}

TEST(RefusedBody, TheHookSeesTheHeadAndFirstBytesAndItsNoteEndsThe413) {
    Seen seen;
    auto server = start_refusing_server(seen);
    TestClient client(server->port());
    const std::string body = body_of(5000);
    ASSERT_TRUE(client.send_all(make_request("POST", "/api/v1/forward_backward?x=1", body,
                                             "Content-Type: application/x-protobuf\r\nX-API-Key: tml-k\r\n")));
    EXPECT_EQ(read_413(client),
              "{\"detail\":\"request body of 5000 bytes exceeds the limit of 1000 bytes; seq_id 3 released\"}");
    EXPECT_TRUE(client.peer_closed(2000));
    std::lock_guard lock(seen.mutex);
    ASSERT_EQ(seen.requests.size(), 1u);
    const Request & r = seen.requests[0];
    EXPECT_EQ(r.method, "POST");
    EXPECT_EQ(r.path, "/api/v1/forward_backward");
    EXPECT_EQ(r.query.at("x"), "1");
    EXPECT_EQ(r.header("content-type"), "application/x-protobuf");
    EXPECT_EQ(r.header("x-api-key"), "tml-k");
    EXPECT_EQ(r.body, body.substr(0, 64));
    EXPECT_EQ(seen.handled.load(), 0);
}

TEST(RefusedBody, ABodyThatDoesNotComeIsWaitedForBriefly) {
    Seen seen;
    auto server = start_refusing_server(seen, 300);
    TestClient client(server->port());
    const auto t0 = Clock::now();
    ASSERT_TRUE(
        client.send_all("POST /api/v1/optim_step HTTP/1.1\r\nHost: x\r\nContent-Length: 9000\r\n\r\n0123456789"));
    EXPECT_NE(read_413(client), "");  // the client stalls after 10 bytes: the 413 comes after the wait
    EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(250));
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
    std::lock_guard lock(seen.mutex);
    ASSERT_EQ(seen.requests.size(), 1u);
    EXPECT_EQ(seen.requests[0].body, "0123456789");
}

TEST(RefusedBody, AChunkedBodyShowsItsDecodedStart) {
    Seen seen;
    auto server = start_refusing_server(seen);
    TestClient chunked(server->port());
    ASSERT_TRUE(chunked.send_all("POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"));
    ASSERT_TRUE(chunked.send_all("320\r\n" + std::string(800, 'a') + "\r\n320\r\n" + std::string(800, 'b') + "\r\n"));
    EXPECT_NE(read_413(chunked).find("exceeds the limit of 1000 bytes; seq_id 3 released"), std::string::npos);
    std::lock_guard lock(seen.mutex);
    ASSERT_EQ(seen.requests.size(), 1u);
    EXPECT_EQ(seen.requests[0].body, std::string(64, 'a'));
}

TEST(RefusedBody, AClientWaitingForContinueIsRefusedAtOnceWithoutTheHook) {
    Seen seen;
    auto server = start_refusing_server(seen, 5000);
    TestClient client(server->port());
    const auto t0 = Clock::now();
    ASSERT_TRUE(client.send_all("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 9000\r\nExpect: 100-continue\r\n\r\n"));
    EXPECT_EQ(read_413(client), "{\"detail\":\"request body of 9000 bytes exceeds the limit of 1000 bytes\"}");
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
    std::lock_guard lock(seen.mutex);
    EXPECT_TRUE(seen.requests.empty());
}

}  // namespace
}  // namespace tinkerd::http
