// Conversions between tinkerd's host tensors (safetensors views and owned buffers) and torch tensors.
// The only place that maps model::DType to torch scalar types.
#pragma once

#include <torch/torch.h>

#include "engine/engine.h"
#include "model/safetensors.h"

namespace tinkerd::engine {

torch::ScalarType to_torch_dtype(model::DType dtype);
Result<model::DType> from_torch_dtype(torch::ScalarType dtype);

// A tensor that aliases the mapped bytes (no copy). The caller keeps the mapping alive.
// The tensor must never be written to (the mapping is read-only).
torch::Tensor view_as_tensor(const model::TensorView & view);

// Copies a host tensor into a new contiguous torch tensor of its own dtype.
torch::Tensor host_to_tensor(const HostTensor & host);
// Copies a torch tensor (any device; meta: zeros) into a host tensor of the given dtype.
HostTensor tensor_to_host(const torch::Tensor & tensor, model::DType dtype);

}  // namespace tinkerd::engine
