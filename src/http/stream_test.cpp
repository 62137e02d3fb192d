// Tests for streamed responses (Response::stream, StreamWriter): chunked framing and order, keep-alive
// after a stream, HTTP/1.0, client hang-ups and on_close, abandoned writers, 200 concurrent streams,
// Server::stop() with open streams, and the cap on unsent bytes for a client that does not read.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "http/server.h"
#include "http/test_client.h"

namespace tinkerd::http {
namespace {

using namespace test_util;
using Writer = std::shared_ptr<StreamWriter>;

Response stream_response(std::function<void(Writer)> stream) {
    Response response;
    response.content_type = "text/event-stream";
    response.headers.emplace_back("Cache-Control", "no-cache");
    response.log_tag = "test=stream";
    response.stream = std::move(stream);
    return response;
}

std::string event(int i) {
    return "data: {\"i\":" + std::to_string(i) + "}\n\n";
}

// Writers kept by the test, and how many of their on_close callbacks ran.
struct HeldWriters {
    std::mutex mutex;
    std::condition_variable changed;
    std::vector<Writer> writers;
    int closes = 0;
    Clock::time_point last_close;

    // Keeps `writer` and registers an on_close that counts.
    void add(const Writer & writer) {
        writer->on_close([this] {
            std::lock_guard lock(mutex);
            ++closes;
            last_close = Clock::now();
            changed.notify_all();
        });
        std::lock_guard lock(mutex);
        writers.push_back(writer);
        changed.notify_all();
    }
    bool wait_for_writers(size_t count) {
        std::unique_lock lock(mutex);
        return changed.wait_for(lock, std::chrono::seconds(10), [&] { return writers.size() >= count; });
    }
    bool wait_for_closes(int count) {
        std::unique_lock lock(mutex);
        return changed.wait_for(lock, std::chrono::seconds(10), [&] { return closes >= count; });
    }
    Writer at(size_t i) {
        std::lock_guard lock(mutex);
        return writers.at(i);
    }
};

// Threads started by handlers, joined at the end of a test.
struct Workers {
    std::mutex mutex;
    std::vector<std::thread> threads;

    void start(std::function<void()> work) {
        std::lock_guard lock(mutex);
        threads.emplace_back(std::move(work));
    }
    ~Workers() {
        std::lock_guard lock(mutex);
        for (auto & thread : threads) {
            thread.join();
        }
    }
};

void expect_chunked_head(const std::optional<Reply> & head) {
    ASSERT_TRUE(head);
    EXPECT_EQ(head->status, 200);
    EXPECT_EQ(head->headers.at("transfer-encoding"), "chunked");
    EXPECT_EQ(head->headers.count("content-length"), 0u);
    EXPECT_EQ(head->headers.at("content-type"), "text/event-stream");
    EXPECT_EQ(head->headers.at("cache-control"), "no-cache");
}

TEST(HttpStream, SendsAHundredChunksFromAnotherThreadInOrder) {
    Workers workers;
    auto server = start_server([&](Request &&, Respond respond) {
        respond(stream_response([&](Writer writer) {
            workers.start([writer] {
                for (int i = 0; i < 100; ++i) {
                    EXPECT_TRUE(writer->write(event(i)));
                }
                EXPECT_TRUE(writer->write(""));  // ignored
                writer->finish();
                EXPECT_FALSE(writer->write(event(100)));
                EXPECT_FALSE(writer->closed());
            });
        }));
    });
    TestClient client(server->port());
    ASSERT_TRUE(client.send_all(make_request("GET", "/stream")));
    expect_chunked_head(client.read_head());
    auto chunks = client.read_chunks();
    ASSERT_TRUE(chunks);
    ASSERT_EQ(chunks->size(), 100u);
    for (int i = 0; i < 100; ++i) {
        EXPECT_EQ((*chunks)[i], event(i));
    }
}

TEST(HttpStream, ServesTheNextRequestOnTheConnectionAfterAFinishedStream) {
    std::atomic<int> closes{0};
    auto server = start_server([&](Request && request, Respond respond) {
        if (request.path == "/now") {
            return respond(Response::json(200, "{\"now\":true}"));
        }
        respond(stream_response([&](Writer writer) {  // written and finished on the I/O thread, at once
            writer->on_close([&] { ++closes; });
            writer->write("a");
            writer->write("bc");
            writer->finish();
        }));
    });
    TestClient client(server->port());
    for (int round = 0; round < 2; ++round) {
        ASSERT_TRUE(client.send_all(make_request("GET", "/stream")));
        expect_chunked_head(client.read_head());
        auto chunks = client.read_chunks();
        ASSERT_TRUE(chunks);
        EXPECT_EQ(*chunks, (std::vector<std::string>{"a", "bc"}));
        ASSERT_TRUE(client.send_all(make_request("GET", "/now")));
        auto reply = client.read_reply();
        ASSERT_TRUE(reply) << "round " << round;
        EXPECT_EQ(reply->body, "{\"now\":true}");
    }
    ASSERT_TRUE(client.send_all(make_request("GET", "/stream", "", "Connection: close\r\n")));
    auto head = client.read_head();
    ASSERT_TRUE(head);
    EXPECT_EQ(head->headers["connection"], "close");
    EXPECT_TRUE(client.read_chunks());
    EXPECT_TRUE(client.peer_closed(2000));
    EXPECT_EQ(closes.load(), 0);  // finished streams never run on_close
}

TEST(HttpStream, Http10ClientGetsARawBodyEndedByClose) {
    auto server = start_server([&](Request &&, Respond respond) {
        respond(stream_response([&](Writer writer) {
            writer->write("one ");
            writer->write("two");
            writer->finish();
        }));
    });
    TestClient client(server->port());
    ASSERT_TRUE(client.send_all("GET /stream HTTP/1.0\r\nHost: x\r\n\r\n"));
    auto head = client.read_head();
    ASSERT_TRUE(head);
    EXPECT_EQ(head->status, 200);
    EXPECT_EQ(head->headers.count("transfer-encoding"), 0u);
    EXPECT_EQ(head->headers.count("content-length"), 0u);
    EXPECT_EQ(head->headers["connection"], "close");
    EXPECT_EQ(client.read_until_close(), "one two");
}

TEST(HttpStream, ClosesTheStreamWhenTheClientHangsUp) {
    HeldWriters held;
    auto server = start_server([&](Request && request, Respond respond) {
        if (request.path == "/now") {
            return respond(Response::json(200, "{}"));
        }
        respond(stream_response([&](Writer writer) {
            writer->write("hello");
            held.add(writer);
        }));
    });
    TestClient client(server->port());
    ASSERT_TRUE(client.send_all(make_request("GET", "/stream")));
    expect_chunked_head(client.read_head());
    EXPECT_EQ(client.read_chunk(), "hello");
    ASSERT_TRUE(held.wait_for_writers(1));
    Writer writer = held.at(0);
    EXPECT_FALSE(writer->closed());

    const auto hang_up = Clock::now();
    client.close();
    ASSERT_TRUE(held.wait_for_closes(1));
    EXPECT_LT(std::chrono::duration<double>(held.last_close - hang_up).count(), 1.0);
    EXPECT_TRUE(writer->closed());
    EXPECT_FALSE(writer->write("more"));
    bool ran = false;
    writer->on_close([&] { ran = true; });  // registered after the close: runs at once
    EXPECT_TRUE(ran);
    writer->finish();  // harmless
    EXPECT_EQ(held.closes, 1);

    TestClient other(server->port());  // the server is fine
    ASSERT_TRUE(other.send_all(make_request("GET", "/now")));
    EXPECT_TRUE(other.read_reply());
}

TEST(HttpStream, AWriterThreadNoticesAHangUpMidStream) {
    Workers workers;
    std::atomic<bool> writer_done{false};
    std::atomic<int> closes{0};
    auto server = start_server([&](Request &&, Respond respond) {
        respond(stream_response([&](Writer writer) {
            writer->on_close([&] { ++closes; });
            workers.start([&, writer] {
                const auto start = Clock::now();
                while (writer->write(std::string(1000, 'x')) && seconds_since(start) < 20) {
                    std::this_thread::sleep_for(std::chrono::microseconds(200));
                }
                writer_done = true;
            });
        }));
    });
    {
        TestClient client(server->port());
        ASSERT_TRUE(client.send_all(make_request("GET", "/stream")));
        expect_chunked_head(client.read_head());
        for (int i = 0; i < 10; ++i) {
            ASSERT_TRUE(client.read_chunk());
        }
    }  // hangs up with data in flight
    const auto start = Clock::now();
    while (!writer_done && seconds_since(start) < 10) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_TRUE(writer_done);
    EXPECT_LT(seconds_since(start), 2.0);
    EXPECT_EQ(closes.load(), 1);
}

// Responds with a stream through `respond`, and checks that the stream callback gets a closed writer.
void expect_closed_writer(const Respond & respond) {
    std::promise<Writer> given;
    auto on_close_ran = std::make_shared<std::atomic<bool>>(false);
    respond(stream_response([&given, on_close_ran](Writer writer) {
        writer->on_close([on_close_ran] { *on_close_ran = true; });
        given.set_value(writer);
    }));
    auto future = given.get_future();
    ASSERT_EQ(future.wait_for(std::chrono::seconds(5)), std::future_status::ready);
    Writer writer = future.get();
    EXPECT_TRUE(writer->closed());
    EXPECT_FALSE(writer->write("x"));
    EXPECT_TRUE(*on_close_ran);
}

TEST(HttpStream, AStreamThatCannotBeSentGetsAClosedWriter) {
    std::mutex mutex;
    std::condition_variable changed;
    std::vector<Respond> responds;
    auto server = start_server([&](Request &&, Respond respond) {
        std::lock_guard lock(mutex);
        responds.push_back(std::move(respond));
        changed.notify_all();
    });
    auto wait_for = [&](size_t count) {
        std::unique_lock lock(mutex);
        EXPECT_TRUE(changed.wait_for(lock, std::chrono::seconds(10), [&] { return responds.size() >= count; }));
        return responds.size() >= count ? responds[count - 1] : Respond();
    };
    TestClient first(server->port());
    ASSERT_TRUE(first.send_all(make_request("GET", "/1")));
    Respond respond_first = wait_for(1);
    first.close();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    expect_closed_writer(respond_first);  // the client has gone

    TestClient second(server->port());
    ASSERT_TRUE(second.send_all(make_request("GET", "/2")));
    Respond respond_second = wait_for(2);
    server->stop();
    expect_closed_writer(respond_second);  // the server has stopped
}

TEST(HttpStream, DroppingTheWriterBeforeFinishAbortsTheResponse) {
    auto server = start_server([&](Request &&, Respond respond) {
        respond(stream_response([](Writer writer) { writer->write("partial"); }));
    });
    TestClient client(server->port());
    ASSERT_TRUE(client.send_all(make_request("GET", "/stream")));
    expect_chunked_head(client.read_head());
    EXPECT_EQ(client.read_chunk(), "partial");
    EXPECT_FALSE(client.read_chunk());  // no last chunk: the connection is closed
}

// Streams fed by a pool of threads, one chunk per job, so the streams' chunks interleave.
class ChunkPool {
  public:
    ChunkPool(int threads, int chunks_per_stream) : chunks_(chunks_per_stream) {
        for (int i = 0; i < threads; ++i) {
            threads_.emplace_back([this] { run(); });
        }
    }
    ~ChunkPool() {
        {
            std::lock_guard lock(mutex_);
            stopping_ = true;
        }
        changed_.notify_all();
        for (auto & thread : threads_) {
            thread.join();
        }
    }
    void add(Writer writer) { push({std::move(writer), 0}); }

  private:
    struct Job {
        Writer writer;
        int next;
    };
    void push(Job job) {
        std::lock_guard lock(mutex_);
        jobs_.push_back(std::move(job));
        changed_.notify_one();
    }
    void run() {
        while (true) {
            std::unique_lock lock(mutex_);
            changed_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
            if (jobs_.empty()) {
                return;
            }
            Job job = std::move(jobs_.front());
            jobs_.pop_front();
            lock.unlock();
            EXPECT_TRUE(job.writer->write(event(job.next)));
            if (++job.next < chunks_) {
                push(std::move(job));
            } else {
                job.writer->finish();
            }
        }
    }

    const int chunks_;
    std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<Job> jobs_;
    bool stopping_ = false;
    std::vector<std::thread> threads_;
};

TEST(HttpStream, TwoHundredConcurrentStreamsAllComplete) {
    raise_open_file_limit();
    constexpr int STREAMS = 200;
    constexpr int CHUNKS = 20;
    ChunkPool pool(4, CHUNKS);
    auto server = start_server(
        [&](Request &&, Respond respond) { respond(stream_response([&](Writer writer) { pool.add(writer); })); });
    std::vector<std::unique_ptr<TestClient>> clients;
    for (int i = 0; i < STREAMS; ++i) {
        clients.push_back(std::make_unique<TestClient>(server->port()));
        ASSERT_TRUE(clients.back()->connected()) << "client " << i;
        ASSERT_TRUE(clients.back()->send_all(make_request("GET", "/stream?i=" + std::to_string(i))));
    }
    for (int i = 0; i < STREAMS; ++i) {
        expect_chunked_head(clients[i]->read_head());
        auto chunks = clients[i]->read_chunks();
        ASSERT_TRUE(chunks) << "client " << i;
        ASSERT_EQ(chunks->size(), static_cast<size_t>(CHUNKS)) << "client " << i;
        for (int c = 0; c < CHUNKS; ++c) {
            EXPECT_EQ((*chunks)[c], event(c)) << "client " << i;
        }
    }
}

TEST(HttpStream, StopClosesOpenStreamsAndWritersOutliveTheServer) {
    constexpr int STREAMS = 5;
    HeldWriters held;
    auto server = start_server(
        [&](Request &&, Respond respond) { respond(stream_response([&](Writer writer) { held.add(writer); })); });
    std::vector<std::unique_ptr<TestClient>> clients;
    for (int i = 0; i < STREAMS; ++i) {
        clients.push_back(std::make_unique<TestClient>(server->port()));
        ASSERT_TRUE(clients.back()->send_all(make_request("GET", "/stream")));
        expect_chunked_head(clients.back()->read_head());
    }
    ASSERT_TRUE(held.wait_for_writers(STREAMS));
    std::atomic<bool> stop_writing{false};
    std::thread writer_thread([&] {  // keeps writing while the server stops
        while (!stop_writing) {
            for (int i = 0; i < STREAMS; ++i) {
                held.at(i)->write("tick");
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    server->stop();
    ASSERT_TRUE(held.wait_for_closes(STREAMS));
    for (int i = 0; i < STREAMS; ++i) {
        EXPECT_TRUE(held.at(i)->closed());
        EXPECT_FALSE(held.at(i)->write("after stop"));
        EXPECT_TRUE(clients[i]->peer_closed(2000)) << "client " << i;
    }
    server.reset();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    stop_writing = true;
    writer_thread.join();
    EXPECT_FALSE(held.at(0)->write("after destruction"));
    held.at(0)->finish();
    EXPECT_EQ(held.closes, STREAMS);
}

TEST(HttpStream, ClosesAStreamWhoseClientDoesNotRead) {
    ServerOptions options;
    options.max_stream_buffer_bytes = 256 * 1024;
    HeldWriters held;
    auto server = start_server(
        [&](Request &&, Respond respond) { respond(stream_response([&](Writer writer) { held.add(writer); })); },
        options);
    TestClient client(server->port(), 16 * 1024);
    ASSERT_TRUE(client.send_all(make_request("GET", "/stream")));
    ASSERT_TRUE(held.wait_for_writers(1));
    Writer writer = held.at(0);
    const std::string chunk(64 * 1024, 'x');
    size_t written = 0;
    while (writer->write(chunk) && written < (size_t{1} << 30)) {  // the client reads nothing
        written += chunk.size();
    }
    EXPECT_LT(written, size_t{1} << 30);
    EXPECT_TRUE(writer->closed());
    EXPECT_TRUE(held.wait_for_closes(1));
    EXPECT_TRUE(client.peer_closed(5000));  // what was sent is read, then the close
}

}  // namespace
}  // namespace tinkerd::http
