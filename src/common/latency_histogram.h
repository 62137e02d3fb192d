// Latency histogram: fixed log-spaced buckets (20 per decade from 1 ms to 1000 s, plus one below and one
// above) that a latency is counted in, and quantiles read back from bucket counts by linear interpolation
// inside the bucket. The store keeps the counts (sampler_latency); this file owns what an index means.
#pragma once

#include <cstdint>
#include <map>
#include <optional>

namespace tinkerd::latency_histogram {

inline constexpr double FIRST_EDGE_S = 1e-3;              // the first bucket is [0, 1 ms]
inline constexpr int EDGES_PER_DECADE = 20;               // each bucket ~12% wider than the one before
inline constexpr int LAST_EDGE_INDEX = 6 * 20;            // edge 120 = 1000 s
inline constexpr int BUCKET_COUNT = LAST_EDGE_INDEX + 2;  // + the bucket above the last edge

// Edge k (0..LAST_EDGE_INDEX) = FIRST_EDGE_S * 10^(k / EDGES_PER_DECADE) seconds.
double edge_seconds(int k);

// Bucket 0 = [0, edge 0]; bucket b (1..LAST_EDGE_INDEX) = (edge b-1, edge b]; the last = (edge 120, inf).
// A negative or NaN latency counts as 0.
int bucket_of(double seconds);

// The latency at quantile q (0..1) of the counts (bucket index -> count; unknown indices are ignored):
// the bucket where the cumulative count reaches q * total, interpolated linearly between its edges
// (the last bucket has no upper edge: its lower one is returned). None when the counts are all zero.
std::optional<double> quantile(const std::map<int, int64_t> & counts, double q);

}  // namespace tinkerd::latency_histogram
