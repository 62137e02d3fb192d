// Machine read bandwidth, measured in-process the way llamacpp-anchor.md's bw.c does it: every thread
// sums its slice of one large float array (well over the LLC) with several independent vector
// accumulators, so enough loads are in flight to saturate memory. Best of N passes, in GB/s (1e9 B/s).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace tinkerd::bench {

class ReadBandwidth {
  public:
    // bytes is rounded down to a multiple of 64 floats per thread; the array is first-touched by the
    // threads that later read it.
    ReadBandwidth(size_t bytes, int threads) : threads_(std::max(1, threads)) {
        const size_t per_thread = bytes / sizeof(float) / threads_ / 64 * 64;
        count_ = per_thread * threads_;
        data_ = static_cast<float *>(std::aligned_alloc(64, count_ * sizeof(float)));
        parallel([](int, float * p, size_t n) { std::fill(p, p + n, 1.0f); });
    }
    ~ReadBandwidth() { std::free(data_); }
    ReadBandwidth(const ReadBandwidth &) = delete;
    ReadBandwidth & operator=(const ReadBandwidth &) = delete;

    size_t bytes() const { return count_ * sizeof(float); }

    // Best of `passes` full reads of the array (after one unreported warm-up read), in GB/s.
    double measure(int passes) {
        double best = 0;
        for (int i = -1; i < passes; ++i) {
            const auto t0 = std::chrono::steady_clock::now();
            parallel([&](int t, const float * p, size_t n) { sums_[t] = sum(p, n); });
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            best = i < 0 ? best : std::max(best, bytes() / s / 1e9);
        }
        for (float v : sums_) {
            checksum_ += v;  // keeps the reads observable
        }
        return best;
    }
    double checksum() const { return checksum_; }

  private:
    typedef float v8f __attribute__((vector_size(32)));

    // 4 independent 8-wide accumulators (8 SSE registers without AVX); n is a multiple of 64.
    static float sum(const float * p, size_t n) {
        v8f a0 = {}, a1 = {}, a2 = {}, a3 = {};
        for (size_t i = 0; i < n; i += 32) {
            v8f x0, x1, x2, x3;
            std::memcpy(&x0, p + i, 32);
            std::memcpy(&x1, p + i + 8, 32);
            std::memcpy(&x2, p + i + 16, 32);
            std::memcpy(&x3, p + i + 24, 32);
            a0 += x0;
            a1 += x1;
            a2 += x2;
            a3 += x3;
        }
        const v8f a = (a0 + a1) + (a2 + a3);
        float total = 0;
        for (int j = 0; j < 8; ++j) {
            total += a[j];
        }
        return total;
    }

    template <typename F>
    void parallel(F && body) {
        const size_t slice = count_ / threads_;
        sums_.assign(threads_, 0.0f);
        std::vector<std::thread> pool;
        for (int t = 0; t < threads_; ++t) {
            pool.emplace_back([&, t] { body(t, data_ + t * slice, slice); });
        }
        for (std::thread & th : pool) {
            th.join();
        }
    }

    int threads_;
    size_t count_ = 0;
    float * data_ = nullptr;
    std::vector<float> sums_;
    double checksum_ = 0;
};

}  // namespace tinkerd::bench
