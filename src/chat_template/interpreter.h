// The tree-walking interpreter's internal interface: scopes, the Interpreter (statements in render.cpp,
// expressions in eval.cpp) and the builtins it calls (operators, attribute access and methods, filters,
// tests, global functions, tojson). One Interpreter renders once; it never outlives a render() call.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "chat_template/syntax.h"
#include "chat_template/value.h"

namespace tinkerd::chat_template {

// One level of variables; lookups walk outwards. Loop iterations and macro calls get their own.
struct Scope {
    const Scope * parent = nullptr;
    std::unordered_map<std::string, Value> vars;
    const Value * find(const std::string & name) const;
};

enum class Flow { NORMAL, BREAK, CONTINUE };

class Interpreter {
  public:
    Interpreter(Scope & globals, std::string & out) : globals_(globals), scope_(&globals), out_(&out) {}
    ~Interpreter();
    Interpreter(const Interpreter &) = delete;
    Interpreter & operator=(const Interpreter &) = delete;

    Flow exec(const Body & body);
    Value eval(const Expr & e);
    Value call(const Value & callee, Args & args);
    int line() const { return line_; }  // the statement being run, for error messages
    // Namespaces made during the render; emptied at its end so that reference cycles cannot leak.
    void adopt(const std::shared_ptr<Namespace> & ns) { namespaces_.push_back(ns); }

  private:
    Scope & globals_;
    Scope * scope_;
    std::string * out_;
    int line_ = 0;
    int call_depth_ = 0;
    int eval_depth_ = 0;
    std::vector<std::shared_ptr<Namespace>> namespaces_;
    std::vector<std::unique_ptr<Scope>> closures_;  // what macros defined in loops or macros see

    // Statements (render.cpp).
    Flow exec_stmt(const Stmt & s);
    Flow exec_if(const Stmt & s);
    Flow exec_for(const Stmt & s);
    void run_iteration(const Stmt & s, const std::vector<Value> & items, size_t i, Flow & flow);
    void exec_set(const Stmt & s);
    void define_macro(const Stmt & s);
    Value call_macro(const Stmt & macro, Args & args, const Scope & closure);
    std::string capture(const Body & body, Scope & scope);

    // Expressions (eval.cpp).
    Value eval_node(const Expr & e);
    Value eval_name(const Expr & e);
    Value eval_sequence(const Expr & e);
    Value eval_slice(const Expr & e);
    Value eval_call(const Expr & e);
    Value eval_filter(const Expr & e);
    Value eval_test(const Expr & e);
    Value eval_unary(const Expr & e);
    Value eval_compare(const Expr & e);
    Args eval_args(const Expr & e);
};

// Operators (operators.cpp), with Python's rules and Jinja's undefined handling.
Value binary_op(const std::string & op, const Value & a, const Value & b);
Value negate(const Value & v, bool minus);
bool contains(const Value & container, const Value & item);  // `item in container`

// Attribute and item access (access.cpp). Missing things are undefined; methods are bound callables.
Value get_attribute(const Value & obj, const std::string & name);
Value get_item(const Value & obj, const Value & key);
Value get_slice(const Value & obj, const Value & start, const Value & stop, const Value & step);

// Builtins (filters.cpp, tests.cpp).
Value apply_filter(Interpreter & in, const std::string & name, const Value & input, Args & args);
bool apply_test(Interpreter & in, const std::string & name, const Value & input, Args & args);
bool has_filter(const std::string & name);
bool has_test(const std::string & name);
// Global functions: range, namespace, dict, raise_exception, strftime_now. Undefined when unknown.
Value global_function(const std::string & name);

// tojson as transformers defines it: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False) (tojson.cpp).
struct JsonStyle {
    bool ensure_ascii = false;
    std::optional<std::string> indent;  // absent: one line
    std::string item_separator = ", ";
    std::string key_separator = ": ";
    bool sort_keys = false;
};
std::string to_json(const Value & v, const JsonStyle & style);

// Binds call arguments to parameters the way Python does. A parameter without a fallback is required.
struct Param {
    const char * name;
    std::optional<Value> fallback;
};
std::vector<Value> bind_args(const std::string & what, const Args & args, const std::vector<Param> & params);

// Small argument helpers shared by the builtins.
std::string expect_string(const Value & v, const std::string & what);
int64_t expect_int(const Value & v, const std::string & what);
std::optional<std::string> optional_string(const Value & v, const std::string & what);  // none/undefined: absent

}  // namespace tinkerd::chat_template
