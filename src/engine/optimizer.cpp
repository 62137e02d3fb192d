// AdamW and gradient clipping over an adapter's flat buffers (see optimizer.h): one norm over the flat
// gradient, then one fused pass (clip, decoupled weight decay, moments, bias-corrected step, zeroed
// gradient) split over threads; AVX2 on x86 CPUs, a scalar loop otherwise, torch ops off the CPU.
#include "engine/optimizer.h"

#include <algorithm>
#include <cmath>

#include <ATen/Parallel.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tinkerd::engine {

Result<void> validate_adam_params(const AdamParams & p) {
    const std::pair<const char *, double> fields[] = {{"learning_rate", p.learning_rate},
                                                      {"beta1", p.beta1},
                                                      {"beta2", p.beta2},
                                                      {"eps", p.eps},
                                                      {"weight_decay", p.weight_decay},
                                                      {"grad_clip_norm", p.grad_clip_norm}};
    for (const auto & [name, value] : fields) {
        if (!std::isfinite(value) || value < 0) {
            return invalid_argument(std::string("adam_params.") + name + " must be a finite number >= 0");
        }
    }
    if (p.beta1 >= 1 || p.beta2 >= 1) {
        return invalid_argument("adam_params.beta1 and beta2 must be < 1");
    }
    return {};
}

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

// Elements [begin, end) of the flat buffers, one at a time.
template <typename T>
void adam_scalar(T * param, T * grad, T * m, T * v, int64_t begin, int64_t end, const AdamCoefs<T> & k) {
    for (int64_t i = begin; i < end; ++i) {
        const T g = grad[i] * k.clip;
        m[i] = m[i] * k.beta1 + k.one_minus_beta1 * g;
        v[i] = v[i] * k.beta2 + k.one_minus_beta2 * g * g;
        const T denom = std::sqrt(v[i]) / k.bc2_sqrt + k.eps;
        param[i] = param[i] * k.decay + k.neg_step_size * (m[i] / denom);
        grad[i] = T(0);
    }
}

#if defined(__x86_64__)
// The same update eight floats at a time; the tail goes through adam_scalar.
__attribute__((target("avx2,fma"))) void adam_avx2(float * param, float * grad, float * m, float * v, int64_t begin,
                                                   int64_t end, const AdamCoefs<float> & k) {
    const __m256 clip = _mm256_set1_ps(k.clip), decay = _mm256_set1_ps(k.decay), b1 = _mm256_set1_ps(k.beta1),
                 c1 = _mm256_set1_ps(k.one_minus_beta1), b2 = _mm256_set1_ps(k.beta2),
                 c2 = _mm256_set1_ps(k.one_minus_beta2), bc2 = _mm256_set1_ps(k.bc2_sqrt), eps = _mm256_set1_ps(k.eps),
                 step = _mm256_set1_ps(k.neg_step_size), zero = _mm256_setzero_ps();
    int64_t i = begin;
    for (; i + 8 <= end; i += 8) {
        const __m256 g = _mm256_mul_ps(_mm256_loadu_ps(grad + i), clip);
        const __m256 mi = _mm256_fmadd_ps(_mm256_loadu_ps(m + i), b1, _mm256_mul_ps(c1, g));
        const __m256 vi = _mm256_fmadd_ps(_mm256_loadu_ps(v + i), b2, _mm256_mul_ps(_mm256_mul_ps(c2, g), g));
        const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2), eps);
        const __m256 update = _mm256_mul_ps(step, _mm256_div_ps(mi, denom));
        _mm256_storeu_ps(param + i, _mm256_fmadd_ps(_mm256_loadu_ps(param + i), decay, update));
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        _mm256_storeu_ps(grad + i, zero);
    }
    adam_scalar(param, grad, m, v, i, end, k);
}
#endif

// The fused pass over the flat CPU buffers of one dtype, split over the intra-op threads.
template <typename T>
void adam_cpu(Adapter & a, const AdamCoefs<T> & k) {
    T * param = a.flat_params.data_ptr<T>();
    T * grad = a.flat_grads.data_ptr<T>();
    T * m = a.flat_exp_avg.data_ptr<T>();
    T * v = a.flat_exp_avg_sq.data_ptr<T>();
    at::parallel_for(0, a.flat_params.numel(), 1 << 15, [&](int64_t begin, int64_t end) {
#if defined(__x86_64__)
        if constexpr (std::is_same_v<T, float>) {
            if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
                adam_avx2(param, grad, m, v, begin, end, k);
                return;
            }
        }
#endif
        adam_scalar(param, grad, m, v, begin, end, k);
    });
}

// The same step as torch ops over the flat buffers (GPUs and other devices).
void adam_torch(Adapter & a, const AdamParams & p, const AdamCoefs<double> & k) {
    a.flat_grads.mul_(k.clip);
    a.flat_params.mul_(k.decay);
    a.flat_exp_avg.mul_(p.beta1).add_(a.flat_grads, k.one_minus_beta1);
    a.flat_exp_avg_sq.mul_(p.beta2).addcmul_(a.flat_grads, a.flat_grads, k.one_minus_beta2);
    torch::Tensor denom = (a.flat_exp_avg_sq.sqrt() / k.bc2_sqrt).add_(k.eps);  // [N]
    a.flat_params.addcdiv_(a.flat_exp_avg, denom, k.neg_step_size);
    a.flat_grads.zero_();
}

}  // namespace

double adamw_step(Adapter & a, const AdamParams & p) {
    torch::NoGradGuard no_grad;
    // Global L2 norm, then the clip coefficient min(1, max_norm / (norm + 1e-6)) when clipping.
    const double norm = a.flat_grads.numel() == 0 ? 0.0 : a.flat_grads.norm(2).item<double>();
    const double clip = p.grad_clip_norm > 0 ? std::min(1.0, p.grad_clip_norm / (norm + 1e-6)) : 1.0;
    a.step += 1;
    if (!a.flat_params.is_cpu()) {
        adam_torch(a, p, make_coefs<double>(p, a.step, clip));
    } else if (a.flat_params.scalar_type() == torch::kFloat32) {
        adam_cpu(a, make_coefs<float>(p, a.step, clip));
    } else {
        TORCH_CHECK(a.flat_params.scalar_type() == torch::kFloat64, "adamw_step: fp32 or fp64 LoRA parameters");
        adam_cpu(a, make_coefs<double>(p, a.step, clip));
    }
    return norm;
}

}  // namespace tinkerd::engine
