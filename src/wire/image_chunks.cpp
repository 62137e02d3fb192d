// Image chunk decoding and preparation (image_chunks.h). Base64 goes through OpenSSL's decoder; the
// pixels through src/vision; the token count a chunk takes is the processor's, checked against the
// client's expected_tokens there.
#include "wire/image_chunks.h"

#include <openssl/evp.h>

namespace tinkerd::wire {

Result<std::string> decode_base64(const std::string & text, const std::string & where) {
    if (text.size() % 4 != 0)
        return invalid_argument(where + ": not valid base64 (length " + std::to_string(text.size()) +
                                " is not a multiple of 4)");
    std::string out(text.size() / 4 * 3, '\0');
    const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char *>(out.data()),
                                  reinterpret_cast<const unsigned char *>(text.data()), static_cast<int>(text.size()));
    if (n < 0)
        return invalid_argument(where + ": not valid base64");
    size_t padding = 0;
    for (size_t i = text.size(); i > 0 && text[i - 1] == '=' && padding < 2; --i)
        ++padding;
    out.resize(static_cast<size_t>(n) - padding);
    return out;
}

namespace {

Result<int64_t> optional_positive(const nlohmann::json & object, const char * key, const std::string & where) {
    auto it = object.find(key);
    if (it == object.end() || it->is_null())
        return int64_t{0};
    if (!it->is_number_integer() || it->get<int64_t>() <= 0 || it->get<int64_t>() > (int64_t{1} << 20))
        return invalid_argument(where + "." + key + ": expected a positive integer, got " + it->dump().substr(0, 64));
    return it->get<int64_t>();
}

}  // namespace

Result<ImageChunkFields> image_chunk_from_json(const nlohmann::json & chunk, const std::string & where) {
    ImageChunkFields fields;
    auto data = chunk.find("data");
    if (data == chunk.end() || !data->is_string())
        return invalid_argument(where + ".data: expected a base64 string");
    auto bytes = decode_base64(data->get<std::string>(), where + ".data");
    if (!bytes)
        return bytes.error();
    fields.data = std::move(*bytes);
    auto format = chunk.find("format");
    if (format == chunk.end() || !format->is_string())
        return invalid_argument(where + ".format: expected \"png\" or \"jpeg\"");
    fields.format = format->get<std::string>();
    auto expected = optional_positive(chunk, "expected_tokens", where);
    if (!expected)
        return expected.error();
    fields.expected_tokens = *expected;
    if (auto dims = chunk.find("override_dimensions"); dims != chunk.end() && !dims->is_null()) {
        if (!dims->is_object())
            return invalid_argument(where + ".override_dimensions: expected {\"width\", \"height\"}");
        auto width = optional_positive(*dims, "width", where + ".override_dimensions");
        auto height = optional_positive(*dims, "height", where + ".override_dimensions");
        if (!width || !height)
            return !width ? width.error() : height.error();
        fields.override_width = *width, fields.override_height = *height;
    }
    return fields;
}

Result<void> append_image_chunk(ImageChunkFields fields, const vision::ProcessorConfig * vision,
                                const std::string & where, std::vector<int64_t> & tokens,
                                std::vector<engine::ImageInput> & images, int64_t & patch_budget) {
    if (vision == nullptr)
        return unsupported(where + ": image chunks are not supported (text-only models)");
    if (fields.format != "png" && fields.format != "jpeg")
        return invalid_argument(where + ".format: '" + fields.format.substr(0, 32) +
                                "' is not supported (use \"png\" or \"jpeg\")");
    engine::ImageInput image;
    image.token_offset = static_cast<int64_t>(tokens.size());
    image.expected_tokens = fields.expected_tokens;
    image.format = std::move(fields.format);
    image.data = std::move(fields.data);
    auto count = vision::prepare_image(image, *vision, where, fields.override_width, fields.override_height);
    if (!count)
        return count.error();
    patch_budget -= image.grid_t * image.grid_h * image.grid_w;
    if (patch_budget < 0)
        return too_large(where + ": the request's images come to more than " + std::to_string(kMaxRequestImagePatches) +
                         " patches; send fewer or smaller images per request");
    tokens.insert(tokens.end(), static_cast<size_t>(*count), vision->image_token_id);
    images.push_back(std::move(image));
    return {};
}

}  // namespace tinkerd::wire
