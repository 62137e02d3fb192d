// ChildSupervisor: starts a set of child processes and restarts one that dies, for both kinds of helper
// process tinkerd runs on one machine (the --dp followers, dist/launch.cpp; the sampling replicas,
// dist/replica_launch.cpp). A child that exits with code 0 was told to stop and stays down; any other exit
// (a signal, a non-zero code) is restarted as the child's next generation after a pause that doubles while
// it keeps dying young. Restarted children are forked by the supervisor's thread, which therefore lives
// until reap() (they die with it: PR_SET_PDEATHSIG).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <sys/types.h>
#include <thread>
#include <vector>

#include "common/status.h"

namespace tinkerd::process {

struct RestartPolicy {
    std::chrono::milliseconds poll{250};            // how often children are checked with waitpid(WNOHANG)
    std::chrono::milliseconds first_pause{500};     // from an exit to the restart
    std::chrono::milliseconds max_pause{32000};     // the pause doubles up to this ...
    std::chrono::milliseconds young{60000};         // ... while the child dies within this of its start
    std::chrono::milliseconds failed_pause{10000};  // after a restart that failed (fork, or on_restart)
};

struct ChildSpec {
    std::string name;  // in log lines: "rank 1", "sampling replica 2"
    // Its arguments (argv[0] first) for generation g: 0 at start(), one more at each restart.
    std::function<std::vector<std::string>(int generation)> argv;
    // Optional; after each restart, on the supervisor's thread without its lock: connects the new process
    // (e.g. joins its groups). false: it failed; the process is killed and started again after failed_pause.
    std::function<bool(pid_t pid, int generation)> on_restart;
};

class ChildSupervisor {
  public:
    // `program`: the binary every child runs; `before_exec`: see spawn_child.
    ChildSupervisor(std::string program, RestartPolicy policy, void (*before_exec)() = nullptr);
    ~ChildSupervisor();  // reap()
    ChildSupervisor(const ChildSupervisor &) = delete;
    ChildSupervisor & operator=(const ChildSupervisor &) = delete;

    // Starts generation 0 of every child from the calling thread (they die with it); an error when a fork
    // fails (the ones started are reaped by reap()).
    Result<void> start(std::vector<ChildSpec> children);
    // Starts the thread that restarts children. Called once, after start() (and after whatever
    // on_restart needs exists).
    void supervise();
    // No restart from now on; returns once an on_restart under way has finished (so what it touches may go).
    void stop_restarting();
    // stop_restarting(), then waits up to `grace` for every child to exit, kills the rest, ends the thread.
    void reap(std::chrono::milliseconds grace = std::chrono::seconds(5));

    // The children's pids, by start() order: 0 while one is down (exited, not yet restarted).
    std::vector<pid_t> pids() const;
    int generation(size_t child) const;

  private:
    struct Child;
    void loop();
    void check_locked(Child & child, std::unique_lock<std::mutex> & lock);
    void restart_locked(Child & child, std::unique_lock<std::mutex> & lock);

    const std::string program_;
    const RestartPolicy policy_;
    void (*const before_exec_)();
    mutable std::mutex mu_;
    std::condition_variable wake_;
    std::vector<Child> children_;
    bool stopping_ = false;    // no more restarts
    bool in_restart_ = false;  // an on_restart runs (without mu_)
    bool done_ = false;        // the thread may end
    std::thread thread_;
};

}  // namespace tinkerd::process
