// Attribute, item and slice access, and the Python str and dict methods templates call
// (message.content.split('</think>'), .strip('\n'), .startswith(...), dict.get/items/keys/values).
// As in Jinja, x.name tries the method before the key and x['name'] the key before the method; what is
// missing is undefined, and only touching an undefined fails.
#include <algorithm>
#include <map>

#include "chat_template/interpreter.h"

namespace tinkerd::chat_template {

namespace {

using Method = Value (*)(const Value & self, const Args & args);

Value string_list(std::vector<std::string> parts) {
    std::vector<Value> items;
    items.reserve(parts.size());
    for (std::string & p : parts) {
        items.push_back(Value::string(std::move(p)));
    }
    return Value::list(std::move(items));
}

// startswith/endswith take one string or a tuple/list of them.
bool affix_matches(const Value & self, const Value & affix, bool at_start) {
    const std::string & s = self.as_string();
    const auto one = [&](const Value & a) {
        const std::string & x = expect_string(a, at_start ? "startswith" : "endswith");
        return s.size() >= x.size() && s.compare(at_start ? 0 : s.size() - x.size(), x.size(), x) == 0;
    };
    if (affix.is(Value::Kind::LIST)) {
        return std::any_of(affix.as_list().items.begin(), affix.as_list().items.end(), one);
    }
    return one(affix);
}

Value str_strip(const Value & self, const Args & args, const char * name, bool left, bool right) {
    const auto a = bind_args(name, args, {{"chars", Value::none()}});
    return Value::string(py_strip(self.as_string(), optional_string(a[0], name), left, right));
}

Value str_split(const Value & self, const Args & args, bool from_right) {
    const char * name = from_right ? "rsplit" : "split";
    const auto a = bind_args(name, args, {{"sep", Value::none()}, {"maxsplit", Value::integer(-1)}});
    const auto sep = optional_string(a[0], name);
    if (sep && sep->empty()) {
        fail("empty separator");
    }
    const int64_t maxsplit = expect_int(a[1], name);
    return string_list(from_right ? py_rsplit(self.as_string(), sep, maxsplit)
                                  : py_split(self.as_string(), sep, maxsplit));
}

Value str_join(const Value & self, const Args & args) {
    const auto a = bind_args("join", args, {{"iterable", std::nullopt}});
    std::string out;
    bool first = true;
    for (const Value & item : iterate(a[0])) {
        out += (first ? "" : self.as_string()) + expect_string(item, "str.join() item");
        first = false;
    }
    return Value::string(std::move(out));
}

// The one string argument of find/rfind/count.
std::string substring_arg(const Args & args, const char * method) {
    return expect_string(bind_args(method, args, {{"sub", std::nullopt}})[0], method);
}

// upper/lower/title/capitalize: no arguments, str -> str.
Value mapped(const Value & self, const Args & args, const char * method, std::string (*f)(std::string_view)) {
    bind_args(method, args, {});
    return Value::string(f(self.as_string()));
}

Value str_is(const Value & self, const Args & args, const char * method) {
    bind_args(method, args, {});
    const std::string & s = self.as_string();
    if (std::string_view(method) == "isdigit") {
        return Value::boolean(!s.empty() &&
                              std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }));
    }
    return Value::boolean(!s.empty() && py_strip(s, std::nullopt, true, true).empty());  // isspace
}

Value str_replace(const Value & self, const Args & args) {
    const auto a =
        bind_args("replace", args, {{"old", std::nullopt}, {"new", std::nullopt}, {"count", Value::integer(-1)}});
    return Value::string(py_replace(self.as_string(), expect_string(a[0], "replace"), expect_string(a[1], "replace"),
                                    expect_int(a[2], "replace")));
}

Value str_affix(const Value & self, const Args & args, bool at_start) {
    const char * method = at_start ? "startswith" : "endswith";
    const auto a = bind_args(method, args, {{at_start ? "prefix" : "suffix", std::nullopt}});
    return Value::boolean(affix_matches(self, a[0], at_start));
}

const std::map<std::string, Method> & string_methods() {
    using A = const Args &;
    using S = const Value &;
    static const std::map<std::string, Method> methods = {
        {"strip", [](S s, A a) { return str_strip(s, a, "strip", true, true); }},
        {"lstrip", [](S s, A a) { return str_strip(s, a, "lstrip", true, false); }},
        {"rstrip", [](S s, A a) { return str_strip(s, a, "rstrip", false, true); }},
        {"split", [](S s, A a) { return str_split(s, a, false); }},
        {"rsplit", [](S s, A a) { return str_split(s, a, true); }},
        {"startswith", [](S s, A a) { return str_affix(s, a, true); }},
        {"endswith", [](S s, A a) { return str_affix(s, a, false); }},
        {"replace", str_replace},
        {"join", str_join},
        {"find", [](S s, A a) { return Value::integer(py_find(s.as_string(), substring_arg(a, "find"), false)); }},
        {"rfind", [](S s, A a) { return Value::integer(py_find(s.as_string(), substring_arg(a, "rfind"), true)); }},
        {"count", [](S s, A a) { return Value::integer(py_count(s.as_string(), substring_arg(a, "count"))); }},
        {"upper", [](S s, A a) { return mapped(s, a, "upper", py_upper); }},
        {"lower", [](S s, A a) { return mapped(s, a, "lower", py_lower); }},
        {"title", [](S s, A a) { return mapped(s, a, "title", py_title); }},
        {"capitalize", [](S s, A a) { return mapped(s, a, "capitalize", py_capitalize); }},
        {"isdigit", [](S s, A a) { return str_is(s, a, "isdigit"); }},
        {"isspace", [](S s, A a) { return str_is(s, a, "isspace"); }},
        {"splitlines",
         [](S s, A a) {
             bind_args("splitlines", a, {});
             return string_list(py_splitlines(s.as_string()));
         }},
    };
    return methods;
}

Value dict_items(const Dict & d) {
    std::vector<Value> items;
    for (const auto & [key, value] : d.entries()) {
        items.push_back(Value::list({Value::string(key), value}, true));
    }
    return Value::list(std::move(items));
}

Value dict_method(const Value & self, const std::string & name, const Args & args) {
    const Dict & d = self.as_dict();
    if (name == "get") {
        const auto a = bind_args("get", args, {{"key", std::nullopt}, {"default", Value::none()}});
        const Value * found = a[0].is_string() ? d.find(a[0].as_string()) : nullptr;
        return found ? *found : a[1];
    }
    if (name != "items" && name != "keys" && name != "values" && name != "copy") {
        fail("dict." + name + "() is not allowed: chat templates cannot change values");
    }
    bind_args(name, args, {});
    if (name == "items") {
        return dict_items(d);
    }
    if (name == "copy") {
        return self;
    }
    std::vector<Value> out;
    for (const auto & [key, value] : d.entries()) {
        out.push_back(name == "keys" ? Value::string(key) : value);
    }
    return Value::list(std::move(out));
}

bool is_dict_method(const std::string & name) {
    static const char * const names[] = {"get",     "items",  "keys",  "values",     "copy",    "pop",
                                         "popitem", "update", "clear", "setdefault", "fromkeys"};
    return std::find_if(std::begin(names), std::end(names), [&](const char * n) { return name == n; }) !=
           std::end(names);
}

Value bound_method(const Value & self, const std::string & name) {
    const std::string repr = "<built-in method " + name + " of " + self.type_name() + " object>";
    if (self.is_string()) {
        const Method m = string_methods().at(name);
        return Value::callable(repr, [self, m](Interpreter &, Args & args) { return m(self, args); });
    }
    return Value::callable(repr, [self, name](Interpreter &, Args & args) { return dict_method(self, name, args); });
}

Value missing(const Value & obj, const std::string & what) {
    return Value::undefined("'" + obj.type_name() + " object' has no attribute " + what);
}

}  // namespace

Value get_attribute(const Value & obj, const std::string & name) {
    switch (obj.kind()) {
        case Value::Kind::UNDEFINED:
            fail(obj.undefined_hint());
        case Value::Kind::DICT: {
            if (is_dict_method(name)) {
                return bound_method(obj, name);
            }
            const Value * v = obj.as_dict().find(name);
            return v ? *v : missing(obj, "'" + name + "'");
        }
        case Value::Kind::STRING:
            return string_methods().count(name) ? bound_method(obj, name) : missing(obj, "'" + name + "'");
        case Value::Kind::NAMESPACE: {
            const Value * v = obj.as_namespace().attrs.find(name);
            return v ? *v : missing(obj, "'" + name + "'");
        }
        default:
            return missing(obj, "'" + name + "'");
    }
}

Value get_item(const Value & obj, const Value & key) {
    obj.defined_or_fail();
    key.defined_or_fail();
    if (obj.is(Value::Kind::DICT) && key.is_string()) {
        const Value * v = obj.as_dict().find(key.as_string());
        return v ? *v : get_attribute(obj, key.as_string());
    }
    const bool indexable = obj.is(Value::Kind::LIST) || obj.is_string();
    if (indexable && key.is_integral()) {
        const std::vector<size_t> starts = obj.is_string() ? char_starts(obj.as_string()) : std::vector<size_t>{};
        const auto n = static_cast<int64_t>(obj.is_string() ? starts.size() : obj.as_list().items.size());
        const int64_t i = key.as_int() < 0 ? key.as_int() + n : key.as_int();
        if (i < 0 || i >= n) {
            return missing(obj, key.repr());
        }
        if (obj.is(Value::Kind::LIST)) {
            return obj.as_list().items[static_cast<size_t>(i)];
        }
        const size_t begin = starts[static_cast<size_t>(i)];
        const size_t end = i + 1 < n ? starts[static_cast<size_t>(i) + 1] : obj.as_string().size();
        return Value::string(obj.as_string().substr(begin, end - begin));
    }
    return key.is_string() ? get_attribute(obj, key.as_string()) : missing(obj, key.repr());
}

namespace {

std::optional<int64_t> slice_part(const Value & v) {
    if (v.is_none() || v.is_undefined()) {
        return std::nullopt;
    }
    if (!v.is_integral()) {
        fail("slice indices must be integers or None");
    }
    return v.as_int();
}

}  // namespace

Value get_slice(const Value & obj, const Value & start, const Value & stop, const Value & step) {
    obj.defined_or_fail();
    const auto st = slice_part(step);
    if (st && *st == 0) {
        fail("slice step cannot be zero");
    }
    if (obj.is(Value::Kind::LIST)) {
        const List & list = obj.as_list();
        std::vector<Value> out;
        for (int64_t i :
             slice_indices(static_cast<int64_t>(list.items.size()), slice_part(start), slice_part(stop), st)) {
            out.push_back(list.items[static_cast<size_t>(i)]);
        }
        return Value::list(std::move(out), list.tuple);
    }
    if (!obj.is_string()) {
        fail("'" + obj.type_name() + "' object is not subscriptable");
    }
    const std::string & s = obj.as_string();
    const std::vector<size_t> starts = char_starts(s);
    std::string out;
    for (int64_t i : slice_indices(static_cast<int64_t>(starts.size()), slice_part(start), slice_part(stop), st)) {
        const auto k = static_cast<size_t>(i);
        out.append(s, starts[k], (k + 1 < starts.size() ? starts[k + 1] : s.size()) - starts[k]);
    }
    return Value::string(std::move(out));
}

}  // namespace tinkerd::chat_template
