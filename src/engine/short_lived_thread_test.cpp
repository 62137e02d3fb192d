// run_on_short_lived_thread (common/short_lived_thread.h): the thread's libgomp pool leaves with it, so start-up
// work does not leave idle OpenMP workers behind (which would throttle the engine thread's spin-waits), and an
// exception thrown on the thread reaches the caller.
#include "common/short_lived_thread.h"

#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

namespace tinkerd {
namespace {

int64_t threads_in_process() {
    int64_t n = 0;
    for ([[maybe_unused]] const auto & entry : std::filesystem::directory_iterator("/proc/self/task")) {
        ++n;
    }
    return n;
}

// Opens a parallel region with 2 threads on the calling thread (libgomp starts the calling thread's pool).
void open_parallel_region() {
    at::set_num_threads(2);
    std::atomic<int64_t> items{0};
    at::parallel_for(0, 64, 1, [&](int64_t begin, int64_t end) { items += end - begin; });
    ASSERT_EQ(items.load(), 64);
}

TEST(ShortLivedThread, ItsOpenMpWorkersExitWithIt) {
    open_parallel_region();  // this thread's own pool first, so that only the short-lived thread's is new
    const int64_t before = threads_in_process();
    int64_t during = 0;
    run_on_short_lived_thread([&] {
        open_parallel_region();
        during = threads_in_process();
    });
    EXPECT_GE(during, before + 2) << "the short-lived thread and its pool's worker";
    int64_t after = threads_in_process();
    for (int i = 0; i < 200 && after > before; ++i) {  // the workers exit right after their master: 2 s at most
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        after = threads_in_process();
    }
    EXPECT_EQ(after, before) << "libgomp kept the short-lived thread's workers";
}

TEST(ShortLivedThread, RethrowsWhatTheThreadThrew) {
    EXPECT_THROW(run_on_short_lived_thread([] { throw std::runtime_error("load failed"); }), std::runtime_error);
    int ran = 0;
    run_on_short_lived_thread([&] { ran = 1; });
    EXPECT_EQ(ran, 1);
}

}  // namespace
}  // namespace tinkerd
