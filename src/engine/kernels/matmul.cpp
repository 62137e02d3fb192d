// Base-weight products (matmul.h): dispatch between the CPU kernels and the generic torch ops, and the
// autograd function that gives base_linear its backward.
#include "engine/kernels/matmul.h"

namespace tinkerd::engine::kernels {

torch::Tensor matmul_weight_generic(const torch::Tensor & x, const torch::Tensor & w) {
    return torch::matmul(x, w.to(x.scalar_type()).t());  // [T, out]
}

torch::Tensor matmul_weight_backward_generic(const torch::Tensor & dy, const torch::Tensor & w) {
    return torch::matmul(dy, w.to(dy.scalar_type()));  // [T, in]
}

torch::Tensor matmul_weight(const torch::Tensor & x, const torch::Tensor & w) {
    return matmul_weight_generic(x, w);
}

torch::Tensor matmul_weight_backward(const torch::Tensor & dy, const torch::Tensor & w) {
    return matmul_weight_backward_generic(dy, w);
}

namespace {

struct BaseLinearFunction : public torch::autograd::Function<BaseLinearFunction> {
    static torch::Tensor forward(torch::autograd::AutogradContext * ctx, const torch::Tensor & x,
                                 const torch::Tensor & w) {
        ctx->saved_data["w"] = w;
        return matmul_weight(x, w);  // [T, out]
    }
    static torch::autograd::tensor_list backward(torch::autograd::AutogradContext * ctx,
                                                 torch::autograd::tensor_list grads) {
        const torch::Tensor w = ctx->saved_data["w"].toTensor();
        return {matmul_weight_backward(grads[0], w), torch::Tensor()};
    }
};

}  // namespace

torch::Tensor base_linear(const torch::Tensor & x, const torch::Tensor & w) {
    if (w.scalar_type() == x.scalar_type()) {
        return torch::matmul(x, w.t());  // fp32 / fp64 weights: autograd's own matmul
    }
    if (!w.device().is_cpu()) {  // GPUs: bf16 tensor-core products, rounded activations
        return torch::matmul(x.to(w.scalar_type()), w.t()).to(x.scalar_type());
    }
    return BaseLinearFunction::apply(x, w);
}

}  // namespace tinkerd::engine::kernels
