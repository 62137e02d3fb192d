// Image chunks in forward_backward requests (protobuf and legacy JSON): prepared for a vision model into
// image_token_id placeholders and ImageInputs at the right offsets, expected_tokens checked by name, bad
// base64 and formats refused, text-only models refusing as before; base64 decoding itself.
#include "wire/image_chunks.h"

#include <gtest/gtest.h>

#include "tinker_public.pb.h"
#include "vision/test_images.h"
#include "wire/forward_backward_codec.h"

namespace tinkerd::wire {
namespace {

constexpr int64_t kImageToken = 999;

DecodeLimits vision_limits() {
    auto config = std::make_shared<vision::ProcessorConfig>();
    config->min_pixels = 1024;  // a 64 x 64 image stays 64 x 64: a 4 x 4 patch grid, 4 tokens
    config->image_token_id = kImageToken;
    DecodeLimits limits;
    limits.vocab_size = 1000;
    limits.vision = config;
    return limits;
}

std::string text_bytes(std::initializer_list<int32_t> ids) {
    std::string out;
    for (int32_t id : ids)
        out.append(reinterpret_cast<const char *>(&id), 4);
    return out;
}

std::string proto_request(int expected_tokens) {
    tinker_public::ForwardBackwardRequest req;
    req.set_model_id("m");
    req.set_loss_fn("cross_entropy");
    auto * datum = req.add_data();
    datum->add_model_input()->mutable_encoded_text()->set_tokens(text_bytes({1, 2}));
    auto * image = datum->add_model_input()->mutable_image();
    image->set_format("png");
    image->set_data(vision::testing::flat_png(64, 64));
    if (expected_tokens > 0)
        image->set_expected_tokens(expected_tokens);
    datum->add_model_input()->mutable_encoded_text()->set_tokens(text_bytes({3}));
    return req.SerializeAsString();
}

TEST(ImageChunks, ProtoImageBecomesPlaceholdersAndAPreparedImage) {
    auto decoded = decode_forward_backward_proto(proto_request(4), vision_limits());
    ASSERT_TRUE(decoded.ok()) << decoded.error().message;
    const engine::Datum & datum = decoded->data.at(0);
    EXPECT_EQ(datum.tokens, (std::vector<int64_t>{1, 2, kImageToken, kImageToken, kImageToken, kImageToken, 3}));
    ASSERT_EQ(datum.images.size(), 1U);
    const engine::ImageInput & image = datum.images[0];
    EXPECT_EQ(image.token_offset, 2);
    EXPECT_EQ(image.expected_tokens, 4);
    EXPECT_EQ(image.grid_t, 1);
    EXPECT_EQ(image.grid_h, 4);
    EXPECT_EQ(image.grid_w, 4);
    EXPECT_EQ(image.pixel_values.size(), 16U * 1536U);
    // Level 128 normalised with mean 0.5 and std 0.5: 128 / 255 * 2 - 1.
    EXPECT_NEAR(image.pixel_values[0], 128.0 / 255.0 * 2.0 - 1.0, 1e-6);
}

TEST(ImageChunks, ExpectedTokensMayBeOmittedButNotWrong) {
    auto omitted = decode_forward_backward_proto(proto_request(0), vision_limits());
    ASSERT_TRUE(omitted.ok()) << omitted.error().message;
    EXPECT_EQ(omitted->data[0].tokens.size(), 7U);
    auto wrong = decode_forward_backward_proto(proto_request(5), vision_limits());
    ASSERT_FALSE(wrong.ok());
    EXPECT_EQ(wrong.error().kind, ErrorKind::INVALID_ARGUMENT);
    EXPECT_EQ(wrong.error().message,
              "data[0].model_input[1].expected_tokens: 5 but the image (64x64, resized to 64x64) gives 4 tokens");
}

TEST(ImageChunks, TextOnlyModelsRefuseAsBefore) {
    auto decoded = decode_forward_backward_proto(proto_request(4), DecodeLimits{});
    ASSERT_FALSE(decoded.ok());
    EXPECT_EQ(decoded.error().kind, ErrorKind::UNSUPPORTED);
    EXPECT_EQ(decoded.error().message, "data[0].model_input[1]: image chunks are not supported (text-only models)");
}

nlohmann::json json_request(const nlohmann::json & image_chunk) {
    return {{"model_id", "m"},
            {"seq_id", 1},
            {"forward_input",
             {{"loss_fn", "cross_entropy"},
              {"data",
               {{{"model_input", {{"chunks", {{{"tokens", {1}}}, image_chunk}}}},
                 {"loss_fn_inputs", nlohmann::json::object()}}}}}}};
}

std::string base64(const std::string & bytes) {
    static const char * abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    for (size_t i = 0; i < bytes.size(); i += 3) {
        uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
        if (i + 1 < bytes.size())
            v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
        if (i + 2 < bytes.size())
            v |= static_cast<uint8_t>(bytes[i + 2]);
        out += abc[(v >> 18) & 63];
        out += abc[(v >> 12) & 63];
        out += i + 1 < bytes.size() ? abc[(v >> 6) & 63] : '=';
        out += i + 2 < bytes.size() ? abc[v & 63] : '=';
    }
    return out;
}

TEST(ImageChunks, JsonImageChunksDecodeBase64AndNameTheirFields) {
    nlohmann::json chunk = {{"type", "image"},
                            {"data", base64(vision::testing::flat_png(64, 64))},
                            {"format", "png"},
                            {"expected_tokens", 4}};
    auto decoded = decode_forward_backward_json(json_request(chunk), vision_limits());
    ASSERT_TRUE(decoded.ok()) << decoded.error().message;
    EXPECT_EQ(decoded->data[0].tokens, (std::vector<int64_t>{1, kImageToken, kImageToken, kImageToken, kImageToken}));
    EXPECT_EQ(decoded->data[0].images.at(0).token_offset, 1);

    chunk["data"] = "not base64!";
    EXPECT_EQ(decode_forward_backward_json(json_request(chunk), vision_limits()).error().message,
              "data[0].model_input.chunks[1].data: not valid base64 (length 11 is not a multiple of 4)");
    chunk["data"] = base64("hello");
    EXPECT_EQ(decode_forward_backward_json(json_request(chunk), vision_limits()).error().message,
              "data[0].model_input.chunks[1]: png image: the bytes are not a PNG file");
    chunk["format"] = "gif";
    EXPECT_EQ(decode_forward_backward_json(json_request(chunk), vision_limits()).error().message,
              "data[0].model_input.chunks[1].format: 'gif' is not supported (use \"png\" or \"jpeg\")");
    chunk["format"] = "png";
    chunk["expected_tokens"] = -3;
    EXPECT_EQ(decode_forward_backward_json(json_request(chunk), vision_limits()).error().message,
              "data[0].model_input.chunks[1].expected_tokens: expected a positive integer, got -3");
}

TEST(ImageChunks, Base64RoundTripsEveryPaddingLength) {
    for (const std::string & text :
         std::vector<std::string>{"", "a", "ab", "abc", "abcd", std::string("\0\xff\x10", 3)}) {
        auto decoded = decode_base64(base64(text), "x");
        ASSERT_TRUE(decoded.ok()) << text;
        EXPECT_EQ(*decoded, text);
    }
    EXPECT_FALSE(decode_base64("ab$=", "x").ok());
}

}  // namespace
}  // namespace tinkerd::wire
