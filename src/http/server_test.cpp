// Tests for src/http: request parsing, keep-alive, error responses (400/413), delayed and dropped
// responses, limits (header timeout, max connections and eviction at the cap, the open-file limit), and
// 1,000 concurrently held requests.
// The client (test_client.h) is a small blocking one over POSIX sockets; streamed responses: stream_test.cpp.

#include "http/server.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "http/target.h"
#include "http/test_client.h"

namespace tinkerd::http {
namespace {

using namespace test_util;

// Echoes "METHOD PATH BODY" with status 200.
void echo_handler(Request && request, Respond respond) {
    Response response;
    response.content_type = "text/plain";
    response.body = request.method + " " + request.path + " " + request.body;
    respond(std::move(response));
}

// Keeps the Respond callbacks of held requests, keyed by their "i" query parameter.
struct HeldRequests {
    std::mutex mutex;
    std::condition_variable changed;
    std::map<std::string, Respond> responds;

    void add(const std::string & key, Respond respond) {
        std::lock_guard lock(mutex);
        responds[key] = std::move(respond);
        changed.notify_all();
    }
    bool wait_for(size_t count, std::chrono::seconds timeout) {
        std::unique_lock lock(mutex);
        return changed.wait_for(lock, timeout, [&] { return responds.size() >= count; });
    }
    Respond take(const std::string & key) {
        std::lock_guard lock(mutex);
        Respond respond = std::move(responds.at(key));
        responds.erase(key);
        return respond;
    }
    // A handler that answers GET /now at once ({"now":true}) and holds every other request.
    Handler hold_all_but_now() {
        return [this](Request && request, Respond respond) {
            if (request.path == "/now") {
                return respond(Response::json(200, "{\"now\":true}"));
            }
            add(request.query["i"], std::move(respond));
        };
    }
};

// ---- target parsing ----

TEST(PercentDecode, DecodesValidEscapesOnly) {
    EXPECT_EQ(percent_decode("a%3Ab%3ac"), "a:b:c");
    EXPECT_EQ(percent_decode("a%2Fb/c"), "a/b/c");
    EXPECT_EQ(percent_decode("a+b%20c"), "a+b c");
    EXPECT_EQ(percent_decode("100%"), "100%");
    EXPECT_EQ(percent_decode("%zz%4"), "%zz%4");
}

TEST(ParseTarget, SplitsPathAndQuery) {
    std::string path;
    std::map<std::string, std::string> query;
    parse_target("/api/v1/runs/sess%3A1/weights/ckpt-1?name=a+b%2Bc&flag&limit=20#frag", path, query);
    EXPECT_EQ(path, "/api/v1/runs/sess:1/weights/ckpt-1");
    EXPECT_EQ(query.size(), 3u);
    EXPECT_EQ(query["name"], "a b+c");
    EXPECT_EQ(query["flag"], "");
    EXPECT_EQ(query["limit"], "20");
    parse_target("http://localhost:8000/x?y=1", path, query);
    EXPECT_EQ(path, "/x");
    EXPECT_EQ(query["y"], "1");
}

// ---- basic requests ----

TEST(HttpServer, EchoesGetAndPost) {
    auto server = start_server(echo_handler);
    TestClient client(server->port());
    ASSERT_TRUE(client.connected());
    ASSERT_TRUE(client.send_all(make_request("GET", "/api/v1/healthz")));
    auto reply = client.read_reply();
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->status, 200);
    EXPECT_EQ(reply->body, "GET /api/v1/healthz ");
    EXPECT_EQ(reply->headers["server"], "tinkerd");
    EXPECT_EQ(reply->headers["content-type"], "text/plain");

    ASSERT_TRUE(
        client.send_all(make_request("POST", "/api/v1/echo", "{\"x\":1}", "Content-Type: application/json\r\n")));
    reply = client.read_reply();
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->status, 200);
    EXPECT_EQ(reply->body, "POST /api/v1/echo {\"x\":1}");
}

TEST(HttpServer, KeepsAliveAcrossRequestsAndHonoursConnectionClose) {
    std::mutex mutex;
    std::vector<std::string> remotes;
    auto server = start_server([&](Request && request, Respond respond) {
        {
            std::lock_guard lock(mutex);
            remotes.push_back(request.remote);
        }
        respond(Response::json(200, "{\"n\":" + std::to_string(remotes.size()) + "}"));
    });
    TestClient client(server->port());
    for (int i = 1; i <= 3; ++i) {
        ASSERT_TRUE(client.send_all(make_request("GET", "/n")));
        auto reply = client.read_reply();
        ASSERT_TRUE(reply) << "request " << i;
        EXPECT_EQ(reply->body, "{\"n\":" + std::to_string(i) + "}");
        EXPECT_EQ(reply->headers["content-type"], "application/json");
    }
    ASSERT_TRUE(client.send_all(make_request("GET", "/n", "", "Connection: close\r\n")));
    auto reply = client.read_reply();
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->headers["connection"], "close");
    EXPECT_TRUE(client.peer_closed(2000));
    std::lock_guard lock(mutex);
    ASSERT_EQ(remotes.size(), 4u);
    EXPECT_EQ(remotes[0], remotes[3]);  // one connection throughout
    EXPECT_EQ(remotes[0].rfind("127.0.0.1:", 0), 0u);
}

TEST(HttpServer, DeleteWithoutBodyAndEmptyPostWork) {
    auto server = start_server(echo_handler);
    TestClient client(server->port());
    ASSERT_TRUE(
        client.send_all("DELETE /api/v1/sessions/s1 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\r\n"));
    auto reply = client.read_reply();
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->status, 200);
    EXPECT_EQ(reply->body, "DELETE /api/v1/sessions/s1 ");
    ASSERT_TRUE(client.send_all(make_request("POST", "/api/v1/heartbeat", "")));
    reply = client.read_reply();
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->body, "POST /api/v1/heartbeat ");
}

TEST(HttpServer, AnswersExpectContinue) {
    auto server = start_server(echo_handler);
    TestClient client(server->port());
    ASSERT_TRUE(
        client.send_all("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"));
    auto interim = client.read_reply();
    ASSERT_TRUE(interim);
    EXPECT_EQ(interim->status, 100);
    ASSERT_TRUE(client.send_all("hello"));
    auto reply = client.read_reply();
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->status, 200);
    EXPECT_EQ(reply->body, "POST /upload hello");
}

TEST(HttpServer, DecodesPathQueryAndHeaders) {
    std::mutex mutex;
    Request seen;
    auto server = start_server([&](Request && request, Respond respond) {
        std::lock_guard lock(mutex);
        seen = std::move(request);
        respond(Response::json(200, "{}"));
    });
    TestClient client(server->port());
    ASSERT_TRUE(client.send_all(make_request("GET",
                                             "/api/v1/training_runs/sess%3A1%3Atrain%3A0/checkpoints/weights%2Fckpt-1"
                                             "?name=a%20b+c&flag&x=%2B",
                                             "", "X-Custom-Header: V1\r\nx-custom-header: V2\r\n")));
    ASSERT_TRUE(client.read_reply());
    std::lock_guard lock(mutex);
    EXPECT_EQ(seen.path, "/api/v1/training_runs/sess:1:train:0/checkpoints/weights/ckpt-1");
    EXPECT_EQ(seen.query["name"], "a b c");
    EXPECT_EQ(seen.query["flag"], "");
    EXPECT_EQ(seen.query["x"], "+");
    EXPECT_EQ(seen.header("x-custom-header"), "V1, V2");
    EXPECT_EQ(seen.header("host"), "localhost");
    EXPECT_EQ(seen.header("absent"), "");
}

TEST(HttpServer, WritesStatusAndExtraHeaders) {
    auto server = start_server([](Request &&, Respond respond) {
        Response response = Response::json(201, "{\"id\":\"a\"}");
        response.headers.emplace_back("Location", "/api/v1/x/a");
        response.log_tag = "model=test";
        respond(std::move(response));
    });
    TestClient client(server->port());
    ASSERT_TRUE(client.send_all(make_request("PUT", "/api/v1/x", "{}")));
    auto reply = client.read_reply();
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->status, 201);
    EXPECT_EQ(reply->headers["location"], "/api/v1/x/a");
    EXPECT_EQ(reply->headers["content-length"], "10");
    EXPECT_EQ(reply->body, "{\"id\":\"a\"}");
}

// ---- refused requests ----

TEST(HttpServer, OversizedBodyGets413WithJsonAndClose) {
    std::atomic<int> calls{0};
    ServerOptions options;
    options.max_body_bytes = 1000;
    auto server = start_server(
        [&](Request &&, Respond respond) {
            ++calls;
            respond(Response::json(200, "{}"));
        },
        options);
    TestClient client(server->port());
    ASSERT_TRUE(client.send_all(make_request("POST", "/api/v1/forward_backward", std::string(5000, 'x'))));
    auto reply = client.read_reply();
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->status, 413);
    EXPECT_EQ(reply->headers["content-type"], "application/json");
    EXPECT_EQ(reply->body, "{\"detail\":\"request body of 5000 bytes exceeds the limit of 1000 bytes\"}");
    EXPECT_TRUE(client.peer_closed(2000));

    TestClient chunked(server->port());  // no Content-Length: the limit applies to the body read so far
    ASSERT_TRUE(chunked.send_all("POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"));
    ASSERT_TRUE(chunked.send_all("320\r\n" + std::string(800, 'a') + "\r\n320\r\n" + std::string(800, 'b') + "\r\n"));
    reply = chunked.read_reply();
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->status, 413);
    EXPECT_NE(reply->body.find("exceeds the limit of 1000 bytes"), std::string::npos);
    EXPECT_EQ(calls.load(), 0);

    TestClient at_limit(server->port());
    ASSERT_TRUE(at_limit.send_all(make_request("POST", "/x", std::string(1000, 'x'))));
    reply = at_limit.read_reply();
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->status, 200);
}

TEST(HttpServer, GarbageGets400WithJsonAndClose) {
    auto server = start_server(echo_handler);
    TestClient client(server->port());
    ASSERT_TRUE(client.send_all("this is not HTTP at all\r\n\r\n"));
    auto reply = client.read_reply();
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->status, 400);
    EXPECT_EQ(reply->headers["content-type"], "application/json");
    EXPECT_EQ(reply->body.rfind("{\"detail\":\"malformed HTTP request", 0), 0u) << reply->body;
    EXPECT_TRUE(client.peer_closed(2000));
}

TEST(HttpServer, ABodyShorterThanItsContentLengthGets400NamingTheNumbers) {
    std::atomic<int> calls{0};
    auto server = start_server([&](Request &&, Respond respond) {
        ++calls;
        respond(Response::json(200, "{}"));
    });
    TestClient client(server->port());
    ASSERT_TRUE(client.send_all("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789"));
    client.shutdown_write();
    auto reply = client.read_reply();
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->status, 400);
    EXPECT_EQ(reply->body,
              "{\"detail\":\"request body ended after 10 of the 100 bytes its Content-Length announced\"}");
    EXPECT_TRUE(client.peer_closed(2000));
    EXPECT_EQ(calls.load(), 0);
}

TEST(HttpServer, ClosesAConnectionWhoseBodyDoesNotArriveInTime) {
    ServerOptions options;
    options.body_timeout_seconds = 1;
    auto server = start_server(echo_handler, options);
    TestClient client(server->port());
    ASSERT_TRUE(client.send_all("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789"));
    auto start = Clock::now();
    EXPECT_TRUE(client.peer_closed(4000));
    EXPECT_GE(seconds_since(start), 0.8);
}

// ---- asynchronous responses ----

TEST(HttpServer, RespondsLaterFromAnotherThread) {
    std::vector<std::thread> workers;
    std::mutex mutex;
    auto server = start_server([&](Request && request, Respond respond) {
        std::lock_guard lock(mutex);
        workers.emplace_back([respond, path = request.path] {
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
            respond(Response::json(200, "{\"path\":\"" + path + "\"}"));
        });
    });
    TestClient client(server->port());
    auto start = Clock::now();
    ASSERT_TRUE(client.send_all(make_request("POST", "/api/v1/retrieve_future", "{}")));
    auto reply = client.read_reply();
    double elapsed = seconds_since(start);
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->body, "{\"path\":\"/api/v1/retrieve_future\"}");
    EXPECT_GE(elapsed, 0.19);
    EXPECT_LT(elapsed, 2.0);
    std::lock_guard lock(mutex);
    for (auto & worker : workers) {
        worker.join();
    }
}

TEST(HttpServer, RespondAfterClientLeftIsDropped) {
    HeldRequests held;
    auto server = start_server(held.hold_all_but_now());
    {
        TestClient client(server->port());
        ASSERT_TRUE(client.send_all(make_request("GET", "/hold?i=1")));
        ASSERT_TRUE(held.wait_for(1, std::chrono::seconds(5)));
    }  // the client hangs up
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    Respond respond = held.take("1");
    std::thread late([&] { respond(Response::json(200, "{\"late\":true}")); });
    late.join();
    respond(Response::json(200, "{}"));  // a second call is ignored too

    TestClient other(server->port());  // the server is still fine
    ASSERT_TRUE(other.send_all(make_request("GET", "/now")));
    auto reply = other.read_reply();
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->status, 200);
}

TEST(HttpServer, FreesAHeldConnectionWhenItsClientHangsUp) {
    ServerOptions options;
    options.max_connections = 1;
    HeldRequests held;
    auto server = start_server(held.hold_all_but_now(), options);
    {
        TestClient client(server->port());
        ASSERT_TRUE(client.send_all(make_request("GET", "/hold?i=1")));
        ASSERT_TRUE(held.wait_for(1, std::chrono::seconds(5)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    TestClient next(server->port());  // admitted: the held connection no longer counts
    ASSERT_TRUE(next.send_all(make_request("GET", "/now")));
    auto reply = next.read_reply();
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->status, 200);
    held.take("1")(Response::json(200, "{}"));
}

TEST(HttpServer, ReadsAPipelinedRequestOnlyAfterTheResponse) {
    HeldRequests held;
    auto server = start_server([&](Request && request, Respond respond) { held.add(request.query["i"], respond); });
    TestClient client(server->port());
    ASSERT_TRUE(client.send_all(make_request("GET", "/hold?i=1") + make_request("GET", "/hold?i=2")));
    ASSERT_TRUE(held.wait_for(1, std::chrono::seconds(5)));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_FALSE(held.wait_for(2, std::chrono::seconds(0)));  // the second is not read yet
    held.take("1")(Response::json(200, "1"));
    auto first = client.read_reply();
    ASSERT_TRUE(first);
    EXPECT_EQ(first->body, "1");
    ASSERT_TRUE(held.wait_for(1, std::chrono::seconds(5)));
    held.take("2")(Response::json(200, "2"));
    auto second = client.read_reply();
    ASSERT_TRUE(second);
    EXPECT_EQ(second->body, "2");
}

TEST(HttpServer, RespondAfterStopAndDestructionIsHarmless) {
    HeldRequests held;
    auto server = start_server([&](Request && request, Respond respond) { held.add(request.query["i"], respond); });
    TestClient first(server->port());
    TestClient second(server->port());
    ASSERT_TRUE(first.send_all(make_request("GET", "/hold?i=1")));
    ASSERT_TRUE(second.send_all(make_request("GET", "/hold?i=2")));
    ASSERT_TRUE(held.wait_for(2, std::chrono::seconds(5)));
    server->stop();
    server->stop();  // idempotent
    EXPECT_TRUE(first.peer_closed(2000));
    held.take("1")(Response::json(200, "{}"));
    server.reset();
    held.take("2")(Response::json(200, "{}"));
    EXPECT_TRUE(second.peer_closed(2000));
}

// ---- limits ----

TEST(HttpServer, ClosesIdleKeepAliveConnectionsAfterTheHeaderTimeout) {
    ServerOptions options;
    options.header_timeout_seconds = 1;
    auto server = start_server(echo_handler, options);
    TestClient client(server->port());
    ASSERT_TRUE(client.send_all(make_request("GET", "/x")));
    ASSERT_TRUE(client.read_reply());
    auto start = Clock::now();
    EXPECT_TRUE(client.peer_closed(3000));
    EXPECT_GE(seconds_since(start), 0.8);
}

TEST(HttpServer, ClosesASilentConnectionAfterTheHeaderTimeout) {
    ServerOptions options;
    options.header_timeout_seconds = 1;
    auto server = start_server(echo_handler, options);
    TestClient silent(server->port());
    auto start = Clock::now();
    EXPECT_TRUE(silent.peer_closed(4000));
    EXPECT_GE(seconds_since(start), 0.8);
    EXPECT_LT(seconds_since(start), 3.0);

    // A slowloris client: a header byte every 200 ms never completes its header within the timeout.
    TestClient slow(server->port());
    const std::string request = make_request("GET", "/x", "", "X-Padding: " + std::string(40, 'p') + "\r\n");
    start = Clock::now();
    bool closed = false;
    for (char c : request) {
        if (!slow.send_all(std::string(1, c)) || slow.peer_closed(200)) {
            closed = true;
            break;
        }
    }
    EXPECT_TRUE(closed || slow.peer_closed(3000));
    EXPECT_LT(seconds_since(start), 3.0);
}

TEST(HttpServer, TheHeaderTimeoutCutsNeitherAHeldRequestNorAStream) {
    ServerOptions options;
    options.header_timeout_seconds = 1;
    std::vector<std::thread> workers;
    std::mutex mutex;
    auto server = start_server(
        [&](Request && request, Respond respond) {
            std::lock_guard lock(mutex);
            if (request.path == "/hold") {
                workers.emplace_back([respond] {
                    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
                    respond(Response::json(200, "{\"held\":true}"));
                });
                return;
            }
            Response response;
            response.content_type = "text/event-stream";
            response.stream = [&](std::shared_ptr<StreamWriter> writer) {
                std::lock_guard stream_lock(mutex);
                workers.emplace_back([writer] {
                    writer->write("first");
                    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
                    writer->write("second");
                    writer->finish();
                });
            };
            respond(std::move(response));
        },
        options);
    TestClient held(server->port());
    TestClient streamed(server->port());
    ASSERT_TRUE(held.send_all(make_request("POST", "/hold", "{}")));
    ASSERT_TRUE(streamed.send_all(make_request("GET", "/stream")));
    auto reply = held.read_reply();
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->body, "{\"held\":true}");
    auto head = streamed.read_head();
    ASSERT_TRUE(head);
    EXPECT_EQ(head->status, 200);
    auto chunks = streamed.read_chunks();
    ASSERT_TRUE(chunks);
    EXPECT_EQ(*chunks, (std::vector<std::string>{"first", "second"}));
    std::lock_guard lock(mutex);
    for (auto & worker : workers) {
        worker.join();
    }
}

TEST(HttpServer, ClosesANewConnectionWhenEveryOneHasARequestInProgress) {
    ServerOptions options;
    options.max_connections = 2;
    HeldRequests held;
    auto server = start_server(held.hold_all_but_now(), options);
    TestClient first(server->port());
    TestClient second(server->port());
    ASSERT_TRUE(first.send_all(make_request("GET", "/hold?i=1")));
    ASSERT_TRUE(second.send_all(make_request("GET", "/hold?i=2")));
    ASSERT_TRUE(held.wait_for(2, std::chrono::seconds(5)));
    TestClient third(server->port());
    EXPECT_TRUE(third.peer_closed(2000));
    held.take("1")(Response::json(200, "{\"i\":1}"));
    auto reply = first.read_reply();
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->body, "{\"i\":1}");
    first.close();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    TestClient fourth(server->port());  // a slot is free again
    ASSERT_TRUE(fourth.send_all(make_request("GET", "/now")));
    EXPECT_TRUE(fourth.read_reply());
    held.take("2")(Response::json(200, "{}"));
    EXPECT_TRUE(second.read_reply());
}

TEST(HttpServer, AtTheCapEvictsTheLongestSilentConnectionNeverAHeldOne) {
    ServerOptions options;
    options.max_connections = 4;
    HeldRequests held;
    auto server = start_server(held.hold_all_but_now(), options);
    TestClient busy(server->port());
    ASSERT_TRUE(busy.send_all(make_request("GET", "/hold?i=1")));
    ASSERT_TRUE(held.wait_for(1, std::chrono::seconds(5)));
    std::vector<std::unique_ptr<TestClient>> silent;
    for (int i = 0; i < 3; ++i) {  // the cap is reached by connections that never send a byte
        silent.push_back(std::make_unique<TestClient>(server->port()));
        ASSERT_TRUE(silent.back()->connected());
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::vector<std::unique_ptr<TestClient>> served;  // kept open (keep-alive): the cap stays reached
    for (int round = 0; round < 3; ++round) {
        served.push_back(std::make_unique<TestClient>(server->port()));
        ASSERT_TRUE(served.back()->send_all(make_request("GET", "/now")));
        auto reply = served.back()->read_reply();
        ASSERT_TRUE(reply) << "round " << round;
        EXPECT_EQ(reply->status, 200);
        EXPECT_TRUE(silent[round]->peer_closed(2000)) << "the oldest silent connection goes first";
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // its wait for the next request begins
    }
    // Now the idle keep-alive connections are the ones waiting longest for a request header.
    TestClient last(server->port());
    ASSERT_TRUE(last.send_all(make_request("GET", "/now")));
    ASSERT_TRUE(last.read_reply());
    EXPECT_TRUE(served[0]->peer_closed(2000));
    held.take("1")(Response::json(200, "{\"held\":true}"));
    auto reply = busy.read_reply();
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->body, "{\"held\":true}");
}

TEST(HttpServer, KeepsTheConnectionCapBelowTheOpenFileLimit) {
    ServerOptions options;
    options.max_connections = size_t{1} << 40;
    auto server = start_server(echo_handler, options);
    rlimit limit{};
    ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
    EXPECT_EQ(limit.rlim_cur, limit.rlim_max);  // raised to the hard limit
    EXPECT_LT(server->max_connections(), static_cast<size_t>(limit.rlim_cur));
    EXPECT_LE(server->max_connections() + 256, static_cast<size_t>(limit.rlim_cur));
    ServerOptions small;
    small.max_connections = 7;
    EXPECT_EQ(start_server(echo_handler, small)->max_connections(), 7u);
}

TEST(HttpServer, StartNamesTheAddressWhenThePortIsTaken) {
    auto first = start_server(echo_handler);
    ServerOptions options;
    options.port = first->port();
    Server second(options, echo_handler);
    auto started = second.start();
    ASSERT_FALSE(started.ok());
    EXPECT_NE(started.error().message.find("127.0.0.1:" + std::to_string(first->port())), std::string::npos)
        << started.error().message;
}

// ---- load ----

TEST(HttpServer, HoldsAThousandPendingRequestsWithoutStarvingOthers) {
    raise_open_file_limit();
    constexpr int CLIENTS = 1000;
    HeldRequests held;
    auto server = start_server(held.hold_all_but_now());
    std::vector<std::unique_ptr<TestClient>> clients;
    for (int i = 0; i < CLIENTS; ++i) {
        clients.push_back(std::make_unique<TestClient>(server->port()));
        ASSERT_TRUE(clients.back()->connected()) << "client " << i;
        ASSERT_TRUE(clients.back()->send_all(make_request("GET", "/hold?i=" + std::to_string(i))));
    }
    ASSERT_TRUE(held.wait_for(CLIENTS, std::chrono::seconds(15)));

    auto start = Clock::now();
    TestClient prompt(server->port());
    ASSERT_TRUE(prompt.send_all(make_request("GET", "/now")));
    auto reply = prompt.read_reply();
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->body, "{\"now\":true}");
    EXPECT_LT(seconds_since(start), 1.0);

    std::thread releaser([&] {
        for (int i = 0; i < CLIENTS; ++i) {
            held.take(std::to_string(i))(Response::json(200, std::to_string(i)));
        }
    });
    for (int i = 0; i < CLIENTS; ++i) {
        auto held_reply = clients[i]->read_reply();
        if (!held_reply) {
            ADD_FAILURE() << "client " << i << " got no response";
            break;
        }
        EXPECT_EQ(held_reply->status, 200);
        EXPECT_EQ(held_reply->body, std::to_string(i));
    }
    releaser.join();
}

}  // namespace
}  // namespace tinkerd::http
