// UTF-8 helpers and the GPT-2 byte<->unicode map used by byte-level BPE (internal to src/tokenizer).
// Everything works on raw bytes in std::string; invalid UTF-8 is tolerated and never crashes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tinkerd::tokenizer {

// Length of the UTF-8 sequence starting with lead byte b (1 for invalid lead bytes).
size_t utf8_seq_len(unsigned char b);

// Decodes the code point at s[pos]; sets len to the bytes used (1 and U+FFFD for invalid input).
uint32_t utf8_decode(std::string_view s, size_t pos, size_t & len);

// Appends code point cp as UTF-8.
void utf8_append(std::string & out, uint32_t cp);

// Number of leading bytes of s that form complete, valid UTF-8, stopping before a trailing
// incomplete (but so far valid) sequence. Invalid bytes in the middle count as complete.
size_t utf8_complete_prefix(std::string_view s);

// s with every invalid UTF-8 byte replaced by U+FFFD (as Rust's from_utf8_lossy, per byte).
std::string utf8_lossy(std::string_view s);

// True when s is entirely valid UTF-8.
bool utf8_valid(std::string_view s);

// The GPT-2 byte-level alphabet: byte b <-> one printable code point.
struct ByteLevelMap {
    std::array<std::string, 256> byte_to_utf8;  // UTF-8 of the code point for byte b
    std::array<int16_t, 512> cp_to_byte;        // code point (< 512) -> byte, -1 if none
};
const ByteLevelMap & byte_level_map();

// Appends the byte-level form of bytes (each byte -> its code point).
void byte_level_encode(std::string_view bytes, std::string & out);

// Maps a byte-level string back to bytes; false (out untouched) if a char is outside the alphabet.
bool byte_level_decode(std::string_view text, std::string & out);

}  // namespace tinkerd::tokenizer
