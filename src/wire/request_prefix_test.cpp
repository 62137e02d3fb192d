// Tests of request_ids_from_prefix: model_id and seq_id from the first bytes of a refused body, for a real
// protobuf ForwardBackwardRequest cut at every length (both ids or nothing, never a wrong one), negative and
// large seq_ids, JSON prefixes (top-level keys only, any order, cut anywhere), and inputs that name neither.
#include <string>

#include <gtest/gtest.h>

#include "tinker_public.pb.h"
#include "wire/forward_backward_codec.h"

namespace tinkerd::wire {
namespace {

std::string proto_request(const std::string & model_id, int32_t seq_id, int datums) {
    tinker_public::ForwardBackwardRequest req;
    req.set_model_id(model_id);
    req.set_seq_id(seq_id);
    req.set_loss_fn("cross_entropy");
    for (int i = 0; i < datums; ++i) {
        auto * datum = req.add_data();
        datum->add_model_input()->mutable_encoded_text()->set_tokens(std::string(4 * 501, '\x07'));
        auto & target = (*datum->mutable_loss_fn_inputs())["target_tokens"];
        target.set_dtype(tinker_public::DTYPE_INT64);
        target.set_dense(std::string(8 * 501, '\x02'));
    }
    return req.SerializeAsString();
}

TEST(RequestPrefix, ProtobufIdsLeadTheBodyAndAShortCutGivesNothing) {
    const std::string model = "3f2a9c1e-5b7d-4e7a-9c1e-2b7d4e7a9c1e:train:0";
    const std::string body = proto_request(model, 7, 30);
    ASSERT_GT(body.size(), 100000u);              // over the reported --max-body-bytes (30 datums of 501 tokens)
    const size_t ids_end = 2 + model.size() + 2;  // tag + length, the id, tag + one-byte varint
    for (size_t cut = 0; cut < 200; ++cut) {
        auto ids = request_ids_from_prefix(std::string_view(body).substr(0, cut), true);
        if (cut < ids_end) {
            EXPECT_FALSE(ids) << "cut at " << cut;
        } else {
            ASSERT_TRUE(ids) << "cut at " << cut;
            EXPECT_EQ(ids->model_id, model);
            EXPECT_EQ(ids->seq_id, 7);
        }
    }
    auto whole = request_ids_from_prefix(body, true);
    ASSERT_TRUE(whole);
    EXPECT_EQ(whole->seq_id, 7);
}

TEST(RequestPrefix, ProtobufSeqIdsKeepTheirInt32Value) {
    for (int32_t seq : {0, 1, 127, 128, 300000, INT32_MAX, -1, INT32_MIN}) {
        auto ids = request_ids_from_prefix(proto_request("m", seq, 1).substr(0, 64), true);
        if (seq == 0) {
            EXPECT_FALSE(ids);  // proto3 leaves a zero out: the prefix does not say (seq_id 0 is create_model's)
            continue;
        }
        ASSERT_TRUE(ids) << seq;
        EXPECT_EQ(ids->seq_id, seq);
    }
}

TEST(RequestPrefix, ProtobufWithoutLeadingIdsGivesNothing) {
    EXPECT_FALSE(request_ids_from_prefix("", true));
    EXPECT_FALSE(request_ids_from_prefix(std::string("\x1a\x05hello", 7), true));  // data first
    EXPECT_FALSE(request_ids_from_prefix(std::string("\x0a\x7f"
                                                     "abc",
                                                     5),
                                         true));                                           // length past the cut
    EXPECT_FALSE(request_ids_from_prefix(std::string("\x0a\x01m\xff\xff\xff", 6), true));  // cut varint
    EXPECT_FALSE(request_ids_from_prefix(std::string(16, '\xff'), true));                  // an endless varint
    EXPECT_FALSE(request_ids_from_prefix("{\"model_id\":\"m\",\"seq_id\":3}", true));      // JSON sent as protobuf
}

TEST(RequestPrefix, JsonTopLevelKeysBeforeTheCut) {
    const std::string body = R"({"model_id": "s:train:0", "seq_id": 12, "forward_backward_input": {"data": [1, 2)";
    auto ids = request_ids_from_prefix(body, false);
    ASSERT_TRUE(ids);
    EXPECT_EQ(ids->model_id, "s:train:0");
    EXPECT_EQ(ids->seq_id, 12);
    ids = request_ids_from_prefix(R"({"seq_id":4,"type":"optim_step","model_id":"m"})", false);
    ASSERT_TRUE(ids);
    EXPECT_EQ(ids->seq_id, 4);
    EXPECT_EQ(ids->model_id, "m");
}

TEST(RequestPrefix, JsonIdsAfterTheCutOrNestedGiveNothing) {
    // The legacy SDK's order: the data first, the ids at the end, beyond any prefix.
    EXPECT_FALSE(request_ids_from_prefix(R"({"forward_backward_input": {"data": [{"model_input": )", false));
    EXPECT_FALSE(request_ids_from_prefix(R"({"model_id": "m", "seq)", false));
    EXPECT_FALSE(request_ids_from_prefix(R"({"x": {"model_id": "m", "seq_id": 3}, "y": [)", false));
    EXPECT_FALSE(request_ids_from_prefix(R"([{"model_id": "m", "seq_id": 3}])", false));
    EXPECT_FALSE(request_ids_from_prefix(R"({"model_id": 5, "seq_id": 3})", false));
    EXPECT_FALSE(request_ids_from_prefix(R"({"model_id": "m", "seq_id": 3.5})", false));
    EXPECT_FALSE(request_ids_from_prefix(R"({"model_id": "m", "seq_id": 18446744073709551615})", false));
    EXPECT_FALSE(request_ids_from_prefix(std::string(4096, '['), false));
    EXPECT_FALSE(request_ids_from_prefix(std::string("\x0a\x01m\x10\x03", 5), false));
}

}  // namespace
}  // namespace tinkerd::wire
