// Host access to tensor memory: the one way engine and dist code read or write a tensor's elements from the
// CPU (scripts/check-host-access.sh fails `make test` on any other). to_host copies a device tensor to the host
// first; the pointer accessors refuse a tensor that is not a CPU one (with an error naming the caller) instead
// of letting the CPU dereference a device address. On torch's meta device (the device-strict test mode,
// ARCHITECTURE.md) to_host gives zeros of the tensor's shape and dtype: a shape-only pass without numbers.
#pragma once

#include <optional>
#include <type_traits>
#include <vector>

#include <torch/torch.h>

namespace tinkerd::engine {

// t's values as a CPU, contiguous tensor (no gradient) of `dtype` (t's own by default): t's storage itself when
// it already is one, else a copy (from a device: a copy that waits for the device). A meta tensor: zeros.
torch::Tensor to_host(const torch::Tensor & t, std::optional<torch::ScalarType> dtype = std::nullopt);

// Throws c10::Error "<caller>: ..." unless t is a CPU tensor of `dtype` (and contiguous when `contiguous`).
void check_host(const torch::Tensor & t, torch::ScalarType dtype, bool contiguous, const char * caller);

// The elements of a CPU, contiguous tensor of type T (checked as check_host). Writable: t's own memory.
template <typename T>
T * host_data(const torch::Tensor & t, const char * caller) {
    check_host(t, c10::CppTypeToScalarType<std::remove_const_t<T>>::value, true, caller);
    return t.data_ptr<std::remove_const_t<T>>();
}

// The first element of a CPU tensor of type T with any strides (the caller walks them: views of a larger slab).
template <typename T>
T * host_strided_data(const torch::Tensor & t, const char * caller) {
    check_host(t, c10::CppTypeToScalarType<std::remove_const_t<T>>::value, false, caller);
    return t.data_ptr<std::remove_const_t<T>>();
}

// The bytes of a CPU, contiguous tensor of any dtype (t.nbytes() of them).
void * host_bytes(const torch::Tensor & t, const char * caller);

// A device or host tensor's elements, as a vector of T (one device-to-host copy).
template <typename T>
std::vector<T> host_values(const torch::Tensor & t) {
    const torch::Tensor host = to_host(t, c10::CppTypeToScalarType<T>::value);
    const T * p = host.data_ptr<T>();
    return std::vector<T>(p, p + host.numel());
}

// The value of a one-element tensor on any device (a device tensor: one copy that waits for the device).
template <typename T>
T host_value(const torch::Tensor & t, const char * caller) {
    TORCH_CHECK(t.numel() == 1, caller, ": expected one element, got a tensor of shape ", t.sizes());
    const torch::Tensor host = to_host(t, c10::CppTypeToScalarType<T>::value);
    return host.data_ptr<T>()[0];
}

// A CPU tensor over caller-owned host memory (no copy; the caller keeps it alive). For host-side use (c10d Gloo,
// mapped weights): a device computation takes it through .to(device).
torch::Tensor host_wrap(void * data, at::IntArrayRef shape, torch::ScalarType dtype);

}  // namespace tinkerd::engine
