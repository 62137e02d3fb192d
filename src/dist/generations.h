// Generations of a data-parallel group: every (re-)formation of one served model's group joins under its
// own store prefix "model<i>/gen<g>", so nothing of a failed one is reused. Rank 0 publishes the
// generation to join ("model<i>/generation"; "stopped" when it shuts down), calls the roll and, once every
// rank answered, says go; a follower joins the published generation, unless it was formed without it (a
// restarted rank waits for the next one). Each wait polls the store, so it can be stopped, and a store
// that cannot be reached (rank 0 gone) ends a follower's wait.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "dist/process_group.h"
#include "engine/engine.h"

namespace tinkerd::dist {

// Store keys of one model's group (options.prefix is "model<i>").
std::string generation_key(const std::string & model_prefix);
std::string generation_prefix(const std::string & model_prefix, int64_t generation);

// Rank 0: publishes `generation`, waits (options.timeout at most) for every rank to answer the roll and
// forms the group. A timeout is ErrorKind::UNAVAILABLE naming the missing ranks; `stop` ends the wait.
Result<std::unique_ptr<DataParallelGroup>> lead_generation(GroupStore & store, const GroupOptions & options,
                                                           int64_t generation, const std::atomic<bool> & stop);

// Rank 0 shuts down: followers waiting for a generation exit.
void publish_stopped(GroupStore & store, const std::string & model_prefix);

// A follower: waits for a generation >= min_generation that is not formed yet and joins it; `generation`
// is set to the one joined. A null group once rank 0 published "stopped"; an error when the store cannot
// be reached (rank 0 is gone).
Result<std::unique_ptr<DataParallelGroup>> follow_generation(GroupStore & store, const GroupOptions & options,
                                                             int64_t min_generation, int64_t & generation);

// A follower's whole life for one model: joins a generation, runs rank 0's commands (run_follower) until
// STOP (ok), and after a failed group joins the next generation with its adapters dropped (rank 0
// re-sends them). Ends with an error only when rank 0 is gone.
Result<void> follow_group(engine::Engine & local, GroupStore & store, const GroupOptions & options);

}  // namespace tinkerd::dist
