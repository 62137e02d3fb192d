// Unit tests of SequenceRecords (stable_reinforce's stability records): a datum's provenance resolves to the
// recorded sampler logprobs (NaN on prompt targets); wrong session, wrong token, bad tiling and expired or
// evicted records are refused with the run named.
#include "api/sequence_records.h"

#include <cmath>
#include <cstring>

#include <gtest/gtest.h>

namespace tinkerd::api {
namespace {

engine::SampleOutput two_samples() {
    engine::SampleOutput out;
    out.sequences.push_back({{7, 8, 9}, {-0.5f, -1.0f, -1.5f}, true});
    out.sequences.push_back({{4, 5}, {-2.0f, -2.5f}, false});
    return out;
}

engine::HostTensor i64(const std::vector<int64_t> & v) {
    engine::HostTensor t{model::DType::I64, {static_cast<int64_t>(v.size())}, std::vector<uint8_t>(v.size() * 8)};
    std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
    return t;
}

std::vector<float> floats(const engine::HostTensor & t) {
    std::vector<float> v(t.bytes.size() / 4);
    std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
    return v;
}

// prompt [1, 2, 3] + sample r.0 [7, 8, 9]: model input [1, 2, 3, 7, 8], targets [2, 3, 7, 8, 9].
engine::Datum datum(std::vector<int64_t> targets = {2, 3, 7, 8, 9}) {
    return {{1, 2, 3, 7, 8}, {{"target_tokens", i64(targets)}}};
}
wire::DatumProvenance spans(const std::string & id = "r.0") {
    return {{{false, id, 0, 3}, {true, id, 0, 2}}, {{false, id, 1, 2}, {true, id, 0, 3}}};
}

TEST(SequenceRecords, ProvenanceResolvesToTheRecordedLogprobs) {
    SequenceRecords records;
    records.record("s1", "r", {1, 2, 3}, two_samples(), 100.0);
    EXPECT_EQ(records.size(), 2);
    auto q = records.resolve("s1", datum(), spans(), 101.0);
    ASSERT_TRUE(q.ok()) << q.error().message;
    const auto v = floats(*q);
    ASSERT_EQ(v.size(), 5u);
    EXPECT_TRUE(std::isnan(v[0]) && std::isnan(v[1])) << "prompt targets have no sampler logprob";
    EXPECT_EQ(v[2], -0.5f);
    EXPECT_EQ(v[4], -1.5f);
}

TEST(SequenceRecords, FalseClaimsAreRefusedNamingTheRun) {
    SequenceRecords records;
    records.record("s1", "r", {1, 2, 3}, two_samples(), 100.0);
    auto other = records.resolve("s2", datum(), spans(), 101.0);
    ASSERT_FALSE(other.ok());
    EXPECT_NE(other.error().message.find("not a recorded sequence of this session"), std::string::npos);
    auto token = records.resolve("s1", datum({2, 3, 7, 8, 6}), spans(), 101.0);
    ASSERT_FALSE(token.ok());
    EXPECT_NE(token.error().message.find("loss_fn_input_spans[1]: token 6 at position 4"), std::string::npos)
        << token.error().message;
    auto shortfall = spans();
    shortfall.targets.back().length = 2;
    auto tiling = records.resolve("s1", datum(), shortfall, 101.0);
    ASSERT_FALSE(tiling.ok());
    EXPECT_NE(tiling.error().message.find("cover 4 positions, the datum has 5"), std::string::npos);
}

TEST(SequenceRecords, RecordsExpireAfterADayOfDisuseAndGiveWayToNewOnes) {
    SequenceRecords records;
    records.record("s1", "r", {1, 2, 3}, two_samples(), 0.0);
    ASSERT_TRUE(records.resolve("s1", datum(), spans(), 50000.0).ok());  // a use restarts the day
    records.expire(100000.0);
    EXPECT_EQ(records.size(), 1) << "r.0 was used at 50000 s; r.1 expired at 86400 s";
    records.expire(50000.0 + SequenceRecords::RETENTION_SECONDS + 1);
    EXPECT_EQ(records.size(), 0);
    SequenceRecords small(12);  // 12 tokens per session: a second request's records push the first out
    small.record("s1", "a", {1, 2, 3}, two_samples(), 0.0);
    small.record("s1", "b", {1, 2, 3}, two_samples(), 0.0);
    EXPECT_FALSE(small.resolve("s1", datum(), spans("a.0"), 1.0).ok());
    EXPECT_TRUE(small.resolve("s1", datum(), spans("b.0"), 1.0).ok());
    small.drop_session("s1");
    EXPECT_EQ(small.size(), 0);
}

}  // namespace
}  // namespace tinkerd::api
