// Conversions between host tensors and torch tensors, and the small host-tensor helpers of engine.h.
#include "engine/torch_convert.h"

#include <cstring>

#include "engine/host_access.h"

namespace tinkerd::engine {

torch::ScalarType to_torch_dtype(model::DType dtype) {
    switch (dtype) {
        case model::DType::F32:
            return torch::kFloat32;
        case model::DType::F16:
            return torch::kFloat16;
        case model::DType::BF16:
            return torch::kBFloat16;
        case model::DType::F64:
            return torch::kFloat64;
        case model::DType::I64:
            return torch::kInt64;
        case model::DType::I32:
            return torch::kInt32;
        case model::DType::U8:
            return torch::kUInt8;
    }
    return torch::kFloat32;
}

Result<model::DType> from_torch_dtype(torch::ScalarType dtype) {
    switch (dtype) {
        case torch::kFloat32:
            return model::DType::F32;
        case torch::kFloat16:
            return model::DType::F16;
        case torch::kBFloat16:
            return model::DType::BF16;
        case torch::kFloat64:
            return model::DType::F64;
        case torch::kInt64:
            return model::DType::I64;
        case torch::kInt32:
            return model::DType::I32;
        default:
            return unsupported("no host dtype for torch dtype " + std::string(c10::toString(dtype)));
    }
}

torch::Tensor view_as_tensor(const model::TensorView & view) {
    // A mutable pointer for torch; the engine never writes to base weights (WeightLoader moves them to the device).
    return host_wrap(const_cast<void *>(view.data), view.shape, to_torch_dtype(view.dtype));
}

torch::Tensor host_to_tensor(const HostTensor & host) {
    auto options = torch::TensorOptions().dtype(to_torch_dtype(host.dtype));
    torch::Tensor out = torch::empty(host.shape, options);
    TORCH_CHECK(static_cast<size_t>(out.nbytes()) == host.bytes.size(), "host tensor byte size mismatch");
    if (!host.bytes.empty()) {
        std::memcpy(host_bytes(out, "host_to_tensor"), host.bytes.data(), host.bytes.size());
    }
    return out;
}

HostTensor tensor_to_host(const torch::Tensor & tensor, model::DType dtype) {
    const torch::Tensor cpu = to_host(tensor, to_torch_dtype(dtype));
    HostTensor host;
    host.dtype = dtype;
    host.shape = cpu.sizes().vec();
    host.bytes.resize(cpu.nbytes());
    if (!host.bytes.empty()) {
        std::memcpy(host.bytes.data(), host_bytes(cpu, "tensor_to_host"), host.bytes.size());
    }
    return host;
}

HostTensor make_host_tensor_f32(std::vector<int64_t> shape, const std::vector<float> & values) {
    HostTensor host{model::DType::F32, std::move(shape), {}};
    host.bytes.resize(values.size() * sizeof(float));
    std::memcpy(host.bytes.data(), values.data(), host.bytes.size());
    return host;
}

HostTensor make_host_tensor_i64(std::vector<int64_t> shape, const std::vector<int64_t> & values) {
    HostTensor host{model::DType::I64, std::move(shape), {}};
    host.bytes.resize(values.size() * sizeof(int64_t));
    std::memcpy(host.bytes.data(), values.data(), host.bytes.size());
    return host;
}

std::vector<double> host_tensor_values(const HostTensor & tensor) {
    return host_values<double>(host_to_tensor(tensor));
}

}  // namespace tinkerd::engine
