// Tests of the SampleResponse codec: stop reasons, int32/float32 little-endian arrays, NaN first prompt
// logprob, top-k cells padded with (0, -99999), and the legacy JSON nulls.
#include "wire/sample_codec.h"

#include <cmath>
#include <cstring>
#include <limits>

#include <gtest/gtest.h>

#include "tinker_public.pb.h"
#include "wire/prompt_extras_codec.h"

namespace tinkerd::wire {
namespace {

engine::SampleOutput make_output() {
    engine::SampleOutput out;
    out.sequences.push_back({{5, 6, 7}, {-0.5f, -1.0f, -0.25f}, true});
    out.sequences.push_back({{9}, {-2.0f}, false});
    out.prompt_logprobs = {std::numeric_limits<float>::quiet_NaN(), -1.5f, -0.75f};
    out.topk_prompt_logprobs = {{}, {{3, -0.1f}, {4, -2.0f}}, {{8, -0.3f}}};
    return out;
}

TEST(SampleCodec, ProtobufFieldsAndByteLayout) {
    const std::string body = encode_sample_response_proto(make_output(), {true, 2});
    tinker_public::SampleResponse msg;
    ASSERT_TRUE(msg.ParseFromString(body));
    ASSERT_EQ(msg.sequences_size(), 2);
    EXPECT_EQ(msg.sequences(0).stop_reason(), tinker_public::STOP_REASON_STOP);
    EXPECT_EQ(msg.sequences(1).stop_reason(), tinker_public::STOP_REASON_LENGTH);
    ASSERT_EQ(msg.sequences(0).tokens().size(), 12u);  // 3 x int32
    int32_t second = 0;
    std::memcpy(&second, msg.sequences(0).tokens().data() + 4, 4);
    EXPECT_EQ(second, 6);
    ASSERT_EQ(msg.prompt_logprobs().size(), 12u);
    float first = 0;
    std::memcpy(&first, msg.prompt_logprobs().data(), 4);
    EXPECT_TRUE(std::isnan(first));
    const auto & topk = msg.topk_prompt_logprobs();
    EXPECT_EQ(topk.k(), 2u);
    EXPECT_EQ(topk.prompt_length(), 3u);
    ASSERT_EQ(topk.logprobs().size(), 3u * 2u * 4u);
    float cell = 0;
    std::memcpy(&cell, topk.logprobs().data() + 5 * 4, 4);  // position 2, second cell: empty
    EXPECT_EQ(cell, -99999.0f);
}

TEST(SampleCodec, OptionalFieldsOmittedWhenNotAsked) {
    tinker_public::SampleResponse msg;
    ASSERT_TRUE(msg.ParseFromString(encode_sample_response_proto(make_output(), {false, 0})));
    EXPECT_FALSE(msg.has_prompt_logprobs());
    EXPECT_FALSE(msg.has_topk_prompt_logprobs());
}

TEST(SampleCodec, RoundTripThroughProtobuf) {
    auto back = decode_sample_response_proto(encode_sample_response_proto(make_output(), {true, 2}));
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->sequences[0].tokens, (std::vector<int64_t>{5, 6, 7}));
    EXPECT_EQ(back->sequences[1].stopped, false);
    ASSERT_EQ(back->topk_prompt_logprobs.size(), 3u);
    EXPECT_TRUE(back->topk_prompt_logprobs[0].empty());
    EXPECT_EQ(back->topk_prompt_logprobs[1].size(), 2u);
    EXPECT_EQ(back->topk_prompt_logprobs[2].size(), 1u);  // trailing empty cell trimmed
    EXPECT_FALSE(decode_sample_response_proto("\xff\xff\xff").ok());
}

// Found by wire_fuzz: an empty (or shorter than one element) byte field was memcpy'd from into a null
// pointer (UB; the sanitizer tier aborts), e.g. the sequence of a max_tokens 0 request.
TEST(SampleCodec, EmptyAndShortByteFieldsDecodeToEmptyArrays) {
    engine::SampleOutput empty;
    empty.sequences.push_back({{}, {}, false});
    empty.prompt_logprobs = {std::numeric_limits<float>::quiet_NaN()};
    auto back = decode_sample_response_proto(encode_sample_response_proto(empty, {true, 0}));
    ASSERT_TRUE(back.ok()) << back.error().message;
    ASSERT_EQ(back->sequences.size(), 1u);
    EXPECT_TRUE(back->sequences[0].tokens.empty());
    EXPECT_TRUE(back->sequences[0].logprobs.empty());

    tinker_public::SampleResponse msg;
    auto * seq = msg.add_sequences();
    seq->set_tokens(std::string("\x01\x02\x03", 3));  // 3 bytes: no whole int32
    msg.set_prompt_logprobs(std::string());
    back = decode_sample_response_proto(msg.SerializeAsString());
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_TRUE(back->sequences[0].tokens.empty());
    EXPECT_TRUE(back->prompt_logprobs.empty());
}

TEST(SampleCodec, TargetPromptLogprobsRepeatTheRequestLayout) {
    const nlohmann::json sparse = {{"data", {5, 6, 0}},
                                   {"dtype", "int64"},
                                   {"shape", {2, 8}},
                                   {"sparse_crow_indices", {0, 2, 3}},
                                   {"sparse_col_indices", {0, 7, 0}}};
    auto ids = decode_target_prompt_ids(sparse, 100, 1000);
    ASSERT_TRUE(ids.ok()) << ids.error().message;
    EXPECT_TRUE(ids->sparse);
    EXPECT_EQ(ids->ids[0], 5);
    EXPECT_EQ(ids->ids[7], 6);
    EXPECT_EQ(ids->ids[8], 0);
    EXPECT_EQ(ids->ids[1], -1);
    engine::SampleOutput out;
    out.target_prompt_logprobs.assign(16, 0.0F);
    out.target_prompt_logprobs[0] = -0.5F;
    out.target_prompt_logprobs[7] = -1.5F;
    out.target_prompt_logprobs[8] = -2.5F;
    SampleEncoding e;
    e.target_prompt_k = 8;
    e.target_sparse = true;
    e.target_crow = ids->crow;
    e.target_cols = ids->cols;
    tinker_public::SampleResponse msg;
    ASSERT_TRUE(msg.ParseFromString(encode_sample_response_proto(out, e)));
    const auto & t = msg.target_prompt_logprobs();
    EXPECT_EQ(t.dtype(), tinker_public::DTYPE_FLOAT32);
    ASSERT_EQ(t.shape_size(), 2);
    EXPECT_EQ(t.shape(1), 8);
    ASSERT_EQ(t.sparse_csr().values().size(), 12u);
    float third = 0;
    std::memcpy(&third, t.sparse_csr().values().data() + 8, 4);
    EXPECT_EQ(third, -2.5F);
    e.target_sparse = false;  // dense: every cell, 0 where nothing was asked
    ASSERT_TRUE(msg.ParseFromString(encode_sample_response_proto(out, e)));
    EXPECT_EQ(msg.target_prompt_logprobs().dense().size(), 64u);
}

TEST(SampleCodec, TargetPromptIdsAreChecked) {
    const auto bad = [](nlohmann::json t) { return decode_target_prompt_ids(t, 100, 1000).error().message; };
    nlohmann::json dense = {{"data", {-1, -1, 3, -1}}, {"dtype", "int64"}, {"shape", {2, 2}}};
    EXPECT_TRUE(decode_target_prompt_ids(dense, 100, 1000).ok());
    EXPECT_NE(bad({{"data", {-1, -1}}, {"dtype", "int64"}, {"shape", {1, 2}}}).find("names no token id"),
              std::string::npos);
    EXPECT_NE(bad({{"data", {1, 200}}, {"dtype", "int64"}, {"shape", {1, 2}}}).find("token id 200"), std::string::npos);
    EXPECT_NE(bad({{"data", {1.5}}, {"dtype", "float32"}, {"shape", {1, 1}}}).find("int64"), std::string::npos);
    EXPECT_NE(bad({{"data", {1, 2}},
                   {"dtype", "int64"},
                   {"shape", {1, 4}},
                   {"sparse_crow_indices", {0, 2}},
                   {"sparse_col_indices", {3, 1}}})
                  .find("increase within a row"),
              std::string::npos);
    EXPECT_NE(bad({{"data", {1}}, {"dtype", "int64"}, {"shape", {1, 2000}}}).find("K <= 1000"), std::string::npos);
}

TEST(SampleCodec, AltTokensAreDenseInt64AndFloat32) {
    engine::SampleOutput out;
    out.prompt_alt_tokens = {4, 4, 9, 2};
    out.prompt_alt_logprobs = {-0.1F, -0.1F, -2.0F, -0.7F};
    SampleEncoding e;
    e.prompt_alt_tokens_k = 2;
    tinker_public::SampleResponse msg;
    ASSERT_TRUE(msg.ParseFromString(encode_sample_response_proto(out, e)));
    const auto & alt = msg.prompt_alt_tokens();
    EXPECT_EQ(alt.tokens().dtype(), tinker_public::DTYPE_INT64);
    EXPECT_EQ(alt.tokens().shape(0), 2);
    EXPECT_EQ(alt.tokens().dense().size(), 32u);
    EXPECT_EQ(alt.logprobs().dense().size(), 16u);
    EXPECT_FALSE(msg.has_target_prompt_logprobs());
}

TEST(SampleCodec, LegacyJsonUsesNulls) {
    const auto j = encode_sample_response_json(make_output(), {true, 2});
    EXPECT_EQ(j["type"], "sample");
    EXPECT_EQ(j["sequences"][0]["stop_reason"], "stop");
    EXPECT_EQ(j["sequences"][1]["stop_reason"], "length");
    EXPECT_TRUE(j["prompt_logprobs"][0].is_null());
    EXPECT_TRUE(j["topk_prompt_logprobs"][0].is_null());
    EXPECT_EQ(j["topk_prompt_logprobs"][1][0][0], 3);
    const auto plain = encode_sample_response_json(make_output(), {false, 0});
    EXPECT_TRUE(plain["prompt_logprobs"].is_null());
    EXPECT_TRUE(plain["topk_prompt_logprobs"].is_null());
}

}  // namespace
}  // namespace tinkerd::wire
