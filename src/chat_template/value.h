// Value: the dynamic type of the template language, with the Python semantics Jinja gives it (undefined,
// none, bool, int, float, str, list/tuple, dict, namespace, callables; value.cpp), Python's str operations
// on UTF-8 text (py_str.cpp), and the interpreter's internal error type. Lists and dicts are immutable
// once built (the sandbox is immutable); namespaces are not.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace tinkerd::chat_template {

// Thrown inside the interpreter and turned into an Error at the public API. `raised` marks messages that
// come from raise_exception() in the template itself (passed on verbatim).
struct TemplateError {
    std::string message;
    bool raised = false;
};
[[noreturn]] void fail(std::string message);

class Value;
class Interpreter;

struct Undefined {
    std::string hint;  // what was missing, e.g. "'x' is undefined"; the error when the value is misused
};

struct List {
    std::vector<Value> items;
    bool tuple = false;  // only changes how it prints: (1, 2) instead of [1, 2]
};

// A str-keyed dict that keeps insertion order, as Python's does.
class Dict {
  public:
    const Value * find(const std::string & key) const;
    void set(const std::string & key, Value value);
    size_t size() const;  // out of line: clang instantiates vector<pair<..., Value>>::size eagerly
    const std::vector<std::pair<std::string, Value>> & entries() const { return entries_; }

  private:
    std::vector<std::pair<std::string, Value>> entries_;
    std::unordered_map<std::string, size_t> index_;
};

struct Namespace {
    Dict attrs;
};

// Call arguments: positional then keyword, in source order.
struct Args {
    std::vector<Value> positional;
    std::vector<std::pair<std::string, Value>> named;
};

struct Callable {
    std::string repr;  // how it prints, e.g. "<Macro 'f'>"
    std::function<Value(Interpreter &, Args &)> fn;
};

class Value {
  public:
    enum class Kind { UNDEFINED, NONE, BOOL, INT, FLOAT, STRING, LIST, DICT, NAMESPACE, CALLABLE };

    Value() : data_(Undefined{}) {}
    static Value undefined(std::string hint) { return Value(Data(Undefined{std::move(hint)})); }
    static Value none() { return Value(Data(nullptr)); }
    static Value boolean(bool b) { return Value(Data(b)); }
    static Value integer(int64_t i) { return Value(Data(i)); }
    static Value number(double d) { return Value(Data(d)); }
    static Value string(std::string s) { return Value(Data(std::move(s))); }
    static Value list(std::vector<Value> items, bool tuple = false);
    static Value dict(Dict d);
    static Value ns(std::shared_ptr<Namespace> n) { return Value(Data(std::move(n))); }
    static Value callable(std::string repr, std::function<Value(Interpreter &, Args &)> fn);

    Kind kind() const { return static_cast<Kind>(data_.index()); }
    bool is(Kind k) const { return kind() == k; }
    bool is_undefined() const { return is(Kind::UNDEFINED); }
    bool is_none() const { return is(Kind::NONE); }
    bool is_string() const { return is(Kind::STRING); }
    bool is_number() const { return is(Kind::BOOL) || is(Kind::INT) || is(Kind::FLOAT); }
    bool is_integral() const { return is(Kind::BOOL) || is(Kind::INT); }  // Python: bool is an int

    bool as_bool() const { return std::get<bool>(data_); }
    int64_t as_int() const;    // BOOL or INT
    double as_double() const;  // any number
    const std::string & as_string() const { return std::get<std::string>(data_); }
    const List & as_list() const { return *std::get<std::shared_ptr<const List>>(data_); }
    const Dict & as_dict() const { return *std::get<std::shared_ptr<const Dict>>(data_); }
    Namespace & as_namespace() const { return *std::get<std::shared_ptr<Namespace>>(data_); }
    const Callable & as_callable() const { return *std::get<std::shared_ptr<const Callable>>(data_); }
    const std::string & undefined_hint() const { return std::get<Undefined>(data_).hint; }
    const void * identity() const;  // the shared object of a namespace or callable, for `is sameas`/==

    bool truthy() const;
    std::string str() const;        // Python str(): what {{ }} prints (undefined prints nothing)
    std::string repr() const;       // Python repr()
    std::string type_name() const;  // Python's type name for errors: "dict", "str", "NoneType", ...
    // Fails with the undefined's hint; for operations that Jinja's Undefined refuses.
    const Value & defined_or_fail() const;

  private:
    using Data =
        std::variant<Undefined, std::nullptr_t, bool, int64_t, double, std::string, std::shared_ptr<const List>,
                     std::shared_ptr<const Dict>, std::shared_ptr<Namespace>, std::shared_ptr<const Callable>>;
    explicit Value(Data d) : data_(std::move(d)) {}
    Data data_;
};

// JSON (messages, tools, kwargs) -> Value. Object keys keep the JSON type's order (sorted for
// nlohmann::json, as received for nlohmann::ordered_json).
Value from_json(const nlohmann::json & j);
Value from_json(const nlohmann::ordered_json & j);

// Python's float repr: shortest round-trip digits, "1.0", "1e-05", "1e+16", "inf", "nan".
std::string float_repr(double d);

// Python == (1 == 1.0 == True, deep list/dict equality, undefined == undefined).
bool equals(const Value & a, const Value & b);
// Python ordering for <, <=, >, >=: numbers, strings, lists. Negative/zero/positive; fails otherwise.
int compare(const Value & a, const Value & b);

// Iterating a value as a for loop does: list items, dict keys, string characters; undefined is empty.
std::vector<Value> iterate(const Value & v);

// ---- Python str operations on UTF-8 text (py_str.cpp), by character as Python counts them. Invalid UTF-8
// bytes count as one character each (they only come from a template's own literals).

// Byte offset where each character starts.
std::vector<size_t> char_starts(std::string_view s);
size_t char_count(std::string_view s);
std::vector<std::string> chars_of(std::string_view s);  // one string per character

// Decodes the character at s[pos] (advancing pos); an invalid byte decodes as itself.
char32_t next_char(std::string_view s, size_t & pos);
void append_utf8(std::string & out, char32_t c);

bool is_py_space(char32_t c);

// Python slice arithmetic (PySlice_AdjustIndices): the indices a[start:stop:step] selects out of `length`.
std::vector<int64_t> slice_indices(int64_t length, std::optional<int64_t> start, std::optional<int64_t> stop,
                                   std::optional<int64_t> step);

// str.strip/lstrip/rstrip: `chars` absent strips whitespace, else any character in `chars`.
std::string py_strip(std::string_view s, const std::optional<std::string> & chars, bool left, bool right);
// str.split: without sep, runs of whitespace separate and empty ends vanish. maxsplit < 0: no limit.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string> & sep, int64_t maxsplit);
std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string> & sep, int64_t maxsplit);
std::vector<std::string> py_splitlines(std::string_view s);
// str.replace; count < 0 replaces every occurrence.
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);
// str.count / str.find / str.rfind (character offsets; -1 when absent).
int64_t py_count(std::string_view s, std::string_view sub);
int64_t py_find(std::string_view s, std::string_view sub, bool from_right);

// Case mapping for ASCII, Latin-1, Greek and Cyrillic letters; other characters are left alone.
std::string py_lower(std::string_view s);
std::string py_upper(std::string_view s);
std::string py_capitalize(std::string_view s);  // first character upper, the rest lower
std::string py_title(std::string_view s);       // str.title(): letters after a non-letter go upper

// Python repr() of a str: single quotes unless the text has ' and no ", escapes for the unprintable.
std::string py_repr(std::string_view s);

}  // namespace tinkerd::chat_template
