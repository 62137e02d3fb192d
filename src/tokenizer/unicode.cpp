// UTF-8 helpers and the GPT-2 byte<->unicode map (bytes_to_unicode): printable Latin-1 bytes map to
// themselves, the other 68 bytes map to U+0100 upwards, in byte order.
#include "tokenizer/unicode.h"

namespace tinkerd::tokenizer {

size_t utf8_seq_len(unsigned char b) {
    if (b < 0x80) {
        return 1;
    }
    if ((b & 0xE0) == 0xC0) {
        return 2;
    }
    if ((b & 0xF0) == 0xE0) {
        return 3;
    }
    if ((b & 0xF8) == 0xF0) {
        return 4;
    }
    return 1;
}

// Checks the sequence at s[pos] of length n; returns the code point or UINT32_MAX if invalid.
static uint32_t decode_checked(std::string_view s, size_t pos, size_t n) {
    const auto b0 = static_cast<unsigned char>(s[pos]);
    if (n == 1) {
        return b0 < 0x80 ? b0 : UINT32_MAX;
    }
    if (pos + n > s.size()) {
        return UINT32_MAX;
    }
    uint32_t cp = b0 & (0x7F >> n);
    for (size_t i = 1; i < n; ++i) {
        const auto b = static_cast<unsigned char>(s[pos + i]);
        if ((b & 0xC0) != 0x80) {
            return UINT32_MAX;
        }
        cp = (cp << 6) | (b & 0x3F);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        return UINT32_MAX;
    }
    return cp;
}

uint32_t utf8_decode(std::string_view s, size_t pos, size_t & len) {
    const size_t n = utf8_seq_len(static_cast<unsigned char>(s[pos]));
    const uint32_t cp = decode_checked(s, pos, n);
    if (cp == UINT32_MAX) {
        len = 1;
        return 0xFFFD;
    }
    len = n;
    return cp;
}

void utf8_append(std::string & out, uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

// True when s[pos..] is a valid but truncated start of a multi-byte sequence.
static bool is_truncated_prefix(std::string_view s, size_t pos) {
    const size_t n = utf8_seq_len(static_cast<unsigned char>(s[pos]));
    if (n == 1 || pos + n <= s.size()) {
        return false;
    }
    for (size_t i = pos + 1; i < s.size(); ++i) {
        if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
            return false;
        }
    }
    return true;
}

size_t utf8_complete_prefix(std::string_view s) {
    size_t pos = 0;
    while (pos < s.size()) {
        if (is_truncated_prefix(s, pos)) {
            return pos;
        }
        size_t len = 1;
        utf8_decode(s, pos, len);
        pos += len;
    }
    return pos;
}

std::string utf8_lossy(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    size_t pos = 0;
    while (pos < s.size()) {
        size_t len = 1;
        const uint32_t cp = utf8_decode(s, pos, len);
        if (cp == 0xFFFD && len == 1) {
            utf8_append(out, 0xFFFD);
        } else {
            out.append(s.substr(pos, len));
        }
        pos += len;
    }
    return out;
}

bool utf8_valid(std::string_view s) {
    size_t pos = 0;
    while (pos < s.size()) {
        const size_t n = utf8_seq_len(static_cast<unsigned char>(s[pos]));
        if (decode_checked(s, pos, n) == UINT32_MAX) {
            return false;
        }
        pos += n;
    }
    return true;
}

static ByteLevelMap build_byte_level_map() {
    ByteLevelMap m;
    m.cp_to_byte.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
        const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        const uint32_t cp = printable ? static_cast<uint32_t>(b) : next++;
        utf8_append(m.byte_to_utf8[b], cp);
        m.cp_to_byte[cp] = static_cast<int16_t>(b);
    }
    return m;
}

const ByteLevelMap & byte_level_map() {
    static const ByteLevelMap map = build_byte_level_map();
    return map;
}

void byte_level_encode(std::string_view bytes, std::string & out) {
    const ByteLevelMap & m = byte_level_map();
    for (const char c : bytes) {
        out += m.byte_to_utf8[static_cast<unsigned char>(c)];
    }
}

bool byte_level_decode(std::string_view text, std::string & out) {
    const ByteLevelMap & m = byte_level_map();
    std::string bytes;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t len = 1;
        const uint32_t cp = utf8_decode(text, pos, len);
        if (cp >= m.cp_to_byte.size() || m.cp_to_byte[cp] < 0) {
            return false;
        }
        bytes += static_cast<char>(m.cp_to_byte[cp]);
        pos += len;
    }
    out += bytes;
    return true;
}

}  // namespace tinkerd::tokenizer
