// causal_conv.h's passes: loop bodies compiled for AVX-512, AVX2+FMA and the baseline ISA and chosen at run time
// by matmul.h's kernel_isa(), as delta_step.cpp does. Inner loops run along the channels (contiguous, independent
// lanes, vectorised by the compiler); rows or channel blocks split across threads by at::parallel_for.
#include "engine/kernels/causal_conv.h"

#include <algorithm>
#include <cmath>

#include <ATen/Parallel.h>

#include "engine/kernels/matmul.h"

namespace tinkerd::engine::kernels {
namespace {

constexpr int64_t kChannelBlock = 256;  // channels per task of the weight gradient

// a[0..n) = sum over the row's taps (the pre-activation of row t).
template <typename T>
__attribute__((always_inline)) inline void pre_activation(const T * x, const T * wt, int64_t t,
                                                          const CausalConvShape & s, int64_t c0, int64_t n, T * a) {
    const int64_t C = s.channels, K = s.taps, reach = std::min(K - 1, s.pos[t]);
    const T * w_now = wt + (K - 1) * C + c0;
    const T * x_now = x + t * C + c0;
    for (int64_t c = 0; c < n; ++c) {
        a[c] = w_now[c] * x_now[c];
    }
    for (int64_t lag = 1; lag <= reach; ++lag) {
        const T * w = wt + (K - 1 - lag) * C + c0;
        const T * xr = x + (t - lag) * C + c0;
        for (int64_t c = 0; c < n; ++c) {
            a[c] += w[c] * xr[c];
        }
    }
}

template <typename T>
__attribute__((always_inline)) inline T sigmoid(T a) {
    return T(1) / (T(1) + std::exp(-a));
}

// Rows [t0, t1) of the forward.
template <typename T>
__attribute__((always_inline)) inline void forward_rows(const T * x, const T * wt, T * y, const CausalConvShape & s,
                                                        int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
        T * yr = y + t * s.channels;
        pre_activation(x, wt, t, s, 0, s.channels, yr);
        for (int64_t c = 0; c < s.channels; ++c) {
            yr[c] = yr[c] * sigmoid(yr[c]);
        }
    }
}

// Rows [t0, t1) of da = dy silu'(a), silu'(a) = sig(a) (1 + a (1 - sig(a))).
template <typename T>
__attribute__((always_inline)) inline void activation_grad_rows(const T * x, const T * wt, const T * dy, T * da,
                                                                const CausalConvShape & s, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
        T * d = da + t * s.channels;
        const T * g = dy + t * s.channels;
        pre_activation(x, wt, t, s, 0, s.channels, d);
        for (int64_t c = 0; c < s.channels; ++c) {
            const T sg = sigmoid(d[c]);
            d[c] = g[c] * sg * (T(1) + d[c] * (T(1) - sg));
        }
    }
}

// Rows [t0, t1) of dx: row t gathers the rows t+lag of its own sequence (pos[t+lag] = pos[t] + lag >= lag).
template <typename T>
__attribute__((always_inline)) inline void input_grad_rows(const T * da, const T * wt, T * dx,
                                                           const CausalConvShape & s, int64_t t0, int64_t t1) {
    const int64_t C = s.channels, K = s.taps;
    for (int64_t t = t0; t < t1; ++t) {
        T * out = dx + t * C;
        const T * w_now = wt + (K - 1) * C;
        for (int64_t c = 0; c < C; ++c) {
            out[c] = w_now[c] * da[t * C + c];
        }
        for (int64_t lag = 1; lag < K && t + lag < s.rows && s.pos[t + lag] >= lag; ++lag) {
            const T * w = wt + (K - 1 - lag) * C;
            const T * d = da + (t + lag) * C;
            for (int64_t c = 0; c < C; ++c) {
                out[c] += w[c] * d[c];
            }
        }
    }
}

// Channels [c0, c0 + n) of dwt, summed over every row in order.
template <typename T>
__attribute__((always_inline)) inline void weight_grad_block(const T * x, const T * da, T * dwt,
                                                             const CausalConvShape & s, int64_t c0, int64_t n) {
    const int64_t C = s.channels, K = s.taps;
    for (int64_t j = 0; j < K; ++j) {
        std::fill(dwt + j * C + c0, dwt + j * C + c0 + n, T(0));
    }
    for (int64_t t = 0; t < s.rows; ++t) {
        const T * d = da + t * C + c0;
        for (int64_t lag = 0; lag <= std::min(K - 1, s.pos[t]); ++lag) {
            T * w = dwt + (K - 1 - lag) * C + c0;
            const T * xr = x + (t - lag) * C + c0;
            for (int64_t c = 0; c < n; ++c) {
                w[c] += d[c] * xr[c];
            }
        }
    }
}

template <typename T>
struct ConvPasses {
    void (*forward)(const T *, const T *, T *, const CausalConvShape &, int64_t, int64_t);
    void (*activation_grad)(const T *, const T *, const T *, T *, const CausalConvShape &, int64_t, int64_t);
    void (*input_grad)(const T *, const T *, T *, const CausalConvShape &, int64_t, int64_t);
    void (*weight_grad)(const T *, const T *, T *, const CausalConvShape &, int64_t, int64_t);
};

#define TINKERD_CONV_PASSES(NAME, TARGET)                                                                           \
    template <typename T>                                                                                           \
    TARGET void NAME##_forward(const T * x, const T * wt, T * y, const CausalConvShape & s, int64_t a, int64_t b) { \
        forward_rows(x, wt, y, s, a, b);                                                                            \
    }                                                                                                               \
    template <typename T>                                                                                           \
    TARGET void NAME##_activation_grad(const T * x, const T * wt, const T * dy, T * da, const CausalConvShape & s,  \
                                       int64_t a, int64_t b) {                                                      \
        activation_grad_rows(x, wt, dy, da, s, a, b);                                                               \
    }                                                                                                               \
    template <typename T>                                                                                           \
    TARGET void NAME##_input_grad(const T * da, const T * wt, T * dx, const CausalConvShape & s, int64_t a,         \
                                  int64_t b) {                                                                      \
        input_grad_rows(da, wt, dx, s, a, b);                                                                       \
    }                                                                                                               \
    template <typename T>                                                                                           \
    TARGET void NAME##_weight_grad(const T * x, const T * da, T * dwt, const CausalConvShape & s, int64_t c0,       \
                                   int64_t n) {                                                                     \
        weight_grad_block(x, da, dwt, s, c0, n);                                                                    \
    }                                                                                                               \
    template <typename T>                                                                                           \
    ConvPasses<T> NAME##_passes() {                                                                                 \
        return {NAME##_forward<T>, NAME##_activation_grad<T>, NAME##_input_grad<T>, NAME##_weight_grad<T>};         \
    }

TINKERD_CONV_PASSES(conv_avx512, __attribute__((target("avx512f,avx512vl,avx2,fma"))))
TINKERD_CONV_PASSES(conv_avx2, __attribute__((target("avx2,fma"))))
TINKERD_CONV_PASSES(conv_generic, )

template <typename T>
ConvPasses<T> passes_for_isa() {
    switch (kernel_isa()) {
        case KernelIsa::avx512:
            return conv_avx512_passes<T>();
        case KernelIsa::avx2:
            return conv_avx2_passes<T>();
        default:
            return conv_generic_passes<T>();
    }
}

// Row tasks of ~64K values each.
int64_t row_grain(const CausalConvShape & s) {
    return std::max<int64_t>(1, 65536 / std::max<int64_t>(1, s.channels));
}

}  // namespace

template <typename T>
void causal_conv_silu(const T * x, const T * wt, T * y, const CausalConvShape & shape) {
    const ConvPasses<T> p = passes_for_isa<T>();
    at::parallel_for(0, shape.rows, row_grain(shape),
                     [&](int64_t t0, int64_t t1) { p.forward(x, wt, y, shape, t0, t1); });
}

template <typename T>
void causal_conv_silu_backward(const T * x, const T * wt, const T * dy, T * scratch, T * dx, T * dwt,
                               const CausalConvShape & shape) {
    const ConvPasses<T> p = passes_for_isa<T>();
    const int64_t grain = row_grain(shape);
    at::parallel_for(0, shape.rows, grain,
                     [&](int64_t t0, int64_t t1) { p.activation_grad(x, wt, dy, scratch, shape, t0, t1); });
    at::parallel_for(0, shape.rows, grain,
                     [&](int64_t t0, int64_t t1) { p.input_grad(scratch, wt, dx, shape, t0, t1); });
    const int64_t blocks = (shape.channels + kChannelBlock - 1) / kChannelBlock;
    at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
            const int64_t c0 = b * kChannelBlock;
            p.weight_grad(x, scratch, dwt, shape, c0, std::min(kChannelBlock, shape.channels - c0));
        }
    });
}

template void causal_conv_silu<float>(const float *, const float *, float *, const CausalConvShape &);
template void causal_conv_silu<double>(const double *, const double *, double *, const CausalConvShape &);
template void causal_conv_silu_backward<float>(const float *, const float *, const float *, float *, float *, float *,
                                               const CausalConvShape &);
template void causal_conv_silu_backward<double>(const double *, const double *, const double *, double *, double *,
                                                double *, const CausalConvShape &);

}  // namespace tinkerd::engine::kernels
