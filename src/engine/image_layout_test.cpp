// Image inputs in the engine (docs/vision.md): multimodal RoPE positions against hand-computed ones (the rule of
// transformers' get_rope_index), the interleaved mrope cos/sin column choice against a direct formula, and the
// error paths: images given to a text-only model, images inconsistent with their tokens.
#include "engine/image_layout.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/attention.h"
#include "engine/test_models.h"

namespace tinkerd::engine {
namespace {

model::ModelConfig vision_config() {
    model::ModelConfig c;
    c.architecture = "Qwen3VLForConditionalGeneration";
    c.vocab_size = 120;
    c.head_dim = 16;
    c.max_position_embeddings = 64;
    c.vision.depth = 1;
    c.vision.spatial_merge_size = 2;
    c.vision.patch_size = 2;
    c.vision.temporal_patch_size = 2;
    c.image_token_id = 100;
    c.mrope_section = {4, 2, 2};
    return c;
}

ImageInput image_at(int64_t offset, int64_t grid_h, int64_t grid_w, const model::ModelConfig & c) {
    ImageInput image;
    image.token_offset = offset;
    image.grid_t = 1, image.grid_h = grid_h, image.grid_w = grid_w;
    image.pixel_values.assign(grid_h * grid_w * c.vision.patch_dim(), 0.5f);
    return image;
}

TEST(MropePositions, TextThenImageThenTextContinuesAfterTheLargerSide) {
    const model::ModelConfig c = vision_config();
    // 2 text tokens, an image of merged grid 2 x 3 (6 tokens), 2 text tokens
    const MropePositions p = mrope_positions(10, {image_at(2, 4, 6, c)}, 2);
    EXPECT_EQ(p.temporal, (std::vector<int64_t>{0, 1, 2, 2, 2, 2, 2, 2, 5, 6}));
    EXPECT_EQ(p.height, (std::vector<int64_t>{0, 1, 2, 2, 2, 3, 3, 3, 5, 6}));
    EXPECT_EQ(p.width, (std::vector<int64_t>{0, 1, 2, 3, 4, 2, 3, 4, 5, 6}));
    EXPECT_EQ(p.next, 7);
}

TEST(MropePositions, ImageAtTheEndAndTwoImages) {
    const model::ModelConfig c = vision_config();
    const MropePositions p = mrope_positions(6, {image_at(0, 2, 2, c), image_at(1, 4, 2, c)}, 2);
    // image 1: one token at (0,0,0), next 1; image 2 (merged 2 x 1) at 1: (1,1,1), (1,2,1); next 1 + 2 = 3
    EXPECT_EQ(p.temporal, (std::vector<int64_t>{0, 1, 1, 3, 4, 5}));
    EXPECT_EQ(p.height, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
    EXPECT_EQ(p.width, (std::vector<int64_t>{0, 1, 1, 3, 4, 5}));
    EXPECT_EQ(p.next, 6);
}

TEST(MropeTables, InterleavedColumnsTakeTheirAxisAngles) {
    const model::ModelConfig c = vision_config();
    RopeTables rope(c, torch::kFloat64, torch::kCPU);
    torch::Tensor positions = torch::tensor({3, 5, 7}, torch::kInt64).view({3, 1});  // t=3, h=5, w=7
    auto [cos, sin] = rope.lookup_mrope(positions, 7);                               // [1, 1, 16]
    const torch::Tensor inv_freq = rope_inv_freq(c);                                 // [8]
    for (int64_t col = 0; col < 16; ++col) {
        const int64_t j = col % 8;
        const int64_t pos = (j % 3 == 1 && j < 6) ? 5 : (j % 3 == 2 && j < 6) ? 7 : 3;
        const double angle = pos * inv_freq[j].item<double>();
        EXPECT_NEAR(cos[0][0][col].item<double>(), std::cos(angle), 1e-12) << col;
        EXPECT_NEAR(sin[0][0][col].item<double>(), std::sin(angle), 1e-12) << col;
    }
}

TEST(CheckImages, ConsistentImagesPass) {
    const model::ModelConfig c = vision_config();
    std::vector<int64_t> tokens = {1, 100, 100, 100, 100, 2};
    EXPECT_TRUE(check_images(tokens, {image_at(1, 4, 4, c)}, c, "data[0]: ").ok());
}

TEST(CheckImages, InconsistentImagesAreNamed) {
    const model::ModelConfig c = vision_config();
    const std::vector<int64_t> tokens = {1, 100, 100, 100, 100, 2};
    auto message = [&](std::vector<ImageInput> images) {
        auto status = check_images(tokens, images, c, "data[0]: ");
        EXPECT_FALSE(status.ok());
        return status.ok() ? std::string() : status.error().message;
    };
    EXPECT_NE(message({image_at(2, 4, 4, c)}).find("token 5 is 2, not the image token 100"), std::string::npos);
    EXPECT_NE(message({image_at(1, 2, 2, c)}).find("4 image tokens (id 100) but its images take 1"), std::string::npos);
    EXPECT_NE(message({image_at(1, 3, 4, c)}).find("multiples of 2"), std::string::npos);
    ImageInput short_pixels = image_at(1, 4, 4, c);
    short_pixels.pixel_values.pop_back();
    EXPECT_NE(message({short_pixels}).find("pixel values"), std::string::npos);
    EXPECT_NE(message({image_at(1, 4, 4, c), image_at(1, 4, 4, c)}).find("after the previous image"),
              std::string::npos);
}

TEST(CheckImages, TextOnlyModelRefusesImagesInTrainingAndSampling) {
    testing::ScopedTempDir dir;
    testing::write_tiny_model(dir.path(), testing::TinyFamily::QWEN3, model::DType::F32, 7);
    auto engine = Engine::load(dir.path(), {ComputeDType::FP32, 1});
    ASSERT_TRUE(engine.ok()) << engine.error().message;
    const model::ModelConfig c = vision_config();
    Datum datum;
    datum.tokens = {1, 2, 3};
    datum.loss_inputs["target_tokens"] = make_host_tensor_i64({3}, {2, 3, 4});
    datum.images = {image_at(0, 2, 2, c)};
    ForwardBackwardInput input;
    input.loss_fn = "cross_entropy";
    input.datums = {datum};
    auto out = (*engine)->forward_backward({input}, false);
    ASSERT_FALSE(out[0].ok());
    EXPECT_NE(out[0].error().message.find("data[0]: holds images, but model"), std::string::npos)
        << out[0].error().message;
    EXPECT_EQ(out[0].error().kind, ErrorKind::INVALID_ARGUMENT);
    SampleRequest request;
    request.prompt = {1, 2, 3};
    request.prompt_images = {image_at(0, 2, 2, c)};
    auto sampled = (*engine)->sample_submit(request);
    ASSERT_FALSE(sampled.ok());
    EXPECT_NE(sampled.error().message.find("prompt: holds images"), std::string::npos) << sampled.error().message;
}

// A text-only export of an image-text model keeps vision_config but has no model.visual.* tensors: it loads and
// serves text, and refuses images as a text model does.
TEST(CheckImages, VisionConfigWithoutTowerServesTextOnly) {
    testing::ScopedTempDir dir;
    const std::string text = testing::tiny_config_json(testing::TinyFamily::QWEN3);
    const model::ModelConfig parsed = model::parse_model_config(text).value();
    const int64_t half = parsed.head_dim / 2;
    nlohmann::json j = nlohmann::json::parse(text);
    j["rope_parameters"] = {{"rope_type", "default"},
                            {"rope_theta", parsed.rope_theta},
                            {"mrope_section", {half / 2, half / 4, half - half / 2 - half / 4}}};
    j["vision_config"] = {{"depth", 1},
                          {"hidden_size", 8},
                          {"intermediate_size", 8},
                          {"num_heads", 2},
                          {"out_hidden_size", parsed.hidden_size},
                          {"num_position_embeddings", 4}};
    j["image_token_id"] = 5;
    testing::write_model_dir(dir.path(), j.dump(),
                             testing::tiny_model_tensors(testing::TinyFamily::QWEN3, model::DType::F32, 3));
    ASSERT_TRUE(model::parse_model_config(j.dump())->has_vision());
    auto engine = Engine::load(dir.path(), {ComputeDType::FP32, 1});
    ASSERT_TRUE(engine.ok()) << engine.error().message;
    EXPECT_FALSE((*engine)->config().has_vision());
    SampleRequest request;
    request.prompt = {1, 5, 3};
    request.prompt_images = {image_at(1, 2, 2, vision_config())};
    auto sampled = (*engine)->sample_submit(request);
    ASSERT_FALSE(sampled.ok());
    EXPECT_NE(sampled.error().message.find("has no vision tower"), std::string::npos) << sampled.error().message;
}

}  // namespace
}  // namespace tinkerd::engine
