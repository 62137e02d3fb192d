// Jinja's builtin filters that chat templates use, with Jinja 3.1's semantics (trim, tojson as
// transformers overrides it, length, first/last, join, default, map/select/selectattr and friends,
// unique, sort, indent, int/float/string/list/items, case filters, replace, reverse, ...).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

#include "chat_template/interpreter.h"

namespace tinkerd::chat_template {

namespace {

using FilterFn = Value (*)(Interpreter & in, const Value & v, Args & args);

std::vector<Value> bind(const char * filter, const Args & args, const std::vector<Param> & params) {
    return bind_args(std::string("filter ") + filter, args, params);
}

// Jinja's attribute getter: "a.b.0" walks items/attributes.
Value attr_path(const Value & v, const std::string & path) {
    Value cur = v;
    for (const std::string & part : py_split(path, std::string("."), -1)) {
        const bool digits =
            !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
        cur = get_item(cur, digits ? Value::integer(std::strtoll(part.c_str(), nullptr, 10)) : Value::string(part));
    }
    return cur;
}

// An indent given as a number of spaces (negative: none).
size_t indent_width(const Value & v, const char * filter) {
    const int64_t width = expect_int(v, filter);
    if (width > 1000) {
        fail(std::string(filter) + ": indent width " + std::to_string(width) + " is too large");
    }
    return static_cast<size_t>(std::max<int64_t>(0, width));
}

Value case_folded(const Value & v, bool case_sensitive) {
    return v.is_string() && !case_sensitive ? Value::string(py_lower(v.as_string())) : v;
}

Value length(Interpreter &, const Value & v, Args & args) {
    bind("length", args, {});
    switch (v.kind()) {
        case Value::Kind::UNDEFINED:
            return Value::integer(0);
        case Value::Kind::STRING:
            return Value::integer(static_cast<int64_t>(char_count(v.as_string())));
        case Value::Kind::LIST:
            return Value::integer(static_cast<int64_t>(v.as_list().items.size()));
        case Value::Kind::DICT:
            return Value::integer(static_cast<int64_t>(v.as_dict().size()));
        default:
            fail("object of type '" + v.type_name() + "' has no len()");
    }
}

Value first_or_last(const Value & v, Args & args, bool first) {
    bind(first ? "first" : "last", args, {});
    const std::vector<Value> items = iterate(v);
    if (items.empty()) {
        return Value::undefined(std::string("filter ") + (first ? "first" : "last") + " got an empty sequence");
    }
    return first ? items.front() : items.back();
}

Value default_filter(Interpreter &, const Value & v, Args & args) {
    const auto a = bind("default", args, {{"default_value", Value::string("")}, {"boolean", Value::boolean(false)}});
    const bool use_default = v.is_undefined() || (a[1].truthy() && !v.truthy());
    return use_default ? a[0] : v;
}

Value join(Interpreter &, const Value & v, Args & args) {
    const auto a = bind("join", args, {{"d", Value::string("")}, {"attribute", Value::none()}});
    const std::string sep = expect_string(a[0], "filter join");
    const auto attribute = optional_string(a[1], "filter join");
    std::string out;
    bool first = true;
    for (const Value & item : iterate(v)) {
        out += (first ? "" : sep) + (attribute ? attr_path(item, *attribute) : item).str();
        first = false;
    }
    return Value::string(std::move(out));
}

// Python's float(s) for a stripped string: decimal or inf/nan, never C's hex floats. end: null if refused.
double parse_float(const std::string & s, char *& end) {
    end = nullptr;
    if (s.empty() || s.find_first_of("xX") != std::string::npos) {
        return 0.0;
    }
    return std::strtod(s.c_str(), &end);
}

Value to_int(Interpreter &, const Value & v, Args & args) {
    const auto a = bind("int", args, {{"default", Value::integer(0)}, {"base", Value::integer(10)}});
    v.defined_or_fail();  // int(Undefined) raises in Jinja
    if (v.is_integral()) {
        return Value::integer(v.as_int());
    }
    if (v.is(Value::Kind::FLOAT)) {
        const double d = v.as_double();
        return std::isfinite(d) && std::fabs(d) < 9.2e18 ? Value::integer(static_cast<int64_t>(d)) : a[0];
    }
    if (!v.is_string()) {
        return a[0];
    }
    std::string s = py_strip(v.as_string(), std::nullopt, true, true);
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    char * end = nullptr;
    errno = 0;
    const long long i = s.empty() ? 0 : std::strtoll(s.c_str(), &end, static_cast<int>(expect_int(a[1], "filter int")));
    if (!s.empty() && errno == 0 && *end == '\0') {
        return Value::integer(i);
    }
    const double d = parse_float(s, end);  // Jinja then tries int(float(s))
    return end != nullptr && *end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18
               ? Value::integer(static_cast<int64_t>(d))
               : a[0];
}

Value to_float(Interpreter &, const Value & v, Args & args) {
    const auto a = bind("float", args, {{"default", Value::number(0.0)}});
    v.defined_or_fail();
    if (v.is_number()) {
        return Value::number(v.as_double());
    }
    if (!v.is_string()) {
        return a[0];
    }
    const std::string s = py_strip(v.as_string(), std::nullopt, true, true);
    char * end = nullptr;
    const double d = parse_float(s, end);
    return end != nullptr && *end == '\0' ? Value::number(d) : a[0];
}

Value items(Interpreter &, const Value & v, Args & args) {
    bind("items", args, {});
    if (v.is_undefined()) {
        return Value::list({});
    }
    if (!v.is(Value::Kind::DICT)) {
        fail("filter items: can only get item pairs from a mapping, got " + v.type_name());
    }
    std::vector<Value> out;
    for (const auto & [key, value] : v.as_dict().entries()) {
        out.push_back(Value::list({Value::string(key), value}, true));
    }
    return Value::list(std::move(out));
}

// map(attribute='x', default=...) or map('filter', args...).
Value map_filter(Interpreter & in, const Value & v, Args & args) {
    std::vector<Value> out;
    const auto attribute =
        std::find_if(args.named.begin(), args.named.end(), [](const auto & kv) { return kv.first == "attribute"; });
    if (attribute != args.named.end()) {
        const auto a = bind("map", args, {{"attribute", std::nullopt}, {"default", Value()}});
        for (const Value & item : iterate(v)) {
            Value x = attr_path(item, expect_string(a[0], "filter map"));
            out.push_back(x.is_undefined() && !a[1].is_undefined() ? a[1] : x);
        }
        return Value::list(std::move(out));
    }
    if (args.positional.empty()) {
        fail("filter map needs a filter name or attribute=");
    }
    const std::string name = expect_string(args.positional[0], "filter map");
    Args rest{std::vector<Value>(args.positional.begin() + 1, args.positional.end()), args.named};
    for (const Value & item : iterate(v)) {
        Args call = rest;
        out.push_back(apply_filter(in, name, item, call));
    }
    return Value::list(std::move(out));
}

// select/reject (by_attribute false) and selectattr/rejectattr: keep items whose test result is `keep`.
Value select_items(Interpreter & in, const Value & v, Args & args, bool by_attribute, bool keep) {
    const size_t fixed = by_attribute ? 1 : 0;
    if (args.positional.size() < fixed || !args.named.empty()) {
        fail(by_attribute ? "selectattr/rejectattr need an attribute name" : "select/reject take positional arguments");
    }
    const std::string attribute = by_attribute ? expect_string(args.positional[0], "selectattr") : "";
    const bool has_test = args.positional.size() > fixed;
    const std::string test = has_test ? expect_string(args.positional[fixed], "test name") : "";
    std::vector<Value> out;
    for (const Value & item : iterate(v)) {
        const Value subject = by_attribute ? attr_path(item, attribute) : item;
        Args test_args{
            std::vector<Value>(args.positional.begin() + static_cast<long>(std::min(args.positional.size(), fixed + 1)),
                               args.positional.end()),
            {}};
        const bool passed = has_test ? apply_test(in, test, subject, test_args) : subject.truthy();
        if (passed == keep) {
            out.push_back(item);
        }
    }
    return Value::list(std::move(out));
}

Value unique(Interpreter &, const Value & v, Args & args) {
    const auto a = bind("unique", args, {{"case_sensitive", Value::boolean(false)}, {"attribute", Value::none()}});
    const auto attribute = optional_string(a[1], "filter unique");
    std::set<std::string> seen;
    std::vector<Value> out;
    for (const Value & item : iterate(v)) {
        const Value key = case_folded(attribute ? attr_path(item, *attribute) : item, a[0].truthy());
        if (seen.insert(key.is_number() ? float_repr(key.as_double()) : key.repr()).second) {
            out.push_back(item);
        }
    }
    return Value::list(std::move(out));
}

Value sort(Interpreter &, const Value & v, Args & args) {
    const auto a = bind(
        "sort", args,
        {{"reverse", Value::boolean(false)}, {"case_sensitive", Value::boolean(false)}, {"attribute", Value::none()}});
    const auto attribute = optional_string(a[2], "filter sort");
    std::vector<std::pair<Value, Value>> keyed;  // (key, item)
    for (const Value & item : iterate(v)) {
        keyed.emplace_back(case_folded(attribute ? attr_path(item, *attribute) : item, a[1].truthy()), item);
    }
    const bool reverse = a[0].truthy();
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto & x, const auto & y) {
        return reverse ? compare(y.first, x.first) < 0 : compare(x.first, y.first) < 0;
    });
    std::vector<Value> out;
    for (auto & kv : keyed) {
        out.push_back(std::move(kv.second));
    }
    return Value::list(std::move(out));
}

Value min_max(const Value & v, Args & args, bool want_max) {
    const auto a =
        bind(want_max ? "max" : "min", args, {{"case_sensitive", Value::boolean(false)}, {"attribute", Value::none()}});
    const auto attribute = optional_string(a[1], "filter min/max");
    std::optional<std::pair<Value, Value>> best;
    for (const Value & item : iterate(v)) {
        Value key = case_folded(attribute ? attr_path(item, *attribute) : item, a[0].truthy());
        if (!best || (want_max ? compare(key, best->first) > 0 : compare(key, best->first) < 0)) {
            best.emplace(std::move(key), item);
        }
    }
    return best ? best->second : Value::undefined("filter min/max got an empty sequence");
}

Value sum(Interpreter &, const Value & v, Args & args) {
    const auto a = bind("sum", args, {{"attribute", Value::none()}, {"start", Value::integer(0)}});
    const auto attribute = optional_string(a[0], "filter sum");
    Value total = a[1];
    for (const Value & item : iterate(v)) {
        total = binary_op("+", total, attribute ? attr_path(item, *attribute) : item);
    }
    return total;
}

Value reverse(Interpreter &, const Value & v, Args & args) {
    bind("reverse", args, {});
    if (v.is_string()) {
        std::vector<std::string> chars = chars_of(v.as_string());
        std::string out;
        for (auto it = chars.rbegin(); it != chars.rend(); ++it) {
            out += *it;
        }
        return Value::string(std::move(out));
    }
    std::vector<Value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
}

Value indent(Interpreter &, const Value & v, Args & args) {
    const auto a =
        bind("indent", args,
             {{"width", Value::integer(4)}, {"first", Value::boolean(false)}, {"blank", Value::boolean(false)}});
    const std::string pad = a[0].is_string() ? a[0].as_string() : std::string(indent_width(a[0], "filter indent"), ' ');
    if (!v.is_string()) {
        v.defined_or_fail();
        fail("filter indent expects a string, got " + v.type_name());
    }
    const std::vector<std::string> lines = py_splitlines(v.str() + "\n");
    std::string out;
    for (size_t i = 0; i < lines.size(); ++i) {
        const bool pad_line = i > 0 && (a[2].truthy() || !lines[i].empty());
        out += (i > 0 ? "\n" : "") + (pad_line ? pad : "") + lines[i];
    }
    return Value::string(a[1].truthy() ? pad + out : out);
}

// Jinja's title filter: each run of characters between - ( { [ < or whitespace is capitalized.
Value title(Interpreter &, const Value & v, Args & args) {
    bind("title", args, {});
    const std::string s = v.str();
    std::string out;
    bool word_start = true;
    for (size_t pos = 0; pos < s.size();) {
        const size_t start = pos;
        const char32_t c = next_char(s, pos);
        const bool separator = is_py_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
        const std::string ch = s.substr(start, pos - start);
        out += separator ? ch : word_start ? py_upper(ch) : py_lower(ch);
        word_start = separator;
    }
    return Value::string(std::move(out));
}

Value escape(Interpreter &, const Value & v, Args & args) {
    bind("escape", args, {});
    std::string out;
    for (const char c : v.str()) {
        out += c == '&'    ? "&amp;"
               : c == '<'  ? "&lt;"
               : c == '>'  ? "&gt;"
               : c == '"'  ? "&#34;"
               : c == '\'' ? "&#39;"
                           : std::string(1, c);
    }
    return Value::string(std::move(out));
}

// attr(name) reads an attribute only: a dict's keys are not attributes (its methods are).
Value attr(Interpreter &, const Value & v, Args & args) {
    const std::string name = expect_string(bind("attr", args, {{"name", std::nullopt}})[0], "filter attr");
    if (v.is(Value::Kind::DICT)) {
        const Value method = get_attribute(Value::dict(Dict()), name);
        return method.is_undefined() ? Value::undefined("'dict object' has no attribute '" + name + "'")
                                     : get_attribute(v, name);
    }
    return get_attribute(v, name);
}

Value tojson(Interpreter &, const Value & v, Args & args) {
    const auto a = bind("tojson", args,
                        {{"ensure_ascii", Value::boolean(false)},
                         {"indent", Value::none()},
                         {"separators", Value::none()},
                         {"sort_keys", Value::boolean(false)}});
    JsonStyle style;
    style.ensure_ascii = a[0].truthy();
    if (a[1].is_string()) {
        style.indent = a[1].as_string();
    } else if (!a[1].is_none() && !a[1].is_undefined()) {
        style.indent = std::string(indent_width(a[1], "filter tojson"), ' ');
    }
    style.item_separator = style.indent ? "," : ", ";
    if (!a[2].is_none() && !a[2].is_undefined()) {
        if (!a[2].is(Value::Kind::LIST) || a[2].as_list().items.size() != 2) {
            fail("filter tojson: separators must be a pair (item_separator, key_separator)");
        }
        style.item_separator = expect_string(a[2].as_list().items[0], "filter tojson");
        style.key_separator = expect_string(a[2].as_list().items[1], "filter tojson");
    }
    style.sort_keys = a[3].truthy();
    return Value::string(to_json(v, style));
}

Value string_op(Interpreter &, const Value & v, Args & args, const char * name) {
    const std::string s = v.str();
    const std::string n = name;
    if (n == "trim") {
        const auto a = bind("trim", args, {{"chars", Value::none()}});
        return Value::string(py_strip(s, optional_string(a[0], "filter trim"), true, true));
    }
    if (n == "replace") {
        const auto a = bind("replace", args, {{"old", std::nullopt}, {"new", std::nullopt}, {"count", Value::none()}});
        const int64_t count = a[2].is_none() ? -1 : expect_int(a[2], "filter replace");
        return Value::string(
            py_replace(s, expect_string(a[0], "filter replace"), expect_string(a[1], "filter replace"), count));
    }
    bind(name, args, {});
    if (n == "lower") {
        return Value::string(py_lower(s));
    }
    if (n == "upper") {
        return Value::string(py_upper(s));
    }
    return Value::string(n == "capitalize" ? py_capitalize(s) : s);  // string
}

Value to_list(Interpreter &, const Value & v, Args & args) {
    bind("list", args, {});
    return Value::list(iterate(v));
}

Value safe(Interpreter &, const Value & v, Args & args) {  // no autoescaping here: identity
    bind("safe", args, {});
    return v;
}

Value abs_value(Interpreter &, const Value & v, Args & args) {
    bind("abs", args, {});
    return negate(v, v.is_number() && v.as_double() < 0);
}

const std::map<std::string, FilterFn> & filters() {
    using I = Interpreter &;
    using V = const Value &;
    using A = Args &;
    static const std::map<std::string, FilterFn> table = {
        {"trim", [](I in, V v, A a) { return string_op(in, v, a, "trim"); }},
        {"replace", [](I in, V v, A a) { return string_op(in, v, a, "replace"); }},
        {"lower", [](I in, V v, A a) { return string_op(in, v, a, "lower"); }},
        {"upper", [](I in, V v, A a) { return string_op(in, v, a, "upper"); }},
        {"capitalize", [](I in, V v, A a) { return string_op(in, v, a, "capitalize"); }},
        {"string", [](I in, V v, A a) { return string_op(in, v, a, "string"); }},
        {"title", title},
        {"indent", indent},
        {"escape", escape},
        {"e", escape},
        {"safe", safe},
        {"tojson", tojson},
        {"length", length},
        {"count", length},
        {"first", [](I, V v, A a) { return first_or_last(v, a, true); }},
        {"last", [](I, V v, A a) { return first_or_last(v, a, false); }},
        {"default", default_filter},
        {"d", default_filter},
        {"join", join},
        {"int", to_int},
        {"float", to_float},
        {"list", to_list},
        {"items", items},
        {"attr", attr},
        {"map", map_filter},
        {"select", [](I in, V v, A a) { return select_items(in, v, a, false, true); }},
        {"reject", [](I in, V v, A a) { return select_items(in, v, a, false, false); }},
        {"selectattr", [](I in, V v, A a) { return select_items(in, v, a, true, true); }},
        {"rejectattr", [](I in, V v, A a) { return select_items(in, v, a, true, false); }},
        {"unique", unique},
        {"sort", sort},
        {"reverse", reverse},
        {"sum", sum},
        {"min", [](I, V v, A a) { return min_max(v, a, false); }},
        {"max", [](I, V v, A a) { return min_max(v, a, true); }},
        {"abs", abs_value},
    };
    return table;
}

}  // namespace

bool has_filter(const std::string & name) {
    return filters().count(name) > 0;
}

Value apply_filter(Interpreter & in, const std::string & name, const Value & input, Args & args) {
    const auto it = filters().find(name);
    if (it == filters().end()) {
        fail("no filter named '" + name + "'");
    }
    return it->second(in, input, args);
}

}  // namespace tinkerd::chat_template
