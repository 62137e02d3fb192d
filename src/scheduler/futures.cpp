// FutureTable implementation: the in-memory map of futures, the held long-polls (waiters) and the one
// timer thread that answers polls whose deadline passes. Callbacks (waiters, on_finish, lookup) are always
// called outside the table's mutex.
#include "scheduler/futures.h"

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/redact.h"

namespace tinkerd::scheduler {

namespace {

using Clock = std::chrono::steady_clock;
using ReadyFn = std::function<void(FutureOutcome)>;

// Calls a poll's callback, never letting an exception escape into the caller's thread.
void answer(const ReadyFn & ready, FutureOutcome outcome) {
    try {
        ready(std::move(outcome));
    } catch (const std::exception & e) {
        LOG_ERR("futures", "poll callback threw: %s", e.what());
    } catch (...) {
        LOG_ERR("futures", "poll callback threw a non-standard exception");
    }
}

FutureOutcome unknown_outcome() {
    FutureOutcome outcome;
    outcome.state = FutureOutcome::State::UNKNOWN;
    return outcome;
}

}  // namespace

struct FutureTable::Impl {
    struct Entry {
        FutureOutcome outcome;                 // state PENDING until finished
        std::unordered_set<uint64_t> waiters;  // ids into `waiters`
    };
    struct Waiter {
        std::string request_id;
        std::multimap<Clock::time_point, uint64_t>::iterator deadline_it;
        ReadyFn ready;
    };
    // One poll to answer once the lock is released.
    struct Answer {
        ReadyFn ready;
        FutureOutcome outcome;
    };

    FutureTableOptions options;
    mutable std::mutex mu;
    std::condition_variable timer_cv;
    std::unordered_map<std::string, Entry> entries;
    std::unordered_map<uint64_t, Waiter> waiters;
    std::multimap<Clock::time_point, uint64_t> deadlines;
    std::deque<std::string> finished_order;  // oldest finished first, for eviction
    size_t n_pending = 0;
    uint64_t next_waiter_id = 1;
    std::mt19937_64 rng;
    bool stopping = false;
    std::thread timer;

    explicit Impl(FutureTableOptions opts) : options(std::move(opts)), rng(seed()) {}

    static uint64_t seed() {
        std::random_device device;
        return (static_cast<uint64_t>(device()) << 32) ^ device();
    }

    std::string new_id_locked() {
        for (;;) {
            char buf[40];
            std::snprintf(buf, sizeof(buf), "req-%016llx%016llx", static_cast<unsigned long long>(rng()),
                          static_cast<unsigned long long>(rng()));
            std::string id(buf);
            if (entries.count(id) == 0) {
                return id;
            }
        }
    }

    void insert_pending_locked(const std::string & id, const std::string & tenant, const std::string & type) {
        auto [it, inserted] = entries.try_emplace(id);
        if (!inserted) {
            return;  // an id known already keeps its state
        }
        it->second.outcome.state = FutureOutcome::State::PENDING;
        it->second.outcome.tenant = tenant;
        it->second.outcome.request_type = type;
        n_pending++;
    }

    // Detaches every waiter of `entry`, returning their callbacks paired with `outcome`.
    std::vector<Answer> take_waiters_locked(Entry & entry, const FutureOutcome & outcome) {
        std::vector<Answer> answers;
        answers.reserve(entry.waiters.size());
        for (uint64_t waiter_id : entry.waiters) {
            auto it = waiters.find(waiter_id);
            deadlines.erase(it->second.deadline_it);
            answers.push_back({std::move(it->second.ready), outcome});
            waiters.erase(it);
        }
        entry.waiters.clear();
        return answers;
    }

    // Marks a pending future finished; false when it is unknown or already finished.
    bool finish(const std::string & id, FutureOutcome outcome) {
        std::vector<Answer> answers;
        {
            std::lock_guard lock(mu);
            auto it = entries.find(id);
            if (it == entries.end() || it->second.outcome.state != FutureOutcome::State::PENDING) {
                return false;
            }
            outcome.tenant = it->second.outcome.tenant;
            outcome.request_type = it->second.outcome.request_type;
            it->second.outcome = outcome;
            n_pending--;
            answers = take_waiters_locked(it->second, outcome);
        }
        if (options.on_finish) {
            try {
                options.on_finish(id, outcome);
            } catch (const std::exception & e) {
                LOG_ERR("futures", "on_finish for %s threw: %s", id.c_str(), e.what());
            }
        }
        for (auto & a : answers) {
            answer(a.ready, std::move(a.outcome));
        }
        // Evict only after on_finish persisted the outcome, so a lookup always finds it somewhere.
        std::lock_guard lock(mu);
        finished_order.push_back(id);
        evict_locked();
        return true;
    }

    void evict_locked() {
        while (finished_order.size() > options.max_finished_in_memory) {
            auto it = entries.find(finished_order.front());
            if (it != entries.end() && it->second.outcome.state != FutureOutcome::State::PENDING) {
                entries.erase(it);
            }
            finished_order.pop_front();
        }
    }

    FutureOutcome lookup_outside_lock(const std::string & id) {
        if (!options.lookup) {
            return unknown_outcome();
        }
        try {
            if (auto found = options.lookup(id)) {
                return *found;
            }
        } catch (const std::exception & e) {
            LOG_ERR("futures", "lookup of %s threw: %s", id.c_str(), e.what());
        }
        return unknown_outcome();
    }

    // Registers a held poll; the caller holds the lock and `entry` is pending.
    void add_waiter_locked(const std::string & id, Entry & entry, Clock::time_point deadline, ReadyFn ready) {
        uint64_t waiter_id = next_waiter_id++;
        auto deadline_it = deadlines.emplace(deadline, waiter_id);
        waiters.emplace(waiter_id, Waiter{id, deadline_it, std::move(ready)});
        entry.waiters.insert(waiter_id);
        if (deadline_it == deadlines.begin()) {
            timer_cv.notify_one();  // the timer sleeps until a later deadline
        }
    }

    // Detaches the waiters whose deadline is at or before `now`, answering them PENDING.
    std::vector<Answer> take_expired_locked(Clock::time_point now) {
        std::vector<Answer> answers;
        while (!deadlines.empty() && deadlines.begin()->first <= now) {
            uint64_t waiter_id = deadlines.begin()->second;
            deadlines.erase(deadlines.begin());
            auto it = waiters.find(waiter_id);
            auto entry_it = entries.find(it->second.request_id);
            FutureOutcome outcome;
            outcome.state = FutureOutcome::State::PENDING;
            if (entry_it != entries.end()) {
                entry_it->second.waiters.erase(waiter_id);
                outcome.tenant = entry_it->second.outcome.tenant;
                outcome.request_type = entry_it->second.outcome.request_type;
            }
            answers.push_back({std::move(it->second.ready), std::move(outcome)});
            waiters.erase(it);
        }
        return answers;
    }

    void timer_loop() {
        std::unique_lock lock(mu);
        while (!stopping) {
            if (deadlines.empty()) {
                timer_cv.wait(lock);
                continue;
            }
            auto next = deadlines.begin()->first;
            if (Clock::now() < next) {
                timer_cv.wait_until(lock, next);
                continue;
            }
            std::vector<Answer> answers = take_expired_locked(Clock::now());
            lock.unlock();
            for (auto & a : answers) {
                answer(a.ready, std::move(a.outcome));
            }
            lock.lock();
        }
    }

    // Stops the timer and answers every held poll with PENDING.
    void shut_down() {
        {
            std::lock_guard lock(mu);
            stopping = true;
        }
        timer_cv.notify_all();
        if (timer.joinable()) {
            timer.join();
        }
        std::vector<Answer> answers;
        {
            std::lock_guard lock(mu);
            answers = take_expired_locked(Clock::time_point::max());
        }
        for (auto & a : answers) {
            answer(a.ready, std::move(a.outcome));
        }
    }
};

FutureTable::FutureTable(FutureTableOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
    impl_->timer = std::thread([this] { impl_->timer_loop(); });
}

FutureTable::~FutureTable() {
    impl_->shut_down();
}

std::string FutureTable::create(const std::string & tenant, const std::string & request_type) {
    std::lock_guard lock(impl_->mu);
    std::string id = impl_->new_id_locked();
    impl_->insert_pending_locked(id, tenant, request_type);
    return id;
}

void FutureTable::create_with_id(const std::string & request_id, const std::string & tenant,
                                 const std::string & request_type) {
    std::lock_guard lock(impl_->mu);
    impl_->insert_pending_locked(request_id, tenant, request_type);
}

void FutureTable::complete(const std::string & request_id, std::string json, std::string proto) {
    FutureOutcome outcome;
    outcome.state = FutureOutcome::State::DONE;
    outcome.json = std::move(json);
    outcome.proto = std::move(proto);
    impl_->finish(request_id, std::move(outcome));
}

void FutureTable::fail(const std::string & request_id, std::string error, std::string category) {
    FutureOutcome outcome;
    outcome.state = FutureOutcome::State::FAILED;
    outcome.error = redact_paths(std::move(error));
    outcome.category = std::move(category);
    impl_->finish(request_id, std::move(outcome));
}

void FutureTable::wait(const std::string & request_id, std::chrono::milliseconds timeout,
                       std::function<void(FutureOutcome)> ready) {
    FutureOutcome now_outcome;
    {
        std::lock_guard lock(impl_->mu);
        auto it = impl_->entries.find(request_id);
        if (it != impl_->entries.end()) {
            bool pending = it->second.outcome.state == FutureOutcome::State::PENDING;
            if (pending && timeout.count() > 0 && !impl_->stopping) {
                impl_->add_waiter_locked(request_id, it->second, Clock::now() + timeout, std::move(ready));
                return;
            }
            now_outcome = it->second.outcome;
        } else {
            now_outcome.state = FutureOutcome::State::UNKNOWN;
        }
    }
    if (now_outcome.state == FutureOutcome::State::UNKNOWN) {
        now_outcome = impl_->lookup_outside_lock(request_id);
    }
    answer(ready, std::move(now_outcome));
}

FutureOutcome FutureTable::peek(const std::string & request_id) {
    {
        std::lock_guard lock(impl_->mu);
        auto it = impl_->entries.find(request_id);
        if (it != impl_->entries.end()) {
            return it->second.outcome;
        }
    }
    return impl_->lookup_outside_lock(request_id);
}

size_t FutureTable::waiting_polls() const {
    std::lock_guard lock(impl_->mu);
    return impl_->waiters.size();
}

size_t FutureTable::pending_futures() const {
    std::lock_guard lock(impl_->mu);
    return impl_->n_pending;
}

}  // namespace tinkerd::scheduler
