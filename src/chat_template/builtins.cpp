// Builtins other than filters: argument binding for every builtin, Jinja's tests (`x is defined`,
// `is none`, `is string`, `is mapping`, ...) and the global functions transformers' environment offers
// (range, namespace, dict, raise_exception, strftime_now).
#include <algorithm>
#include <ctime>
#include <map>

#include "chat_template/interpreter.h"

namespace tinkerd::chat_template {

std::vector<Value> bind_args(const std::string & what, const Args & args, const std::vector<Param> & params) {
    if (args.positional.size() > params.size()) {
        fail(what + "() takes at most " + std::to_string(params.size()) + " argument(s) (" +
             std::to_string(args.positional.size()) + " given)");
    }
    std::vector<std::optional<Value>> bound(params.size());
    for (size_t i = 0; i < args.positional.size(); ++i) {
        bound[i] = args.positional[i];
    }
    for (const auto & [key, value] : args.named) {
        const auto it =
            std::find_if(params.begin(), params.end(), [&key = key](const Param & p) { return key == p.name; });
        if (it == params.end()) {
            fail(what + "() got an unexpected keyword argument '" + key + "'");
        }
        auto & slot = bound[static_cast<size_t>(it - params.begin())];
        if (slot) {
            fail(what + "() got multiple values for argument '" + key + "'");
        }
        slot = value;
    }
    std::vector<Value> out;
    for (size_t i = 0; i < params.size(); ++i) {
        if (!bound[i] && !params[i].fallback) {
            fail(what + "() missing required argument '" + params[i].name + "'");
        }
        out.push_back(bound[i] ? *bound[i] : *params[i].fallback);
    }
    return out;
}

std::string expect_string(const Value & v, const std::string & what) {
    if (!v.is_string()) {
        v.defined_or_fail();
        fail(what + ": expected a string, got " + v.type_name());
    }
    return v.as_string();
}

int64_t expect_int(const Value & v, const std::string & what) {
    if (!v.is_integral()) {
        v.defined_or_fail();
        fail(what + ": expected an integer, got " + v.type_name());
    }
    return v.as_int();
}

std::optional<std::string> optional_string(const Value & v, const std::string & what) {
    if (v.is_none() || v.is_undefined()) {
        return std::nullopt;
    }
    return expect_string(v, what);
}

namespace {

using TestFn = bool (*)(const Value & v, const std::vector<Value> & args);

const Value & arg0(const std::vector<Value> & args, const char * test) {
    if (args.size() != 1) {
        fail(std::string("test '") + test + "' takes one argument");
    }
    return args[0];
}

bool is_kind(const Value & v, Value::Kind k) {
    return v.is(k);
}

// Python's `%` on numbers, for odd/even/divisibleby.
bool remainder_is(const Value & v, const Value & divisor, int64_t expected) {
    const Value r = binary_op("%", v, divisor);
    return r.is_integral() ? r.as_int() == expected : r.as_double() == static_cast<double>(expected);
}

bool same_as(const Value & a, const Value & b) {
    if (a.identity() != nullptr || b.identity() != nullptr) {
        return a.identity() == b.identity();
    }
    const bool scalar = a.is_none() || a.is(Value::Kind::BOOL) || a.is_undefined();
    return scalar && a.kind() == b.kind() && equals(a, b);
}

const std::map<std::string, TestFn> & tests() {
    using K = Value::Kind;
    static const std::map<std::string, TestFn> table = {
        {"defined", [](const Value & v, const std::vector<Value> &) { return !v.is_undefined(); }},
        {"undefined", [](const Value & v, const std::vector<Value> &) { return v.is_undefined(); }},
        {"none", [](const Value & v, const std::vector<Value> &) { return v.is_none(); }},
        {"boolean", [](const Value & v, const std::vector<Value> &) { return is_kind(v, K::BOOL); }},
        {"false", [](const Value & v, const std::vector<Value> &) { return is_kind(v, K::BOOL) && !v.as_bool(); }},
        {"true", [](const Value & v, const std::vector<Value> &) { return is_kind(v, K::BOOL) && v.as_bool(); }},
        {"integer", [](const Value & v, const std::vector<Value> &) { return is_kind(v, K::INT); }},
        {"float", [](const Value & v, const std::vector<Value> &) { return is_kind(v, K::FLOAT); }},
        {"number", [](const Value & v, const std::vector<Value> &) { return v.is_number(); }},
        {"string", [](const Value & v, const std::vector<Value> &) { return v.is_string(); }},
        {"mapping", [](const Value & v, const std::vector<Value> &) { return is_kind(v, K::DICT); }},
        {"iterable",
         [](const Value & v, const std::vector<Value> &) {
             return v.is_string() || is_kind(v, K::LIST) || is_kind(v, K::DICT) || v.is_undefined();
         }},
        {"sequence",
         [](const Value & v, const std::vector<Value> &) {
             return v.is_string() || is_kind(v, K::LIST) || is_kind(v, K::DICT) || v.is_undefined();
         }},
        {"callable",
         [](const Value & v, const std::vector<Value> &) { return is_kind(v, K::CALLABLE) || v.is_undefined(); }},
        {"odd", [](const Value & v, const std::vector<Value> &) { return remainder_is(v, Value::integer(2), 1); }},
        {"even", [](const Value & v, const std::vector<Value> &) { return remainder_is(v, Value::integer(2), 0); }},
        {"divisibleby",
         [](const Value & v, const std::vector<Value> & a) { return remainder_is(v, arg0(a, "divisibleby"), 0); }},
        {"eq", [](const Value & v, const std::vector<Value> & a) { return equals(v, arg0(a, "eq")); }},
        {"ne", [](const Value & v, const std::vector<Value> & a) { return !equals(v, arg0(a, "ne")); }},
        {"lt", [](const Value & v, const std::vector<Value> & a) { return compare(v, arg0(a, "lt")) < 0; }},
        {"le", [](const Value & v, const std::vector<Value> & a) { return compare(v, arg0(a, "le")) <= 0; }},
        {"gt", [](const Value & v, const std::vector<Value> & a) { return compare(v, arg0(a, "gt")) > 0; }},
        {"ge", [](const Value & v, const std::vector<Value> & a) { return compare(v, arg0(a, "ge")) >= 0; }},
        {"in", [](const Value & v, const std::vector<Value> & a) { return contains(arg0(a, "in"), v); }},
        {"sameas", [](const Value & v, const std::vector<Value> & a) { return same_as(v, arg0(a, "sameas")); }},
        {"lower",
         [](const Value & v,
            const std::vector<Value> &) { return py_lower(v.str()) == v.str() && v.str() != py_upper(v.str()); }},
        {"upper",
         [](const Value & v,
            const std::vector<Value> &) { return py_upper(v.str()) == v.str() && v.str() != py_lower(v.str()); }},
        {"escaped", [](const Value &, const std::vector<Value> &) { return false; }},
    };
    return table;
}

const std::map<std::string, std::string> & test_aliases() {
    static const std::map<std::string, std::string> aliases = {
        {"==", "eq"}, {"equalto", "eq"}, {"!=", "ne"}, {"<", "lt"},           {"lessthan", "lt"},
        {"<=", "le"}, {">", "gt"},       {">=", "ge"}, {"greaterthan", "gt"},
    };
    return aliases;
}

std::string test_name(const std::string & name) {
    const auto it = test_aliases().find(name);
    return it == test_aliases().end() ? name : it->second;
}

}  // namespace

bool has_test(const std::string & name) {
    return tests().count(test_name(name)) > 0;
}

bool apply_test(Interpreter &, const std::string & name, const Value & input, Args & args) {
    const auto it = tests().find(test_name(name));
    if (it == tests().end()) {
        fail("no test named '" + name + "'");
    }
    if (!args.named.empty()) {
        fail("test '" + name + "' takes no keyword arguments");
    }
    return it->second(input, args.positional);
}

namespace {

constexpr int64_t kMaxRange = 100000;  // Jinja's sandbox refuses larger ranges

Value range_fn(Interpreter &, Args & args) {
    if (!args.named.empty() || args.positional.empty() || args.positional.size() > 3) {
        fail("range() takes 1 to 3 positional arguments");
    }
    std::vector<int64_t> p;
    for (const Value & v : args.positional) {
        p.push_back(expect_int(v, "range"));
    }
    const int64_t start = p.size() == 1 ? 0 : p[0];
    const int64_t stop = p.size() == 1 ? p[0] : p[1];
    const int64_t step = p.size() == 3 ? p[2] : 1;
    if (step == 0) {
        fail("range() arg 3 must not be zero");
    }
    std::vector<Value> out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
        if (static_cast<int64_t>(out.size()) >= kMaxRange) {
            fail("range too big (more than " + std::to_string(kMaxRange) + " items)");
        }
        out.push_back(Value::integer(i));
        if (__builtin_add_overflow(i, step, &i)) {
            break;
        }
    }
    return Value::list(std::move(out));
}

// dict(mapping?, **kwargs), also the contents of namespace(...).
Dict dict_from_args(const Args & args, const char * what) {
    if (args.positional.size() > 1 || (args.positional.size() == 1 && !args.positional[0].is(Value::Kind::DICT))) {
        fail(std::string(what) + "() takes at most one positional argument, a dict");
    }
    Dict d;
    if (!args.positional.empty()) {
        d = args.positional[0].as_dict();
    }
    for (const auto & [key, value] : args.named) {
        d.set(key, value);
    }
    return d;
}

Value strftime_now(Interpreter &, Args & args) {
    const std::string format =
        expect_string(bind_args("strftime_now", args, {{"format", std::nullopt}})[0], "strftime_now");
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[512];
    const size_t n = std::strftime(buf, sizeof buf, format.c_str(), &local);
    return Value::string(std::string(buf, n));
}

}  // namespace

Value global_function(const std::string & name) {
    if (name == "range") {
        return Value::callable("<class 'range'>", range_fn);
    }
    if (name == "namespace") {
        return Value::callable("<class 'jinja2.utils.Namespace'>", [](Interpreter & in, Args & args) {
            auto ns = std::make_shared<Namespace>();
            ns->attrs = dict_from_args(args, "namespace");
            in.adopt(ns);
            return Value::ns(std::move(ns));
        });
    }
    if (name == "dict") {
        return Value::callable("<class 'dict'>",
                               [](Interpreter &, Args & args) { return Value::dict(dict_from_args(args, "dict")); });
    }
    if (name == "raise_exception") {
        return Value::callable("<function raise_exception>", [](Interpreter &, Args & args) -> Value {
            const Value message = bind_args("raise_exception", args, {{"message", std::nullopt}})[0];
            throw TemplateError{message.str(), true};
        });
    }
    if (name == "strftime_now") {
        return Value::callable("<function strftime_now>", strftime_now);
    }
    return Value();
}

}  // namespace tinkerd::chat_template
