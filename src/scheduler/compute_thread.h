// ComputeThread: one thread that runs the engine calls of several EngineWorkers (one per served model) in turn.
// libgomp keeps a pool of OpenMP workers for each thread that opens parallel regions; with one engine thread per
// model the pools outnumber the CPUs as soon as two models are served with --threads equal to the cores, and
// libgomp then cuts every worker's spin-wait to ~100 iterations, so each parallel region pays a futex wake-up
// (about half the decode speed: docs/benchmarks.md). Running every model's steps on this one thread keeps one pool.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace tinkerd::scheduler {

class ComputeThread {
  public:
    ComputeThread();
    ~ComputeThread();  // runs what is queued, then joins
    ComputeThread(const ComputeThread &) = delete;
    ComputeThread & operator=(const ComputeThread &) = delete;

    // Runs f on the compute thread after the calls queued before it (first come, first served) and returns
    // when it has run; an exception f throws is rethrown here. Called from the compute thread itself, f runs
    // at once (no deadlock).
    void run(const std::function<void()> & f);

  private:
    struct Job {
        const std::function<void()> * f = nullptr;
        std::exception_ptr error;
        bool done = false;
    };
    void loop();

    std::mutex mu_;
    std::condition_variable work_cv_, done_cv_;
    std::deque<Job *> queue_;
    bool stopping_ = false;
    std::thread thread_;
};

}  // namespace tinkerd::scheduler
