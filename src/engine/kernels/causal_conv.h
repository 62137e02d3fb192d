// Qwen3.5's depthwise causal conv + SiLU over packed sequences, forward and backward, on raw pointers: one pass
// over the rows instead of the tensor-op form's dozen full-size temporaries (each a fresh allocation of
// [T, Cc] that costs its page faults: ~160 ms at 1,024 rows of Qwen3.5-4B's 8,192 channels against ~15 here).
#pragma once

#include <cstdint>

namespace tinkerd::engine::kernels {

// Sizes and row positions shared by the three passes. x, y, dy, dx [rows, channels] row-major; wt [K, channels]
// (the checkpoint's [channels, K] transposed: tap j multiplies the input K-1-j rows back); pos[t] = t's position
// in its own sequence (rows further back than pos[t] read as zero).
struct CausalConvShape {
    int64_t rows = 0, channels = 0, taps = 0;
    const int64_t * pos = nullptr;
};

// y[t, c] = silu(a[t, c]), a[t, c] = sum_{lag <= min(K-1, pos[t])} wt[K-1-lag, c] x[t-lag, c]. Rows in parallel.
template <typename T>
void causal_conv_silu(const T * x, const T * wt, T * y, const CausalConvShape & shape);

// The backward for dy: da = dy silu'(a) (a recomputed), dx[t] = sum_lag wt[K-1-lag] da[t+lag] over the rows
// t+lag of t's sequence, dwt[K-1-lag, c] = sum_t da[t, c] x[t-lag, c]. scratch [rows, channels] receives da.
// Every sum runs in a fixed order (dwt per channel block over t ascending): results do not depend on the threads.
template <typename T>
void causal_conv_silu_backward(const T * x, const T * wt, const T * dy, T * scratch, T * dx, T * dwt,
                               const CausalConvShape & shape);

}  // namespace tinkerd::engine::kernels
