// Lexer (see syntax.h): splits the source into text and tags, applies Jinja's whitespace rules to the
// text around each tag, and tokenizes the inside of {{ }} and {% %}. String escapes follow Python's.
#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "chat_template/syntax.h"
#include "chat_template/value.h"

namespace tinkerd::chat_template {

void syntax_error(int line, int column, const std::string & message) {
    fail("chat template syntax error at line " + std::to_string(line) + ", column " + std::to_string(column) + ": " +
         message);
}

namespace {

// Jinja reads every newline style as \n and drops one trailing newline.
std::string normalize_newlines(const std::string & source) {
    std::string out;
    out.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
        if (source[i] == '\r') {
            out += '\n';
            if (i + 1 < source.size() && source[i + 1] == '\n') {
                ++i;
            }
        } else {
            out += source[i];
        }
    }
    if (!out.empty() && out.back() == '\n') {
        out.pop_back();
    }
    return out;
}

bool all_space(std::string_view s) {
    for (size_t pos = 0; pos < s.size();) {
        if (!is_py_space(next_char(s, pos))) {
            return false;
        }
    }
    return true;
}

int hex_value(char c) {
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    return c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

bool is_name_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

class Lexer {
  public:
    explicit Lexer(const std::string & source) : src_(normalize_newlines(source)) {
        line_starts_.push_back(0);
        for (size_t i = 0; i < src_.size(); ++i) {
            if (src_[i] == '\n') {
                line_starts_.push_back(i + 1);
            }
        }
    }

    std::vector<Token> run() {
        while (pos_ < src_.size()) {
            const size_t open = find_tag_open(pos_);
            if (open == std::string::npos) {
                emit_text(src_.substr(pos_));
                break;
            }
            const char kind = src_[open + 1];
            const char sign =
                open + 2 < src_.size() && (src_[open + 2] == '-' || src_[open + 2] == '+') ? src_[open + 2] : 0;
            emit_text(strip_before_tag(src_.substr(pos_, open - pos_), kind, sign));
            pos_ = open + 2 + (sign ? 1 : 0);
            if (kind == '#') {
                lex_comment(open);
            } else if (kind == '%' && try_raw(open)) {
                continue;
            } else {
                lex_tag(open, kind);
            }
        }
        out_.push_back(make(TokenType::END_OF_INPUT, src_.size()));
        return std::move(out_);
    }

  private:
    std::string src_;
    size_t pos_ = 0;
    bool line_starting_ = true;  // the last tag ended by consuming a newline
    std::vector<size_t> line_starts_;
    std::vector<Token> out_;

    Token make(TokenType type, size_t offset, std::string text = "") const {
        const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset) - 1;
        Token t;
        t.type = type;
        t.text = std::move(text);
        t.line = static_cast<int>(it - line_starts_.begin()) + 1;
        t.column = static_cast<int>(offset - *it) + 1;
        return t;
    }

    [[noreturn]] void error_at(size_t offset, const std::string & message) const {
        const Token t = make(TokenType::END_OF_INPUT, offset);
        syntax_error(t.line, t.column, message);
    }

    size_t find_tag_open(size_t from) const {
        for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
            if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
                return i;
            }
        }
        return std::string::npos;
    }

    void emit_text(std::string text) {
        if (!text.empty()) {
            out_.push_back(make(TokenType::TEXT, pos_, std::move(text)));
        }
    }

    // {%- strips all whitespace before the tag; lstrip_blocks strips a block or comment tag's indentation
    // when only whitespace precedes it on its line ({%+ opts out).
    std::string strip_before_tag(std::string text, char kind, char sign) const {
        if (sign == '-') {
            return py_strip(text, std::nullopt, false, true);
        }
        if (sign == '+' || kind == '{') {
            return text;
        }
        const size_t line_pos = text.rfind('\n') + 1;  // npos + 1 == 0
        if ((line_pos > 0 || line_starting_) && all_space(std::string_view(text).substr(line_pos))) {
            text.resize(line_pos);
        }
        return text;
    }

    // After a tag's closing marker: -%} eats all following whitespace, %} (trim_blocks) one newline.
    void after_tag_end(bool minus, bool trim_newline) {
        const size_t start = pos_;
        if (minus) {
            while (pos_ < src_.size()) {
                size_t next = pos_;
                if (!is_py_space(next_char(src_, next))) {
                    break;
                }
                pos_ = next;
            }
        } else if (trim_newline && pos_ < src_.size() && src_[pos_] == '\n') {
            ++pos_;
        }
        line_starting_ = pos_ > start && src_[pos_ - 1] == '\n';
    }

    void lex_comment(size_t open) {
        const size_t close = src_.find("#}", pos_);
        if (close == std::string::npos) {
            error_at(open, "missing end of comment tag");
        }
        const bool minus = close > pos_ && src_[close - 1] == '-';
        pos_ = close + 2;
        after_tag_end(minus, true);
    }

    // {% raw %}...{% endraw %}: the body is text, untouched but for the whitespace control on its ends.
    bool try_raw(size_t open) {
        size_t p = skip_space(pos_);
        if (src_.compare(p, 3, "raw") != 0 ||
            (p + 3 < src_.size() && (is_name_start(src_[p + 3]) || is_digit(src_[p + 3])))) {
            return false;
        }
        p = skip_space(p + 3);
        const bool minus = src_.compare(p, 3, "-%}") == 0;
        if (!minus && src_.compare(p, 2, "%}") != 0 && src_.compare(p, 3, "+%}") != 0) {
            return false;
        }
        pos_ = p + (src_[p] == '%' ? 2 : 3);
        after_tag_end(minus, false);
        for (size_t end = find_tag_open(pos_); end != std::string::npos; end = find_tag_open(end + 1)) {
            const char sign =
                end + 2 < src_.size() && (src_[end + 2] == '-' || src_[end + 2] == '+') ? src_[end + 2] : 0;
            size_t q = skip_space(end + 2 + (sign ? 1 : 0));
            if (src_[end + 1] != '%' || src_.compare(q, 6, "endraw") != 0) {
                continue;
            }
            q = skip_space(q + 6);
            const bool end_minus = src_.compare(q, 3, "-%}") == 0;
            const bool end_plus = src_.compare(q, 3, "+%}") == 0;
            if (!end_minus && !end_plus && src_.compare(q, 2, "%}") != 0) {
                continue;
            }
            emit_text(strip_before_tag(src_.substr(pos_, end - pos_), '%', sign));
            pos_ = q + (end_minus || end_plus ? 3 : 2);
            after_tag_end(end_minus, !end_plus);
            return true;
        }
        error_at(open, "missing {% endraw %} for this {% raw %}");
    }

    size_t skip_space(size_t p) const {
        while (p < src_.size() &&
               (src_[p] == ' ' || src_[p] == '\t' || src_[p] == '\n' || src_[p] == '\v' || src_[p] == '\f')) {
            ++p;
        }
        return p;
    }

    // The closing marker of a tag at pos_, if there is one: returns its length (0: none).
    size_t tag_end_at(char kind, bool & minus, bool & plus) const {
        const std::string close = kind == '{' ? "}}" : "%}";
        minus = src_.compare(pos_, 3, "-" + close) == 0;
        plus = kind == '%' && src_.compare(pos_, 3, "+" + close) == 0;
        if (minus || plus) {
            return 3;
        }
        return src_.compare(pos_, 2, close) == 0 ? 2 : 0;
    }

    void lex_tag(size_t open, char kind) {
        out_.push_back(make(kind == '{' ? TokenType::VAR_BEGIN : TokenType::BLOCK_BEGIN, open));
        std::string brackets;  // open ( [ { inside the tag: the closing marker only counts outside them
        while (true) {
            pos_ = skip_space(pos_);
            if (pos_ >= src_.size()) {
                error_at(open, std::string("unexpected end of template: this ") +
                                   (kind == '{' ? "'{{' has no '}}'" : "'{%' has no '%}'"));
            }
            bool minus = false;
            bool plus = false;
            const size_t end_len = brackets.empty() ? tag_end_at(kind, minus, plus) : 0;
            if (end_len > 0) {
                out_.push_back(make(kind == '{' ? TokenType::VAR_END : TokenType::BLOCK_END, pos_));
                pos_ += end_len;
                after_tag_end(minus, kind == '%' && !plus);
                return;
            }
            lex_token(brackets);
        }
    }

    void lex_token(std::string & brackets) {
        const char c = src_[pos_];
        if (is_name_start(c)) {
            size_t end = pos_;
            while (end < src_.size() && (is_name_start(src_[end]) || is_digit(src_[end]))) {
                ++end;
            }
            out_.push_back(make(TokenType::NAME, pos_, src_.substr(pos_, end - pos_)));
            pos_ = end;
        } else if (is_digit(c)) {
            lex_number();
        } else if (c == '\'' || c == '"') {
            lex_string();
        } else {
            lex_operator(brackets);
        }
    }

    void lex_operator(std::string & brackets) {
        static const char * const ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                           ">",  "(",  ")",  "[",  "]",  "{",  "}", ",", ".", ":", "|", "="};
        for (const char * op : ops) {
            const std::string_view sv(op);
            if (src_.compare(pos_, sv.size(), sv) != 0) {
                continue;
            }
            track_bracket(op[0], brackets);
            out_.push_back(make(TokenType::OP, pos_, op));
            pos_ += sv.size();
            return;
        }
        error_at(pos_, std::string("unexpected character '") + src_[pos_] + "'");
    }

    void track_bracket(char c, std::string & brackets) const {
        static const std::string opening = "([{";
        static const std::string closing = ")]}";
        if (opening.find(c) != std::string::npos) {
            brackets += closing[opening.find(c)];
        } else if (closing.find(c) != std::string::npos) {
            if (brackets.empty() || brackets.back() != c) {
                error_at(pos_, std::string("unexpected '") + c + "'" +
                                   (brackets.empty() ? "" : std::string(", expected '") + brackets.back() + "'"));
            }
            brackets.pop_back();
        }
    }

    size_t digits_end(size_t p, int base) const {
        while (p < src_.size() && (src_[p] == '_' || (hex_value(src_[p]) >= 0 && hex_value(src_[p]) < base))) {
            ++p;
        }
        return p;
    }

    void lex_number() {
        const size_t start = pos_;
        const char prefix = pos_ + 1 < src_.size() && src_[pos_] == '0' ? src_[pos_ + 1] : 0;
        const int base = prefix == 'x' || prefix == 'X'   ? 16
                         : prefix == 'o' || prefix == 'O' ? 8
                         : prefix == 'b' || prefix == 'B' ? 2
                                                          : 10;
        size_t end = digits_end(pos_ + (base == 10 ? 0 : 2), base);
        bool is_float = false;
        const bool after_dot = start > 0 && src_[start - 1] == '.';  // x.0.1 is two item lookups
        if (base == 10 && !after_dot) {
            if (end + 1 < src_.size() && src_[end] == '.' && is_digit(src_[end + 1])) {
                end = digits_end(end + 1, 10);
                is_float = true;
            }
            size_t e = end;
            if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
                ++e;
                e += e < src_.size() && (src_[e] == '+' || src_[e] == '-') ? 1 : 0;
                if (e < src_.size() && is_digit(src_[e])) {
                    end = digits_end(e, 10);
                    is_float = true;
                }
            }
        }
        std::string text = src_.substr(start, end - start);
        text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
        Token t = make(is_float ? TokenType::FLOAT : TokenType::INT, start, text);
        if (is_float) {
            t.float_value = std::strtod(text.c_str(), nullptr);
        } else {
            const char * first = text.c_str() + (base == 10 ? 0 : 2);
            const auto res = std::from_chars(first, text.c_str() + text.size(), t.int_value, base);
            if (res.ec != std::errc() || res.ptr != text.c_str() + text.size()) {
                error_at(start, "integer literal '" + text + "' is out of range or malformed");
            }
        }
        out_.push_back(std::move(t));
        pos_ = end;
    }

    void lex_string() {
        const size_t start = pos_;
        const char quote = src_[pos_++];
        std::string value;
        while (true) {
            if (pos_ >= src_.size()) {
                error_at(start, "unterminated string literal");
            }
            const char c = src_[pos_++];
            if (c == quote) {
                break;
            }
            if (c == '\\') {
                unescape(value, start);
            } else {
                value += c;
            }
        }
        out_.push_back(make(TokenType::STRING, start, std::move(value)));
    }

    // One escape after a backslash, Python's unicode-escape rules; unknown escapes keep the backslash.
    void unescape(std::string & value, size_t string_start) {
        if (pos_ >= src_.size()) {
            error_at(string_start, "unterminated string literal");
        }
        const char c = src_[pos_++];
        static const std::string simple_from = "\\'\"abfnrtv";
        static const std::string simple_to = "\\'\"\a\b\f\n\r\t\v";
        if (simple_from.find(c) != std::string::npos) {
            value += simple_to[simple_from.find(c)];
        } else if (c == '\n') {
            // a backslash-newline continues the line
        } else if (c >= '0' && c <= '7') {
            char32_t code = c - '0';
            for (int i = 0; i < 2 && pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '7'; ++i) {
                code = code * 8 + static_cast<char32_t>(src_[pos_++] - '0');
            }
            append_utf8(value, code);
        } else if (c == 'x' || c == 'u' || c == 'U') {
            const int digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
            char32_t code = 0;
            for (int i = 0; i < digits; ++i) {
                if (pos_ >= src_.size() || hex_value(src_[pos_]) < 0) {
                    error_at(pos_, std::string("truncated \\") + c + " escape");
                }
                code = code * 16 + static_cast<char32_t>(hex_value(src_[pos_++]));
            }
            if (code > 0x10FFFF) {
                error_at(pos_, "illegal Unicode character in escape");
            }
            append_utf8(value, code);
        } else if (c == 'N') {
            error_at(pos_ - 2, "\\N{...} escapes are not supported");
        } else {
            value += '\\';
            value += c;
        }
    }
};

}  // namespace

std::vector<Token> lex(const std::string & source) {
    return Lexer(source).run();
}

}  // namespace tinkerd::chat_template
