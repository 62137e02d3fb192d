// AdapterLru: import on a miss (create, import, remove again if the import fails), most-recent-first
// bookkeeping, and trimming from the least recently used end past the adapters in use.
#include "scheduler/adapter_lru.h"

#include "common/heap_release.h"

namespace tinkerd::scheduler {

Result<engine::AdapterId> AdapterLru::acquire(engine::Engine & engine, const std::string & key,
                                              const WeightsLoader & load) {
    check_epoch(engine);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        if (it->first == key) {
            entries_.splice(entries_.begin(), entries_, it);
            return entries_.front().second;
        }
    }
    if (!load) {
        return internal_error("sampler '" + key + "' has no weights loader");
    }
    auto weights = load();
    if (!weights.ok()) {
        return weights.error();
    }
    auto adapter = guarded_engine_call<engine::AdapterId>([&] { return engine.create_adapter(weights->first); });
    if (!adapter.ok()) {
        return adapter.error();
    }
    auto imported = guarded_engine_call<void>([&] { return engine.import_adapter(*adapter, weights->second, false); });
    if (!imported.ok()) {
        (void)engine.remove_adapter(*adapter);
        return imported.error();
    }
    entries_.emplace_front(key, *adapter);
    weights->second.clear();  // the file's copy of the weights (the import's copies are already freed)
    release_free_heap();
    return *adapter;
}

void AdapterLru::check_epoch(engine::Engine & engine) {
    const int64_t epoch = engine.adapters_epoch();
    if (epoch != epoch_) {
        entries_.clear();  // their ids mean nothing to the engine any more
        epoch_ = epoch;
    }
}

void AdapterLru::trim(engine::Engine & engine, const std::set<engine::AdapterId> & in_use) {
    check_epoch(engine);
    auto it = entries_.end();
    while (entries_.size() > capacity_ && it != entries_.begin()) {
        --it;  // least recently used first
        if (in_use.count(it->second) == 0) {
            (void)engine.remove_adapter(it->second);
            it = entries_.erase(it);
        }
    }
}

}  // namespace tinkerd::scheduler
