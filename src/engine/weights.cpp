// WeightLoader: named, shape-checked access to checkpoint tensors with dtype conversion.
#include "engine/weights.h"

#include "engine/host_access.h"
#include "engine/torch_convert.h"

namespace tinkerd::engine {

std::string shape_string(const std::vector<int64_t> & shape) {
    std::string out = "[";
    for (size_t i = 0; i < shape.size(); ++i) {
        out += (i ? "," : "") + std::to_string(shape[i]);
    }
    return out + "]";
}

void WeightLoader::choose_model_prefix() {
    model_prefix_ = file_->contains("model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
}

std::string WeightLoader::resolve(const std::string & name) const {
    static const std::string kModel = "model.";
    if (model_prefix_ == kModel || name.rfind(kModel, 0) != 0) {
        return name;
    }
    return model_prefix_ + name.substr(kModel.size());
}

Result<torch::Tensor> WeightLoader::fetch(const std::string & hf_name, const std::vector<int64_t> & shape,
                                          torch::ScalarType dtype) const {
    const std::string name = resolve(hf_name);
    auto view = file_->get(name);
    if (!view.ok()) {
        return not_found("missing tensor '" + name + "' in the checkpoint");
    }
    const model::DType stored = view->dtype;
    if (stored != model::DType::F32 && stored != model::DType::BF16 && stored != model::DType::F16 &&
        stored != model::DType::F64) {
        return unsupported("tensor '" + name + "' has unsupported dtype " + model::dtype_name(stored) +
                           " (supported: F32, BF16, F16)");
    }
    if (view->shape != shape) {
        return invalid_argument("tensor '" + name + "' has shape " + shape_string(view->shape) + ", expected " +
                                shape_string(shape));
    }
    torch::Tensor mapped = view_as_tensor(*view);
    if (mapped.scalar_type() == dtype && device_.is_cpu()) {
        return mapped;  // zero-copy: stays in the page cache, counted once
    }
    torch::Tensor converted = mapped.to(device_, dtype).contiguous();
    file_->release_pages(view->data, view->n_bytes);  // the mapped original is no longer needed
    return converted;
}

Result<torch::Tensor> WeightLoader::matrix(const std::string & name, std::vector<int64_t> shape) const {
    return fetch(name, shape, compute_);
}

Result<torch::Tensor> WeightLoader::act_matrix(const std::string & name, std::vector<int64_t> shape) const {
    return fetch(name, shape, act_);
}

Result<torch::Tensor> WeightLoader::vector(const std::string & name, int64_t size) const {
    return fetch(name, {size}, act_);
}

void release_mapped(const model::SafetensorsFile & file, const torch::Tensor & t) {
    if (t.device().is_cpu() && t.is_contiguous()) {  // a mapped view is both; other tensors own their memory
        file.release_pages(host_bytes(t, "release_mapped"), t.nbytes());
    }
}

void fuse_projections(LayerWeights & w, const model::SafetensorsFile & file) {
    if (w.wq.defined()) {  // a linear-attention layer has its own (already fused) projections
        w.w_qkv = torch::cat({w.wq, w.wk, w.wv}, 0);
    }
    if (w.bq.defined()) {
        w.b_qkv = torch::cat({w.bq, w.bk, w.bv}, 0);
    }
    if (w.w_gate.defined()) {  // a sparse layer has experts instead
        w.w_gate_up = torch::cat({w.w_gate, w.w_up}, 0);
    }
    for (const torch::Tensor * part : {&w.wq, &w.wk, &w.wv, &w.w_gate, &w.w_up}) {
        if (!part->defined()) {
            continue;
        }
        release_mapped(file, *part);
    }
    w.wq = w.wk = w.wv = w.bq = w.bk = w.bv = w.w_gate = w.w_up = torch::Tensor();
}

}  // namespace tinkerd::engine
