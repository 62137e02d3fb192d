// Internal to src/http: the state of one streamed response, shared by its Session (which sends the queued
// bytes on its strand, one async write at a time) and the StreamWriter handed to the handler (any thread).
// One mutex guards it; user callbacks never run (nor are destroyed) under it.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "http/server.h"

namespace tinkerd::http {

class Session;
struct ServerContext;

class StreamState : public std::enable_shared_from_this<StreamState> {
  public:
    // What take() found.
    enum class Take {
        DATA,    // bytes to send
        IDLE,    // nothing queued: the next write() asks the session to send again
        DONE,    // finished and everything sent
        CLOSED,  // closed (see close_reason())
    };

    // `head` (the serialized response header) is the first thing sent. `chunked`: HTTP/1.1 chunk framing.
    StreamState(std::weak_ptr<Session> session, std::weak_ptr<ServerContext> context, bool chunked,
                size_t max_unsent_bytes, std::string head);

    // ---- the writer's side (any thread) ----
    bool write(std::string data);
    void finish();
    bool closed() const;
    void on_close(std::function<void()> callback);
    // The last StreamWriter is gone before finish(): what is queued is sent, then the connection closed.
    void abandon();
    bool abandoned() const;

    // ---- the session's side (on its strand) ----
    // Moves the queued bytes into `out` (which must be empty).
    Take take(std::string & out);
    // `bytes` of what take() returned have been written.
    void sent(size_t bytes);
    // Closes the stream (if still open): runs on_close unless finished. Returns false if already closed.
    bool close(const std::string & reason);
    std::string close_reason() const;
    size_t body_bytes() const;

  private:
    // Marks the stream closed; returns the callback to run, if any (to be run and destroyed unlocked).
    std::function<void()> close_locked(const std::string & reason);
    // Asks the session to send (or, once closed, to drop the connection). False if it is gone or stopping.
    bool wake_session();
    // Why wake_session() failed: "server stopped" or "connection closed".
    std::string gone_reason() const;

    const std::weak_ptr<Session> session_;
    const std::weak_ptr<ServerContext> context_;
    const bool chunked_;
    const size_t max_unsent_bytes_;

    mutable std::mutex mutex_;  // guards everything below
    std::string pending_;       // framed bytes not yet taken by the session
    size_t unsent_bytes_ = 0;   // pending_ plus the batch being written
    size_t body_bytes_ = 0;     // payload written so far (without framing)
    bool session_busy_ = true;  // the session will call take() again (it starts by sending the head)
    bool finished_ = false;     // by finish() or abandon(): no more writes
    bool abandoned_ = false;    // ... by abandon(): no last chunk, and the connection is closed
    bool closed_ = false;
    std::string close_reason_;
    std::function<void()> on_close_;
};

// The StreamWriter given to the handler: forwards to the state, and abandons it when destroyed.
std::shared_ptr<StreamWriter> make_stream_writer(std::shared_ptr<StreamState> state);

// For a streamed Response that will not be sent (the connection is gone, Respond was called twice, an
// invalid status): calls `stream` (if set) with a writer closed for `reason`, so `stream` is still called
// once and an on_close runs at once. Call it with no lock held.
void refuse_stream(const std::function<void(std::shared_ptr<StreamWriter>)> & stream, const std::string & reason);

}  // namespace tinkerd::http
