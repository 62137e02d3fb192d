// The CPU gradient accumulation (see grad_accumulate.h): the adapter's parameters are back-to-back views of
// its flat buffers, so the new gradients are walked as segments of the flat index space, in fixed blocks of
// kBlock elements split over the threads. Σ g² sums each block in double and the blocks in order, so the norm
// does not depend on the thread count.
#include "engine/grad_accumulate.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include <ATen/Parallel.h>

#include "engine/host_access.h"

namespace tinkerd::engine {

namespace {

constexpr int64_t kBlock = 1 << 16;  // elements per block of the flat gradient

// One parameter's stretch of the flat gradient and its new values (nullptr: none this pass).
template <typename T>
struct Segment {
    int64_t offset = 0, count = 0;
    const T * src = nullptr;
};

using Float8 = float __attribute__((vector_size(32)));
using Double8 = double __attribute__((vector_size(64)));

// With src: dst = (overwrite ? 0 : dst) + src over n floats; without (a parameter without a new gradient keeps
// its accumulated one): dst as it is. Returns Σ dst² in double.
__attribute__((target_clones("avx512f", "avx2", "default"))) double add_squares(float * dst, const float * src,
                                                                                int64_t n, bool overwrite) {
    Double8 acc = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        Float8 d;
        std::memcpy(&d, dst + i, sizeof d);
        if (src != nullptr) {
            Float8 s;
            std::memcpy(&s, src + i, sizeof s);
            d = (overwrite ? Float8{} : d) + s;
            std::memcpy(dst + i, &d, sizeof d);
        }
        const Double8 w = __builtin_convertvector(d, Double8);
        acc += w * w;
    }
    double sum = 0;
    for (int k = 0; k < 8; ++k) {
        sum += acc[k];
    }
    for (; i < n; ++i) {
        if (src != nullptr) {
            dst[i] = (overwrite ? 0.0f : dst[i]) + src[i];
        }
        sum += double(dst[i]) * dst[i];
    }
    return sum;
}

// True when every one of n floats is finite (a running sum of x·0 turns NaN otherwise).
__attribute__((target_clones("avx512f", "avx2", "default"))) bool all_finite(const float * src, int64_t n) {
    Float8 poison = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        Float8 s;
        std::memcpy(&s, src + i, sizeof s);
        poison += s * 0.0f;
    }
    float lanes = 0;
    for (int k = 0; k < 8; ++k) {
        lanes += poison[k];
    }
    for (; i < n; ++i) {
        lanes += src[i] * 0.0f;
    }
    return lanes == 0.0f;
}

// The same two loops for fp64 adapters (tests and references), scalar.
double add_squares(double * dst, const double * src, int64_t n, bool overwrite) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
        if (src != nullptr) {
            dst[i] = (overwrite ? 0.0 : dst[i]) + src[i];
        }
        sum += dst[i] * dst[i];
    }
    return sum;
}
bool all_finite(const double * src, int64_t n) {
    double poison = 0;
    for (int64_t i = 0; i < n; ++i) {
        poison += src[i] * 0.0;
    }
    return poison == 0.0;
}

// Calls visit(segment, begin, end) for the parts of the segments inside flat elements [b0, b1); the segments
// are sorted by offset and cover the flat buffer without gaps.
template <typename T, typename Visit>
void for_block(const std::vector<Segment<T>> & segments, int64_t b0, int64_t b1, Visit && visit) {
    auto it = std::upper_bound(segments.begin(), segments.end(), b0,
                               [](int64_t at, const Segment<T> & s) { return at < s.offset; });
    for (--it; it != segments.end() && it->offset < b1; ++it) {
        const int64_t begin = std::max(b0, it->offset), end = std::min(b1, it->offset + it->count);
        visit(*it, begin - it->offset, end - it->offset);
    }
}

// Calls visit(block, segment, begin, end) for every block of kBlock elements of the flat index space [0, n) and every
// part of a segment inside it, the blocks split over the threads.
template <typename T, typename Visit>
void for_each_block(const std::vector<Segment<T>> & segments, int64_t n, Visit && visit) {
    at::parallel_for(0, (n + kBlock - 1) / kBlock, 1, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
            for_block(segments, b * kBlock, std::min(n, (b + 1) * kBlock),
                      [&](const Segment<T> & s, int64_t i, int64_t j) { visit(b, s, i, j); });
        }
    });
}

// The segments of a's flat gradient with their new values; empty when a new gradient is not usable raw.
template <typename T>
std::vector<Segment<T>> segments_of(const Adapter & a, const std::vector<torch::Tensor> & grads, size_t first) {
    std::vector<Segment<T>> out;
    const T * base = host_data<T>(a.flat_grads, "gradient accumulation");
    for (size_t j = 0; j < a.grads.size(); ++j) {
        const torch::Tensor & g = grads[first + j];
        if (g.defined() && (!g.is_cpu() || g.scalar_type() != a.flat_grads.scalar_type() || !g.is_contiguous())) {
            return {};
        }
        out.push_back({host_data<T>(a.grads[j], "gradient accumulation") - base, a.grads[j].numel(),
                       g.defined() ? host_data<T>(g, "gradient accumulation") : nullptr});
    }
    std::sort(out.begin(), out.end(), [](const Segment<T> & x, const Segment<T> & y) { return x.offset < y.offset; });
    int64_t covered = 0;  // the walk in for_block needs segments that tile [0, N)
    for (const Segment<T> & s : out) {
        if (s.offset != covered) {
            return {};
        }
        covered += s.count;
    }
    return covered == a.flat_grads.numel() ? out : std::vector<Segment<T>>{};
}

template <typename T>
bool accumulate_raw(Adapter & a, const std::vector<Segment<T>> & segments) {
    T * dst = host_data<T>(a.flat_grads, "gradient accumulation");
    const int64_t n = a.flat_grads.numel(), blocks = (n + kBlock - 1) / kBlock;
    std::atomic<bool> finite{true};
    for_each_block(segments, n, [&](int64_t, const Segment<T> & s, int64_t i, int64_t j) {
        if (finite && s.src != nullptr && !all_finite(s.src + i, j - i)) {  // after a failure: no more reading
            finite = false;
        }
    });
    if (!finite) {
        return false;
    }
    const bool overwrite = gradient_is_consumed(a);
    std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
    for_each_block(segments, n, [&](int64_t b, const Segment<T> & s, int64_t i, int64_t j) {
        T * d = dst + s.offset + i;
        if (s.src == nullptr && overwrite) {
            std::fill(d, d + (j - i), T(0));
        } else {
            partial[b] += add_squares(d, s.src == nullptr ? nullptr : s.src + i, j - i, overwrite);
        }
    });
    double sum = 0;
    for (double p : partial) {
        sum += p;
    }
    note_raw_gradient_write(a);  // also ends a consumed state
    a.gradient_squares = {true, sum, a.flat_grads._version()};
    return true;
}

// The torch-op fallback: one finiteness flag per gradient read once, then add_.
bool accumulate_with_torch(Adapter & a, const std::vector<torch::Tensor> & grads, size_t first) {
    settle_gradient(a);
    std::vector<torch::Tensor> nonfinite_flags;  // one scalar per gradient; read once
    for (size_t j = 0; j < a.grads.size(); ++j) {
        if (grads[first + j].defined()) {
            nonfinite_flags.push_back(grads[first + j].isfinite().logical_not().any());
        }
    }
    if (nonfinite_flags.empty()) {
        return true;
    }
    if (host_value<bool>(torch::stack(nonfinite_flags).any(), "forward_backward gradient check")) {
        return false;
    }
    for (size_t j = 0; j < a.grads.size(); ++j) {
        if (grads[first + j].defined()) {
            a.grads[j].add_(grads[first + j]);
        }
    }
    return true;
}

}  // namespace

bool accumulate_gradients(Adapter & a, const std::vector<torch::Tensor> & grads, size_t first) {
    if (!a.flat_grads.is_cpu() || a.flat_grads.numel() == 0) {
        return accumulate_with_torch(a, grads, first);
    }
    if (a.flat_grads.scalar_type() == torch::kFloat32) {
        if (auto segments = segments_of<float>(a, grads, first); !segments.empty()) {
            return accumulate_raw<float>(a, segments);
        }
    } else if (a.flat_grads.scalar_type() == torch::kFloat64) {
        if (auto segments = segments_of<double>(a, grads, first); !segments.empty()) {
            return accumulate_raw<double>(a, segments);
        }
    }
    return accumulate_with_torch(a, grads, first);
}

void consume_gradient(Adapter & a) {
    a.consumed_version = a.flat_grads._version();
}

bool gradient_is_consumed(const Adapter & a) {
    return a.consumed_version == a.flat_grads._version();
}

void settle_gradient(Adapter & a) {
    if (gradient_is_consumed(a)) {
        a.flat_grads.zero_();  // moves the version: no longer consumed
    }
}

void note_raw_gradient_write(Adapter & a) {
    if (a.flat_grads.defined()) {
        a.flat_grads.unsafeGetTensorImpl()->bump_version();
    }
}

std::optional<double> recorded_gradient_squares(const Adapter & a) {
    const Adapter::GradientSquares & s = a.gradient_squares;
    if (gradient_is_consumed(a) || !s.known || s.version != a.flat_grads._version()) {
        return std::nullopt;
    }
    return s.sum;
}

}  // namespace tinkerd::engine
