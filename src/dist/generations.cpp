// The generations' rendezvous (generations.h): a roll call and a go through the store, then
// DataParallelGroup::join under the generation's prefix; and a follower's loop over generations.
#include "dist/generations.h"

#include <thread>

#include "common/log.h"
#include "dist/distributed_engine.h"

namespace tinkerd::dist {

namespace {

constexpr std::chrono::milliseconds POLL{100};
const std::string STOPPED = "stopped";

std::string here_key(const std::string & prefix, int rank) {
    return prefix + "/here/" + std::to_string(rank);
}
std::string go_key(const std::string & prefix) {
    return prefix + "/go";
}

GroupOptions for_generation(const GroupOptions & options, int64_t generation) {
    GroupOptions o = options;
    o.prefix = generation_prefix(options.prefix, generation);
    return o;
}

// The ranks that have not answered the roll of a generation, as "1, 2" (empty when none).
Result<std::string> missing_ranks(GroupStore & store, const std::string & prefix, int world_size) {
    std::string missing;
    for (int r = 0; r < world_size; ++r) {
        auto here = store.get(here_key(prefix, r));
        if (!here.ok()) {
            return here.error();
        }
        if (!*here) {
            missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        }
    }
    return missing;
}

// The published generation: -1 while none is, -2 once rank 0 stopped.
Result<int64_t> published_generation(GroupStore & store, const std::string & model_prefix) {
    auto value = store.get(generation_key(model_prefix));
    if (!value.ok()) {
        return value.error();
    }
    if (!*value) {
        return int64_t{-1};
    }
    return **value == STOPPED ? int64_t{-2} : std::stoll(**value);
}

// A follower that answered the roll of `generation`: true once rank 0 says go, false once it publishes
// another generation (or stops).
Result<bool> await_go(GroupStore & store, const std::string & model_prefix, int64_t generation) {
    const std::string go = go_key(generation_prefix(model_prefix, generation));
    while (true) {
        auto said = store.get(go);
        if (!said.ok()) {
            return said.error();
        }
        if (*said) {
            return true;
        }
        auto published = published_generation(store, model_prefix);
        if (!published.ok()) {
            return published.error();
        }
        if (*published != generation) {
            return false;
        }
        std::this_thread::sleep_for(POLL);
    }
}

}  // namespace

std::string generation_key(const std::string & model_prefix) {
    return model_prefix + "/generation";
}

std::string generation_prefix(const std::string & model_prefix, int64_t generation) {
    return model_prefix + "/gen" + std::to_string(generation);
}

Result<std::unique_ptr<DataParallelGroup>> lead_generation(GroupStore & store, const GroupOptions & options,
                                                           int64_t generation, const std::atomic<bool> & stop) {
    const std::string prefix = generation_prefix(options.prefix, generation);
    TRY_STATUS(store.set(here_key(prefix, 0), "1"));
    TRY_STATUS(store.set(generation_key(options.prefix), std::to_string(generation)));
    const auto deadline = std::chrono::steady_clock::now() + options.timeout;
    while (true) {
        auto missing = missing_ranks(store, prefix, options.world_size);
        if (!missing.ok()) {
            return missing.error();
        }
        if (missing->empty()) {
            break;
        }
        if (stop) {
            return unavailable("stopped while waiting for rank(s) " + *missing);
        }
        if (std::chrono::steady_clock::now() >= deadline) {
            return unavailable("waiting for rank(s) " + *missing);
        }
        std::this_thread::sleep_for(POLL);
    }
    TRY_STATUS(store.set(go_key(prefix), "1"));
    return DataParallelGroup::join(store, for_generation(options, generation));
}

void publish_stopped(GroupStore & store, const std::string & model_prefix) {
    (void)store.set(generation_key(model_prefix), STOPPED);
}

Result<std::unique_ptr<DataParallelGroup>> follow_generation(GroupStore & store, const GroupOptions & options,
                                                             int64_t min_generation, int64_t & generation) {
    bool told = false;
    while (true) {
        auto published = published_generation(store, options.prefix);
        if (!published.ok()) {
            return published.error();
        }
        if (*published == -2) {
            return std::unique_ptr<DataParallelGroup>();
        }
        const int64_t g = *published;
        auto formed = g >= min_generation ? store.get(go_key(generation_prefix(options.prefix, g)))
                                          : Result<std::optional<std::string>>(std::optional<std::string>("old"));
        if (!formed.ok()) {
            return formed.error();
        }
        if (*formed) {  // none yet, an old one, or one formed without this rank: wait for the next
            if (!told) {
                LOG_INF("dist", "rank %d, %s: waiting for rank 0 to open a generation >= %lld", options.rank,
                        options.prefix.c_str(), static_cast<long long>(std::max(min_generation, g + 1)));
                told = true;
            }
            std::this_thread::sleep_for(POLL);
            continue;
        }
        TRY_STATUS(store.set(here_key(generation_prefix(options.prefix, g), options.rank), "1"));
        auto go = await_go(store, options.prefix, g);
        if (!go.ok()) {
            return go.error();
        }
        if (!*go) {
            continue;
        }
        auto group = [&] {
            const auto watch = store.watch();
            return DataParallelGroup::join(store, for_generation(options, g));
        }();
        if (group.ok()) {
            generation = g;
            return group;
        }
        LOG_WRN("dist", "rank %d: generation %lld did not form (%s); waiting for the next one", options.rank,
                static_cast<long long>(g), group.error().message.c_str());
        min_generation = g + 1;
    }
}

Result<void> follow_group(engine::Engine & local, GroupStore & store, const GroupOptions & options) {
    int64_t min_generation = 0;
    while (true) {
        int64_t generation = -1;
        auto group = follow_generation(store, options, min_generation, generation);
        if (!group.ok()) {
            return internal_error("rank 0 is gone (" + group.error().message + ")");
        }
        if (!*group) {
            LOG_INF("dist", "rank %d, %s: rank 0 stopped", options.rank, options.prefix.c_str());
            return {};
        }
        auto status = run_follower(local, **group);
        if (status.ok()) {
            return {};
        }
        LOG_WRN("dist", "rank %d, %s: generation %lld failed (%s); joining the next one", options.rank,
                options.prefix.c_str(), static_cast<long long>(generation), status.error().message.c_str());
        min_generation = generation + 1;
    }
}

}  // namespace tinkerd::dist
