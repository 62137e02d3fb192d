// tojson: Python's json.dumps output byte for byte, as transformers' chat-template `tojson` filter
// calls it (ensure_ascii=False, no HTML escaping, keys in their own order unless sort_keys, optional
// indent and separators). Floats print as Python's repr; NaN and infinities as Python spells them.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "chat_template/interpreter.h"

namespace tinkerd::chat_template {

namespace {

void append_u_escape(std::string & out, unsigned code) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\u%04x", code);
    out += buf;
}

void append_json_string(std::string & out, const std::string & s, bool ensure_ascii) {
    out += '"';
    for (size_t pos = 0; pos < s.size();) {
        const size_t start = pos;
        const char32_t c = next_char(s, pos);
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            case '\b':
                out += "\\b";
                break;
            case '\f':
                out += "\\f";
                break;
            default:
                if (c < 0x20 || (ensure_ascii && c >= 0x7F && c < 0x10000)) {
                    append_u_escape(out, static_cast<unsigned>(c));
                } else if (ensure_ascii && c >= 0x10000) {  // a UTF-16 surrogate pair, as Python writes it
                    const char32_t v = c - 0x10000;
                    append_u_escape(out, static_cast<unsigned>(0xD800 + (v >> 10)));
                    append_u_escape(out, static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
                } else {
                    out.append(s, start, pos - start);
                }
        }
    }
    out += '"';
}

class JsonWriter {
  public:
    JsonWriter(const JsonStyle & style, std::string & out) : style_(style), out_(out) {}

    void write(const Value & v, int level) {
        switch (v.kind()) {
            case Value::Kind::NONE:
                out_ += "null";
                return;
            case Value::Kind::BOOL:
                out_ += v.as_bool() ? "true" : "false";
                return;
            case Value::Kind::INT:
                out_ += std::to_string(v.as_int());
                return;
            case Value::Kind::FLOAT:
                write_float(v.as_double());
                return;
            case Value::Kind::STRING:
                append_json_string(out_, v.as_string(), style_.ensure_ascii);
                return;
            case Value::Kind::LIST:
                write_list(v.as_list(), level);
                return;
            case Value::Kind::DICT:
                write_dict(v.as_dict(), level);
                return;
            default:
                fail("Object of type " + v.type_name() + " is not JSON serializable");
        }
    }

  private:
    const JsonStyle & style_;
    std::string & out_;

    void write_float(double d) {
        if (std::isnan(d)) {
            out_ += "NaN";
        } else if (std::isinf(d)) {
            out_ += d < 0 ? "-Infinity" : "Infinity";
        } else {
            out_ += float_repr(d);
        }
    }

    // Before an item: the item separator (not before the first) and, when indenting, a new line.
    void item_prefix(size_t index, int level) {
        if (index > 0) {
            out_ += style_.item_separator;
        }
        newline(level);
    }

    void newline(int level) {
        if (!style_.indent) {
            return;
        }
        out_ += '\n';
        for (int i = 0; i < level; ++i) {
            out_ += *style_.indent;
        }
    }

    void write_list(const List & list, int level) {
        if (list.items.empty()) {
            out_ += "[]";
            return;
        }
        out_ += '[';
        for (size_t i = 0; i < list.items.size(); ++i) {
            item_prefix(i, level + 1);
            write(list.items[i], level + 1);
        }
        newline(level);
        out_ += ']';
    }

    void write_dict(const Dict & dict, int level) {
        if (dict.size() == 0) {
            out_ += "{}";
            return;
        }
        std::vector<const std::pair<std::string, Value> *> entries;
        for (const auto & entry : dict.entries()) {
            entries.push_back(&entry);
        }
        if (style_.sort_keys) {
            std::stable_sort(entries.begin(), entries.end(),
                             [](const auto * a, const auto * b) { return a->first < b->first; });
        }
        out_ += '{';
        for (size_t i = 0; i < entries.size(); ++i) {
            item_prefix(i, level + 1);
            append_json_string(out_, entries[i]->first, style_.ensure_ascii);
            out_ += style_.key_separator;
            write(entries[i]->second, level + 1);
        }
        newline(level);
        out_ += '}';
    }
};

}  // namespace

std::string to_json(const Value & v, const JsonStyle & style) {
    std::string out;
    JsonWriter(style, out).write(v, 0);
    return out;
}

}  // namespace tinkerd::chat_template
