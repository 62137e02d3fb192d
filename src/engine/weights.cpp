// WeightLoader: named, shape-checked access to checkpoint tensors with dtype conversion.
#include "engine/weights.h"

#include <algorithm>

#include "engine/host_access.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/quant_matmul.h"
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
                                          torch::ScalarType dtype, bool product_weight, bool resolve_name) const {
    const std::string name = resolve_name ? resolve(hf_name) : hf_name;
    auto view = file_->get(name);
    if (!view.ok()) {
        return not_found("missing tensor '" + name + "' in the checkpoint");
    }
    const model::DType stored = view->dtype;
    if (stored == model::DType::U8) {
        return quantised(*view, shape, dtype, product_weight);
    }
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
    if (quantise_ != LoadQuant::NONE && product_weight && device_.is_cpu()) {
        torch::Tensor blocks = quantise_loaded(mapped);  // [..., in/blk, bb]
        if (blocks.defined()) {
            file_->release_pages(view->data, view->n_bytes);
            return blocks;
        }
    }
    if (mapped.scalar_type() == dtype && device_.is_cpu()) {
        return mapped;  // zero-copy: stays in the page cache, counted once
    }
    torch::Tensor converted = mapped.to(device_, dtype).contiguous();
    file_->release_pages(view->data, view->n_bytes);  // the mapped original is no longer needed
    return converted;
}

torch::Tensor WeightLoader::quantise_loaded(const torch::Tensor & mapped) const {
    const int64_t in = mapped.size(-1);
    if (quantise_ == LoadQuant::Q4_K && in % 256 == 0) {
        return kernels::quantise_q4_k(mapped);  // [..., in/256, 144]
    }
    if (in % 32 == 0) {
        return kernels::quantise_q8_0(mapped);  // [..., in/32, 34]
    }
    return {};
}

Result<torch::Tensor> WeightLoader::quantised(const model::TensorView & view, const std::vector<int64_t> & shape,
                                              torch::ScalarType dtype, bool product_weight) const {
    torch::Tensor blocks = view_as_tensor(view);  // [..., out, in/blk, bb] uint8
    if (!kernels::is_quantised(blocks) || kernels::logical_shape(blocks) != shape) {
        return invalid_argument("tensor '" + view.name + "' holds quantised blocks " + shape_string(view.shape) +
                                " that are not a known type of shape " + shape_string(shape));
    }
    if (!device_.is_cpu()) {
        return unsupported("tensor '" + view.name + "' is quantised: quantised base weights (--base-quant gguf) " +
                           "run on the CPU only; use --base-quant dequant on " + device_.str());
    }
    if (product_weight) {
        return blocks;  // used where it lies: the products dequantise block by block
    }
    return kernels::dequantise(blocks).to(dtype);  // a router or vector: small, in its own dtype
}

Result<torch::Tensor> WeightLoader::matrix(const std::string & name, std::vector<int64_t> shape) const {
    return fetch(name, shape, compute_, true);
}

Result<torch::Tensor> WeightLoader::act_matrix(const std::string & name, std::vector<int64_t> shape) const {
    return fetch(name, shape, act_);
}

Result<torch::Tensor> WeightLoader::exact(const std::string & name, std::vector<int64_t> shape, bool as_matrix) const {
    return fetch(name, shape, as_matrix ? compute_ : act_, false, false);
}

Result<torch::Tensor> WeightLoader::vector(const std::string & name, int64_t size) const {
    return fetch(name, {size}, act_);
}

void release_mapped(const model::SafetensorsFile & file, const torch::Tensor & t) {
    if (t.device().is_cpu() && t.is_contiguous()) {  // a mapped view is both; other tensors own their memory
        file.release_pages(host_bytes(t, "release_mapped"), t.nbytes());
    }
}

namespace {

// fused = cat(parts) along the rows, the parts released and dropped; or, when they cannot be stacked (quantised
// blocks of different types), the parts kept and fused left undefined (fused_linear multiplies them one by one).
void stack_parts(torch::Tensor & fused, std::initializer_list<torch::Tensor *> parts,
                 const model::SafetensorsFile & file) {
    std::vector<torch::Tensor> tensors;
    for (torch::Tensor * part : parts) {
        tensors.push_back(*part);
    }
    if (!can_stack(tensors)) {
        return;
    }
    fused = torch::cat(tensors, 0);
    for (torch::Tensor * part : parts) {
        release_mapped(file, *part);
        *part = torch::Tensor();
    }
}

}  // namespace

void fuse_projections(LayerWeights & w, const model::SafetensorsFile & file) {
    if (w.wq.defined()) {  // a linear-attention layer has its own (already fused) projections
        stack_parts(w.w_qkv, {&w.wq, &w.wk, &w.wv}, file);
    }
    if (w.bq.defined()) {
        w.b_qkv = torch::cat({w.bq, w.bk, w.bv}, 0);
        w.bq = w.bk = w.bv = torch::Tensor();
    }
    if (w.w_gate.defined()) {  // a sparse layer has experts instead
        stack_parts(w.w_gate_up, {&w.w_gate, &w.w_up}, file);
    }
}

bool can_stack(const std::vector<torch::Tensor> & parts) {
    const torch::Tensor & first = parts.front();
    return std::all_of(parts.begin(), parts.end(), [&](const torch::Tensor & t) {
        return t.scalar_type() == first.scalar_type() && t.dim() == first.dim() &&
               (t.dim() < 3 || t.size(-1) == first.size(-1));
    });
}

torch::Tensor fused_linear(const torch::Tensor & x, const torch::Tensor & fused,
                           const std::vector<torch::Tensor> & parts) {
    if (fused.defined()) {
        return kernels::base_linear(x, fused);  // [T, Σ out]
    }
    std::vector<torch::Tensor> outs;
    for (const torch::Tensor & part : parts) {
        outs.push_back(kernels::base_linear(x, part));  // [T, out]
    }
    return torch::cat(outs, -1);
}

}  // namespace tinkerd::engine
