// Host access to tensor memory (host_access.h): device-to-host copies, the meta device's zeros, and the checks
// that keep the CPU from dereferencing device memory.
#include "engine/host_access.h"

namespace tinkerd::engine {

torch::Tensor to_host(const torch::Tensor & t, std::optional<torch::ScalarType> dtype) {
    const torch::ScalarType type = dtype.value_or(t.scalar_type());
    if (t.is_meta()) {  // device-strict test mode: no values exist; the host side runs on zeros
        return torch::zeros(t.sizes(), torch::TensorOptions().dtype(type));
    }
    return t.detach().to(torch::kCPU, type).contiguous();  // t itself when already a CPU, contiguous `type` tensor
}

void check_host(const torch::Tensor & t, torch::ScalarType dtype, bool contiguous, const char * caller) {
    TORCH_CHECK(t.defined(), caller, ": host access to an undefined tensor");
    TORCH_CHECK(t.device().is_cpu(), caller, ": host access to a tensor on device ", t.device().str(),
                " (copy it with to_host first)");
    TORCH_CHECK(t.scalar_type() == dtype, caller, ": host access as ", c10::toString(dtype), " to a ",
                c10::toString(t.scalar_type()), " tensor");
    TORCH_CHECK(!contiguous || t.is_contiguous(), caller, ": host access to a non-contiguous tensor of shape ",
                t.sizes());
}

void * host_bytes(const torch::Tensor & t, const char * caller) {
    check_host(t, t.scalar_type(), true, caller);
    return t.data_ptr();
}

torch::Tensor host_wrap(void * data, at::IntArrayRef shape, torch::ScalarType dtype) {
    return torch::from_blob(data, shape, torch::TensorOptions().dtype(dtype));
}

}  // namespace tinkerd::engine
