// ComputeThread (compute_thread.h): a FIFO of blocking calls served by one thread.
#include "scheduler/compute_thread.h"

namespace tinkerd::scheduler {

ComputeThread::ComputeThread() : thread_([this] { loop(); }) {}

ComputeThread::~ComputeThread() {
    {
        std::lock_guard lock(mu_);
        stopping_ = true;
    }
    work_cv_.notify_all();
    thread_.join();
}

void ComputeThread::run(const std::function<void()> & f) {
    if (std::this_thread::get_id() == thread_.get_id()) {
        f();
        return;
    }
    Job job;
    job.f = &f;
    std::unique_lock lock(mu_);
    queue_.push_back(&job);
    work_cv_.notify_one();
    done_cv_.wait(lock, [&] { return job.done; });
    if (job.error) {
        std::rethrow_exception(job.error);
    }
}

void ComputeThread::loop() {
    std::unique_lock lock(mu_);
    for (;;) {
        work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) {
            return;  // stopping, nothing left
        }
        Job * job = queue_.front();
        queue_.pop_front();
        lock.unlock();
        try {
            (*job->f)();
        } catch (...) {
            job->error = std::current_exception();
        }
        lock.lock();
        job->done = true;
        done_cv_.notify_all();
    }
}

}  // namespace tinkerd::scheduler
