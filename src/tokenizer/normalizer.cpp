// Normalizers from tokenizer.json: Sequence, Prepend, Replace, Strip, and NFC (through ICU).
// Anything else (NFKC, Lowercase, BertNormalizer, ...) is refused with its type named.
#include <algorithm>
#include <string>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include "tokenizer/text_steps.h"

namespace tinkerd::tokenizer {

using nlohmann::json;

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
    std::string out;
    out.reserve(text.size() + text.size() / 4);
    size_t pos = 0;
    while (true) {
        const size_t hit = text.find(from, pos);
        if (hit == std::string_view::npos) {
            out.append(text.substr(pos));
            return out;
        }
        out.append(text.substr(pos, hit - pos));
        out.append(to);
        pos = hit + from.size();
    }
}

// The pattern of a Replace/Split: {"String": "..."} or {"Regex": "..."}; sets literal or re.
Result<void> read_pattern(const json & j, std::string & literal, std::shared_ptr<Regex> & re) {
    if (j.is_object() && j.contains("String") && j["String"].is_string()) {
        literal = j["String"].get<std::string>();
        if (literal.empty()) {
            return unsupported("empty String pattern");
        }
        return {};
    }
    if (j.is_object() && j.contains("Regex") && j["Regex"].is_string()) {
        auto r = Regex::compile(j["Regex"].get<std::string>());
        if (!r.ok()) {
            return r.error();
        }
        re = std::move(r.value());
        return {};
    }
    return invalid_argument("pattern must be {\"String\": ...} or {\"Regex\": ...}");
}

Result<void> Normalizer::add(const json & j, std::vector<Step> & steps) {
    const std::string type = j.value("type", "");
    if (type == "Sequence") {
        for (const json & sub : j.value("normalizers", json::array())) {
            TRY_STATUS(add(sub, steps));
        }
        return {};
    }
    Step s;
    if (type == "NFC") {
        s.kind = Step::NFC;
    } else if (type == "Prepend") {
        s.kind = Step::PREPEND;
        s.content = j.value("prepend", "");
    } else if (type == "Replace") {
        s.kind = Step::REPLACE;
        s.content = j.value("content", "");
        TRY_STATUS(read_pattern(j.value("pattern", json()), s.pattern, s.re));
    } else if (type == "Strip") {
        s.kind = Step::STRIP;
        s.left = j.value("strip_left", false);
        s.right = j.value("strip_right", false);
    } else {
        return unsupported("normalizer type '" + type + "' is not supported");
    }
    steps.push_back(std::move(s));
    return {};
}

Result<Normalizer> Normalizer::from_json(const json & j) {
    Normalizer n;
    if (!j.is_null()) {
        TRY_STATUS(add(j, n.steps_));
    }
    return n;
}

static std::string regex_replace(const Regex & re, const std::string & text, const std::string & content) {
    std::string out;
    size_t pos = 0;
    for (const auto & [b, e] : re.find_all(text)) {
        out.append(text, pos, b - pos);
        out += content;
        pos = e;
    }
    out.append(text, pos, std::string::npos);
    return out;
}

// Unicode canonical composition through ICU. Plain ASCII is already NFC; invalid UTF-8 is left as is.
static std::string nfc(const std::string & text) {
    if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
        return text;
    }
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2 * normalizer = icu::Normalizer2::getNFCInstance(status);
    if (U_FAILURE(status)) {
        return text;
    }
    icu::UnicodeString composed = normalizer->normalize(icu::UnicodeString::fromUTF8(text), status);
    if (U_FAILURE(status)) {
        return text;
    }
    std::string out;
    composed.toUTF8String(out);
    return out;
}

static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

void Normalizer::apply(std::string & text) const {
    for (const Step & s : steps_) {
        if (s.kind == Step::PREPEND) {
            if (!text.empty()) {
                text.insert(0, s.content);
            }
        } else if (s.kind == Step::REPLACE) {
            text = s.re ? regex_replace(*s.re, text, s.content) : replace_all(text, s.pattern, s.content);
        } else if (s.kind == Step::NFC) {
            text = nfc(text);
        } else {
            size_t b = 0, e = text.size();
            while (s.left && b < e && is_space(text[b])) {
                ++b;
            }
            while (s.right && e > b && is_space(text[e - 1])) {
                --e;
            }
            text = text.substr(b, e - b);
        }
    }
}

}  // namespace tinkerd::tokenizer
