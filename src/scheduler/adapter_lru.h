// AdapterLru: the sampler adapters one engine keeps imported (--max-sampler-adapters), keyed by sampler
// id, most recently used first. A miss imports the caller's weights into a fresh engine adapter; trim()
// removes the least recently used ones beyond the cap, never one that a running request samples from.
// Engine thread only (not thread-safe).
#pragma once

#include <exception>
#include <functional>
#include <list>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "common/status.h"
#include "engine/engine.h"

namespace tinkerd::scheduler {

// Runs an engine call on the engine thread, turning an exception (a torch error) into an INTERNAL error.
template <typename T, typename F>
Result<T> guarded_engine_call(F && call) {
    try {
        return call();
    } catch (const std::exception & e) {
        return internal_error(std::string("engine error: ") + e.what());
    }
}

// A sampler's LoRA shape and PEFT tensors, as the caller reads them (snapshot cache, checkpoint files).
using AdapterWeights = std::pair<engine::LoraSpec, std::map<std::string, engine::HostTensor>>;
using WeightsLoader = std::function<Result<AdapterWeights>()>;

class AdapterLru {
  public:
    explicit AdapterLru(size_t capacity) : capacity_(capacity) {}

    // The adapter cached under `key` (now the most recent), or a new one made from load() on a miss.
    Result<engine::AdapterId> acquire(engine::Engine & engine, const std::string & key, const WeightsLoader & load);
    // Removes least recently used adapters not in `in_use` until at most `capacity` remain (or none can go).
    void trim(engine::Engine & engine, const std::set<engine::AdapterId> & in_use);

    size_t size() const { return entries_.size(); }
    size_t capacity() const { return capacity_; }

  private:
    // Forgets every entry when the engine lost its adapters (Engine::adapters_epoch changed).
    void check_epoch(engine::Engine & engine);

    size_t capacity_;
    std::list<std::pair<std::string, engine::AdapterId>> entries_;  // most recent first
    int64_t epoch_ = 0;                                             // the engine's adapters_epoch they belong to
};

}  // namespace tinkerd::scheduler
