// Unit tests of src/vision: PNG decoding of every colour type (encoded here through libpng's simplified
// writer), malformed and oversized inputs, smart_resize against values computed by the Python formula,
// the patch order of pixel_values, resizing invariants, processor configs and expected_tokens errors.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <png.h>

#include <gtest/gtest.h>

#include "vision/preprocess.h"
#include "vision/resize.h"
#include "vision/test_images.h"

namespace tinkerd::vision {
namespace {

using testing::encode_png;

TEST(VisionDecode, PngColourTypesBecomeRgbAsPilConvertsThem) {
    const std::vector<uint8_t> rgb = {10, 20, 30, 40, 50, 60};
    auto plain = decode_png(encode_png(2, 1, PNG_FORMAT_RGB, rgb));
    ASSERT_TRUE(plain.ok()) << plain.error().message;
    EXPECT_EQ(plain->rgb, rgb);
    auto rgba = decode_png(encode_png(2, 1, PNG_FORMAT_RGBA, {10, 20, 30, 0, 40, 50, 60, 128}));
    ASSERT_TRUE(rgba.ok());
    EXPECT_EQ(rgba->rgb, rgb);  // alpha dropped, not composited
    auto grey = decode_png(encode_png(2, 1, PNG_FORMAT_GRAY, {7, 200}));
    ASSERT_TRUE(grey.ok());
    EXPECT_EQ(grey->rgb, (std::vector<uint8_t>{7, 7, 7, 200, 200, 200}));
    auto grey_alpha = decode_png(encode_png(1, 1, PNG_FORMAT_GA, {99, 3}));
    ASSERT_TRUE(grey_alpha.ok());
    EXPECT_EQ(grey_alpha->rgb, (std::vector<uint8_t>{99, 99, 99}));
    EXPECT_EQ(plain->width, 2);
    EXPECT_EQ(plain->height, 1);
}

TEST(VisionDecode, MalformedAndOversizedImagesAreRefusedByName) {
    EXPECT_EQ(decode_png("hello").error().message, "png image: the bytes are not a PNG file");
    EXPECT_EQ(decode_jpeg("hello").error().message, "jpeg image: the bytes are not a JPEG file");
    const std::string png = encode_png(4, 4, PNG_FORMAT_RGB, std::vector<uint8_t>(48, 1));
    auto truncated = decode_png(png.substr(0, png.size() / 2));
    ASSERT_FALSE(truncated.ok());
    EXPECT_EQ(truncated.error().kind, ErrorKind::INVALID_ARGUMENT);
    auto big = decode_png(png, /*max_pixels=*/15);
    ASSERT_FALSE(big.ok());
    EXPECT_EQ(big.error().message, "png image: image of 4x4 pixels is over the limit of 15 pixels");
    EXPECT_EQ(decode_image(png, "gif").error().message,
              "image format 'gif' is not supported (use \"png\" or \"jpeg\")");
    auto jpeg_garbage = decode_jpeg(std::string("\xFF\xD8\xFF\xE0garbage", 11));
    ASSERT_FALSE(jpeg_garbage.ok());
    EXPECT_EQ(jpeg_garbage.error().message.rfind("jpeg image: ", 0), 0U);
}

TEST(VisionResize, SmartResizeMatchesThePythonFormula) {
    // Values from transformers' smart_resize (Python round() rounds halves to even: 1.5 -> 2, 2.5 -> 2).
    auto check = [](int64_t h, int64_t w, int64_t f, int64_t lo, int64_t hi, int64_t eh, int64_t ew) {
        auto size = smart_resize(h, w, f, lo, hi);
        ASSERT_TRUE(size.ok());
        EXPECT_EQ(size->height, eh) << h << "x" << w;
        EXPECT_EQ(size->width, ew) << h << "x" << w;
    };
    check(48, 80, 32, 1024, 1 << 20, 64, 64);
    check(480, 640, 32, 65536, 16777216, 480, 640);
    check(10, 10, 32, 65536, 16777216, 256, 256);
    check(5000, 4000, 32, 65536, 1 << 20, 1120, 896);
    check(100, 300, 28, 3136, 1003520, 112, 308);
    EXPECT_FALSE(smart_resize(1, 300, 32, 1024, 1 << 20).ok());
}

TEST(VisionResize, SameSizeIsACopyAndConstantImagesStayConstant) {
    RgbImage image{3, 2, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18}};
    EXPECT_EQ(resize_bicubic(image, 3, 2).rgb, image.rgb);
    RgbImage flat{5, 7, std::vector<uint8_t>(5 * 7 * 3, 77)};
    for (auto [w, h] : {std::pair{2, 3}, std::pair{11, 13}, std::pair{5, 1}}) {
        RgbImage out = resize_bicubic(flat, w, h);
        EXPECT_EQ(out.width, w);
        EXPECT_EQ(out.height, h);
        EXPECT_EQ(out.rgb, std::vector<uint8_t>(static_cast<size_t>(w * h * 3), 77));
    }
}

TEST(VisionPreprocess, PatchesFollowTheProcessorsMergeBlockOrder) {
    ProcessorConfig config;
    config.patch_size = 2, config.merge_size = 2, config.temporal_patch_size = 2;
    config.min_pixels = 1, config.max_pixels = 1 << 20;
    config.rescale_factor = 1.0, config.mean[0] = config.mean[1] = config.mean[2] = 0.0;
    config.std[0] = config.std[1] = config.std[2] = 1.0;
    RgbImage image{8, 4, std::vector<uint8_t>(8 * 4 * 3)};  // value = 10 * y + x in red, c in green/blue
    for (int y = 0; y < 4; ++y)
        for (int x = 0; x < 8; ++x)
            image.rgb[(y * 8 + x) * 3] = static_cast<uint8_t>(10 * y + x);
    engine::ImageInput out;
    auto tokens = preprocess(image, config, out);
    ASSERT_TRUE(tokens.ok());
    EXPECT_EQ(*tokens, 2);  // grid 2 x 4 patches, merged 2 x 2
    EXPECT_EQ(out.grid_h, 2);
    EXPECT_EQ(out.grid_w, 4);
    ASSERT_EQ(out.pixel_values.size(), 8U * 24U);
    // Patch 1 is (row 0, col 1) of the first merge block; patch 4 is (row 0, col 2), the second block.
    auto red = [&](int patch, int t, int y, int x) { return out.pixel_values[patch * 24 + (t * 2 + y) * 2 + x]; };
    EXPECT_EQ(red(1, 0, 0, 0), 2.0F);
    EXPECT_EQ(red(2, 0, 1, 1), 31.0F);  // patch (row 1, col 0) of the block: pixel x 1, y 3
    EXPECT_EQ(red(4, 1, 0, 0), 4.0F);   // the second frame repeats the first
    EXPECT_EQ(red(7, 0, 1, 1), 37.0F);
}

std::filesystem::path write_model_dir(const std::string & name, const std::string & config, const std::string & pre) {
    auto dir = std::filesystem::path(::testing::TempDir()) / name;
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "config.json") << config;
    if (!pre.empty())
        std::ofstream(dir / "preprocessor_config.json") << pre;
    return dir;
}

TEST(VisionConfig, TextModelsHaveNoProcessorAndBadSettingsAreNamed) {
    auto text = load_processor_config(write_model_dir("text", R"({"model_type": "qwen3"})", ""));
    ASSERT_TRUE(text.ok());
    EXPECT_EQ(*text, nullptr);
    const std::string vl =
        R"({"image_token_id": 151655, "vision_config": {"patch_size": 14, "spatial_merge_size": 2}})";
    auto config = load_processor_config(write_model_dir(
        "vl", vl, R"({"size": {"shortest_edge": 3136, "longest_edge": 1003520}, "image_mean": [0.1, 0.2, 0.3]})"));
    ASSERT_TRUE(config.ok()) << config.error().message;
    EXPECT_EQ((*config)->patch_size, 14);
    EXPECT_EQ((*config)->min_pixels, 3136);
    EXPECT_EQ((*config)->max_pixels, 1003520);
    EXPECT_EQ((*config)->image_token_id, 151655);
    EXPECT_DOUBLE_EQ((*config)->mean[2], 0.3);
    auto bilinear = load_processor_config(write_model_dir("vl2", vl, R"({"resample": 2})"));
    ASSERT_FALSE(bilinear.ok());
    EXPECT_NE(bilinear.error().message.find("\"resample\": only 3 (bicubic) is supported"), std::string::npos);
    auto other_patch = load_processor_config(write_model_dir("vl3", vl, R"({"patch_size": 16})"));
    ASSERT_FALSE(other_patch.ok());
    EXPECT_NE(other_patch.error().message.find("\"patch_size\" is 16 but config.json's vision_config says 14"),
              std::string::npos)
        << other_patch.error().message;
}

TEST(VisionPreprocess, ExpectedTokensMismatchNamesBothCounts) {
    ProcessorConfig config;
    config.min_pixels = 1024;
    engine::ImageInput image;
    image.format = "png";
    const std::string png = encode_png(64, 32, PNG_FORMAT_RGB, std::vector<uint8_t>(64 * 32 * 3, 5));
    image.data = png;
    image.expected_tokens = 3;
    auto tokens = prepare_image(image, config, "data[0].model_input[1]");
    ASSERT_FALSE(tokens.ok());
    EXPECT_EQ(tokens.error().message,
              "data[0].model_input[1].expected_tokens: 3 but the image (64x32, resized to 64x32) gives 2 tokens");
    image.data = png;
    image.expected_tokens = 2;
    auto ok = prepare_image(image, config, "x");
    ASSERT_TRUE(ok.ok());
    EXPECT_EQ(*ok, 2);
    EXPECT_TRUE(image.data.empty()) << "the encoded bytes stay after preparation";
    EXPECT_EQ(image.pixel_values.size(), size_t{8} * 3 * 2 * 16 * 16);
    image.data = png;
    image.format = "bmp";
    EXPECT_EQ(prepare_image(image, config, "x").error().message,
              "x: image format 'bmp' is not supported (use \"png\" or \"jpeg\")");
}

}  // namespace
}  // namespace tinkerd::vision
