// Decoders from tokenizer.json: each token becomes raw bytes (byte-level map, <0xNN> bytes, ▁ -> space),
// the bytes are fused, and a final Strip removes e.g. the SentencePiece prefix space.
#include "tokenizer/decoder.h"

#include <cstdlib>

#include "tokenizer/text_steps.h"
#include "tokenizer/unicode.h"

namespace tinkerd::tokenizer {

using nlohmann::json;

size_t strip_repeated(std::string & text, const std::string & c, size_t n, bool from_end) {
    size_t removed = 0;
    while (removed < n && !c.empty() && text.size() >= c.size()) {
        const size_t at = from_end ? text.size() - c.size() : 0;
        if (text.compare(at, c.size(), c) != 0) {
            break;
        }
        text.erase(at, c.size());
        ++removed;
    }
    return removed;
}

Result<void> Decoder::add_strip(const json & j) {
    const std::string content = j.value("content", " ");
    const size_t start = j.value("start", 0), stop = j.value("stop", 0);
    if (fused_) {
        strip_char_ = content;
        strip_start_ = start;
        strip_stop_ = stop;
        return {};
    }
    Step s;
    s.kind = Step::STRIP_TOKEN;
    s.content = content;
    s.start = start;
    s.stop = stop;
    steps_.push_back(std::move(s));
    return {};
}

Result<void> Decoder::add(const json & j, Decoder & d) {
    const std::string type = j.value("type", "");
    Step s;
    if (type == "Sequence") {
        for (const json & sub : j.value("decoders", json::array())) {
            TRY_STATUS(add(sub, d));
        }
        return {};
    } else if (type == "Fuse") {
        d.fused_ = true;
        return {};
    } else if (type == "Strip") {
        return d.add_strip(j);
    } else if (type == "ByteLevel") {
        s.kind = Step::BYTE_LEVEL;
    } else if (type == "ByteFallback") {
        s.kind = Step::BYTE_FALLBACK;
    } else if (type == "Replace") {
        s.kind = Step::REPLACE;
        s.to = j.value("content", "");
        std::shared_ptr<Regex> re;
        TRY_STATUS(read_pattern(j.value("pattern", json()), s.from, re));
        if (re) {
            return unsupported("Replace decoder with a Regex pattern is not supported");
        }
    } else if (type == "Metaspace") {
        s.kind = Step::METASPACE;
        s.from = j.value("replacement", "\xE2\x96\x81");
        s.to.assign(1, ' ');
        const std::string scheme = j.value("prepend_scheme", j.value("add_prefix_space", true) ? "always" : "never");
        s.strip_first = scheme != "never";
    } else {
        return unsupported("decoder type '" + type + "' is not supported");
    }
    d.steps_.push_back(std::move(s));
    return {};
}

Result<Decoder> Decoder::from_json(const json & j) {
    Decoder d;
    if (j.is_null()) {
        d.join_with_space_ = true;
        return d;
    }
    TRY_STATUS(add(j, d));
    return d;
}

// "<0xNN>" -> the byte NN; other tokens are unchanged.
static bool byte_fallback_token(const std::string & text, std::string & out) {
    if (text.size() != 6 || text.compare(0, 3, "<0x") != 0 || text[5] != '>') {
        return false;
    }
    char * end = nullptr;
    const std::string hex = text.substr(3, 2);
    const long v = std::strtol(hex.c_str(), &end, 16);
    if (end != hex.c_str() + 2) {
        return false;
    }
    out.assign(1, static_cast<char>(v));
    return true;
}

void Decoder::apply(const Step & s, bool first, std::string & text) {
    switch (s.kind) {
        case Step::REPLACE:
            text = replace_all(text, s.from, s.to);
            break;
        case Step::BYTE_LEVEL: {
            std::string bytes;
            if (byte_level_decode(text, bytes)) {
                text.swap(bytes);
            }
            break;
        }
        case Step::BYTE_FALLBACK: {
            std::string byte;
            if (byte_fallback_token(text, byte)) {
                text.swap(byte);
            }
            break;
        }
        case Step::STRIP_TOKEN:
            strip_repeated(text, s.content, s.start, false);
            strip_repeated(text, s.content, s.stop, true);
            break;
        case Step::METASPACE:
            text = replace_all(text, s.from, s.to);
            if (first && s.strip_first && !text.empty() && text[0] == ' ') {
                text.erase(0, 1);
            }
            break;
    }
}

void Decoder::append_token(std::string_view token, bool first, std::string & out) const {
    if (join_with_space_ && !first) {
        out += ' ';
    }
    std::string text(token);
    for (const Step & s : steps_) {
        apply(s, first, text);
    }
    out += text;
}

std::string Decoder::decode(const std::vector<std::string_view> & tokens) const {
    std::string bytes;
    for (size_t i = 0; i < tokens.size(); ++i) {
        append_token(tokens[i], i == 0, bytes);
    }
    strip_repeated(bytes, strip_char_, strip_start_, false);
    strip_repeated(bytes, strip_char_, strip_stop_, true);
    return utf8_lossy(bytes);
}

}  // namespace tinkerd::tokenizer
