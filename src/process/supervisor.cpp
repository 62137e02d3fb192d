// ChildSupervisor (supervisor.h): generation 0 from the caller's thread, then one thread that polls the
// children with waitpid(WNOHANG), restarts the ones that died (pause, fork, on_restart) and, once told to
// stop, only waits for reap() so that the children it forked live until then.
#include "process/supervisor.h"

#include <algorithm>
#include <csignal>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "process/spawn.h"

namespace tinkerd::process {

using Clock = std::chrono::steady_clock;

struct ChildSupervisor::Child {
    ChildSpec spec;
    pid_t pid = 0;            // 0 while down
    int generation = 0;       // of the process running (or last run)
    bool stays_down = false;  // exited with code 0: told to stop
    Clock::time_point started;
    Clock::time_point restart_at;
    std::chrono::milliseconds next_pause{0};  // the pause after its next young death
};

namespace {

double seconds(std::chrono::milliseconds ms) {
    return static_cast<double>(ms.count()) / 1000.0;
}

}  // namespace

ChildSupervisor::ChildSupervisor(std::string program, RestartPolicy policy, void (*before_exec)())
    : program_(std::move(program)), policy_(policy), before_exec_(before_exec) {}

ChildSupervisor::~ChildSupervisor() {
    reap();
}

Result<void> ChildSupervisor::start(std::vector<ChildSpec> children) {
    std::lock_guard lock(mu_);
    for (ChildSpec & spec : children) {
        Child child;
        child.spec = std::move(spec);
        child.next_pause = policy_.first_pause;
        child.pid = spawn_child(program_, child.spec.argv(0), before_exec_);
        child.started = Clock::now();
        const bool failed = child.pid < 0;
        if (failed) {
            child.pid = 0;
            child.stays_down = true;
        }
        children_.push_back(std::move(child));
        if (failed) {
            return internal_error(children_.back().spec.name + ": fork failed");
        }
    }
    return {};
}

void ChildSupervisor::supervise() {
    thread_ = std::thread([this] { loop(); });
}

void ChildSupervisor::loop() {
    std::unique_lock lock(mu_);
    while (!done_) {
        wake_.wait_for(lock, policy_.poll);
        // children_ does not change after start(), so iterating survives restart_locked's unlocking.
        for (Child & child : children_) {
            if (stopping_) {
                break;
            }
            check_locked(child, lock);
        }
    }
}

// Reaps the child if it exited (code 0: it stays down; otherwise its restart is due after a pause), and
// restarts it once that pause is over.
void ChildSupervisor::check_locked(Child & child, std::unique_lock<std::mutex> & lock) {
    int status = 0;
    if (child.pid > 0 && waitpid(child.pid, &status, WNOHANG) == child.pid) {
        const pid_t pid = child.pid;
        child.pid = 0;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
            child.stays_down = true;
            LOG_INF("supervisor", "%s exited (exit code 0, pid %d): told to stop, not restarted",
                    child.spec.name.c_str(), static_cast<int>(pid));
            return;
        }
        const auto now = Clock::now();
        const auto pause = now - child.started < policy_.young ? child.next_pause : policy_.first_pause;
        child.restart_at = now + pause;
        child.next_pause = std::min(pause * 2, policy_.max_pause);
        LOG_WRN("supervisor", "%s exited (%s, pid %d); restarting it in %.1f s", child.spec.name.c_str(),
                exit_reason(status).c_str(), static_cast<int>(pid), seconds(pause));
    }
    if (child.pid == 0 && !child.stays_down && Clock::now() >= child.restart_at) {
        restart_locked(child, lock);
    }
}

// Starts the child's next generation and runs its on_restart without the lock; a failure is tried again
// after failed_pause.
void ChildSupervisor::restart_locked(Child & child, std::unique_lock<std::mutex> & lock) {
    const int generation = child.generation + 1;
    const pid_t pid = spawn_child(program_, child.spec.argv(generation), before_exec_);
    child.started = Clock::now();
    if (pid < 0) {
        child.restart_at = Clock::now() + policy_.failed_pause;
        LOG_ERR("supervisor", "%s: fork failed; trying again in %.0f s", child.spec.name.c_str(),
                seconds(policy_.failed_pause));
        return;
    }
    child.pid = pid;
    child.generation = generation;
    if (child.spec.on_restart) {
        in_restart_ = true;
        lock.unlock();
        const bool connected = child.spec.on_restart(pid, generation);
        lock.lock();
        in_restart_ = false;
        wake_.notify_all();  // stop_restarting() may wait for this
        if (!connected) {
            kill(pid, SIGKILL);
            waitpid(pid, nullptr, 0);
            child.pid = 0;
            child.restart_at = Clock::now() + policy_.failed_pause;
            LOG_ERR("supervisor", "%s (pid %d) did not come back; trying again in %.0f s", child.spec.name.c_str(),
                    static_cast<int>(pid), seconds(policy_.failed_pause));
            return;
        }
    }
    LOG_INF("supervisor", "%s restarted (pid %d, generation %d)", child.spec.name.c_str(), static_cast<int>(pid),
            generation);
}

void ChildSupervisor::stop_restarting() {
    std::unique_lock lock(mu_);
    stopping_ = true;
    wake_.notify_all();
    wake_.wait(lock, [this] { return !in_restart_; });
}

void ChildSupervisor::reap(std::chrono::milliseconds grace) {
    stop_restarting();
    std::vector<pid_t> pids = this->pids();
    std::erase(pids, 0);
    const auto deadline = Clock::now() + grace;
    while (!pids.empty() && Clock::now() < deadline) {
        std::erase_if(pids, [](pid_t pid) { return waitpid(pid, nullptr, WNOHANG) != 0; });
        if (!pids.empty()) {
            usleep(100000);
        }
    }
    for (pid_t pid : pids) {
        LOG_WRN("supervisor", "child process %d did not exit within %.1f s; killing it", static_cast<int>(pid),
                seconds(grace));
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
    }
    {
        std::lock_guard lock(mu_);
        for (Child & child : children_) {
            child.pid = 0;
        }
        done_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) {
        thread_.join();
    }
}

std::vector<pid_t> ChildSupervisor::pids() const {
    std::lock_guard lock(mu_);
    std::vector<pid_t> pids;
    for (const Child & child : children_) {
        pids.push_back(child.pid);
    }
    return pids;
}

int ChildSupervisor::generation(size_t child) const {
    std::lock_guard lock(mu_);
    return children_.at(child).generation;
}

}  // namespace tinkerd::process
