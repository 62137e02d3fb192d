// AdamW and gradient clipping over an adapter's flat buffers (see optimizer.h): the gradient's norm (on the
// CPU the accumulation's Σ g², when current), then the writing pass (clip, decoupled weight decay, moments,
// bias-corrected step) split over threads, preceded by a checking pass unless the last step's maxima prove every new
// value finite; AVX2 on x86 CPUs, a scalar loop otherwise, torch ops off the CPU.
#include "engine/optimizer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>

#include <ATen/Parallel.h>

#include "engine/grad_accumulate.h"
#include "engine/host_access.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tinkerd::engine {

namespace {

// The per-element constants of one step, as torch.optim.AdamW (1.13 single-tensor) uses them:
// g' = g·clip; p = p·decay; m = m·b1 + (1 − b1)·g'; v = v·b2 + (1 − b2)·g'²;
// p = p − step_size·m / (sqrt(v) / sqrt(bc2) + eps).
template <typename T>
struct AdamCoefs {
    T clip, decay, beta1, one_minus_beta1, beta2, one_minus_beta2, bc2_sqrt, eps, neg_step_size;
};

template <typename T>
AdamCoefs<T> make_coefs(const AdamParams & p, int64_t step, double clip) {
    const double bias_correction1 = 1.0 - std::pow(p.beta1, static_cast<double>(step));
    const double bias_correction2 = 1.0 - std::pow(p.beta2, static_cast<double>(step));
    return {T(clip),
            T(1.0 - p.learning_rate * p.weight_decay),
            T(p.beta1),
            T(1.0 - p.beta1),
            T(p.beta2),
            T(1.0 - p.beta2),
            T(std::sqrt(bias_correction2)),
            T(p.eps),
            T(-p.learning_rate / bias_correction1)};
}

// The flat buffers of one adapter for one step (CPU).
template <typename T>
struct StepBuffers {
    T *param, *grad, *m, *v;
    int64_t n;
};

// The largest |new value| of each buffer over a range (the next step's bounds).
template <typename T>
struct Maxima {
    T param = 0, m = 0, v = 0;
    void merge(const Maxima & o) {
        param = std::max(param, o.param);
        m = std::max(m, o.m);
        v = std::max(v, o.v);
    }
};

// Elements [begin, end), one at a time. kStore = false only computes the new values and says whether all
// are finite; kStore = true writes them and their maxima into mx (the gradient is left as it is: the caller marks
// it consumed). Both evaluate the same
// expressions in the same order, so a range the first pass found finite is written finite by the second.
template <bool kStore, typename T>
bool adam_scalar(const StepBuffers<T> & b, int64_t begin, int64_t end, const AdamCoefs<T> & k, Maxima<T> & mx) {
    bool finite = true;
    for (int64_t i = begin; i < end; ++i) {
        const T g = b.grad[i] * k.clip;
        const T mi = b.m[i] * k.beta1 + k.one_minus_beta1 * g;
        const T vi = b.v[i] * k.beta2 + k.one_minus_beta2 * g * g;
        const T denom = std::sqrt(vi) / k.bc2_sqrt + k.eps;
        const T pi = b.param[i] * k.decay + k.neg_step_size * (mi / denom);
        if constexpr (kStore) {
            b.m[i] = mi;
            b.v[i] = vi;
            b.param[i] = pi;
            mx.merge({std::abs(pi), std::abs(mi), std::abs(vi)});
        } else {
            finite = finite && std::isfinite(pi) && std::isfinite(mi) && std::isfinite(vi);
        }
    }
    return finite;
}

#if defined(__x86_64__)
// Largest lane of x.
__attribute__((target("avx2,fma"))) float max_lane(__m256 x) {
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, x);
    return *std::max_element(lanes, lanes + 8);
}

// The same update eight floats at a time; the tail goes through adam_scalar. Checking (kStore = false), a
// non-finite value makes its lane of `poison` (a running sum of x·0 over the new values) NaN; writing, the
// lanes' maxima go to mx.
template <bool kStore>
__attribute__((target("avx2,fma"))) bool adam_avx2(const StepBuffers<float> & b, int64_t begin, int64_t end,
                                                   const AdamCoefs<float> & k, Maxima<float> & mx) {
    const __m256 clip = _mm256_set1_ps(k.clip), decay = _mm256_set1_ps(k.decay), b1 = _mm256_set1_ps(k.beta1),
                 c1 = _mm256_set1_ps(k.one_minus_beta1), b2 = _mm256_set1_ps(k.beta2),
                 c2 = _mm256_set1_ps(k.one_minus_beta2), bc2 = _mm256_set1_ps(k.bc2_sqrt), eps = _mm256_set1_ps(k.eps),
                 step = _mm256_set1_ps(k.neg_step_size), zero = _mm256_setzero_ps();
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 poison = zero, max_p = zero, max_m = zero, max_v = zero;
    int64_t i = begin;
    for (; i + 8 <= end; i += 8) {
        const __m256 p0 = _mm256_loadu_ps(b.param + i), m0 = _mm256_loadu_ps(b.m + i), v0 = _mm256_loadu_ps(b.v + i);
        const __m256 g = _mm256_mul_ps(_mm256_loadu_ps(b.grad + i), clip);
        const __m256 mi = _mm256_fmadd_ps(m0, b1, _mm256_mul_ps(c1, g));
        const __m256 vi = _mm256_fmadd_ps(v0, b2, _mm256_mul_ps(_mm256_mul_ps(c2, g), g));
        const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2), eps);
        const __m256 pi = _mm256_fmadd_ps(p0, decay, _mm256_mul_ps(step, _mm256_div_ps(mi, denom)));
        if constexpr (kStore) {
            _mm256_storeu_ps(b.param + i, pi);
            _mm256_storeu_ps(b.m + i, mi);
            _mm256_storeu_ps(b.v + i, vi);
            max_p = _mm256_max_ps(max_p, _mm256_and_ps(pi, abs_mask));
            max_m = _mm256_max_ps(max_m, _mm256_and_ps(mi, abs_mask));
            max_v = _mm256_max_ps(max_v, _mm256_and_ps(vi, abs_mask));
        } else {
            poison =
                _mm256_add_ps(poison, _mm256_fmadd_ps(pi, zero, _mm256_fmadd_ps(mi, zero, _mm256_mul_ps(vi, zero))));
        }
    }
    if constexpr (kStore) {
        mx.merge({max_lane(max_p), max_lane(max_m), max_lane(max_v)});
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, poison);
    bool finite = adam_scalar<kStore>(b, i, end, k, mx);
    for (float lane : lanes) {
        finite = finite && lane == 0.0f;
    }
    return finite;
}
#endif

// One thread's range: AVX2 for fp32 where the CPU has it, else the scalar loop.
template <bool kStore, typename T>
bool adam_range(const StepBuffers<T> & b, int64_t begin, int64_t end, const AdamCoefs<T> & k, Maxima<T> & mx) {
#if defined(__x86_64__)
    if constexpr (std::is_same_v<T, float>) {
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
            return adam_avx2<kStore>(b, begin, end, k, mx);
        }
    }
#endif
    return adam_scalar<kStore>(b, begin, end, k, mx);
}

// One pass over the flat CPU buffers of one dtype, split over the intra-op threads: checking (kStore =
// false: true when every new parameter and moment is finite) or writing the new values (their maxima to mx).
template <bool kStore, typename T>
bool adam_cpu_pass(const StepBuffers<T> & b, const AdamCoefs<T> & k, Maxima<T> & mx) {
    std::atomic<bool> finite{true};
    std::mutex merge;
    at::parallel_for(0, b.n, 1 << 15, [&](int64_t begin, int64_t end) {
        Maxima<T> local;
        if (!adam_range<kStore>(b, begin, end, k, local)) {
            finite = false;
        }
        const std::lock_guard<std::mutex> lock(merge);
        mx.merge(local);
    });
    return finite;
}

// The same step as torch ops over the flat buffers (GPUs and other devices); false when not finite.
bool adam_torch(Adapter & a, const AdamParams & p, const AdamCoefs<double> & k, torch::Tensor & old) {
    const int64_t n = a.flat_params.numel();
    old.narrow(0, 0, n).copy_(a.flat_params);
    old.narrow(0, n, n).copy_(a.flat_exp_avg);
    old.narrow(0, 2 * n, n).copy_(a.flat_exp_avg_sq);
    torch::Tensor g = a.flat_grads * k.clip;  // [N]
    a.flat_params.mul_(k.decay);
    a.flat_exp_avg.mul_(p.beta1).add_(g, k.one_minus_beta1);
    a.flat_exp_avg_sq.mul_(p.beta2).addcmul_(g, g, k.one_minus_beta2);
    torch::Tensor denom = (a.flat_exp_avg_sq.sqrt() / k.bc2_sqrt).add_(k.eps);  // [N]
    a.flat_params.addcdiv_(a.flat_exp_avg, denom, k.neg_step_size);
    const torch::Tensor poison = (a.flat_params.sum() + a.flat_exp_avg.sum() + a.flat_exp_avg_sq.sum()).mul(0);
    return host_value<double>(poison, "adamw_step finite check") == 0.0;
}

// Puts the parameters and moments saved in `old` back (the torch path).
void restore(Adapter & a, const torch::Tensor & old) {
    const int64_t n = a.flat_params.numel();
    a.flat_params.copy_(old.narrow(0, 0, n));
    a.flat_exp_avg.copy_(old.narrow(0, n, n));
    a.flat_exp_avg_sq.copy_(old.narrow(0, 2 * n, n));
}

std::array<int64_t, 3> versions_of(const Adapter & a) {
    return {a.flat_params._version(), a.flat_exp_avg._version(), a.flat_exp_avg_sq._version()};
}

// True when the last accepted step's maxima (still current) prove every value of this step finite: each
// bound (|g'|, |m'|, v', sqrt(v')/sqrt(bc2), |p'|, with |g| <= the gradient's norm and every denominator
// >= eps) stays below 1e30, far from fp32's 3.4e38, so no rounding of the fp32 pass can overflow.
bool step_is_bounded(const Adapter & a, const AdamParams & p, const AdamCoefs<double> & k, double norm) {
    const Adapter::StepBounds & s = a.step_bounds;
    if (!s.known || s.versions != versions_of(a) || !(p.eps >= 1e-30) || !(k.bc2_sqrt > 0) || !(p.beta1 >= 0) ||
        !(p.beta1 <= 1) || !(p.beta2 >= 0) || !(p.beta2 <= 1)) {
        return false;
    }
    const double g = norm * k.clip;
    const double m = p.beta1 * s.exp_avg + (1 - p.beta1) * g;
    const double v = p.beta2 * s.exp_avg_sq + (1 - p.beta2) * g * g;
    const double param = std::abs(k.decay) * s.param + std::abs(k.neg_step_size) * m / p.eps;
    for (double bound : {g, m, v, std::sqrt(v) / k.bc2_sqrt, param}) {
        if (!(bound < 1e30)) {  // NaN fails too
            return false;
        }
    }
    return true;
}

// The CPU step: the checking pass first unless step_is_bounded proves it unnecessary, then the writing pass,
// whose maxima bound the next step. No copy of the old values is ever made (a [3N] copy was 5.5 GiB for a
// rank-32 Qwen3-30B-A3B adapter).
template <typename T>
bool adam_cpu_step(Adapter & a, const AdamParams & p, double norm, double clip) {
    const char * caller = "adamw_step";
    const StepBuffers<T> b{host_data<T>(a.flat_params, caller), host_data<T>(a.flat_grads, caller),
                           host_data<T>(a.flat_exp_avg, caller), host_data<T>(a.flat_exp_avg_sq, caller),
                           a.flat_params.numel()};
    const AdamCoefs<T> k = make_coefs<T>(p, a.step + 1, clip);
    if (!step_is_bounded(a, p, make_coefs<double>(p, a.step + 1, clip), norm)) {
        a.checked_steps += 1;
        Maxima<T> unused;  // the checking pass writes nothing, maxima included
        if (!adam_cpu_pass<false>(b, k, unused)) {
            a.step_bounds.known = false;
            return false;
        }
    }
    Maxima<T> mx;
    adam_cpu_pass<true>(b, k, mx);
    a.step_bounds = {true, double(mx.param), double(mx.m), double(mx.v), versions_of(a)};
    return true;
}

}  // namespace

Result<GradientNorm> gradient_norm(const Adapter & a, double grad_clip_norm) {
    const std::optional<double> squares = recorded_gradient_squares(a);  // the accumulation's, when still current
    const double norm = squares                     ? std::sqrt(*squares)
                        : a.flat_grads.numel() == 0 ? 0.0
                                                    : host_value<double>(a.flat_grads.norm(2), "optim_step norm");
    if (!std::isfinite(norm)) {
        return invalid_argument("optim_step refused: the accumulated gradient is not finite (norm " +
                                std::to_string(norm) + "); the adapter is unchanged");
    }
    return GradientNorm{norm, grad_clip_norm > 0 ? std::min(1.0, grad_clip_norm / (norm + 1e-6)) : 1.0};
}

torch::Tensor & step_scratch(torch::Tensor & scratch, const Adapter & a) {
    const int64_t n = a.flat_params.numel();
    if (scratch.numel() < 3 * n || scratch.scalar_type() != a.flat_params.scalar_type() ||
        scratch.device() != a.flat_params.device()) {
        scratch = torch::empty({3 * n}, a.flat_params.options());  // [3N] reused by later steps
    }
    return scratch;
}

Result<double> adamw_step(Adapter & a, const AdamParams & p, torch::Tensor & scratch) {
    torch::NoGradGuard no_grad;
    settle_gradient(a);
    auto grad = gradient_norm(a, p.grad_clip_norm);
    TRY_STATUS(grad);
    const double norm = grad->norm, clip = grad->clip;
    const int64_t n = a.flat_params.numel();
    bool finite = false;
    if (!a.flat_params.is_cpu()) {
        torch::Tensor old = step_scratch(scratch, a).narrow(0, 0, 3 * n);  // [3N] params, exp_avg, exp_avg_sq
        finite = adam_torch(a, p, make_coefs<double>(p, a.step + 1, clip), old);
        if (!finite) {
            restore(a, old);
        }
    } else if (a.flat_params.scalar_type() == torch::kFloat32) {
        finite = adam_cpu_step<float>(a, p, norm, clip);
    } else {
        TORCH_CHECK(a.flat_params.scalar_type() == torch::kFloat64, "adamw_step: fp32 or fp64 LoRA parameters");
        finite = adam_cpu_step<double>(a, p, norm, clip);
    }
    if (!finite) {
        return invalid_argument(
            "optim_step refused: this learning rate / these adam_params would make LoRA weights "
            "or Adam moments non-finite; the adapter, its moments and its gradient are unchanged");
    }
    a.step += 1;
    // The gradient is consumed. On the CPU it is not rewritten (the next accumulation writes over it), nor
    // released: faulting 40 MB of released pages back in cost 250 ms a step on a KVM guest (SmolLM2, rank 32).
    if (a.flat_params.is_cpu()) {
        consume_gradient(a);
    } else {
        a.flat_grads.zero_();
    }
    return norm;
}

}  // namespace tinkerd::engine
