// Engine loading, adapter lifecycle, AdamW steps and PEFT-named import/export.
#include <optional>
#include <thread>

#include <ATen/detail/CUDAHooksInterface.h>

#include "common/log.h"
#include "engine/engine_impl.h"
#include "engine/grad_accumulate.h"
#include "engine/host_access.h"
#include "engine/kernel_choice.h"
#include "engine/kernels/quant_int8.h"
#include "engine/meta_kernels.h"
#include "engine/optimizer.h"
#include "engine/sampler.h"
#include "engine/torch_convert.h"

namespace tinkerd::engine {

// The requested base-weight dtype; nullopt (AUTO) lets the checkpoint decide.
static std::optional<torch::ScalarType> requested_dtype(ComputeDType requested) {
    switch (requested) {
        case ComputeDType::FP32:
            return torch::kFloat32;
        case ComputeDType::BF16:
            return torch::kBFloat16;
        case ComputeDType::FP64:
            return torch::kFloat64;
        case ComputeDType::AUTO:
            break;
    }
    return std::nullopt;
}

// The device the engine runs on, or a start-up error that says why it cannot be used.
static Result<torch::Device> select_device(const std::string & name, int slot) {
    std::optional<torch::Device> device;
    try {
        device = torch::Device(name);
    } catch (const c10::Error &) {
        return invalid_argument("unknown device '" + name + "' (expected cpu, cuda or cuda:N)");
    }
    if (device->is_meta()) {  // the device-strict test mode: shapes only, no values
        ensure_meta_kernels();
        return *device;
    }
    if (device->is_cpu()) {
        return *device;
    }
    if (!device->is_cuda()) {
        return invalid_argument("device '" + name + "' is not supported (expected cpu, cuda or cuda:N)");
    }
    // libtorch_cuda registers CUDA's hooks when it is loaded: only tinkerd-cuda links it (make build-cuda).
    if (!at::detail::getCUDAHooks().isBuilt()) {
        return invalid_argument(
            "this tinkerd was built without CUDA; build it with `make build-cuda` to use --device " + name);
    }
    const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
    if (count == 0) {
        return invalid_argument("--device " + name + ": no CUDA device is available on this machine");
    }
    if (device->has_index() && device->index() >= count) {
        return invalid_argument("--device " + name + ": only " + std::to_string(count) + " CUDA device(s)");
    }
    if (!device->has_index()) {  // one GPU per local process (--dp, --sampling-replicas), shared round-robin
        return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(slot % count));
    }
    return *device;
}

Result<std::unique_ptr<Engine>> Engine::load(const std::string & model_dir, const EngineOptions & options) {
    const int threads =
        options.n_threads > 0 ? options.n_threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    at::set_num_threads(threads);  // libtorch defaults to 1 here; see docs/benchmarks.md
    auto device = select_device(options.device, options.device_slot);
    if (!device.ok()) {
        return device.error();
    }
    try {
        auto transformer =
            Transformer::load(model_dir, requested_dtype(options.dtype), *device, options.quantise_at_load);
        if (!transformer.ok()) {
            return transformer.error();
        }
        auto impl = std::make_unique<EngineImpl>(std::move(transformer).value(), options.kv_cache_bytes);
        impl->set_sample_int8_activations(options.sample_int8_activations);
        std::unique_ptr<Engine> engine = std::move(impl);
        LOG_INF("engine", "loaded %s (%s, %lld layers, %s weights, %d threads, device %s)", model_dir.c_str(),
                engine->config().architecture.c_str(), static_cast<long long>(engine->config().n_layers),
                engine->compute_dtype_name().c_str(), threads, device->str().c_str());
        return engine;
    } catch (const c10::Error & e) {
        return internal_error(std::string("loading the model failed: ") + e.what_without_backtrace());
    }
}

void EngineImpl::set_sample_int8_activations(bool on) {
    if (!on) {
        return;
    }
    const std::string quantised = transformer_->quantised_types();
    if (quantised.empty()) {
        LOG_INF("engine",
                "--sample-activations int8: no effect, the base weights are not quantised (sampling "
                "runs in fp32)");
        note_sample_activations("int8 (no effect: the base is not quantised)");
        return;
    }
    sampling_.set_int8_activations(true);
    LOG_INF("engine",
            "--sample-activations int8: sampling's few-row products with %s blocks quantise activations to int8 "
            "(%s kernels; Q8_0, Q4_1, Q4_K, Q6_K in int8, other types exact); training stays fp32",
            quantised.c_str(), kernels::int8_kernel_path());
    note_sample_activations(std::string("int8 (") + kernels::int8_kernel_path() + " kernels)");
}

std::string EngineImpl::compute_dtype_name() const {
    const std::string quantised = transformer_->quantised_types();
    switch (transformer_->compute_dtype()) {
        case torch::kBFloat16:
            return quantised.empty() ? "bf16" : quantised + " blocks + bf16";
        case torch::kFloat64:
            return "fp64";
        default:
            return quantised.empty() ? "fp32" : quantised + " blocks + fp32";
    }
}

Result<AdapterId> EngineImpl::create_adapter(const LoraSpec & spec) {
    if (spec.rank <= 0 || spec.rank > 4096) {
        return invalid_argument("lora rank must be in [1, 4096], got " + std::to_string(spec.rank));
    }
    if (!spec.train_attn && !spec.train_mlp && !spec.train_unembed) {
        return invalid_argument("at least one of train_attn, train_mlp, train_unembed must be true");
    }
    const AdapterId id = next_id_++;
    const uint64_t seed = spec.seed ? *spec.seed : next_seed_++;
    adapters_[id] =
        std::make_unique<Adapter>(make_adapter(id, spec, config(), lora_dtype(), transformer_->device(), seed));
    return id;
}

Result<Adapter *> EngineImpl::find_adapter(AdapterId id) {
    auto it = adapters_.find(id);
    if (it == adapters_.end()) {
        return not_found("unknown adapter " + std::to_string(id));
    }
    return it->second.get();
}

Result<void> EngineImpl::remove_adapter(AdapterId id) {
    auto it = adapters_.find(id);
    if (it == adapters_.end()) {
        return not_found("unknown adapter " + std::to_string(id));
    }
    sampling_.drop_adapter(it->second.get());
    adapters_.erase(it);
    return {};
}

Result<SampleHandle> EngineImpl::sample_submit(SampleRequest request) {
    const Adapter * adapter = nullptr;
    if (request.adapter != BASE_MODEL) {
        auto it = adapters_.find(request.adapter);
        if (it == adapters_.end()) {
            return not_found("unknown adapter " + std::to_string(request.adapter));
        }
        adapter = it->second.get();
    }
    TRY_STATUS(validate_sample_request(request, config()));
    return sampling_.submit(std::move(request), adapter);
}

Result<LoraSpec> EngineImpl::adapter_spec(AdapterId id) const {
    auto it = adapters_.find(id);
    if (it == adapters_.end()) {
        return not_found("unknown adapter " + std::to_string(id));
    }
    return it->second->spec;
}

Result<OptimStepOutput> EngineImpl::optim_step(AdapterId id, const AdamParams & params) {
    auto adapter = find_adapter(id);
    if (!adapter.ok()) {
        return adapter.error();
    }
    TRY_STATUS(validate_adam_params(params));
    auto norm = params.kind == OptimizerKind::DIMUON ? dimuon_step(**adapter, params, optim_scratch_)
                                                     : adamw_step(**adapter, params, optim_scratch_);
    if (!norm.ok()) {
        return norm.error();
    }
    OptimStepOutput out;
    out.metrics["grad_norm:mean"] = *norm;
    out.metrics["step:max"] = static_cast<double>((*adapter)->step);
    return out;
}

Result<std::map<std::string, HostTensor>> EngineImpl::export_adapter(AdapterId id, bool with_optimizer) const {
    auto it = adapters_.find(id);
    if (it == adapters_.end()) {
        return not_found("unknown adapter " + std::to_string(id));
    }
    const Adapter & a = *it->second;
    std::map<std::string, HostTensor> out;
    for (size_t i = 0; i < a.params.size(); ++i) {
        out[a.names[i]] = tensor_to_host(a.params[i], model::DType::F32);
        if (with_optimizer) {
            out[a.names[i] + ".exp_avg"] = tensor_to_host(a.exp_avg[i], model::DType::F32);
            out[a.names[i] + ".exp_avg_sq"] = tensor_to_host(a.exp_avg_sq[i], model::DType::F32);
        }
    }
    if (with_optimizer) {
        out["optimizer.step"] = make_host_tensor_i64({1}, {a.step});
    }
    return out;
}

Result<std::map<std::string, HostTensor>> EngineImpl::export_gradients(AdapterId id) const {
    auto it = adapters_.find(id);
    if (it == adapters_.end()) {
        return not_found("unknown adapter " + std::to_string(id));
    }
    std::map<std::string, HostTensor> out;
    settle_gradient(*it->second);
    for (size_t i = 0; i < it->second->grads.size(); ++i) {
        out[it->second->names[i]] = tensor_to_host(it->second->grads[i], model::DType::F64);
    }
    return out;
}

Result<void> EngineImpl::check_forward_backward_input(const ForwardBackwardInput & input, bool backward) {
    auto loss = validate_input(input, backward);
    if (!loss.ok()) {
        return loss.error();
    }
    return {};
}

Result<void> EngineImpl::visit_gradients(AdapterId id, const std::function<void(float * data, int64_t count)> & visit) {
    auto adapter = find_adapter(id);
    if (!adapter.ok()) {
        return adapter.error();
    }
    torch::NoGradGuard no_grad;
    settle_gradient(**adapter);
    torch::Tensor & flat = (*adapter)->flat_grads;              // [N]
    const torch::Tensor host = to_host(flat, torch::kFloat32);  // [N] flat itself when on the CPU in fp32
    visit(host_data<float>(host, "visit_gradients"), host.numel());
    if (!host.is_alias_of(flat)) {
        flat.copy_(host);
    }
    note_raw_gradient_write(**adapter);
    return {};
}

// Finds key with the given shape in tensors, or names what is wrong. A PEFT adapter of an image-text model
// (Qwen3-VL, Qwen3.5) names the text layers "model.language_model.layers.": accepted for "model.layers.".
static Result<torch::Tensor> lookup_import(const std::map<std::string, HostTensor> & tensors, const std::string & key,
                                           const torch::Tensor & like) {
    auto it = tensors.find(key);
    if (const size_t at = key.find(".model.layers."); it == tensors.end() && at != std::string::npos) {
        it = tensors.find(key.substr(0, at) + ".model.language_model.layers." + key.substr(at + 14));
    }
    if (it == tensors.end()) {
        return invalid_argument("adapter tensor '" + key + "' is missing");
    }
    if (it->second.shape != like.sizes().vec()) {
        return invalid_argument("adapter tensor '" + key + "' has shape " + shape_string(it->second.shape) +
                                ", expected " + shape_string(like.sizes().vec()));
    }
    return host_to_tensor(it->second).to(like.device(), like.scalar_type());
}

Result<void> EngineImpl::import_adapter(AdapterId id, const std::map<std::string, HostTensor> & tensors,
                                        bool with_optimizer) {
    auto adapter = find_adapter(id);
    if (!adapter.ok()) {
        return adapter.error();
    }
    Adapter & a = **adapter;
    std::vector<std::pair<torch::Tensor *, torch::Tensor>> updates;  // validated first, applied after
    for (size_t i = 0; i < a.params.size(); ++i) {
        std::vector<std::pair<std::string, torch::Tensor *>> wanted = {{a.names[i], &a.params[i]}};
        if (with_optimizer) {
            wanted.push_back({a.names[i] + ".exp_avg", &a.exp_avg[i]});
            wanted.push_back({a.names[i] + ".exp_avg_sq", &a.exp_avg_sq[i]});
        }
        for (auto & [key, dst] : wanted) {
            auto t = lookup_import(tensors, key, *dst);
            if (!t.ok()) {
                return t.error();
            }
            updates.emplace_back(dst, std::move(t).value());
        }
    }
    int64_t step = 0;  // weights only: a fresh optimizer (moments zeroed below, bias correction restarts)
    if (with_optimizer) {
        auto it = tensors.find("optimizer.step");
        if (it == tensors.end() || host_tensor_values(it->second).size() != 1) {
            return invalid_argument("adapter tensor 'optimizer.step' is missing or not a single value");
        }
        step = static_cast<int64_t>(host_tensor_values(it->second)[0]);
    }
    torch::NoGradGuard no_grad;
    for (auto & [dst, value] : updates) {
        dst->copy_(value);
    }
    zero_releasing(a.flat_grads);  // every gradient and moment is a view of these flat buffers
    if (!with_optimizer) {         // weights only: the optimizer starts afresh
        zero_releasing(a.flat_exp_avg);
        zero_releasing(a.flat_exp_avg_sq);
    }
    a.step = step;
    return {};
}

Result<std::vector<int64_t>> greedy_generate(Engine & engine, AdapterId id, std::vector<int64_t> prompt, int64_t n_new,
                                             const std::vector<int64_t> & stop_ids) {
    std::vector<int64_t> generated;
    for (int64_t i = 0; i < n_new; ++i) {
        auto logits = engine.last_logits(id, prompt);
        if (!logits.ok()) {
            return logits.error();
        }
        const auto & v = *logits;
        const int64_t next = std::max_element(v.begin(), v.end()) - v.begin();
        generated.push_back(next);
        prompt.push_back(next);
        if (std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end()) {
            break;
        }
    }
    return generated;
}

}  // namespace tinkerd::engine
