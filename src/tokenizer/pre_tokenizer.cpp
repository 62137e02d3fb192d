// Pre-tokenizers from tokenizer.json: Split (the model's own regex through PCRE2), ByteLevel (GPT-2
// byte map, optional GPT-2 regex), Metaspace, and the regex-shaped Digits/Whitespace/Punctuation.
#include <cctype>
#include <string>

#include "tokenizer/text_steps.h"
#include "tokenizer/unicode.h"

namespace tinkerd::tokenizer {

using nlohmann::json;

namespace {

const char * GPT2_REGEX = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

std::string escape_literal(const std::string & literal) {
    std::string out;
    for (const char c : literal) {
        const auto u = static_cast<unsigned char>(c);
        if (u < 0x80 && !std::isalnum(u)) {
            out += '\\';
        }
        out += c;
    }
    return out;
}

}  // namespace

Result<PreTokenizer::Step> PreTokenizer::split_step(const json & j) {
    Step s;
    std::string literal;
    TRY_STATUS(read_pattern(j.value("pattern", json()), literal, s.re));
    if (!s.re) {
        auto r = Regex::compile(escape_literal(literal));
        if (!r.ok()) {
            return r.error();
        }
        s.re = std::move(r.value());
    }
    const std::string behavior = j.value("behavior", "Isolated");
    static const std::pair<const char *, Behavior> names[] = {{"Isolated", Behavior::ISOLATED},
                                                              {"Removed", Behavior::REMOVED},
                                                              {"MergedWithPrevious", Behavior::MERGED_WITH_PREVIOUS},
                                                              {"MergedWithNext", Behavior::MERGED_WITH_NEXT},
                                                              {"Contiguous", Behavior::CONTIGUOUS}};
    bool known = false;
    for (const auto & [name, b] : names) {
        if (behavior == name) {
            s.behavior = b;
            known = true;
        }
    }
    if (!known) {
        return unsupported("Split behavior '" + behavior + "' is not supported");
    }
    s.invert = j.value("invert", false);
    return s;
}

Result<PreTokenizer::Step> PreTokenizer::byte_level_step(const json & j) {
    Step s;
    s.kind = Step::BYTE_LEVEL;
    s.add_prefix_space = j.value("add_prefix_space", true);
    if (j.value("use_regex", true)) {
        auto r = Regex::compile(GPT2_REGEX);
        if (!r.ok()) {
            return r.error();
        }
        s.re = std::move(r.value());
    }
    return s;
}

Result<PreTokenizer::Step> PreTokenizer::metaspace_step(const json & j) {
    Step s;
    s.kind = Step::METASPACE;
    s.replacement = j.value("replacement", "\xE2\x96\x81");
    s.split = j.value("split", true);
    if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) {
        s.prepend_scheme = j["prepend_scheme"].get<std::string>();
    } else {
        s.prepend_scheme = j.value("add_prefix_space", true) ? "always" : "never";
    }
    if (s.prepend_scheme != "always" && s.prepend_scheme != "first" && s.prepend_scheme != "never") {
        return unsupported("Metaspace prepend_scheme '" + s.prepend_scheme + "' is not supported");
    }
    auto r = Regex::compile(escape_literal(s.replacement));
    if (!r.ok()) {
        return r.error();
    }
    s.re = std::move(r.value());
    s.behavior = Behavior::MERGED_WITH_NEXT;
    return s;
}

// Regex-shaped pre-tokenizers expressed as Split steps.
static json as_split(const std::string & type, const json & j) {
    if (type == "Digits") {
        const bool each = j.value("individual_digits", false);
        return {{"pattern", {{"Regex", each ? "\\p{N}" : "\\p{N}+"}}}, {"behavior", "Isolated"}};
    }
    if (type == "Whitespace") {
        return {{"pattern", {{"Regex", "\\w+|[^\\w\\s]+"}}}, {"behavior", "Removed"}, {"invert", true}};
    }
    if (type == "WhitespaceSplit") {
        return {{"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Removed"}};
    }
    if (type == "Punctuation") {
        return {{"pattern", {{"Regex", "[\\p{P}!-/:-@\\[-`{-~]"}}}, {"behavior", j.value("behavior", "Isolated")}};
    }
    return json();
}

Result<void> PreTokenizer::add(const json & j, std::vector<Step> & steps) {
    const std::string type = j.value("type", "");
    if (type == "Sequence") {
        for (const json & sub : j.value("pretokenizers", json::array())) {
            TRY_STATUS(add(sub, steps));
        }
        return {};
    }
    Result<Step> step = unsupported("pre-tokenizer type '" + type + "' is not supported");
    if (type == "Split") {
        step = split_step(j);
    } else if (type == "ByteLevel") {
        step = byte_level_step(j);
    } else if (type == "Metaspace") {
        step = metaspace_step(j);
    } else if (const json split = as_split(type, j); !split.is_null()) {
        step = split_step(split);
    }
    if (!step.ok()) {
        return step.error();
    }
    steps.push_back(std::move(step.value()));
    return {};
}

Result<PreTokenizer> PreTokenizer::from_json(const json & j) {
    PreTokenizer p;
    if (!j.is_null()) {
        TRY_STATUS(add(j, p.steps_));
    }
    for (const Step & s : p.steps_) {
        p.byte_level_ = p.byte_level_ || s.kind == Step::BYTE_LEVEL;
    }
    return p;
}

void PreTokenizer::run_split(const Step & s, std::string_view text, std::vector<std::string> & out) {
    // Pieces of text, each flagged as a delimiter (a match, or a gap when inverted).
    std::vector<std::pair<std::string_view, bool>> pieces;
    size_t pos = 0;
    for (const auto & [b, e] : s.re->find_all(text)) {
        if (b > pos) {
            pieces.emplace_back(text.substr(pos, b - pos), s.invert);
        }
        pieces.emplace_back(text.substr(b, e - b), !s.invert);
        pos = e;
    }
    if (pos < text.size()) {
        pieces.emplace_back(text.substr(pos), s.invert);
    }
    std::string cur;
    bool prev_delim = false;
    for (const auto & [piece, delim] : pieces) {
        switch (s.behavior) {
            case Behavior::ISOLATED:
                out.emplace_back(piece);
                break;
            case Behavior::REMOVED:
                if (!delim) {
                    out.emplace_back(piece);
                }
                break;
            case Behavior::MERGED_WITH_PREVIOUS:
                cur.append(piece);
                if (delim) {
                    out.push_back(std::move(cur));
                    cur.clear();
                }
                break;
            case Behavior::MERGED_WITH_NEXT:
            case Behavior::CONTIGUOUS: {
                const bool starts_new = s.behavior == Behavior::MERGED_WITH_NEXT ? delim : delim != prev_delim;
                if (starts_new && !cur.empty()) {
                    out.push_back(std::move(cur));
                    cur.clear();
                }
                cur.append(piece);
                break;
            }
        }
        prev_delim = delim;
    }
    if (!cur.empty()) {
        out.push_back(std::move(cur));
    }
}

void PreTokenizer::run_step(const Step & s, std::string && piece, bool first, std::vector<std::string> & out) {
    if (s.kind == Step::SPLIT) {
        run_split(s, piece, out);
        return;
    }
    if (s.kind == Step::METASPACE) {
        std::string text = replace_all(piece, " ", s.replacement);
        const bool prepend = s.prepend_scheme == "always" || (s.prepend_scheme == "first" && first);
        if (prepend && text.compare(0, s.replacement.size(), s.replacement) != 0) {
            text.insert(0, s.replacement);
        }
        if (!s.split) {
            out.push_back(std::move(text));
            return;
        }
        run_split(s, text, out);  // s.re splits before each replacement char (MergedWithNext)
        return;
    }
    // ByteLevel: optional prefix space, optional GPT-2 regex, then the byte -> unicode map.
    if (s.add_prefix_space && (piece.empty() || piece[0] != ' ')) {
        piece.insert(0, " ");
    }
    std::vector<std::string> parts;
    if (s.re) {
        run_split(s, piece, parts);
    } else {
        parts.push_back(std::move(piece));
    }
    for (const std::string & p : parts) {
        std::string mapped;
        mapped.reserve(p.size() * 2);
        byte_level_encode(p, mapped);
        out.push_back(std::move(mapped));
    }
}

void PreTokenizer::apply(std::string_view text, bool first_segment, std::vector<std::string> & words) const {
    if (steps_.empty()) {
        if (!text.empty()) {
            words.emplace_back(text);
        }
        return;
    }
    std::vector<std::string> cur{std::string(text)};
    std::vector<std::string> next;
    for (const Step & s : steps_) {
        next.clear();
        for (size_t i = 0; i < cur.size(); ++i) {
            run_step(s, std::move(cur[i]), first_segment && i == 0, next);
        }
        cur.swap(next);
    }
    for (std::string & w : cur) {
        if (!w.empty()) {
            words.push_back(std::move(w));
        }
    }
}

}  // namespace tinkerd::tokenizer
