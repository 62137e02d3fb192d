// Unit tests of the SDK 0.38 wire additions: loss_fn_config_v2 (preferred over the legacy map, text values
// refused by name), the new loss names refused, provenance spans and image dimensions accepted by the decoder, top-k
// sampled logprobs on SampledSequence (field 4), and prompt_logprobs_last_n masking in the proto and JSON sample
// results.
#include <cmath>
#include <cstring>
#include <limits>

#include <gtest/gtest.h>

#include "tinker_public.pb.h"
#include "wire/forward_backward_codec.h"
#include "wire/sample_codec.h"

namespace tinkerd::wire {
namespace {

std::string i32_bytes(const std::vector<int32_t> & v) {
    return {reinterpret_cast<const char *>(v.data()), v.size() * 4};
}

std::string i64_bytes(const std::vector<int64_t> & v) {
    return {reinterpret_cast<const char *>(v.data()), v.size() * 8};
}

// The request SDK 0.38 sends for loss_fn_config={"clip_low_threshold": 0.5}: both maps, plus spans.
tinker_public::ForwardBackwardRequest request_038() {
    tinker_public::ForwardBackwardRequest req;
    req.set_model_id("m");
    req.set_seq_id(3);
    req.set_loss_fn("ppo");
    (*req.mutable_loss_fn_config())["clip_low_threshold"] = 0.5;
    (*req.mutable_loss_fn_config_v2())["clip_low_threshold"].set_number(0.5);
    auto * datum = req.add_data();
    datum->add_model_input()->mutable_encoded_text()->set_tokens(i32_bytes({1, 2, 3}));
    auto & target = (*datum->mutable_loss_fn_inputs())["target_tokens"];
    target.set_dtype(tinker_public::DTYPE_INT64);
    target.set_dense(i64_bytes({2, 3, 4}));
    auto * span = datum->add_model_input_spans()->mutable_sampled_tokens();
    span->set_sequence_id("req-1.0");
    span->set_length(3);
    auto * prompt = datum->add_loss_fn_input_spans()->mutable_prompt_tokens();
    prompt->set_sequence_id("req-1.0");
    prompt->set_length(3);
    return req;
}

Result<ForwardBackwardRequest> decode(const tinker_public::ForwardBackwardRequest & req) {
    return decode_forward_backward_proto(req.SerializeAsString());
}

TEST(Sdk038Request, LossConfigV2NumbersAndSpansAreAccepted) {
    auto out = decode(request_038());
    ASSERT_TRUE(out.ok()) << out.error().message;
    EXPECT_EQ(out->loss_fn_config.at("clip_low_threshold"), 0.5);
    EXPECT_EQ(out->data.at(0).tokens, (std::vector<int64_t>{1, 2, 3}));
}

TEST(Sdk038Request, LossConfigV2WinsOverTheLegacyMap) {
    auto req = request_038();
    (*req.mutable_loss_fn_config_v2())["clip_high_threshold"].set_number(1.5);
    (*req.mutable_loss_fn_config())["stale"] = 9.0;  // only in the legacy map: ignored when v2 is set
    auto out = decode(req);
    ASSERT_TRUE(out.ok()) << out.error().message;
    EXPECT_EQ(out->loss_fn_config.size(), 2u);
    EXPECT_EQ(out->loss_fn_config.at("clip_high_threshold"), 1.5);
    EXPECT_EQ(out->loss_fn_config.count("stale"), 0u);
}

TEST(Sdk038Request, LossConfigTextIsRefusedByName) {
    auto req = request_038();
    (*req.mutable_loss_fn_config_v2())["mode"].set_text("token");
    auto out = decode(req);
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.error().kind, ErrorKind::UNSUPPORTED);
    EXPECT_NE(out.error().message.find("loss_fn_config[\"mode\"]: string values (\"token\")"), std::string::npos)
        << out.error().message;
    (*req.mutable_loss_fn_config_v2())["mode"].Clear();
    out = decode(req);
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.error().kind, ErrorKind::INVALID_ARGUMENT);
}

TEST(Sdk038Request, CustomLossIsRefusedAndTheNewLossesDecode) {
    auto req = request_038();
    req.set_loss_fn("custom");
    auto out = decode(req);
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.error().kind, ErrorKind::UNSUPPORTED);
    EXPECT_EQ(out.error().message.rfind("loss_fn 'custom' (server-side custom losses) is not supported", 0), 0u)
        << out.error().message;
    for (const char * name : {"gspo", "stable_reinforce"}) {
        req.set_loss_fn(name);
        EXPECT_TRUE(decode(req).ok()) << name;
    }
}

TEST(Sdk038Request, ProvenanceSpansDecodeInOrder) {
    auto req = request_038();
    auto * datum = req.mutable_data(0);
    datum->clear_model_input_spans();
    datum->clear_loss_fn_input_spans();
    auto * prompt = datum->add_loss_fn_input_spans()->mutable_prompt_tokens();
    prompt->set_sequence_id("r1.0");
    prompt->set_offset(1);
    prompt->set_length(2);
    auto * sampled = datum->add_loss_fn_input_spans()->mutable_sampled_tokens();
    sampled->set_sequence_id("r1.0");
    sampled->set_length(3);
    auto out = decode(req);
    ASSERT_TRUE(out.ok()) << out.error().message;
    ASSERT_EQ(out->provenance.size(), out->data.size());
    const auto & runs = out->provenance[0].targets;
    ASSERT_EQ(runs.size(), 2u);
    EXPECT_FALSE(runs[0].sampled);
    EXPECT_EQ(runs[0].offset, 1);
    EXPECT_EQ(runs[0].length, 2);
    EXPECT_TRUE(runs[1].sampled);
    EXPECT_EQ(runs[1].sequence_id, "r1.0");
    EXPECT_TRUE(out->provenance[0].model_input.empty());
    datum->add_model_input_spans();  // neither arm set
    out = decode(req);
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.error().message, "data[0].model_input_spans[0]: neither prompt_tokens nor sampled_tokens is set");
}

TEST(Sdk038Request, ImageChunkWithDimensionsIsUnsupported) {
    auto req = request_038();
    auto * image = req.mutable_data(0)->add_model_input()->mutable_image();
    image->set_format("png");
    image->mutable_override_dimensions()->set_width(32);
    auto out = decode(req);
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.error().kind, ErrorKind::UNSUPPORTED);
    EXPECT_EQ(out.error().message, "data[0].model_input[1]: image chunks are not supported (text-only models)");
    auto ids = forward_backward_ids_proto(req.SerializeAsString());
    ASSERT_TRUE(ids.has_value());
    EXPECT_EQ(ids->seq_id, 3);
}

engine::SampleOutput sampled_output() {
    engine::SampleOutput out;
    engine::SampledSequence seq{{5, 6}, {-0.5f, -1.0f}, true};
    seq.top_logprobs = {{{5, -0.5f}, {7, -1.5f}}, {{6, -1.0f}}};
    out.sequences.push_back(seq);
    out.prompt_logprobs = {std::numeric_limits<float>::quiet_NaN(), -1.5f, -0.75f, -0.25f};
    out.topk_prompt_logprobs = {{}, {{3, -0.1f}}, {{8, -0.3f}}, {{9, -0.2f}}};
    return out;
}

TEST(Sdk038Sample, TopkSampledLogprobsPerToken) {
    SampleEncoding enc;
    enc.topk_sample_logprobs = 2;
    tinker_public::SampleResponse msg;
    ASSERT_TRUE(msg.ParseFromString(encode_sample_response_proto(sampled_output(), enc)));
    const auto & seq = msg.sequences(0);
    ASSERT_TRUE(seq.has_topk_sampled_logprobs());
    EXPECT_EQ(seq.topk_sampled_logprobs().k(), 2u);
    EXPECT_EQ(seq.topk_sampled_logprobs().prompt_length(), 2u);  // "length" in SDK 0.38: one row per token
    float empty = 0;
    std::memcpy(&empty, seq.topk_sampled_logprobs().logprobs().data() + 3 * 4, 4);  // row 1, cell 1
    EXPECT_EQ(empty, -99999.0f);
    auto back = decode_sample_response_proto(msg.SerializeAsString());
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->sequences[0].top_logprobs, sampled_output().sequences[0].top_logprobs);
    ASSERT_TRUE(msg.ParseFromString(encode_sample_response_proto(sampled_output(), {})));
    EXPECT_FALSE(msg.sequences(0).has_topk_sampled_logprobs());
}

TEST(Sdk038Sample, PromptLogprobsLastNMasksEarlierPositions) {
    SampleEncoding enc{true, 1};
    enc.prompt_logprobs_last_n = 2;
    auto back = decode_sample_response_proto(encode_sample_response_proto(sampled_output(), enc));
    ASSERT_TRUE(back.ok()) << back.error().message;
    ASSERT_EQ(back->prompt_logprobs.size(), 4u);
    EXPECT_TRUE(std::isnan(back->prompt_logprobs[0]) && std::isnan(back->prompt_logprobs[1]));
    EXPECT_EQ(back->prompt_logprobs[2], -0.75f);
    EXPECT_TRUE(back->topk_prompt_logprobs[1].empty());
    EXPECT_EQ(back->topk_prompt_logprobs[2].at(0).first, 8);
    const auto json = encode_sample_response_json(sampled_output(), enc);
    EXPECT_TRUE(json["prompt_logprobs"][1].is_null());
    EXPECT_EQ(json["prompt_logprobs"][3].get<float>(), -0.25f);
    EXPECT_TRUE(json["topk_prompt_logprobs"][1].is_null());
    EXPECT_FALSE(json["topk_prompt_logprobs"][3].is_null());
}

}  // namespace
}  // namespace tinkerd::wire
