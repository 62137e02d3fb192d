// Tests for RunQueue alone (no worker thread): the gap clock and giving a hole up, and releasing a seq_id
// (skip) for a request refused with its seq_id known: what it releases, what it leaves alone (admitted ops
// stay DUPLICATE / CONFLICT), and that a released seq_id ends a hole at once and arrives STALE later.
#include "scheduler/run_queue.h"

#include <gtest/gtest.h>

namespace tinkerd::scheduler {
namespace {

using namespace std::chrono_literals;
using Clock = RunQueue::Clock;
using Kind = Admission::Kind;

Kind admit(RunQueue & q, int64_t seq, const std::string & hash = "h") {
    Op op;
    return q.admit(seq, hash, std::to_string(seq), op).kind;
}

TEST(RunQueueGap, ClockStartsWhenTheHoleIsSeenAndResetsWhenFilled) {
    RunQueue q(1);
    const auto t0 = Clock::now();
    EXPECT_EQ(q.expire_gap(t0, 10s), 0);  // empty: no hole
    EXPECT_FALSE(q.gap_deadline(10s));
    admit(q, 3);
    EXPECT_EQ(q.expire_gap(t0, 10s), 0);
    EXPECT_EQ(q.gap_deadline(10s), t0 + 10s);
    admit(q, 1);  // seq 1 arrives: ready, no hole
    EXPECT_EQ(q.expire_gap(t0 + 5s, 10s), 0);
    q.pop_head();
    EXPECT_EQ(q.expire_gap(t0 + 20s, 10s), 0);  // seq 2 missing: a new clock from t0 + 20 s
    EXPECT_EQ(q.expire_gap(t0 + 29s, 10s), 0);
    EXPECT_EQ(q.expire_gap(t0 + 30s, 10s), 1);  // seq 2 given up
    EXPECT_TRUE(q.ready());
    EXPECT_EQ(q.next_seq(), 3);
}

// Giving a hole up counts only the seq_ids nobody released; the released ones are forgotten with it.
TEST(RunQueueGap, GivingUpCountsOnlyTheSeqIdsNobodyReleased) {
    RunQueue q(1);
    const auto t0 = Clock::now();
    EXPECT_TRUE(q.skip(3));
    admit(q, 5);  // 1, 2 and 4 never come
    EXPECT_EQ(q.expire_gap(t0, 10s), 0);
    EXPECT_EQ(q.expire_gap(t0 + 10s, 10s), 3);
    EXPECT_EQ(q.next_seq(), 5);
    EXPECT_TRUE(q.ready());
    EXPECT_EQ(admit(q, 3), Kind::STALE);
    EXPECT_EQ(admit(q, 4), Kind::STALE);
}

// The 413 case: seq 1 is refused unread while seq 2 waits; its release ends the hole before any timeout.
TEST(RunQueueRelease, ReleasingTheMissingSeqIdEndsTheHoleAtOnce) {
    RunQueue q(1);
    const auto t0 = Clock::now();
    admit(q, 2);
    EXPECT_EQ(q.expire_gap(t0, 10s), 0);
    ASSERT_TRUE(q.gap_deadline(10s));
    EXPECT_TRUE(q.skip(1));
    EXPECT_TRUE(q.ready());
    EXPECT_EQ(q.head().seq_id, 2);
    EXPECT_FALSE(q.gap_deadline(10s));
    EXPECT_EQ(q.expire_gap(t0 + 1h, 10s), 0);  // nothing left to give up
    EXPECT_EQ(q.pop_head().seq_id, 2);
    EXPECT_EQ(q.next_seq(), 3);
}

TEST(RunQueueRelease, SkipSaysWhetherItReleasedAnything) {
    RunQueue q(5);
    EXPECT_FALSE(q.skip(4));                            // below next_seq: already consumed
    EXPECT_FALSE(q.skip(-1));                           // never valid
    EXPECT_FALSE(q.skip(5 + RunQueue::kMaxAhead + 1));  // too far ahead to have been admitted
    EXPECT_TRUE(q.skip(7));                             // ahead: remembered
    EXPECT_FALSE(q.skip(7));                            // a second refusal of the same seq_id
    EXPECT_TRUE(q.skip(5));                             // next: consumed now
    EXPECT_EQ(q.next_seq(), 6);
    EXPECT_FALSE(q.skip(5));
    EXPECT_EQ(admit(q, 6), Kind::ACCEPTED);
    EXPECT_FALSE(q.skip(6));  // admitted: it runs, whatever a refused copy says
    EXPECT_EQ(q.pop_head().seq_id, 6);
    EXPECT_EQ(q.next_seq(), 8);  // 7 was released
}

// design.md's guarantees hold around a release: an admitted op is answered once (DUPLICATE) and a different
// body under its seq_id is a CONFLICT even after a refused request named the same seq_id; a released
// seq_id that arrives later is STALE (it never runs after the ops behind it).
TEST(RunQueueRelease, AdmittedOpsKeepTheirAnswersAndReleasedSeqIdsArriveStale) {
    RunQueue q(1);
    EXPECT_EQ(admit(q, 1, "body1"), Kind::ACCEPTED);
    EXPECT_FALSE(q.skip(1));
    Op op;
    const Admission resend = q.admit(1, "body1", "other", op);
    EXPECT_EQ(resend.kind, Kind::DUPLICATE);
    EXPECT_EQ(resend.request_id, "1");
    EXPECT_EQ(admit(q, 1, "body2"), Kind::CONFLICT);
    EXPECT_TRUE(q.skip(2));
    EXPECT_EQ(admit(q, 3), Kind::ACCEPTED);
    EXPECT_EQ(q.pop_head().seq_id, 1);
    EXPECT_EQ(q.pop_head().seq_id, 3);  // 2 released: 3 follows 1
    EXPECT_EQ(admit(q, 2), Kind::STALE);
    EXPECT_EQ(admit(q, 1, "body1"), Kind::DUPLICATE);  // still remembered below next_seq
}

}  // namespace
}  // namespace tinkerd::scheduler
