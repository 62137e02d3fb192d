// Arithmetic and membership operators with Python's rules: bool counts as int, / is true division,
// // and % floor toward negative infinity, str and list concatenation and repetition, `in` on str, list
// and dict. Integer overflow fails (Python would switch to big integers). Undefined operands fail, but
// ~ prints them as empty, as Jinja does.
#include <cmath>

#include "chat_template/interpreter.h"

namespace tinkerd::chat_template {

namespace {

constexpr size_t kMaxRepeatBytes = size_t{1} << 26;  // str/list * n beyond this is refused

[[noreturn]] void unsupported(const std::string & op, const Value & a, const Value & b) {
    fail("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
}

[[noreturn]] void overflow() {
    fail("integer overflow in a template expression");
}

int64_t checked_add(int64_t a, int64_t b) {
    int64_t r = 0;
    return __builtin_add_overflow(a, b, &r) ? (overflow(), 0) : r;
}

int64_t checked_sub(int64_t a, int64_t b) {
    int64_t r = 0;
    return __builtin_sub_overflow(a, b, &r) ? (overflow(), 0) : r;
}

int64_t checked_mul(int64_t a, int64_t b) {
    int64_t r = 0;
    return __builtin_mul_overflow(a, b, &r) ? (overflow(), 0) : r;
}

// Exponentiation by squaring; if a squared base overflows, so would the result.
int64_t int_pow(int64_t base, int64_t exp) {
    int64_t result = 1;
    while (exp > 0) {
        if (exp & 1) {
            result = checked_mul(result, base);
        }
        exp >>= 1;
        if (exp > 0) {
            base = checked_mul(base, base);
        }
    }
    return result;
}

Value int_arith(const std::string & op, int64_t a, int64_t b) {
    if (op == "+" || op == "-" || op == "*") {
        return Value::integer(op == "+" ? checked_add(a, b) : op == "-" ? checked_sub(a, b) : checked_mul(a, b));
    }
    if (op == "**") {
        return b < 0 ? Value::number(std::pow(static_cast<double>(a), static_cast<double>(b)))
                     : Value::integer(int_pow(a, b));
    }
    if (b == 0) {
        fail(op == "/" ? "division by zero" : "integer division or modulo by zero");
    }
    if (a == INT64_MIN && b == -1) {
        overflow();
    }
    if (op == "/") {
        return Value::number(static_cast<double>(a) / static_cast<double>(b));
    }
    const int64_t q = a / b - ((a % b != 0) && ((a < 0) != (b < 0)) ? 1 : 0);
    return Value::integer(op == "//" ? q : a - q * b);
}

Value float_arith(const std::string & op, double a, double b) {
    if (op == "+" || op == "-" || op == "*") {
        return Value::number(op == "+" ? a + b : op == "-" ? a - b : a * b);
    }
    if (op == "**") {
        if (a == 0.0 && b < 0) {
            fail("0.0 cannot be raised to a negative power");
        }
        return Value::number(std::pow(a, b));
    }
    if (b == 0.0) {
        fail("float division by zero");
    }
    if (op == "/") {
        return Value::number(a / b);
    }
    double mod = std::fmod(a, b);
    if (mod != 0.0 && ((mod < 0) != (b < 0))) {
        mod += b;
    }
    return Value::number(op == "%" ? mod : std::round((a - mod) / b));
}

Value repeat(const Value & seq, const Value & times) {
    const auto n = static_cast<size_t>(std::max<int64_t>(0, times.as_int()));
    const bool is_string = seq.is_string();
    const size_t unit = is_string ? seq.as_string().size() : seq.as_list().items.size() * sizeof(Value);
    if (unit > 0 && n > kMaxRepeatBytes / unit) {
        fail(std::string(is_string ? "string" : "list") + " repetition result is too large");
    }
    const size_t count = unit == 0 ? 0 : n;  // repeating nothing gives nothing, however often
    if (is_string) {
        std::string out;
        out.reserve(unit * count);
        for (size_t i = 0; i < count; ++i) {
            out += seq.as_string();
        }
        return Value::string(std::move(out));
    }
    const List & list = seq.as_list();
    std::vector<Value> out;
    for (size_t i = 0; i < count; ++i) {
        out.insert(out.end(), list.items.begin(), list.items.end());
    }
    return Value::list(std::move(out), list.tuple);
}

Value add(const Value & a, const Value & b) {
    if (a.is_string() && b.is_string()) {
        return Value::string(a.as_string() + b.as_string());
    }
    if (a.is(Value::Kind::LIST) && b.is(Value::Kind::LIST) && a.as_list().tuple == b.as_list().tuple) {
        std::vector<Value> items = a.as_list().items;
        items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
        return Value::list(std::move(items), a.as_list().tuple);
    }
    if (a.is_string() || a.is(Value::Kind::LIST)) {
        fail("can only concatenate " + a.type_name() + " (not \"" + b.type_name() + "\") to " + a.type_name());
    }
    unsupported("+", a, b);
}

bool is_sequence(const Value & v) {
    return v.is_string() || v.is(Value::Kind::LIST);
}

}  // namespace

Value binary_op(const std::string & op, const Value & a, const Value & b) {
    if (op == "~") {
        return Value::string(a.str() + b.str());
    }
    a.defined_or_fail();
    b.defined_or_fail();
    if (a.is_number() && b.is_number()) {
        if (a.is_integral() && b.is_integral()) {
            return int_arith(op, a.as_int(), b.as_int());
        }
        return float_arith(op, a.as_double(), b.as_double());
    }
    if (op == "+") {
        return add(a, b);
    }
    if (op == "*" && is_sequence(a) && b.is_integral()) {
        return repeat(a, b);
    }
    if (op == "*" && a.is_integral() && is_sequence(b)) {
        return repeat(b, a);
    }
    if (op == "%" && a.is_string()) {
        fail("printf-style string formatting (str % args) is not supported in chat templates");
    }
    unsupported(op, a, b);
}

Value negate(const Value & v, bool minus) {
    v.defined_or_fail();
    if (v.is_integral()) {
        return Value::integer(minus ? checked_sub(0, v.as_int()) : v.as_int());
    }
    if (v.is(Value::Kind::FLOAT)) {
        return Value::number(minus ? -v.as_double() : v.as_double());
    }
    fail(std::string("bad operand type for unary ") + (minus ? "-" : "+") + ": '" + v.type_name() + "'");
}

bool contains(const Value & container, const Value & item) {
    switch (container.kind()) {
        case Value::Kind::UNDEFINED:
            return false;
        case Value::Kind::STRING:
            if (!item.is_string()) {
                fail("'in <string>' requires string as left operand, not " + item.type_name());
            }
            return container.as_string().find(item.as_string()) != std::string::npos;
        case Value::Kind::LIST:
            for (const Value & v : container.as_list().items) {
                if (equals(v, item)) {
                    return true;
                }
            }
            return false;
        case Value::Kind::DICT:
            if (item.is(Value::Kind::LIST) || item.is(Value::Kind::DICT)) {
                fail("unhashable type: '" + item.type_name() + "'");
            }
            return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
        default:
            fail("argument of type '" + container.type_name() + "' is not iterable");
    }
}

}  // namespace tinkerd::chat_template
