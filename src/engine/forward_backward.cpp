// EngineImpl::forward_backward: validates each input, packs the valid ones into one batch (grouped by
// adapter), runs the transformer once, computes each datum's target logprobs and loss, and (when
// training) accumulates each adapter's gradients only if they are all finite.
#include <cmath>

#include "common/log.h"
#include "engine/engine_impl.h"
#include "engine/grad_accumulate.h"
#include "engine/host_access.h"
#include "engine/image_layout.h"
#include "engine/torch_convert.h"

namespace tinkerd::engine {

Result<LossConfig> EngineImpl::validate_input(const ForwardBackwardInput & input, bool backward) {
    if (input.adapter != BASE_MODEL && !adapters_.count(input.adapter)) {
        return not_found("unknown adapter " + std::to_string(input.adapter));
    }
    if (backward && input.adapter == BASE_MODEL) {
        return invalid_argument("forward_backward needs a LoRA adapter; the base model is frozen");
    }
    auto loss = parse_loss(input.loss_fn, input.loss_fn_config);
    if (!loss.ok()) {
        return loss;
    }
    if (input.datums.empty()) {
        return invalid_argument("data must hold at least one datum");
    }
    const int64_t vocab = config().vocab_size;
    for (size_t d = 0; d < input.datums.size(); ++d) {
        const Datum & datum = input.datums[d];
        const std::string where = "data[" + std::to_string(d) + "]: ";
        if (datum.tokens.empty()) {
            return invalid_argument(where + "model_input is empty");
        }
        for (int64_t token : datum.tokens) {
            if (token < 0 || token >= vocab) {
                return invalid_argument(where + "token id " + std::to_string(token) +
                                        " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
            }
        }
        auto status = validate_loss_inputs(*loss, datum, vocab);
        if (!status.ok()) {
            return invalid_argument(where + status.error().message);
        }
        TRY_STATUS(check_images(datum.tokens, datum.images, config(), where));
    }
    return loss;
}

PackedBatch EngineImpl::pack(std::vector<PlannedInput> & planned) const {
    // Rows of one adapter stay contiguous so each projection runs one LoRA matmul per adapter.
    std::stable_sort(planned.begin(), planned.end(), [](const PlannedInput & a, const PlannedInput & b) {
        return a.input->adapter < b.input->adapter;
    });
    std::vector<int64_t> tokens, positions, image_rows;
    std::array<std::vector<int64_t>, 3> mrope;  // temporal, height, width of every row
    PackedBatch batch;
    for (PlannedInput & p : planned) {
        p.first_row = static_cast<int64_t>(tokens.size());
        for (const Datum & datum : p.input->datums) {
            const auto first = static_cast<int64_t>(tokens.size()), n = static_cast<int64_t>(datum.tokens.size());
            batch.layout.offsets.push_back(first);
            batch.layout.lengths.push_back(n);
            tokens.insert(tokens.end(), datum.tokens.begin(), datum.tokens.end());
            for (int64_t t = 0; t < n; ++t) {
                positions.push_back(t);
            }
            if (config().has_vision()) {  // text models: 1-D positions only
                add_image_rows(datum, first, batch.images, image_rows, mrope);
            }
        }
        const int64_t end = static_cast<int64_t>(tokens.size());
        if (!batch.segments.empty() && batch.segments.back().adapter == p.adapter) {
            batch.segments.back().end = end;
        } else {
            batch.segments.push_back({p.first_row, end, p.adapter});
        }
    }
    auto device = transformer_->device();
    batch.tokens = torch::tensor(tokens, torch::kInt64).to(device);
    batch.positions = torch::tensor(positions, torch::kInt64).to(device);
    if (!batch.images.empty()) {
        batch.images.rows = torch::tensor(image_rows, torch::kInt64).to(device);
        batch.mrope_positions =
            torch::stack({torch::tensor(mrope[0], torch::kInt64), torch::tensor(mrope[1], torch::kInt64),
                          torch::tensor(mrope[2], torch::kInt64)})
                .to(device);  // [3, T]
    }
    return batch;
}

// A datum's images and their token rows (packed from `first`), and its rows' mrope positions (the 1-D position
// thrice for a datum without images; only used when the batch holds an image).
void EngineImpl::add_image_rows(const Datum & datum, int64_t first, BatchImages & images,
                                std::vector<int64_t> & image_rows, std::array<std::vector<int64_t>, 3> & mrope) const {
    const auto n = static_cast<int64_t>(datum.tokens.size());
    const MropePositions p = mrope_positions(n, datum.images, std::max<int64_t>(config().vision.spatial_merge_size, 1));
    mrope[0].insert(mrope[0].end(), p.temporal.begin(), p.temporal.end());
    mrope[1].insert(mrope[1].end(), p.height.begin(), p.height.end());
    mrope[2].insert(mrope[2].end(), p.width.begin(), p.width.end());
    for (const ImageInput & image : datum.images) {
        images.images.push_back(&image);
        for (int64_t k = 0; k < image_token_count(image, config()); ++k) {
            image_rows.push_back(first + image.token_offset + k);
        }
    }
}

// Every row's target ids as one [T, Kmax] index (2-D targets use K columns, 1-D ones column 0; unused
// cells point at token 0), so the logprobs come from one gather instead of a slice of [T, V] per datum.
// Built on the host from the datums' own host tensors: one copy to the device, no device reads.
static torch::Tensor packed_target_index(const std::vector<const Datum *> & datums, int64_t n_rows) {
    std::vector<torch::Tensor> targets;  // per datum [N] or [N, K], int64, CPU
    int64_t k_max = 1;
    for (const Datum * datum : datums) {
        torch::Tensor t = host_to_tensor(datum->loss_inputs.at("target_tokens")).to(torch::kInt64);
        k_max = std::max<int64_t>(k_max, t.dim() == 2 ? t.size(1) : 1);
        targets.push_back(t.dim() == 1 ? t.unsqueeze(1) : t);
    }
    torch::Tensor index = torch::zeros({n_rows, k_max}, torch::kInt64);
    int64_t row = 0;
    for (const torch::Tensor & t : targets) {
        index.narrow(0, row, t.size(0)).narrow(1, 0, t.size(1)).copy_(t);
        row += t.size(0);
    }
    return index;
}

// A datum's loss inputs as tensors: target ids int64, everything else in the act dtype.
static std::map<std::string, torch::Tensor> loss_input_tensors(const Datum & datum, torch::ScalarType act,
                                                               torch::Device device) {
    std::map<std::string, torch::Tensor> inputs;
    for (const auto & [key, host] : datum.loss_inputs) {
        torch::Tensor t = host_to_tensor(host).to(device);
        inputs[key] = key == "target_tokens" ? t.to(torch::kInt64) : t.to(act);
    }
    return inputs;
}

void EngineImpl::run_planned(std::vector<PlannedInput> & planned, bool backward,
                             std::vector<Result<ForwardBackwardOutput>> & results) {
    const auto act = transformer_->act_dtype();
    const auto device = transformer_->device();
    PackedBatch batch = pack(planned);
    // Loss inputs are copied to the device before the forward is queued, so no copy waits on it.
    std::vector<std::map<std::string, torch::Tensor>> datum_inputs;  // in packed row order
    std::vector<const Datum *> datums;
    for (const PlannedInput & p : planned) {
        for (const Datum & datum : p.input->datums) {
            datum_inputs.push_back(loss_input_tensors(datum, act, device));
            datums.push_back(&datum);
        }
    }
    torch::Tensor index = packed_target_index(datums, batch.tokens.size(0)).to(device);   // [T, Kmax]
    torch::Tensor hidden = transformer_->hidden_states(batch);                            // [T, C]
    torch::Tensor picked = transformer_->target_logprobs(hidden, batch.segments, index);  // [T, Kmax]
    std::vector<torch::Tensor> losses;  // one scalar per planned input, on the device
    size_t d = 0;
    for (PlannedInput & p : planned) {
        torch::Tensor total = torch::zeros({}, torch::TensorOptions().dtype(act).device(device));
        int64_t row = p.first_row;
        for (const Datum & datum : p.input->datums) {
            const auto & inputs = datum_inputs[d++];
            const int64_t n = static_cast<int64_t>(datum.tokens.size());
            const int64_t k = inputs.at("target_tokens").dim() == 2 ? inputs.at("target_tokens").size(1) : 0;
            torch::Tensor rows = picked.narrow(0, row, n);  // [N, Kmax]
            total = total + datum_loss(p.loss, k == 0 ? rows.select(1, 0) : rows.narrow(1, 0, k), inputs);
            row += n;
        }
        losses.push_back(total);
    }
    collect_outputs(planned, picked, losses, results);
    if (backward) {
        apply_gradients(planned, losses, results);
    }
}

// Per-datum logprobs and per-input loss:sum from ONE device-to-host copy of the picked logprobs and one of
// the losses (a GPU is synchronised once per batch, not once per datum).
void EngineImpl::collect_outputs(const std::vector<PlannedInput> & planned, const torch::Tensor & picked,
                                 const std::vector<torch::Tensor> & losses,
                                 std::vector<Result<ForwardBackwardOutput>> & results) {
    torch::NoGradGuard no_grad;
    const torch::Tensor picked_host = to_host(picked, torch::kFloat32);                 // [T, Kmax]
    const std::vector<double> loss_values = host_values<double>(torch::stack(losses));  // [inputs]
    for (size_t i = 0; i < planned.size(); ++i) {
        const PlannedInput & p = planned[i];
        ForwardBackwardOutput out;
        int64_t row = p.first_row;
        for (const Datum & datum : p.input->datums) {
            const auto & targets = datum.loss_inputs.at("target_tokens");
            const int64_t n = static_cast<int64_t>(datum.tokens.size());
            torch::Tensor rows = picked_host.narrow(0, row, n);  // [N, Kmax]
            torch::Tensor lp = targets.shape.size() == 2 ? rows.narrow(1, 0, targets.shape[1]) : rows.select(1, 0);
            out.logprobs.push_back(tensor_to_host(lp, model::DType::F32));
            row += n;
        }
        out.metrics["loss:sum"] = loss_values[i];
        results[p.index] = std::isfinite(loss_values[i])
                               ? Result<ForwardBackwardOutput>(std::move(out))
                               : Result<ForwardBackwardOutput>(invalid_argument("the loss is not finite"));
    }
}

// Adds an adapter's new gradients grads[first + j] (undefined: none) to its accumulated ones when every value is
// finite; false (nothing added) otherwise. On the CPU two passes over memory (grad_accumulate.h); on a GPU two
// multi-tensor kernels (the AMP non-finite check, with a scale of 1, and a foreach add) and one flag read.
static bool accumulate_if_finite(Adapter & adapter, const std::vector<torch::Tensor> & grads, size_t first) {
    if (!adapter.flat_grads.is_cuda()) {
        return accumulate_gradients(adapter, grads, first);
    }
    settle_gradient(adapter);
    std::vector<torch::Tensor> added, into;
    for (size_t j = 0; j < adapter.params.size(); ++j) {
        if (grads[first + j].defined()) {
            added.push_back(grads[first + j]);
            into.push_back(adapter.grads[j]);
        }
    }
    if (added.empty()) {
        return true;
    }
    torch::Tensor found = torch::zeros({1}, added[0].options());  // becomes 1 where a value is not finite
    at::_amp_foreach_non_finite_check_and_unscale_(added, found, torch::ones({1}, added[0].options()));
    const bool finite = host_value<float>(found, "forward_backward gradient check") == 0;
    if (finite) {
        at::_foreach_add_(into, added);
    }
    return finite;
}

// Gradients of every adapter in the batch in one backward pass; accumulated per adapter only when the
// adapter's inputs all succeeded and its gradients are finite.
void EngineImpl::apply_gradients(std::vector<PlannedInput> & planned, const std::vector<torch::Tensor> & losses,
                                 std::vector<Result<ForwardBackwardOutput>> & results) {
    // Failed inputs (non-finite loss) are left out of the sum, so they contribute no gradient; the
    // other inputs of the same adapter still accumulate theirs.
    std::map<Adapter *, bool> adapter_ok;  // adapter -> has at least one successful input
    torch::Tensor total;
    for (size_t i = 0; i < planned.size(); ++i) {
        const bool ok = results[planned[i].index].ok();
        adapter_ok[planned[i].adapter] |= ok;
        if (ok) {
            total = total.defined() ? total + losses[i] : losses[i];
        }
    }
    std::vector<torch::Tensor> params;
    std::vector<std::pair<Adapter *, size_t>> owners;  // (adapter, first index in params)
    for (auto & [adapter, ok] : adapter_ok) {
        if (ok) {
            owners.emplace_back(adapter, params.size());
            params.insert(params.end(), adapter->params.begin(), adapter->params.end());
        }
    }
    if (!total.defined() || params.empty()) {
        return;
    }
    auto grads = torch::autograd::grad({total}, params, {}, /*retain_graph=*/false, /*create_graph=*/false,
                                       /*allow_unused=*/true);
    torch::NoGradGuard no_grad;
    for (auto & [adapter, first] : owners) {
        if (!accumulate_if_finite(*adapter, grads, first)) {
            for (auto & p : planned) {
                if (p.adapter == adapter && results[p.index].ok()) {
                    results[p.index] = invalid_argument("the gradient is not finite; nothing was accumulated");
                }
            }
        }
    }
}

std::vector<Result<ForwardBackwardOutput>> EngineImpl::forward_backward(
    const std::vector<ForwardBackwardInput> & inputs, bool backward) {
    std::vector<Result<ForwardBackwardOutput>> results(inputs.size(),
                                                       Result<ForwardBackwardOutput>(internal_error("not run")));
    std::vector<PlannedInput> planned;
    for (size_t i = 0; i < inputs.size(); ++i) {
        auto loss = validate_input(inputs[i], backward);
        if (!loss.ok()) {
            results[i] = loss.error();
            continue;
        }
        Adapter * adapter = inputs[i].adapter == BASE_MODEL ? nullptr : adapters_.at(inputs[i].adapter).get();
        planned.push_back({i, &inputs[i], *loss, adapter, 0});
    }
    if (planned.empty()) {
        return results;
    }
    try {
        std::optional<torch::NoGradGuard> no_grad;
        if (!backward) {
            no_grad.emplace();
        }
        run_planned(planned, backward, results);
    } catch (const c10::Error & e) {
        LOG_ERR("engine", "forward_backward failed: %s", e.what_without_backtrace());
        for (const PlannedInput & p : planned) {
            results[p.index] = internal_error(std::string("engine error: ") + e.what_without_backtrace());
        }
    }
    return results;
}

Result<std::vector<float>> EngineImpl::last_logits(AdapterId id, const std::vector<int64_t> & tokens) {
    Datum datum;
    datum.tokens = tokens;
    datum.loss_inputs["target_tokens"] =
        make_host_tensor_i64({static_cast<int64_t>(tokens.size())}, std::vector<int64_t>(tokens.size(), 0));
    ForwardBackwardInput input{id, {datum}, "cross_entropy", {}};
    auto status = validate_input(input, false);
    if (!status.ok()) {
        return status.error();
    }
    torch::NoGradGuard no_grad;
    std::vector<PlannedInput> planned = {{0, &input, *status, id == BASE_MODEL ? nullptr : adapters_.at(id).get(), 0}};
    PackedBatch batch = pack(planned);
    torch::Tensor hidden = transformer_->hidden_states(batch);
    torch::Tensor last = hidden.narrow(0, hidden.size(0) - 1, 1);
    std::vector<RowSegment> segments = {{0, 1, planned[0].adapter}};
    return host_values<float>(transformer_->logits(last, segments).squeeze(0));  // [V], one copy from the device
}

}  // namespace tinkerd::engine
