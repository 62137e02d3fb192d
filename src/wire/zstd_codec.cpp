// zstd request bodies: capped streaming decompression (a zstd bomb never makes the output buffer grow
// past max_bytes) and plain one-shot compression for tests and fixtures.
#include <algorithm>
#include <memory>
#include <stdexcept>
#include <zstd.h>
#include <zstd_errors.h>

#include "wire/forward_backward_codec.h"

namespace tinkerd::wire {
namespace {

struct DCtxDeleter {
    void operator()(ZSTD_DCtx * ctx) const { ZSTD_freeDCtx(ctx); }
};

std::string cap_message(size_t max_bytes) {
    return "zstd body decompresses to more than " + std::to_string(max_bytes) + " bytes";
}

// The largest window the decoder may allocate: enough for max_bytes of output, within zstd's default
// limit (2^27; 2^10 is the format's minimum; both constants sit in zstd's static-only API).
int window_log_limit(size_t max_bytes) {
    constexpr int kMinLog = 10, kDefaultMaxLog = 27;
    int log = kMinLog;
    while (log < kDefaultMaxLog && (size_t{1} << log) < max_bytes) {
        ++log;
    }
    return log;
}

// Grows `out` so that `extra` more bytes fit, never giving it a capacity above max_bytes. libstdc++ may
// double a reserve() request that is under twice the current capacity, so the last step moves the bytes
// into a fresh string reserved at exactly max_bytes.
void grow_for(std::string & out, size_t extra, size_t max_bytes) {
    const size_t needed = out.size() + extra;
    if (needed <= out.capacity()) {
        return;
    }
    const size_t target = std::min(max_bytes, std::max(needed, 2 * out.capacity()));
    if (target >= 2 * out.capacity()) {
        out.reserve(target);
        return;
    }
    std::string fresh;
    fresh.reserve(target);
    fresh.append(out);
    out.swap(fresh);
}

Error zstd_error(size_t code, size_t max_bytes) {
    if (ZSTD_getErrorCode(code) == ZSTD_error_frameParameter_windowTooLarge) {
        return too_large("zstd body needs a decoding window larger than the " + std::to_string(max_bytes) +
                         "-byte limit");
    }
    return invalid_argument(std::string("malformed zstd body: ") + ZSTD_getErrorName(code));
}

// One ZSTD_decompressStream call into `chunk`, appended to `out`. Returns the call's hint (0 = frame done).
Result<size_t> decode_step(ZSTD_DCtx * ctx, ZSTD_inBuffer & in, std::string & chunk, std::string & out,
                           size_t max_bytes) {
    ZSTD_outBuffer chunk_out{chunk.data(), chunk.size(), 0};
    const size_t hint = ZSTD_decompressStream(ctx, &chunk_out, &in);
    if (ZSTD_isError(hint)) {
        return zstd_error(hint, max_bytes);
    }
    if (chunk_out.pos > max_bytes - out.size()) {
        return too_large(cap_message(max_bytes));
    }
    grow_for(out, chunk_out.pos, max_bytes);
    out.append(chunk.data(), chunk_out.pos);
    if (in.pos == in.size && hint != 0 && chunk_out.pos == 0) {
        return invalid_argument("malformed zstd body: truncated frame");
    }
    return hint;
}

}  // namespace

Result<std::string> zstd_decompress(std::string_view compressed, size_t max_bytes) {
    const unsigned long long declared = ZSTD_getFrameContentSize(compressed.data(), compressed.size());
    if (declared == ZSTD_CONTENTSIZE_ERROR) {
        return invalid_argument("malformed zstd body: not a zstd frame");
    }
    if (declared != ZSTD_CONTENTSIZE_UNKNOWN && declared > max_bytes) {
        return too_large(cap_message(max_bytes) + " (declared " + std::to_string(declared) + ")");
    }
    std::unique_ptr<ZSTD_DCtx, DCtxDeleter> ctx(ZSTD_createDCtx());
    if (!ctx) {
        return internal_error("ZSTD_createDCtx failed");
    }
    ZSTD_DCtx_setParameter(ctx.get(), ZSTD_d_windowLogMax, window_log_limit(max_bytes));

    std::string out;
    if (declared != ZSTD_CONTENTSIZE_UNKNOWN) {
        out.reserve(static_cast<size_t>(declared));
    }
    std::string chunk(ZSTD_DStreamOutSize(), '\0');
    ZSTD_inBuffer in{compressed.data(), compressed.size(), 0};
    // Feed every input byte, then keep flushing (no new input) until the last frame is complete; a
    // call that neither consumes nor produces anything means the frame was cut short.
    size_t hint = 1;
    while (in.pos < in.size || hint != 0) {
        auto step = decode_step(ctx.get(), in, chunk, out, max_bytes);
        if (!step.ok()) {
            return step.error();
        }
        hint = *step;
    }
    return out;
}

std::string zstd_compress(std::string_view plain, int level) {
    std::string out(ZSTD_compressBound(plain.size()), '\0');
    const size_t n = ZSTD_compress(out.data(), out.size(), plain.data(), plain.size(), level);
    if (ZSTD_isError(n)) {
        throw std::runtime_error(std::string("ZSTD_compress: ") + ZSTD_getErrorName(n));
    }
    out.resize(n);
    return out;
}

}  // namespace tinkerd::wire
