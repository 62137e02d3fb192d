// Meta kernels (meta_kernels.h): output shapes and dtypes only, never data.
#include "engine/meta_kernels.h"

#include <memory>
#include <mutex>
#include <string>

#include <ATen/ExpandUtils.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>
#include <torch/torch.h>

namespace tinkerd::engine {

namespace {

// self [..., n, ...] indexed along dim by index [m] -> [..., m, ...].
at::Tensor index_select_meta(const at::Tensor & self, int64_t dim, const at::Tensor & index) {
    std::vector<int64_t> sizes = self.sizes().vec();
    if (!sizes.empty()) {
        sizes[c10::maybe_wrap_dim(dim, self.dim())] = index.numel();
    }
    return at::empty(sizes, self.options());
}

// A [*, n, n], B [*, n, k] (left) or [*, k, n] (right) -> B's last two dims over the broadcast batch.
at::Tensor solve_triangular_meta(const at::Tensor & A, const at::Tensor & B, bool upper, bool left,
                                 bool unitriangular) {
    (void)upper, (void)left, (void)unitriangular;
    TORCH_CHECK(A.dim() >= 2 && B.dim() >= 2, "linalg_solve_triangular: matrices expected");
    std::vector<int64_t> sizes = at::infer_size(A.sizes().slice(0, A.dim() - 2), B.sizes().slice(0, B.dim() - 2));
    sizes.push_back(B.size(-2));
    sizes.push_back(B.size(-1));
    return at::empty(sizes, B.options());
}

// where(condition, self, other): the three shapes broadcast, self's and other's dtypes promoted.
at::Tensor where_meta(const at::Tensor & condition, const at::Tensor & self, const at::Tensor & other) {
    const std::vector<int64_t> sizes = at::infer_size(at::infer_size(condition.sizes(), self.sizes()), other.sizes());
    return at::empty(sizes, self.options().dtype(at::result_type(self, other)));
}

at::Tensor & where_out_meta(const at::Tensor & condition, const at::Tensor & self, const at::Tensor & other,
                            at::Tensor & out) {
    out.resize_(at::infer_size(at::infer_size(condition.sizes(), self.sizes()), other.sizes()));
    return out;
}

// Elementwise ops with an out tensor (abs, logical_not; logical_and, logical_or): out takes the (broadcast) shape.
at::Tensor & unary_out_meta(const at::Tensor & self, at::Tensor & out) {
    out.resize_(self.sizes());
    return out;
}

at::Tensor & binary_out_meta(const at::Tensor & self, const at::Tensor & other, at::Tensor & out) {
    out.resize_(at::infer_size(self.sizes(), other.sizes()));
    return out;
}

at::Tensor isnan_meta(const at::Tensor & self) {
    return at::empty(self.sizes(), self.options().dtype(at::kBool));
}

bool has_meta_kernel(const char * op, const char * overload) {
    const auto handle = c10::Dispatcher::singleton().findSchema({op, overload});
    return handle && handle->hasKernelForDispatchKey(c10::DispatchKey::Meta);
}

}  // namespace

void ensure_meta_kernels() {
    static std::once_flag once;
    static std::unique_ptr<torch::Library> library;
    std::call_once(once, [] {
        library =
            std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::Meta, __FILE__, __LINE__);
        if (!has_meta_kernel("aten::index_select", "")) {
            library->impl("index_select", TORCH_FN(index_select_meta));
        }
        if (!has_meta_kernel("aten::where", "self")) {
            library->impl("where.self", TORCH_FN(where_meta));
        }
        if (!has_meta_kernel("aten::where", "self_out")) {
            library->impl("where.self_out", TORCH_FN(where_out_meta));
        }
        for (const char * op : {"abs", "logical_not"}) {
            if (!has_meta_kernel((std::string("aten::") + op).c_str(), "out")) {
                library->impl((std::string(op) + ".out").c_str(), TORCH_FN(unary_out_meta));
            }
        }
        for (const char * op : {"logical_and", "logical_or"}) {
            if (!has_meta_kernel((std::string("aten::") + op).c_str(), "out")) {
                library->impl((std::string(op) + ".out").c_str(), TORCH_FN(binary_out_meta));
            }
        }
        if (!has_meta_kernel("aten::isnan", "")) {
            library->impl("isnan", TORCH_FN(isnan_meta));
        }
        if (!has_meta_kernel("aten::linalg_solve_triangular", "")) {
            library->impl("linalg_solve_triangular", TORCH_FN(solve_triangular_meta));
        }
    });
}

}  // namespace tinkerd::engine
