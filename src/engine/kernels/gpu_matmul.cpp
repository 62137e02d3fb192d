// The GPU's base-weight products (gpu_matmul.h): the three-part exact product and the rounded product with
// fp32 results, each one torch mm.dtype call (bf16 operands, fp32 sums and results: CUDA kernels only).
#include "engine/kernels/gpu_matmul.h"

#include <cstdlib>
#include <cstring>
#include <vector>

namespace tinkerd::engine::kernels {

namespace {

// [..., n] view of a [T, n] product of x [..., k].
torch::Tensor shaped_like(const torch::Tensor & y, const torch::Tensor & x) {
    std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end() - 1);
    shape.push_back(y.size(1));
    return y.view(shape);
}

// x [..., k] rounded to bf16 times b [k, n] -> [..., n] fp32.
torch::Tensor rounded_product(const torch::Tensor & x, const torch::Tensor & b) {
    return shaped_like(at::mm(x.reshape({-1, x.size(-1)}).to(torch::kBFloat16), b, torch::kFloat), x);
}

struct RoundedGpuLinearFunction : public torch::autograd::Function<RoundedGpuLinearFunction> {
    static torch::Tensor forward(torch::autograd::AutogradContext * ctx, const torch::Tensor & x,
                                 const torch::Tensor & w) {
        ctx->saved_data["w"] = w;
        return rounded_product(x, w.t());  // [..., out]
    }
    static torch::autograd::tensor_list backward(torch::autograd::AutogradContext * ctx,
                                                 torch::autograd::tensor_list grads) {
        const torch::Tensor w = ctx->saved_data["w"].toTensor();  // [out, in]
        return {rounded_product(grads[0], w), torch::Tensor()};   // [..., in]
    }
};

}  // namespace

torch::Tensor split_bf16_product(const torch::Tensor & x, const torch::Tensor & b) {
    const torch::Tensor a = x.reshape({-1, x.size(-1)});  // [n, k]
    const torch::Tensor hi = a.to(torch::kBFloat16);      // [n, k]
    const torch::Tensor rest = a - hi.to(torch::kFloat);  // [n, k], exact (Sterbenz)
    const torch::Tensor mid = rest.to(torch::kBFloat16);  // [n, k]
    const torch::Tensor lo = (rest - mid.to(torch::kFloat)).to(torch::kBFloat16);
    const torch::Tensor parts = torch::cat({hi, mid, lo}, 0);  // [3n, k]
    // mm.dtype (bf16 products, fp32 sums and results) has CUDA kernels only; elsewhere the parts are widened.
    const torch::Tensor sums = parts.is_cuda() ? at::mm(parts, b, torch::kFloat)
                                               : at::mm(parts.to(torch::kFloat), b.to(torch::kFloat));  // [3n, m]
    return shaped_like(sums.view({3, a.size(0), b.size(1)}).sum(0), x);                                 // [..., m]
}

bool rounded_gpu_applies(const torch::Tensor & x, const torch::Tensor & w) {
    return w.is_cuda() && w.scalar_type() == torch::kBFloat16 && x.scalar_type() == torch::kFloat && gpu_fast_paths();
}

torch::Tensor rounded_gpu_linear(const torch::Tensor & x, const torch::Tensor & w) {
    if (!torch::GradMode::is_enabled() || !x.requires_grad()) {
        return rounded_product(x, w.t());  // [..., out]
    }
    return RoundedGpuLinearFunction::apply(x, w);
}

bool gpu_fast_paths() {
    const char * env = std::getenv("TINKERD_GPU_PATHS");
    return env == nullptr || std::strcmp(env, "reference") != 0;
}

}  // namespace tinkerd::engine::kernels
