#include "api/output_stage.h"

#include <exception>

#include "common/log.h"

namespace tinkerd::api {

OutputStage::OutputStage(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {
    thread_ = std::thread([this] { loop(); });
}

OutputStage::~OutputStage() {
    stop();
}

void OutputStage::push_tokens(std::shared_ptr<SampleSink> sink, std::vector<GeneratedToken> tokens) {
    if (tokens.empty()) {
        return;
    }
    Event event;
    event.sink = std::move(sink);
    event.tokens = std::move(tokens);
    push(std::move(event));
}

void OutputStage::push_done(std::shared_ptr<SampleSink> sink, Result<engine::SampleOutput> output) {
    Event event;
    event.sink = std::move(sink);
    event.done.emplace(std::move(output));
    push(std::move(event));
}

void OutputStage::push(Event event) {
    {
        std::unique_lock<std::mutex> lock(mutex_);
        if (!stopped_) {
            if (queue_.size() >= capacity_ && !stopping_) {
                ++full_waits_;
                not_full_.wait(lock, [this] { return queue_.size() < capacity_ || stopping_; });
            }
            if (!stopping_) {
                queue_.push_back(std::move(event));
                lock.unlock();
                not_empty_.notify_one();
                return;
            }
        }
    }
    // Stopping: wait for the thread to hand over (events stay in order), then handle it here.
    {
        std::unique_lock<std::mutex> lock(mutex_);
        not_full_.wait(lock, [this] { return stopped_; });
    }
    handle(event);
}

void OutputStage::stop() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stopping_) {
            return;
        }
        stopping_ = true;
    }
    not_empty_.notify_all();
    not_full_.notify_all();
    if (thread_.joinable()) {
        thread_.join();
    }
}

void OutputStage::loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        not_empty_.wait(lock, [this] { return !queue_.empty() || stopping_; });
        if (queue_.empty()) {  // stopping and drained
            stopped_ = true;
            lock.unlock();
            not_full_.notify_all();
            return;
        }
        Event event = std::move(queue_.front());
        queue_.pop_front();
        lock.unlock();
        not_full_.notify_one();
        handle(event);
        event = Event{};  // release the sink and output outside the lock
        lock.lock();
    }
}

void OutputStage::handle(Event & event) {
    if (!event.sink) {
        return;
    }
    try {
        if (event.done) {
            event.sink->on_done(std::move(*event.done));
        } else if (!event.sink->cancelled()) {
            event.sink->on_tokens(std::move(event.tokens));
        }
    } catch (const std::exception & e) {
        LOG_ERR("output", "a sample event's handler failed: %s", e.what());
    }
}

}  // namespace tinkerd::api
