// Latency histogram buckets and quantiles (latency_histogram.h): edges computed from their index, so the
// index a latency is stored under means the same range in every process and after a restart.
#include "common/latency_histogram.h"

#include <algorithm>
#include <cmath>

namespace tinkerd::latency_histogram {

double edge_seconds(int k) {
    return FIRST_EDGE_S * std::pow(10.0, static_cast<double>(k) / EDGES_PER_DECADE);
}

int bucket_of(double seconds) {
    if (!(seconds > FIRST_EDGE_S)) {  // also NaN and negatives
        return 0;
    }
    if (seconds > edge_seconds(LAST_EDGE_INDEX)) {
        return BUCKET_COUNT - 1;
    }
    // The smallest k with edge k >= seconds; the log estimate is corrected against the edges themselves.
    int k = static_cast<int>(std::ceil(std::log10(seconds / FIRST_EDGE_S) * EDGES_PER_DECADE));
    k = std::clamp(k, 1, LAST_EDGE_INDEX);
    while (k > 1 && edge_seconds(k - 1) >= seconds) {
        --k;
    }
    while (k < LAST_EDGE_INDEX && edge_seconds(k) < seconds) {
        ++k;
    }
    return k;
}

std::optional<double> quantile(const std::map<int, int64_t> & counts, double q) {
    int64_t total = 0;
    for (const auto & [bucket, count] : counts) {
        if (bucket >= 0 && bucket < BUCKET_COUNT && count > 0) {
            total += count;
        }
    }
    if (total == 0) {
        return std::nullopt;
    }
    const double rank = std::clamp(q, 0.0, 1.0) * static_cast<double>(total);
    double below = 0;  // samples in the buckets before this one
    for (const auto & [bucket, count] : counts) {
        if (bucket < 0 || bucket >= BUCKET_COUNT || count <= 0) {
            continue;
        }
        const double lower = bucket == 0 ? 0.0 : edge_seconds(bucket - 1);
        if (bucket == BUCKET_COUNT - 1) {
            return lower;
        }
        if (below + static_cast<double>(count) >= rank) {
            const double upper = edge_seconds(bucket);
            return lower + (upper - lower) * (rank - below) / static_cast<double>(count);
        }
        below += static_cast<double>(count);
    }
    return edge_seconds(LAST_EDGE_INDEX);  // not reached: the last counted bucket holds rank <= total
}

}  // namespace tinkerd::latency_histogram
