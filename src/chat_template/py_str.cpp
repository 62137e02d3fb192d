// Python str operations on UTF-8 text (declared in value.h): character iteration, whitespace, slicing,
// strip, split, replace, case mapping and repr().
#include <algorithm>
#include <cstdio>

#include "chat_template/value.h"

namespace tinkerd::chat_template {

char32_t next_char(std::string_view s, size_t & pos) {
    const auto lead = static_cast<unsigned char>(s[pos]);
    const size_t len = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 0;
    if (len <= 1 || pos + len > s.size()) {
        ++pos;
        return lead;
    }
    char32_t c = lead & (0xFF >> (len + 1));
    for (size_t i = 1; i < len; ++i) {
        const auto cont = static_cast<unsigned char>(s[pos + i]);
        if ((cont & 0xC0) != 0x80) {
            ++pos;
            return lead;
        }
        c = (c << 6) | (cont & 0x3F);
    }
    pos += len;
    return c;
}

void append_utf8(std::string & out, char32_t c) {
    if (c < 0x80) {
        out += static_cast<char>(c);
    } else if (c < 0x800) {
        out += static_cast<char>(0xC0 | (c >> 6));
        out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        out += static_cast<char>(0xE0 | (c >> 12));
        out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (c >> 18));
        out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (c & 0x3F));
    }
}

std::vector<size_t> char_starts(std::string_view s) {
    std::vector<size_t> starts;
    for (size_t pos = 0; pos < s.size();) {
        starts.push_back(pos);
        next_char(s, pos);
    }
    return starts;
}

size_t char_count(std::string_view s) {
    size_t n = 0;
    for (size_t pos = 0; pos < s.size(); ++n) {
        next_char(s, pos);
    }
    return n;
}

std::vector<std::string> chars_of(std::string_view s) {
    std::vector<std::string> out;
    for (size_t pos = 0; pos < s.size();) {
        const size_t start = pos;
        next_char(s, pos);
        out.emplace_back(s.substr(start, pos - start));
    }
    return out;
}

bool is_py_space(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::vector<int64_t> slice_indices(int64_t length, std::optional<int64_t> start, std::optional<int64_t> stop,
                                   std::optional<int64_t> step) {
    const int64_t st = step.value_or(1);
    const auto clamp = [&](std::optional<int64_t> v, int64_t if_absent) {
        if (!v) {
            return if_absent;
        }
        int64_t i = *v < 0 ? *v + length : *v;
        const int64_t lo = st < 0 ? -1 : 0;
        const int64_t hi = st < 0 ? length - 1 : length;
        return std::clamp(i, lo, hi);
    };
    const int64_t from = clamp(start, st < 0 ? length - 1 : 0);
    const int64_t to = clamp(stop, st < 0 ? -1 : length);
    std::vector<int64_t> out;
    for (int64_t i = from; st > 0 ? i < to : i > to;) {
        out.push_back(i);
        if (__builtin_add_overflow(i, st, &i)) {  // a huge step: nothing further is in range
            break;
        }
    }
    return out;
}

std::string py_strip(std::string_view s, const std::optional<std::string> & chars, bool left, bool right) {
    std::vector<char32_t> set;
    if (chars) {
        for (size_t pos = 0; pos < chars->size();) {
            set.push_back(next_char(*chars, pos));
        }
    }
    const auto strippable = [&](char32_t c) {
        return chars ? std::find(set.begin(), set.end(), c) != set.end() : is_py_space(c);
    };
    const std::vector<size_t> starts = char_starts(s);
    size_t first = 0;
    size_t last = starts.size();  // one past the last kept character
    const auto at = [&](size_t i) {
        size_t pos = starts[i];
        return next_char(s, pos);
    };
    while (left && first < last && strippable(at(first))) {
        ++first;
    }
    while (right && last > first && strippable(at(last - 1))) {
        --last;
    }
    const size_t begin = first < starts.size() ? starts[first] : s.size();
    const size_t end = last < starts.size() ? starts[last] : s.size();
    return std::string(s.substr(begin, end - begin));
}

namespace {

// Whitespace-separated words with their byte ranges.
std::vector<std::pair<size_t, size_t>> words(std::string_view s) {
    std::vector<std::pair<size_t, size_t>> out;
    size_t pos = 0;
    bool in_word = false;
    while (pos < s.size()) {
        const size_t start = pos;
        const bool space = is_py_space(next_char(s, pos));
        if (!space && !in_word) {
            out.emplace_back(start, pos);
        } else if (!space) {
            out.back().second = pos;
        }
        in_word = !space;
    }
    return out;
}

std::vector<std::string> split_whitespace(std::string_view s, int64_t maxsplit, bool from_right) {
    const auto ws = words(s);
    const size_t n = ws.size();
    const size_t pieces = maxsplit < 0 ? n : std::min<size_t>(n, static_cast<size_t>(maxsplit) + 1);
    const auto word = [&](size_t i) { return std::string(s.substr(ws[i].first, ws[i].second - ws[i].first)); };
    std::vector<std::string> out;
    if (pieces == n) {
        for (size_t i = 0; i < n; ++i) {
            out.push_back(word(i));
        }
    } else if (!from_right) {  // the remainder runs to the end of the string, trailing whitespace included
        for (size_t i = 0; i + 1 < pieces; ++i) {
            out.push_back(word(i));
        }
        out.emplace_back(s.substr(ws[pieces - 1].first));
    } else {  // the remainder runs from the start of the string, leading whitespace included
        const size_t head = n - pieces;
        out.emplace_back(s.substr(0, ws[head].second));
        for (size_t i = head + 1; i < n; ++i) {
            out.push_back(word(i));
        }
    }
    return out;
}

}  // namespace

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string> & sep, int64_t maxsplit) {
    if (!sep) {
        return split_whitespace(s, maxsplit, false);
    }
    std::vector<std::string> out;
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
        const size_t hit = s.find(*sep, pos);
        if (hit == std::string_view::npos) {
            break;
        }
        out.emplace_back(s.substr(pos, hit - pos));
        pos = hit + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
}

std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string> & sep, int64_t maxsplit) {
    if (!sep) {
        return split_whitespace(s, maxsplit, true);
    }
    std::vector<std::string> out;
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
        if (end < sep->size()) {
            break;
        }
        const size_t hit = s.rfind(*sep, end - sep->size());
        if (hit == std::string_view::npos) {
            break;
        }
        out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
        end = hit;
    }
    out.emplace_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
}

std::vector<std::string> py_splitlines(std::string_view s) {
    std::vector<std::string> out;
    size_t line_start = 0;
    size_t pos = 0;
    while (pos < s.size()) {
        const size_t at = pos;
        const char32_t c = next_char(s, pos);
        const bool breaks = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
                            c == 0x2028 || c == 0x2029;
        if (!breaks) {
            continue;
        }
        out.emplace_back(s.substr(line_start, at - line_start));
        if (c == '\r' && pos < s.size() && s[pos] == '\n') {
            ++pos;
        }
        line_start = pos;
    }
    if (line_start < s.size()) {
        out.emplace_back(s.substr(line_start));
    }
    return out;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
    std::string out;
    int64_t done = 0;
    if (old.empty()) {  // Python inserts the replacement around every character
        const auto chars = chars_of(s);
        for (const std::string & c : chars) {
            if (count < 0 || done < count) {
                out += repl;
                ++done;
            }
            out += c;
        }
        if (count < 0 || done < count) {
            out += repl;
        }
        return out;
    }
    size_t pos = 0;
    while (count < 0 || done < count) {
        const size_t hit = s.find(old, pos);
        if (hit == std::string_view::npos) {
            break;
        }
        out.append(s.substr(pos, hit - pos)).append(repl);
        pos = hit + old.size();
        ++done;
    }
    out.append(s.substr(pos));
    return out;
}

int64_t py_count(std::string_view s, std::string_view sub) {
    if (sub.empty()) {
        return static_cast<int64_t>(char_count(s)) + 1;
    }
    int64_t n = 0;
    for (size_t pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size())) {
        ++n;
    }
    return n;
}

int64_t py_find(std::string_view s, std::string_view sub, bool from_right) {
    const size_t hit = from_right ? s.rfind(sub) : s.find(sub);
    return hit == std::string_view::npos ? -1 : static_cast<int64_t>(char_count(s.substr(0, hit)));
}

namespace {

// Simple case mapping for ASCII, Latin-1, Greek and Cyrillic (what Python's str.lower/upper do there,
// less the few characters that change length, like 'ß' -> 'SS'); other characters are left alone.
char32_t to_lower(char32_t c) {
    if ((c >= 'A' && c <= 'Z') || (c >= 0xC0 && c <= 0xDE && c != 0xD7) || (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) ||
        (c >= 0x410 && c <= 0x42F)) {
        return c + 0x20;
    }
    return c >= 0x400 && c <= 0x40F ? c + 0x50 : c;
}

char32_t to_upper(char32_t c) {
    if ((c >= 'a' && c <= 'z') || (c >= 0xE0 && c <= 0xFE && c != 0xF7) || (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) ||
        (c >= 0x430 && c <= 0x44F)) {
        return c - 0x20;
    }
    return c == 0x3C2 ? 0x3A3 : c >= 0x450 && c <= 0x45F ? c - 0x50 : c;
}

std::string map_chars(std::string_view s, char32_t (*f)(char32_t)) {
    std::string out;
    out.reserve(s.size());
    for (size_t pos = 0; pos < s.size();) {
        const size_t start = pos;
        const char32_t c = next_char(s, pos);
        const char32_t m = f(c);
        if (m == c) {
            out.append(s.substr(start, pos - start));  // keeps invalid bytes as they were
        } else {
            append_utf8(out, m);
        }
    }
    return out;
}

}  // namespace

std::string py_lower(std::string_view s) {
    return map_chars(s, to_lower);
}

std::string py_upper(std::string_view s) {
    return map_chars(s, to_upper);
}

std::string py_capitalize(std::string_view s) {
    if (s.empty()) {
        return "";
    }
    size_t first_end = 0;
    next_char(s, first_end);
    return py_upper(s.substr(0, first_end)) + py_lower(s.substr(first_end));
}

std::string py_title(std::string_view s) {
    std::string out;
    bool after_letter = false;
    for (size_t pos = 0; pos < s.size();) {
        const size_t start = pos;
        const char32_t c = next_char(s, pos);
        const bool letter = to_lower(c) != to_upper(c) || (c >= 0x80 && !is_py_space(c));  // other non-ASCII: a letter
        const std::string_view ch = s.substr(start, pos - start);
        out += letter ? (after_letter ? py_lower(ch) : py_upper(ch)) : std::string(ch);
        after_letter = letter;
    }
    return out;
}

namespace {

// Characters Python's str.isprintable() rejects, as far as this interpreter knows them.
bool unprintable(char32_t c) {
    return c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD || c == 0x1680 || (c >= 0x2000 && c <= 0x200F) ||
           (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF ||
           (c >= 0xD800 && c <= 0xDFFF) || (c >= 0xE000 && c <= 0xF8FF) || c == 0xFFFE || c == 0xFFFF;
}

std::string escape_char(char32_t c) {
    char buf[16];
    if (c < 0x100) {
        std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
    } else if (c < 0x10000) {
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
    } else {
        std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(c));
    }
    return buf;
}

}  // namespace

std::string py_repr(std::string_view s) {
    const bool has_single = s.find('\'') != std::string_view::npos;
    const char quote = has_single && s.find('"') == std::string_view::npos ? '"' : '\'';
    std::string out(1, quote);
    for (size_t pos = 0; pos < s.size();) {
        const char32_t c = next_char(s, pos);
        if (c == static_cast<char32_t>(quote) || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c == '\n' || c == '\r' || c == '\t') {
            out += c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t";
        } else if (unprintable(c)) {
            out += escape_char(c);
        } else {
            append_utf8(out, c);
        }
    }
    out += quote;
    return out;
}

}  // namespace tinkerd::chat_template
