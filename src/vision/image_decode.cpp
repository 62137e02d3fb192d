// PNG and JPEG decoding into RGB (image_decode.h). Both libraries report errors by longjmp; each decoder
// keeps the setjmp frame in a function whose locals are plain pointers and sizes, so no C++ destructor is
// skipped, and the error text the library produced becomes the Result's message.
#include "vision/image_decode.h"

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <jerror.h>
#include <jpeglib.h>
#include <png.h>
#include <string>

namespace tinkerd::vision {
namespace {

Error bad_image(std::string_view format, const std::string & why) {
    return invalid_argument(std::string(format) + " image: " + why);
}

Result<void> check_size(std::string_view format, int64_t width, int64_t height, int64_t max_pixels) {
    if (width <= 0 || height <= 0)
        return bad_image(format, "it has no pixels");
    if (width > max_pixels / height)
        return bad_image(format, "image of " + std::to_string(width) + "x" + std::to_string(height) +
                                     " pixels is over the limit of " + std::to_string(max_pixels) + " pixels");
    return {};
}

// ---- PNG ----

struct PngSource {
    const unsigned char * data;
    size_t size;
    size_t offset;
    char message[200];
};

void png_read_from_memory(png_structp png, png_bytep out, png_size_t count) {
    auto * source = static_cast<PngSource *>(png_get_io_ptr(png));
    if (count > source->size - source->offset)
        png_error(png, "the file is truncated");
    std::memcpy(out, source->data + source->offset, count);
    source->offset += count;
}

void png_on_error(png_structp png, png_const_charp message) {
    auto * source = static_cast<PngSource *>(png_get_error_ptr(png));
    std::snprintf(source->message, sizeof(source->message), "%s", message);
    png_longjmp(png, 1);
}

void png_on_warning(png_structp, png_const_charp) {}

// Transforms to 8-bit RGB as PIL's convert("RGB") sees the file: palettes and low-bit grey expanded,
// 16 bits cut to their high byte, alpha and tRNS dropped, no gamma applied.
void set_rgb_transforms(png_structp png, png_infop info) {
    const int color = png_get_color_type(png, info);
    if (color == PNG_COLOR_TYPE_PALETTE)
        png_set_palette_to_rgb(png);
    if (color == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(png, info) < 8)
        png_set_expand_gray_1_2_4_to_8(png);
    if (png_get_bit_depth(png, info) == 16)
        png_set_strip_16(png);
    if (color & PNG_COLOR_MASK_ALPHA)
        png_set_strip_alpha(png);
    if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA)
        png_set_gray_to_rgb(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
}

// Reads the whole image. `image` and `rows` belong to the caller, so a longjmp out of libpng skips no
// destructor here.
bool png_decode_rows(png_structp png, png_infop info, PngSource & source, RgbImage & image,
                     std::vector<png_bytep> & rows, int64_t max_pixels, std::string & size_error) {
    if (setjmp(png_jmpbuf(png)))
        return false;
    png_set_read_fn(png, &source, png_read_from_memory);
    png_read_info(png, info);
    const int64_t width = png_get_image_width(png, info), height = png_get_image_height(png, info);
    if (auto fits = check_size("png", width, height, max_pixels); !fits) {
        size_error = fits.error().message;
        return false;
    }
    set_rgb_transforms(png, info);
    if (png_get_rowbytes(png, info) != static_cast<size_t>(width) * 3)
        png_error(png, "unexpected row layout");
    image.width = width;
    image.height = height;
    image.rgb.resize(static_cast<size_t>(width * height * 3));
    rows.resize(static_cast<size_t>(height));
    for (int64_t y = 0; y < height; ++y)
        rows[static_cast<size_t>(y)] = image.rgb.data() + y * width * 3;
    png_read_image(png, rows.data());
    png_read_end(png, nullptr);
    return true;
}

// ---- JPEG ----

struct JpegError {
    jpeg_error_mgr manager;
    std::jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
    bool truncated;  // libjpeg only warns on a premature end (and pads with grey); PIL refuses it, so do we
};

void jpeg_on_error(j_common_ptr cinfo) {
    auto * error = reinterpret_cast<JpegError *>(cinfo->err);
    (*cinfo->err->format_message)(cinfo, error->message);
    std::longjmp(error->jump, 1);
}

void jpeg_on_message(j_common_ptr cinfo, int level) {
    if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF)
        reinterpret_cast<JpegError *>(cinfo->err)->truncated = true;
}

bool jpeg_decode_rows(jpeg_decompress_struct & cinfo, JpegError & error, std::string_view bytes, RgbImage & image,
                      int64_t max_pixels, std::string & size_error) {
    if (setjmp(error.jump))
        return false;
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char *>(bytes.data()),
                 static_cast<unsigned long>(bytes.size()));
    jpeg_read_header(&cinfo, TRUE);
    if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
        size_error = "jpeg image: CMYK JPEGs are not supported (send an RGB or greyscale JPEG, or a PNG)";
        return false;
    }
    if (auto fits = check_size("jpeg", cinfo.image_width, cinfo.image_height, max_pixels); !fits) {
        size_error = fits.error().message;
        return false;
    }
    cinfo.out_color_space = JCS_RGB;  // greyscale is replicated, as PIL's L -> RGB
    cinfo.dct_method = JDCT_ISLOW;    // PIL's default, exact integer IDCT
    jpeg_start_decompress(&cinfo);
    image.width = cinfo.output_width;
    image.height = cinfo.output_height;
    image.rgb.resize(static_cast<size_t>(image.width * image.height * 3));
    while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW row = image.rgb.data() + static_cast<size_t>(cinfo.output_scanline) * image.width * 3;
        jpeg_read_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_decompress(&cinfo);
    return true;
}

}  // namespace

Result<RgbImage> decode_png(std::string_view bytes, int64_t max_pixels) {
    if (bytes.size() < 8 || png_sig_cmp(reinterpret_cast<png_const_bytep>(bytes.data()), 0, 8) != 0)
        return bad_image("png", "the bytes are not a PNG file");
    PngSource source{reinterpret_cast<const unsigned char *>(bytes.data()), bytes.size(), 0, {}};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &source, png_on_error, png_on_warning);
    if (png == nullptr)
        return internal_error("png: out of memory");
    png_infop info = png_create_info_struct(png);
    RgbImage image;
    std::vector<png_bytep> rows;
    std::string size_error;
    const bool ok = info != nullptr && png_decode_rows(png, info, source, image, rows, max_pixels, size_error);
    png_destroy_read_struct(&png, info != nullptr ? &info : nullptr, nullptr);
    if (!size_error.empty())
        return invalid_argument(size_error);
    if (!ok)
        return bad_image("png", source.message[0] != '\0' ? source.message : "the file could not be decoded");
    return image;
}

Result<RgbImage> decode_jpeg(std::string_view bytes, int64_t max_pixels) {
    if (bytes.size() < 3 || static_cast<unsigned char>(bytes[0]) != 0xFF ||
        static_cast<unsigned char>(bytes[1]) != 0xD8)
        return bad_image("jpeg", "the bytes are not a JPEG file");
    jpeg_decompress_struct cinfo{};
    JpegError error{};
    cinfo.err = jpeg_std_error(&error.manager);
    error.manager.error_exit = jpeg_on_error;
    error.manager.emit_message = jpeg_on_message;
    RgbImage image;
    std::string size_error;
    const bool ok = jpeg_decode_rows(cinfo, error, bytes, image, max_pixels, size_error);
    jpeg_destroy_decompress(&cinfo);
    if (!size_error.empty())
        return invalid_argument(size_error);
    if (ok && error.truncated)
        return bad_image("jpeg", "the file is truncated");
    if (!ok)
        return bad_image("jpeg", error.message[0] != '\0' ? error.message : "the file could not be decoded");
    return image;
}

Result<RgbImage> decode_image(std::string_view bytes, std::string_view format, int64_t max_pixels) {
    if (format == "png")
        return decode_png(bytes, max_pixels);
    if (format == "jpeg" || format == "jpg")
        return decode_jpeg(bytes, max_pixels);
    return invalid_argument("image format '" + std::string(format) + "' is not supported (use \"png\" or \"jpeg\")");
}

}  // namespace tinkerd::vision
