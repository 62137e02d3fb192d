// fused_causal_conv1d_silu (see causal_conv.h): the layout turned into each row's position in its sequence, the
// weight transposed to [K, Cc] (tap-major, so the kernels read it along the channels), and an autograd function
// whose backward runs kernels::causal_conv_silu_backward.
#include "engine/arch/causal_conv.h"

#include "engine/host_access.h"
#include "engine/kernels/causal_conv.h"

namespace tinkerd::engine {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// [T] position of each packed row within its sequence (rows outside every sequence: 0, they see no history).
torch::Tensor row_positions(const SequenceLayout & layout, int64_t rows) {
    torch::Tensor pos = torch::zeros({rows}, torch::kInt64);
    int64_t * p = host_data<int64_t>(pos, "causal conv");
    for (size_t s = 0; s < layout.lengths.size(); ++s) {
        TORCH_CHECK(layout.offsets[s] >= 0 && layout.offsets[s] + layout.lengths[s] <= rows, "causal conv: sequence ",
                    s, " (rows ", layout.offsets[s], " + ", layout.lengths[s], ") is outside the ", rows, " rows");
        for (int64_t i = 0; i < layout.lengths[s]; ++i) {
            p[layout.offsets[s] + i] = i;
        }
    }
    return pos;
}

kernels::CausalConvShape shape_of(const torch::Tensor & x, const torch::Tensor & wt, const torch::Tensor & pos) {
    return {x.size(0), x.size(1), wt.size(0), host_data<const int64_t>(pos, "causal conv")};
}

struct CausalConvFunction : public torch::autograd::Function<CausalConvFunction> {
    // x [T, Cc], wt [K, Cc] (contiguous), pos [T] -> [T, Cc]
    static torch::Tensor forward(AutogradContext * ctx, const torch::Tensor & x, const torch::Tensor & wt,
                                 const torch::Tensor & pos) {
        torch::Tensor y = torch::empty_like(x);
        AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "causal_conv_silu", [&] {
            kernels::causal_conv_silu(host_data<const scalar_t>(x, "causal conv"),
                                      host_data<const scalar_t>(wt, "causal conv"),
                                      host_data<scalar_t>(y, "causal conv"), shape_of(x, wt, pos));
        });
        ctx->save_for_backward({x, wt, pos});
        return y;
    }
    static tensor_list backward(AutogradContext * ctx, tensor_list grads) {
        const auto saved = ctx->get_saved_variables();
        const torch::Tensor &x = saved[0], &wt = saved[1], &pos = saved[2];
        const torch::Tensor dy = grads[0].contiguous();
        torch::Tensor scratch = torch::empty_like(x), dx = torch::empty_like(x), dwt = torch::empty_like(wt);
        const char * who = "causal conv backward";
        AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "causal_conv_silu_backward", [&] {
            kernels::causal_conv_silu_backward(host_data<const scalar_t>(x, who), host_data<const scalar_t>(wt, who),
                                               host_data<const scalar_t>(dy, who), host_data<scalar_t>(scratch, who),
                                               host_data<scalar_t>(dx, who), host_data<scalar_t>(dwt, who),
                                               shape_of(x, wt, pos));
        });
        return {dx, dwt, torch::Tensor()};
    }
};

}  // namespace

bool fused_causal_conv_applies(const torch::Tensor & x, const torch::Tensor & weight) {
    const auto dtype = x.scalar_type();
    return x.device().is_cpu() && weight.device().is_cpu() && weight.scalar_type() == dtype &&
           (dtype == torch::kFloat || dtype == torch::kDouble) && x.dim() == 2 && weight.dim() == 2 &&
           weight.size(0) == x.size(1) && weight.size(1) >= 1;
}

torch::Tensor fused_causal_conv1d_silu(const torch::Tensor & x, const torch::Tensor & weight,
                                       const SequenceLayout & layout) {
    TORCH_CHECK(fused_causal_conv_applies(x, weight), "fused causal conv: x ", x.sizes(), " ", x.scalar_type(),
                ", weight ", weight.sizes(), " ", weight.scalar_type(), " on ", x.device());
    const torch::Tensor wt = weight.t().contiguous();  // [K, Cc]: autograd carries the gradient back to [Cc, K]
    return CausalConvFunction::apply(x.contiguous(), wt, row_positions(layout, x.size(0)));
}

}  // namespace tinkerd::engine
