// ChildSupervisor (supervisor.h) over /bin/sh children: exit code 0 stays down, a killed child comes back
// as the next generation with that generation's argv, the pause doubles for a child that keeps dying young
// and not for one that lived long, a failed on_restart is retried, stop_restarting waits for one under way,
// restarted children live until reap(), and reap() kills what does not exit.
#include "process/supervisor.h"

#include <atomic>
#include <csignal>
#include <fstream>
#include <mutex>
#include <unistd.h>

#include <gtest/gtest.h>

namespace tinkerd::process {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

RestartPolicy quick_policy() {
    RestartPolicy p;
    p.poll = 5ms;
    p.first_pause = 20ms;
    p.max_pause = 20ms;
    p.failed_pause = 20ms;
    return p;
}

ChildSpec shell(const std::string & script) {
    return {"child", [script](int) { return std::vector<std::string>{"sh", "-c", script}; }, nullptr};
}

// Polls `done` every 5 ms for up to 10 s; true as soon as one call says so (not asked again, since a
// state seen once, such as a restarted pid, may already have moved on).
template <typename F>
bool eventually(F done) {
    const auto deadline = Clock::now() + 10s;
    while (Clock::now() < deadline) {
        if (done()) {
            return true;
        }
        std::this_thread::sleep_for(5ms);
    }
    return done();
}

// A restarted child's pid: neither 0 (reaped, not yet restarted) nor the killed one. Takes one reading of
// pids(): reading it twice could see the old pid, then 0, and pass before the restart.
bool is_new_pid(pid_t now, pid_t killed) {
    return now != 0 && now != killed;
}

// Running (a zombie, killed but not yet reaped, is not).
bool alive(pid_t pid) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (pid <= 0 || !std::getline(stat, line) || line.rfind(')') == std::string::npos) {
        return false;
    }
    const size_t state = line.rfind(')') + 2;  // "pid (comm) S ..."
    return state < line.size() && line[state] != 'Z' && line[state] != 'X';
}

TEST(Supervisor, ExitCodeZeroStaysDown) {
    ChildSupervisor s("/bin/sh", quick_policy());
    ASSERT_TRUE(s.start({shell("exit 0")}).ok());
    s.supervise();
    EXPECT_TRUE(eventually([&] { return s.pids()[0] == 0; }));
    std::this_thread::sleep_for(200ms);  // ten pauses: a restart would have happened
    EXPECT_EQ(s.pids()[0], 0);
    EXPECT_EQ(s.generation(0), 0);
}

TEST(Supervisor, KilledChildComesBackAsTheNextGeneration) {
    std::mutex mu;
    std::vector<int> argv_generations;
    ChildSpec spec{"child",
                   [&](int generation) {
                       std::lock_guard lock(mu);
                       argv_generations.push_back(generation);
                       return std::vector<std::string>{"sh", "-c", "exec sleep 30"};
                   },
                   nullptr};
    ChildSupervisor s("/bin/sh", quick_policy());
    ASSERT_TRUE(s.start({spec, shell("exec sleep 30")}).ok());
    s.supervise();
    const std::vector<pid_t> first = s.pids();
    ASSERT_TRUE(alive(first[0]) && alive(first[1]));
    kill(first[0], SIGKILL);
    ASSERT_TRUE(eventually([&] { return is_new_pid(s.pids()[0], first[0]); }));
    EXPECT_EQ(s.generation(0), 1);
    EXPECT_EQ(s.pids()[1], first[1]) << "only the dead child is restarted";
    EXPECT_EQ(s.generation(1), 0);
    s.reap(0ms);
    std::lock_guard lock(mu);
    EXPECT_EQ(argv_generations, (std::vector<int>{0, 1}));
}

// Times of each on_restart of a child that always fails with exit code 3.
std::vector<Clock::time_point> restart_times(RestartPolicy policy, int restarts) {
    std::mutex mu;
    std::vector<Clock::time_point> times;
    ChildSpec spec = shell("exit 3");
    spec.on_restart = [&](pid_t, int) {
        std::lock_guard lock(mu);
        times.push_back(Clock::now());
        return true;
    };
    ChildSupervisor s("/bin/sh", policy);
    EXPECT_TRUE(s.start({spec}).ok());
    s.supervise();
    EXPECT_TRUE(eventually([&] {
        std::lock_guard lock(mu);
        return static_cast<int>(times.size()) >= restarts;
    }));
    s.reap(0ms);
    return times;
}

TEST(Supervisor, PauseDoublesWhileAChildKeepsDyingYoung) {
    RestartPolicy p = quick_policy();
    p.first_pause = 40ms;
    p.max_pause = 160ms;
    const auto times = restart_times(p, 5);
    ASSERT_GE(times.size(), 5u);
    // Between restarts k and k+1: the child's short life, then pause k+1 = 80, 160, 160, 160 ms.
    const std::vector<std::chrono::milliseconds> pauses = {80ms, 160ms, 160ms, 160ms};
    for (size_t k = 0; k + 1 < 5; ++k) {
        EXPECT_GE(times[k + 1] - times[k], pauses[k]) << "restart " << k + 1;
    }
}

TEST(Supervisor, PauseStaysFirstForAChildThatLivedLong) {
    RestartPolicy p = quick_policy();
    p.first_pause = 50ms;
    p.max_pause = 10s;
    p.young = 0ms;  // every death counts as one after a long life
    const auto start = Clock::now();
    const auto times = restart_times(p, 6);
    ASSERT_GE(times.size(), 6u);
    // Doubling would take 50+100+...+1600 ms = 3.15 s for six restarts; without it about 0.3 s.
    EXPECT_LT(times[5] - start, 2s);
}

TEST(Supervisor, FailedRestartIsKilledAndTriedAgain) {
    std::atomic<int> calls{0};
    std::vector<pid_t> failed;
    ChildSpec spec = shell("exec sleep 30");
    spec.on_restart = [&](pid_t pid, int generation) {
        if (calls++ == 0) {
            failed.push_back(pid);
            return false;
        }
        return true;
    };
    ChildSupervisor s("/bin/sh", quick_policy());
    ASSERT_TRUE(s.start({spec}).ok());
    s.supervise();
    ASSERT_GT(s.pids()[0], 0);  // kill(0) would signal the whole process group
    kill(s.pids()[0], SIGKILL);
    ASSERT_TRUE(eventually([&] { return calls.load() >= 2 && s.pids()[0] != 0; }));
    EXPECT_EQ(s.generation(0), 2);
    ASSERT_EQ(failed.size(), 1u);
    EXPECT_FALSE(alive(failed[0])) << "the process whose on_restart failed is killed";
    EXPECT_TRUE(alive(s.pids()[0]));
    s.reap(0ms);
}

TEST(Supervisor, StopRestartingWaitsForARestartUnderWay) {
    std::atomic<bool> in_hook{false};
    std::atomic<bool> hook_done{false};
    ChildSpec spec = shell("exec sleep 30");
    spec.on_restart = [&](pid_t, int) {
        in_hook = true;
        std::this_thread::sleep_for(300ms);
        hook_done = true;
        return true;
    };
    ChildSupervisor s("/bin/sh", quick_policy());
    ASSERT_TRUE(s.start({spec}).ok());
    s.supervise();
    ASSERT_GT(s.pids()[0], 0);  // kill(0) would signal the whole process group
    kill(s.pids()[0], SIGKILL);
    ASSERT_TRUE(eventually([&] { return in_hook.load(); }));
    s.stop_restarting();
    EXPECT_TRUE(hook_done.load());
    s.reap(0ms);
}

TEST(Supervisor, RestartedChildrenLiveUntilReap) {
    ChildSupervisor s("/bin/sh", quick_policy());
    ASSERT_TRUE(s.start({shell("exec sleep 30")}).ok());
    s.supervise();
    const pid_t first = s.pids()[0];
    ASSERT_GT(first, 0);
    kill(first, SIGKILL);
    ASSERT_TRUE(eventually([&] { return is_new_pid(s.pids()[0], first); }));
    const pid_t restarted = s.pids()[0];
    ASSERT_GT(restarted, 0);
    s.stop_restarting();
    std::this_thread::sleep_for(200ms);
    EXPECT_TRUE(alive(restarted)) << "a child forked by the supervisor's thread outlived stop_restarting";
    kill(restarted, SIGKILL);
    std::this_thread::sleep_for(100ms);
    EXPECT_EQ(s.pids()[0], restarted) << "no restart after stop_restarting";
    s.reap(0ms);
    EXPECT_FALSE(alive(restarted));
}

TEST(Supervisor, ReapKillsWhatDoesNotExit) {
    ChildSupervisor s("/bin/sh", quick_policy());
    ASSERT_TRUE(s.start({shell("exec sleep 30"), shell("exit 0")}).ok());
    s.supervise();
    const pid_t stubborn = s.pids()[0];
    const auto started = Clock::now();
    s.reap(200ms);
    EXPECT_LT(Clock::now() - started, 5s);
    EXPECT_FALSE(alive(stubborn));
    EXPECT_EQ(s.pids(), (std::vector<pid_t>{0, 0}));
}

}  // namespace
}  // namespace tinkerd::process
