// fp32 weight copies (fp32_copies.h): one map, under one mutex, from a weight's (storage, offset, shape) to its
// fp32 copy. Each entry holds a weak reference to the weight's storage: the storage object cannot be reused
// while it exists, and the entry is dropped once that storage is freed (swept before a new copy is made).
#include "engine/kernels/fp32_copies.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "model/memory_check.h"

namespace tinkerd::engine::kernels {

namespace {

constexpr int64_t kHeadroomBytes = int64_t{1} << 30;  // left available after a copy, beyond twice the budget

struct Key {
    const void * storage;
    int64_t offset, rows, cols;
    auto operator<=>(const Key &) const = default;
};

struct Copy {
    c10::weak_intrusive_ptr<c10::StorageImpl> owner;
    torch::Tensor values;  // [out, in] fp32; undefined: refused for memory, not asked again
    int64_t bytes = 0;
};

struct Copies {
    std::mutex mu;
    std::map<Key, Copy> entries;
    int64_t budget = 0, held = 0;

    void sweep_locked() {
        for (auto it = entries.begin(); it != entries.end();) {
            if (it->second.owner.expired()) {
                held -= it->second.bytes;
                it = entries.erase(it);
            } else {
                ++it;
            }
        }
    }
};

Copies & copies() {
    static Copies c;
    return c;
}

// After the copy the machine still has twice the budget plus kHeadroomBytes available, so copies never take
// what activations, caches or another model need (false when MemAvailable is unknown).
bool memory_allows(int64_t bytes, int64_t budget) {
    const uint64_t available = model::available_memory_bytes();
    const uint64_t keep = 2 * static_cast<uint64_t>(budget) + static_cast<uint64_t>(kHeadroomBytes);  // budget < 2^62
    return available > 0 && available >= static_cast<uint64_t>(bytes) + keep;
}

bool copyable(const torch::Tensor & w) {
    return w.scalar_type() == torch::kBFloat16 && w.device().is_cpu() && w.dim() == 2 && w.is_contiguous() &&
           w.has_storage();
}

}  // namespace

void set_fp32_copy_budget(int64_t bytes) {
    Copies & c = copies();
    const std::lock_guard<std::mutex> lock(c.mu);
    bytes = std::clamp<int64_t>(bytes, 0, int64_t{1} << 61);
    if (bytes < c.budget) {
        c.entries.clear();
        c.held = 0;
    }
    c.budget = bytes;
}

int64_t fp32_copy_budget() {
    Copies & c = copies();
    const std::lock_guard<std::mutex> lock(c.mu);
    return c.budget;
}

int64_t fp32_copy_bytes() {
    Copies & c = copies();
    const std::lock_guard<std::mutex> lock(c.mu);
    c.sweep_locked();
    return c.held;
}

torch::Tensor fp32_copy_of(const torch::Tensor & w) {
    Copies & c = copies();
    const std::lock_guard<std::mutex> lock(c.mu);
    if (c.budget == 0 || !copyable(w)) {
        return {};
    }
    const Key key{w.storage().unsafeGetStorageImpl(), w.storage_offset(), w.size(0), w.size(1)};
    if (auto it = c.entries.find(key); it != c.entries.end()) {
        if (!it->second.owner.expired()) {
            return it->second.values;
        }
        c.held -= it->second.bytes;
        c.entries.erase(it);
    }
    const int64_t bytes = w.numel() * static_cast<int64_t>(sizeof(float));
    c.sweep_locked();
    if (c.held + bytes > c.budget) {
        return {};
    }
    Copy copy{w.storage().getWeakStorageImpl(), torch::Tensor(), 0};
    if (memory_allows(bytes, c.budget)) {
        const torch::NoGradGuard no_grad;
        copy.values = w.to(torch::kFloat);  // [out, in]
        copy.bytes = bytes;
        c.held += bytes;
    }
    return c.entries.emplace(key, std::move(copy)).first->second.values;
}

}  // namespace tinkerd::engine::kernels
