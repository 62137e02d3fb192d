// RateWindow: amounts (tokens, busy seconds) added at times, summed over the last `seconds` in one-second
// buckets, so a rate ("tokens per second over the last minute") costs O(window) to read and O(1) to add.
// Not thread-safe: its owner locks.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace tinkerd {

class RateWindow {
  public:
    explicit RateWindow(int seconds = 60) : buckets_(static_cast<size_t>(seconds > 0 ? seconds : 1)) {}

    // Adds `amount` at `now` (Unix seconds; times must not go back by more than the window).
    void add(double now, double amount) {
        Bucket & b = bucket_at(now);
        b.sum += amount;
    }

    // The sum over (now - window, now].
    double sum(double now) const {
        const int64_t second = static_cast<int64_t>(std::floor(now));
        const int64_t window = static_cast<int64_t>(buckets_.size());
        double total = 0;
        for (const Bucket & b : buckets_) {
            if (b.second > second - window && b.second <= second) {
                total += b.sum;
            }
        }
        return total;
    }

    // sum / window length (the window is shortened to `elapsed` seconds when fewer have passed).
    double rate(double now, double elapsed) const {
        const double window = std::min(static_cast<double>(buckets_.size()), std::max(elapsed, 1.0));
        return sum(now) / window;
    }

  private:
    struct Bucket {
        int64_t second = -1;
        double sum = 0;
    };
    Bucket & bucket_at(double now) {
        const int64_t second = static_cast<int64_t>(std::floor(now));
        Bucket & b = buckets_[static_cast<size_t>(second % static_cast<int64_t>(buckets_.size()))];
        if (b.second != second) {
            b.second = second;
            b.sum = 0;
        }
        return b;
    }

    std::vector<Bucket> buckets_;
};

}  // namespace tinkerd
