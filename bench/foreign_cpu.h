// How busy the rest of the machine was while a measurement ran: CPU time of all processes (from
// /proc/stat) minus this process's own (getrusage), as a share of the cores' wall time. On this shared
// 2-core VM a few % of foreign CPU already slows 2-thread OpenMP code by multiples (llamacpp-anchor.md §3).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sys/resource.h>
#include <thread>

namespace tinkerd::bench {

class ForeignCpu {
  public:
    ForeignCpu() : wall0_(std::chrono::steady_clock::now()), busy0_(machine_busy_s()), own0_(own_s()) {}

    // Percent of all cores' time since construction used by other processes (clamped at 0).
    double percent() const {
        const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0_).count();
        const double foreign = (machine_busy_s() - busy0_) - (own_s() - own0_);
        const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
        return foreign > 0 && wall > 0 ? 100.0 * foreign / (wall * cores) : 0.0;
    }

  private:
    // Non-idle CPU seconds of the whole machine since boot (user nice system irq softirq steal).
    static double machine_busy_s() {
        unsigned long long v[8] = {};
        FILE * f = std::fopen("/proc/stat", "r");
        if (f == nullptr) {
            return 0;
        }
        const int n = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
                                  &v[5], &v[6], &v[7]);
        std::fclose(f);
        return n == 8 ? (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / 100.0 : 0;  // USER_HZ = 100
    }

    static double own_s() {
        rusage u{};
        getrusage(RUSAGE_SELF, &u);
        return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
    }

    std::chrono::steady_clock::time_point wall0_;
    double busy0_, own0_;
};

// Waits (in 1 s windows, up to timeout_s) until other processes use at most max_pct of the cores.
inline bool wait_for_quiet(double max_pct, double timeout_s) {
    for (double waited = 0; waited < timeout_s; waited += 1) {
        const ForeignCpu window;
        std::this_thread::sleep_for(std::chrono::seconds(1));
        if (window.percent() <= max_pct) {
            return true;
        }
    }
    return false;
}

}  // namespace tinkerd::bench
