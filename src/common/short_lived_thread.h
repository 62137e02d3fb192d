// run_on_short_lived_thread: start-up work that runs torch ops (GGUF conversion, kernel timings, model
// loading and its check) runs on a thread that exits when it is done. libgomp keeps a pool of workers for
// every thread that ever opened a parallel region, until that thread exits, and counts all of them: with more
// pooled workers than CPUs, each worker sleeps after ~100 spins instead of ~300,000, and every parallel region
// of the engine thread pays a futex wake-up (~1,600 a decode token on a Qwen3.5-35B-A3B-shaped model).
#pragma once

#include <exception>
#include <thread>
#include <utility>

namespace tinkerd {

// Runs f() on a new thread and waits for it; an exception f throws is rethrown here. The thread inherits this
// one's signal mask and CPU affinity.
template <class F>
void run_on_short_lived_thread(F && f) {
    std::exception_ptr error;
    std::thread thread([&f, &error] {
        try {
            std::forward<F>(f)();
        } catch (...) {
            error = std::current_exception();
        }
    });
    thread.join();
    if (error) {
        std::rethrow_exception(error);
    }
}

}  // namespace tinkerd
