// Value (see value.h): construction, truthiness, str()/repr() as Python prints them, equality and
// ordering, iteration, and the conversion from JSON.
#include "chat_template/value.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

namespace tinkerd::chat_template {

void fail(std::string message) {
    throw TemplateError{std::move(message), false};
}

size_t Dict::size() const {
    return entries_.size();
}

const Value * Dict::find(const std::string & key) const {
    const auto it = index_.find(key);
    return it == index_.end() ? nullptr : &entries_[it->second].second;
}

void Dict::set(const std::string & key, Value value) {
    const auto it = index_.find(key);
    if (it != index_.end()) {
        entries_[it->second].second = std::move(value);
        return;
    }
    index_.emplace(key, entries_.size());
    entries_.emplace_back(key, std::move(value));
}

Value Value::list(std::vector<Value> items, bool tuple) {
    return Value(Data(std::make_shared<const List>(List{std::move(items), tuple})));
}

Value Value::dict(Dict d) {
    return Value(Data(std::make_shared<const Dict>(std::move(d))));
}

Value Value::callable(std::string repr, std::function<Value(Interpreter &, Args &)> fn) {
    return Value(Data(std::make_shared<const Callable>(Callable{std::move(repr), std::move(fn)})));
}

int64_t Value::as_int() const {
    return is(Kind::BOOL) ? (as_bool() ? 1 : 0) : std::get<int64_t>(data_);
}

double Value::as_double() const {
    return is(Kind::FLOAT) ? std::get<double>(data_) : static_cast<double>(as_int());
}

const void * Value::identity() const {
    if (is(Kind::NAMESPACE)) {
        return &as_namespace();
    }
    return is(Kind::CALLABLE) ? static_cast<const void *>(&as_callable()) : nullptr;
}

bool Value::truthy() const {
    switch (kind()) {
        case Kind::UNDEFINED:
        case Kind::NONE:
            return false;
        case Kind::BOOL:
            return as_bool();
        case Kind::INT:
            return as_int() != 0;
        case Kind::FLOAT:
            return as_double() != 0.0;
        case Kind::STRING:
            return !as_string().empty();
        case Kind::LIST:
            return !as_list().items.empty();
        case Kind::DICT:
            return as_dict().size() != 0;
        default:
            return true;
    }
}

std::string Value::str() const {
    if (is_undefined()) {
        return "";
    }
    return is_string() ? as_string() : repr();
}

namespace {

std::string list_repr(const List & list) {
    std::string out = list.tuple ? "(" : "[";
    for (size_t i = 0; i < list.items.size(); ++i) {
        out += (i ? ", " : "") + list.items[i].repr();
    }
    if (list.tuple && list.items.size() == 1) {
        out += ",";
    }
    return out + (list.tuple ? ")" : "]");
}

std::string dict_repr(const Dict & dict) {
    std::string out = "{";
    bool first = true;
    for (const auto & [key, value] : dict.entries()) {
        out += (first ? "" : ", ") + py_repr(key) + ": " + value.repr();
        first = false;
    }
    return out + "}";
}

}  // namespace

std::string Value::repr() const {
    switch (kind()) {
        case Kind::UNDEFINED:
            return "Undefined";
        case Kind::NONE:
            return "None";
        case Kind::BOOL:
            return as_bool() ? "True" : "False";
        case Kind::INT:
            return std::to_string(as_int());
        case Kind::FLOAT:
            return float_repr(as_double());
        case Kind::STRING:
            return py_repr(as_string());
        case Kind::LIST:
            return list_repr(as_list());
        case Kind::DICT:
            return dict_repr(as_dict());
        case Kind::NAMESPACE:
            return "<Namespace " + dict_repr(as_namespace().attrs) + ">";
        case Kind::CALLABLE:
            return as_callable().repr;
    }
    return "";
}

std::string Value::type_name() const {
    static const char * const names[] = {"Undefined", "NoneType", "bool", "int",       "float",
                                         "str",       "list",     "dict", "Namespace", "function"};
    return is(Kind::LIST) && as_list().tuple ? "tuple" : names[static_cast<int>(kind())];
}

const Value & Value::defined_or_fail() const {
    if (is_undefined()) {
        fail(undefined_hint());
    }
    return *this;
}

std::string float_repr(double d) {
    if (std::isnan(d)) {
        return "nan";
    }
    if (std::isinf(d)) {
        return d < 0 ? "-inf" : "inf";
    }
    char buf[64];
    const auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
    const std::string sci(buf, res.ptr);  // e.g. "-1.5e+16": shortest round-trip digits
    const size_t e = sci.find('e');
    const bool negative = sci[0] == '-';
    std::string digits;
    for (size_t i = negative ? 1 : 0; i < e; ++i) {
        if (sci[i] != '.') {
            digits += sci[i];
        }
    }
    const int exponent = std::atoi(sci.c_str() + e + 1);
    std::string out = negative ? "-" : "";
    if (exponent < -4 || exponent >= 16) {  // Python switches to exponent notation here
        out += digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : "");
        char exp[16];
        std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
        return out + exp;
    }
    if (exponent < 0) {
        return out + "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    }
    const auto int_len = static_cast<size_t>(exponent) + 1;
    if (digits.size() <= int_len) {
        return out + digits + std::string(int_len - digits.size(), '0') + ".0";
    }
    return out + digits.substr(0, int_len) + "." + digits.substr(int_len);
}

namespace {

bool dicts_equal(const Dict & a, const Dict & b) {
    if (a.size() != b.size()) {
        return false;
    }
    for (const auto & [key, value] : a.entries()) {
        const Value * other = b.find(key);
        if (other == nullptr || !equals(value, *other)) {
            return false;
        }
    }
    return true;
}

}  // namespace

bool equals(const Value & a, const Value & b) {
    using K = Value::Kind;
    if (a.is_number() && b.is_number()) {
        if (a.is_integral() && b.is_integral()) {
            return a.as_int() == b.as_int();
        }
        return a.as_double() == b.as_double();
    }
    if (a.kind() != b.kind()) {
        return false;
    }
    switch (a.kind()) {
        case K::UNDEFINED:
        case K::NONE:
            return true;
        case K::STRING:
            return a.as_string() == b.as_string();
        case K::LIST: {
            const List & x = a.as_list();
            const List & y = b.as_list();
            return x.tuple == y.tuple && x.items.size() == y.items.size() &&
                   std::equal(x.items.begin(), x.items.end(), y.items.begin(), equals);
        }
        case K::DICT:
            return dicts_equal(a.as_dict(), b.as_dict());
        default:
            return a.identity() == b.identity();
    }
}

int compare(const Value & a, const Value & b) {
    if (a.is_number() && b.is_number()) {
        if (a.is_integral() && b.is_integral()) {
            return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
        }
        return a.as_double() < b.as_double() ? -1 : a.as_double() > b.as_double() ? 1 : 0;
    }
    if (a.is_string() && b.is_string()) {  // UTF-8 byte order is code point order
        const int c = a.as_string().compare(b.as_string());
        return c < 0 ? -1 : c > 0 ? 1 : 0;
    }
    if (a.is(Value::Kind::LIST) && b.is(Value::Kind::LIST)) {
        const auto & x = a.as_list().items;
        const auto & y = b.as_list().items;
        for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
            if (!equals(x[i], y[i])) {
                return compare(x[i], y[i]);
            }
        }
        return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
    }
    a.defined_or_fail();
    b.defined_or_fail();
    fail("ordering is not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

std::vector<Value> iterate(const Value & v) {
    switch (v.kind()) {
        case Value::Kind::UNDEFINED:
            return {};
        case Value::Kind::LIST:
            return v.as_list().items;
        case Value::Kind::DICT: {
            std::vector<Value> keys;
            for (const auto & entry : v.as_dict().entries()) {
                keys.push_back(Value::string(entry.first));
            }
            return keys;
        }
        case Value::Kind::STRING: {
            std::vector<Value> out;
            for (std::string & c : chars_of(v.as_string())) {
                out.push_back(Value::string(std::move(c)));
            }
            return out;
        }
        default:
            fail("'" + v.type_name() + "' object is not iterable");
    }
}

namespace {

template <typename Json>
Value convert(const Json & j) {
    switch (j.type()) {
        case Json::value_t::null:
            return Value::none();
        case Json::value_t::boolean:
            return Value::boolean(j.template get<bool>());
        case Json::value_t::number_integer:
            return Value::integer(j.template get<int64_t>());
        case Json::value_t::number_unsigned: {
            const auto u = j.template get<uint64_t>();
            return u <= static_cast<uint64_t>(INT64_MAX) ? Value::integer(static_cast<int64_t>(u))
                                                         : Value::number(static_cast<double>(u));
        }
        case Json::value_t::number_float:
            return Value::number(j.template get<double>());
        case Json::value_t::string:
            return Value::string(j.template get<std::string>());
        case Json::value_t::array: {
            std::vector<Value> items;
            items.reserve(j.size());
            for (const auto & item : j) {
                items.push_back(convert(item));
            }
            return Value::list(std::move(items));
        }
        case Json::value_t::object: {
            Dict d;
            for (const auto & [key, item] : j.items()) {
                d.set(key, convert(item));
            }
            return Value::dict(std::move(d));
        }
        default:  // binary or discarded: not produced by JSON text
            return Value::none();
    }
}

}  // namespace

Value from_json(const nlohmann::json & j) {
    return convert(j);
}

Value from_json(const nlohmann::ordered_json & j) {
    return convert(j);
}

}  // namespace tinkerd::chat_template
