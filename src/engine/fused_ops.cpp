// Fused RMSNorm, RoPE and SwiGLU (fused_ops.h): autograd functions whose forward and backward are single
// loops over rows, split across threads with at::parallel_for; sums over a row accumulate in double. On CUDA,
// RMSNorm takes torch's fused kernel (at::_fused_rms_norm) unless TINKERD_GPU_PATHS=reference.
#include "engine/fused_ops.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include <ATen/Parallel.h>

#include "engine/host_access.h"
#include "engine/kernels/gpu_matmul.h"

namespace tinkerd::engine {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

constexpr int64_t GRAIN_ELEMENTS = 16384;  // per parallel chunk

bool fusable(const torch::Tensor & x) {
    return x.device().is_cpu() && (x.scalar_type() == torch::kFloat32 || x.scalar_type() == torch::kFloat64);
}

// True when autograd records a node for these inputs (grad mode on, one of them requiring a gradient). When it
// does not, the fused ops run their forward alone, without a Function's node and context: a few µs a call,
// which decoding pays ~150 times a token.
bool records_graph(std::initializer_list<const torch::Tensor *> inputs) {
    return torch::GradMode::is_enabled() &&
           std::any_of(inputs.begin(), inputs.end(), [](const torch::Tensor * t) { return t->requires_grad(); });
}

// The elements of a fused function's tensor: CPU, contiguous (fusable() admitted it; host_data checks again).
template <typename T>
T * cpu_data(const torch::Tensor & t) {
    return host_data<T>(t, "fused_ops");
}

int64_t grain(int64_t row_elements) {
    return std::max<int64_t>(1, GRAIN_ELEMENTS / std::max<int64_t>(row_elements, 1));
}

// Σ a[i]·b[i] in double, over independent lanes (so the loop vectorises without reordering a lane).
template <typename T>
double row_dot(const T * a, const T * b, int64_t n) {
    constexpr int LANES = 8;
    double lanes[LANES] = {};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        for (int l = 0; l < LANES; ++l) {
            lanes[l] += static_cast<double>(a[i + l]) * b[i + l];
        }
    }
    double sum = 0;
    for (; i < n; ++i) {
        sum += static_cast<double>(a[i]) * b[i];
    }
    for (double lane : lanes) {
        sum += lane;
    }
    return sum;
}

// Σ a[i]·b[i]·c[i] in double, lanes as row_dot.
template <typename T>
double row_dot3(const T * a, const T * b, const T * c, int64_t n) {
    constexpr int LANES = 8;
    double lanes[LANES] = {};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        for (int l = 0; l < LANES; ++l) {
            lanes[l] += static_cast<double>(a[i + l]) * b[i + l] * c[i + l];
        }
    }
    double sum = 0;
    for (; i < n; ++i) {
        sum += static_cast<double>(a[i]) * b[i] * c[i];
    }
    for (double lane : lanes) {
        sum += lane;
    }
    return sum;
}

}  // namespace

// One row of RMSNorm (noipa: never inlined or specialised, so that the fused ops and the decode layers run this one
// copy and agree bit
// for bit); returns rstd.
template <typename T>
__attribute__((noipa)) T rms_norm_row(const T * x, const T * w, T * y, int64_t c, double eps) {
    const double sum = row_dot(x, x, c);
    const T s = static_cast<T>(1.0 / std::sqrt(sum / static_cast<double>(c) + eps));
    for (int64_t i = 0; i < c; ++i) {
        y[i] = (x[i] * s) * w[i];
    }
    return s;
}

float rms_norm_row_f32(const float * x, const float * w, float * y, int64_t c, double eps) {
    return rms_norm_row<float>(x, w, y, c, eps);
}

namespace {

// ---- RMSNorm: rows [N, C]; rstd [N] kept for the backward.
template <typename T>
void rms_norm_rows(const T * x, const T * w, T * y, T * rstd, int64_t n, int64_t c, double eps) {
    at::parallel_for(0, n, grain(c), [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            rstd[r] = rms_norm_row<T>(x + r * c, w, y + r * c, c, eps);
        }
    });
}

// dx = s·w·dy − x·s³/C·Σ(dy·w·x), per row.
template <typename T>
void rms_norm_backward_rows(const T * x, const T * w, const T * rstd, const T * dy, T * dx, int64_t n, int64_t c) {
    at::parallel_for(0, n, grain(c), [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            const T * xr = x + r * c;
            const T * dyr = dy + r * c;
            const double dot = row_dot3(dyr, w, xr, c);
            const double s = rstd[r];
            const double k = dot * s * s * s / static_cast<double>(c);
            for (int64_t i = 0; i < c; ++i) {  // in double: the two terms may cancel
                dx[r * c + i] = static_cast<T>(s * w[i] * dyr[i] - static_cast<double>(xr[i]) * k);
            }
        }
    });
}

// y = rms_norm(x) · w and what its backward keeps: x and w contiguous, rstd [N].
struct RmsNormValues {
    torch::Tensor y, x, w, rstd;
};

RmsNormValues rms_norm_values(const torch::Tensor & x_in, const torch::Tensor & w_in, double eps) {
    RmsNormValues v{torch::Tensor(), x_in.contiguous(), w_in.contiguous(), torch::Tensor()};
    const int64_t c = v.x.size(-1), n = v.x.numel() / std::max<int64_t>(c, 1);
    v.y = torch::empty_like(v.x);               // [..., C]
    v.rstd = torch::empty({n}, v.x.options());  // [N]
    AT_DISPATCH_FLOATING_TYPES(v.x.scalar_type(), "fused_rms_norm", [&] {
        rms_norm_rows<scalar_t>(cpu_data<scalar_t>(v.x), cpu_data<scalar_t>(v.w), cpu_data<scalar_t>(v.y),
                                cpu_data<scalar_t>(v.rstd), n, c, eps);
    });
    return v;
}

struct RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
    static torch::Tensor forward(AutogradContext * ctx, const torch::Tensor & x_in, const torch::Tensor & w_in,
                                 double eps) {
        RmsNormValues v = rms_norm_values(x_in, w_in, eps);
        ctx->save_for_backward({v.x, v.w, v.rstd});
        return v.y;
    }
    static tensor_list backward(AutogradContext * ctx, tensor_list grads) {
        auto saved = ctx->get_saved_variables();
        const torch::Tensor & x = saved[0];
        const torch::Tensor dy = grads[0].contiguous();
        const int64_t c = x.size(-1), n = x.numel() / std::max<int64_t>(c, 1);
        torch::Tensor dx = torch::empty_like(x);
        AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_rms_norm_backward", [&] {
            rms_norm_backward_rows<scalar_t>(cpu_data<scalar_t>(x), cpu_data<scalar_t>(saved[1]),
                                             cpu_data<scalar_t>(saved[2]), cpu_data<scalar_t>(dy),
                                             cpu_data<scalar_t>(dx), n, c);
        });
        return {dx, torch::Tensor(), torch::Tensor()};
    }
};

}  // namespace

// One token's heads x, y [heads, D] rotated by c, s [D] (noipa, as rms_norm_row).
template <typename T>
__attribute__((noipa)) void rope_token(const T * x, const T * c, const T * s, T * y, int64_t heads, int64_t d,
                                       bool inverse) {
    const int64_t half = d / 2;
    for (int64_t h = 0; h < heads; ++h) {
        const T * xr = x + h * d;
        T * yr = y + h * d;
        for (int64_t i = 0; i < half; ++i) {
            const T si = inverse ? -s[i] : s[i];
            yr[i] = xr[i] * c[i] - xr[i + half] * si;
            yr[i + half] = xr[i + half] * c[i] + xr[i] * si;
        }
    }
}

void rope_token_f32(const float * x, const float * cos, const float * sin, float * y, int64_t heads, int64_t d) {
    rope_token<float>(x, cos, sin, y, heads, d, false);
}

namespace {

// ---- RoPE: y₁ = x₁c − x₂s, y₂ = x₂c + x₁s (c, s: the first half of cos, sin); the backward is the same
// rotation with −s. x [T, Hh, D], cos/sin [T, 1, D].
template <typename T>
void rope_rows(const T * x, const T * cos, const T * sin, T * y, int64_t t_rows, int64_t heads, int64_t d,
               bool inverse) {
    at::parallel_for(0, t_rows, grain(heads * d), [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
            rope_token<T>(x + t * heads * d, cos + t * d, sin + t * d, y + t * heads * d, heads, d, inverse);
        }
    });
}

torch::Tensor rope_apply(const torch::Tensor & x_in, const torch::Tensor & cos, const torch::Tensor & sin,
                         bool inverse) {
    const torch::Tensor x = x_in.contiguous();
    torch::Tensor y = torch::empty_like(x);  // [T, Hh, D]
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_rope", [&] {
        rope_rows<scalar_t>(cpu_data<scalar_t>(x), cpu_data<scalar_t>(cos), cpu_data<scalar_t>(sin),
                            cpu_data<scalar_t>(y), x.size(0), x.size(1), x.size(2), inverse);
    });
    return y;
}

struct RopeFunction : public torch::autograd::Function<RopeFunction> {
    static torch::Tensor forward(AutogradContext * ctx, const torch::Tensor & x, const torch::Tensor & cos,
                                 const torch::Tensor & sin) {
        ctx->save_for_backward({cos, sin});
        return rope_apply(x, cos, sin, false);
    }
    static tensor_list backward(AutogradContext * ctx, tensor_list grads) {
        auto saved = ctx->get_saved_variables();
        return {rope_apply(grads[0], saved[0], saved[1], true), torch::Tensor(), torch::Tensor()};
    }
};

// ---- SwiGLU: y = g·σ(g)·u; dg = dy·u·σ(g)·(1 + g·(1 − σ(g))), du = dy·g·σ(g). σ comes from torch's
// vectorised sigmoid (recomputed in the backward rather than kept), the rest is one loop. Rows [N, F].
template <typename T>
void swiglu_rows(const T * g, const T * sig, const T * u, T * y, int64_t n) {
    at::parallel_for(0, n, GRAIN_ELEMENTS, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            y[i] = g[i] * sig[i] * u[i];
        }
    });
}

template <typename T>
void swiglu_backward_rows(const T * g, const T * sig, const T * u, const T * dy, T * dg, T * du, int64_t n) {
    at::parallel_for(0, n, GRAIN_ELEMENTS, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            const T s = sig[i];
            du[i] = dy[i] * (g[i] * s);
            dg[i] = dy[i] * u[i] * (s * (T(1) + g[i] * (T(1) - s)));
        }
    });
}

// y = g·σ(g)·u [T, F] for contiguous g, u [T, F].
torch::Tensor swiglu_values(const torch::Tensor & g, const torch::Tensor & u) {
    const torch::Tensor sig = torch::sigmoid(g);  // [T, F]
    torch::Tensor y = torch::empty_like(g);       // [T, F]
    AT_DISPATCH_FLOATING_TYPES(g.scalar_type(), "fused_swiglu", [&] {
        swiglu_rows<scalar_t>(cpu_data<scalar_t>(g), cpu_data<scalar_t>(sig), cpu_data<scalar_t>(u),
                              cpu_data<scalar_t>(y), g.numel());
    });
    return y;
}

struct SwigluFunction : public torch::autograd::Function<SwigluFunction> {
    static torch::Tensor forward(AutogradContext * ctx, const torch::Tensor & gate, const torch::Tensor & up) {
        const torch::Tensor g = gate.contiguous(), u = up.contiguous();
        ctx->save_for_backward({g, u});
        return swiglu_values(g, u);
    }
    static tensor_list backward(AutogradContext * ctx, tensor_list grads) {
        auto saved = ctx->get_saved_variables();
        const torch::Tensor dy = grads[0].contiguous();
        const torch::Tensor sig = torch::sigmoid(saved[0]);  // [T, F]
        torch::Tensor dg = torch::empty_like(saved[0]), du = torch::empty_like(saved[1]);
        AT_DISPATCH_FLOATING_TYPES(dy.scalar_type(), "fused_swiglu_backward", [&] {
            swiglu_backward_rows<scalar_t>(cpu_data<scalar_t>(saved[0]), cpu_data<scalar_t>(sig),
                                           cpu_data<scalar_t>(saved[1]), cpu_data<scalar_t>(dy), cpu_data<scalar_t>(dg),
                                           cpu_data<scalar_t>(du), dy.numel());
        });
        return {dg, du};
    }
};

}  // namespace

torch::Tensor rms_norm_reference(const torch::Tensor & x, const torch::Tensor & weight, double eps) {
    return x * torch::rsqrt(x.pow(2).mean(-1, true) + eps) * weight;
}

torch::Tensor fused_rms_norm(const torch::Tensor & x, const torch::Tensor & weight, double eps) {
    if (x.is_cuda() && !weight.requires_grad() && kernels::gpu_fast_paths()) {  // torch's fused CUDA kernel
        return std::get<0>(at::_fused_rms_norm(x, {x.size(-1)}, weight.to(x.scalar_type()), eps));
    }
    if (!fusable(x) || weight.scalar_type() != x.scalar_type() || weight.requires_grad()) {
        return rms_norm_reference(x, weight, eps);
    }
    if (!records_graph({&x})) {
        return rms_norm_values(x, weight, eps).y;
    }
    return RmsNormFunction::apply(x, weight, eps);
}

torch::Tensor rope_reference(const torch::Tensor & x, const torch::Tensor & cos, const torch::Tensor & sin) {
    const int64_t half = x.size(-1) / 2;
    torch::Tensor x1 = x.narrow(-1, 0, half);
    torch::Tensor x2 = x.narrow(-1, half, half);
    return x * cos + torch::cat({-x2, x1}, -1) * sin;
}

torch::Tensor fused_rope(const torch::Tensor & x, const torch::Tensor & cos, const torch::Tensor & sin) {
    if (!fusable(x) || x.dim() != 3 || cos.scalar_type() != x.scalar_type() || !cos.is_contiguous() ||
        !sin.is_contiguous() || x.size(2) % 2 != 0) {
        return rope_reference(x, cos, sin);
    }
    if (!records_graph({&x, &cos, &sin})) {
        return rope_apply(x, cos, sin, false);
    }
    return RopeFunction::apply(x, cos, sin);
}

torch::Tensor swiglu_reference(const torch::Tensor & gate, const torch::Tensor & up) {
    return torch::silu(gate) * up;
}

torch::Tensor fused_swiglu(const torch::Tensor & gate, const torch::Tensor & up) {
    if (!fusable(gate) || up.scalar_type() != gate.scalar_type() || gate.sizes() != up.sizes()) {
        return swiglu_reference(gate, up);
    }
    if (!records_graph({&gate, &up})) {
        return swiglu_values(gate.contiguous(), up.contiguous());
    }
    return SwigluFunction::apply(gate, up);
}

}  // namespace tinkerd::engine
