// checkpointed(): an autograd Function whose forward runs the layer with grad mode off (Function::apply's
// default) and saves its input, and whose backward recomputes it with grad mode on and differentiates that
// graph (reentrant, as torch.utils.checkpoint's original form); should_checkpoint() decides when.
#include "engine/layer_checkpoint.h"

#include <cstdlib>
#include <string>

#include "common/log.h"
#include "model/memory_check.h"

namespace tinkerd::engine {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The layer's function, kept alive in the autograd context until the backward.
struct LayerRun : torch::CustomClassHolder {
    explicit LayerRun(std::function<torch::Tensor(const torch::Tensor &)> f) : run(std::move(f)) {}
    std::function<torch::Tensor(const torch::Tensor &)> run;
};

struct CheckpointedLayer : public torch::autograd::Function<CheckpointedLayer> {
    // params as a TensorList: autograd counts a TensorList's tensors as inputs (a std::vector it would not).
    static torch::Tensor forward(AutogradContext * ctx, const torch::Tensor & x, at::TensorList params,
                                 const c10::IValue & run) {
        variable_list saved{x};
        saved.insert(saved.end(), params.begin(), params.end());
        ctx->save_for_backward(saved);
        ctx->saved_data["run"] = run;
        return c10::static_intrusive_pointer_cast<LayerRun>(run.toCapsule())->run(x);  // [T, C], no graph
    }

    static variable_list backward(AutogradContext * ctx, variable_list grad_out) {
        variable_list inputs = ctx->get_saved_variables();  // x, then the params
        inputs[0] = inputs[0].detach().requires_grad_(true);
        const auto run = c10::static_intrusive_pointer_cast<LayerRun>(ctx->saved_data["run"].toCapsule());
        torch::Tensor y;
        {
            torch::AutoGradMode grad_on(true);
            y = run->run(inputs[0]);  // [T, C], with its graph this time
        }
        variable_list grads = torch::autograd::grad({y}, inputs, {grad_out[0]}, /*retain_graph=*/false,
                                                    /*create_graph=*/false, /*allow_unused=*/true);
        grads.emplace_back();  // the run argument has no gradient
        return grads;
    }
};

}  // namespace

torch::Tensor checkpointed(std::function<torch::Tensor(const torch::Tensor &)> run, const torch::Tensor & x,
                           const std::vector<torch::Tensor> & params) {
    const c10::IValue holder = c10::IValue::make_capsule(c10::make_intrusive<LayerRun>(std::move(run)));
    return CheckpointedLayer::apply(x, at::TensorList(params), holder);
}

bool should_checkpoint(int64_t tokens, int64_t bytes_per_token) {
    static const char * forced = std::getenv("TINKERD_CHECKPOINT_ACTIVATIONS");
    if (forced != nullptr && (std::string(forced) == "0" || std::string(forced) == "1")) {
        return std::string(forced) == "1";
    }
    const uint64_t available = model::available_memory_bytes();
    const uint64_t needed = static_cast<uint64_t>(tokens) * static_cast<uint64_t>(bytes_per_token);
    const bool checkpoint = available > 0 && needed > available / 4;
    if (checkpoint) {
        LOG_INF("engine", "checkpointing activations: %lld tokens would keep about %.1f GiB (%.1f GiB available)",
                static_cast<long long>(tokens), needed / 1073741824.0, available / 1073741824.0);
    }
    return checkpoint;
}

}  // namespace tinkerd::engine
