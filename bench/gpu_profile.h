// profile_step's device half: which device the profiled engine runs on (TINKERD_BENCH_DEVICE, default cpu),
// synchronising it before a clock is read, and the summary of the GPU kernels a kineto trace holds (total
// kernel time against the wall, the top kernels by time), so one run on a lent GPU says where a step goes.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>

namespace tinkerd::bench {

inline std::string bench_device() {
    const char * env = std::getenv("TINKERD_BENCH_DEVICE");
    return env == nullptr || *env == '\0' ? "cpu" : env;
}

inline bool is_gpu(const std::string & device) {
    return device.rfind("cuda", 0) == 0;
}

// Waits for the device's queued work (a no-op on the CPU), so a wall clock read after it covers that work.
inline void sync_device(const std::string & device) {
    if (is_gpu(device)) {
        torch::cuda::synchronize();
    }
}

inline bool is_gpu_event(const torch::autograd::profiler::KinetoEvent & e) {
    return e.deviceType() == c10::DeviceType::CUDA;
}

// Prints the GPU kernels' total time against wall_s (how busy the device was) and the `top` kernels by time
// (name cut to 100 characters), one line each: seconds, share of kernel time, count, name.
inline void print_gpu_kernels(const torch::autograd::profiler::ProfilerResult & result, double wall_s, int top) {
    std::map<std::string, std::pair<double, int64_t>> by_name;  // name -> (seconds, count)
    double total = 0;
    for (const auto & e : result.events()) {
        if (!is_gpu_event(e)) {
            continue;
        }
        auto & slot = by_name[e.name().substr(0, 100)];
        slot.first += e.durationNs() / 1e9;
        slot.second += 1;
        total += e.durationNs() / 1e9;
    }
    std::vector<std::pair<std::string, std::pair<double, int64_t>>> rows(by_name.begin(), by_name.end());
    std::sort(rows.begin(), rows.end(), [](const auto & a, const auto & b) { return a.second.first > b.second.first; });
    std::printf("GPU kernels: %.4f s in %zu kinds over %.4f s wall (%.0f%% busy)\n", total, rows.size(), wall_s,
                wall_s > 0 ? 100 * total / wall_s : 0.0);
    for (size_t i = 0; i < rows.size() && static_cast<int>(i) < top; ++i) {
        std::printf("%9.4f s %5.1f%% %7lld x  %s\n", rows[i].second.first,
                    total > 0 ? 100 * rows[i].second.first / total : 0.0, static_cast<long long>(rows[i].second.second),
                    rows[i].first.c_str());
    }
}

}  // namespace tinkerd::bench
