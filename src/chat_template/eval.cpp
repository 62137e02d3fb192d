// Expression evaluation: names (template variables, then global functions), literals, attribute and
// item access, slices, calls, filters, tests, boolean logic with Python's short-circuit values, and
// chained comparisons.
#include "chat_template/interpreter.h"

namespace tinkerd::chat_template {

// Macros calling macros can stack expression trees; past this the render stops instead of the stack.
constexpr int kMaxEvalDepth = 1000;

Value Interpreter::eval(const Expr & e) {
    if (eval_depth_ >= kMaxEvalDepth) {
        fail("expressions nested too deeply");
    }
    ++eval_depth_;
    Value v = eval_node(e);
    --eval_depth_;
    return v;
}

Value Interpreter::eval_node(const Expr & e) {
    switch (e.kind) {
        case ExprKind::LITERAL:
            return e.literal;
        case ExprKind::NAME:
            return eval_name(e);
        case ExprKind::LIST:
        case ExprKind::DICT:
            return eval_sequence(e);
        case ExprKind::ATTR:
            return get_attribute(eval(*e.a), e.name);
        case ExprKind::ITEM: {
            const Value obj = eval(*e.a);
            return get_item(obj, eval(*e.b));
        }
        case ExprKind::SLICE:
            return eval_slice(e);
        case ExprKind::CALL:
            return eval_call(e);
        case ExprKind::FILTER:
            return eval_filter(e);
        case ExprKind::TEST:
            return eval_test(e);
        case ExprKind::UNARY:
            return eval_unary(e);
        case ExprKind::BINARY: {
            const Value a = eval(*e.a);
            return binary_op(e.name, a, eval(*e.b));
        }
        case ExprKind::COMPARE:
            return eval_compare(e);
        case ExprKind::AND: {
            Value a = eval(*e.a);
            return a.truthy() ? eval(*e.b) : a;
        }
        case ExprKind::OR: {
            Value a = eval(*e.a);
            return a.truthy() ? a : eval(*e.b);
        }
        case ExprKind::CONDITION:
            if (eval(*e.b).truthy()) {
                return eval(*e.a);
            }
            return e.c ? eval(*e.c) : Value::undefined("an inline if without else had a false condition");
    }
    return Value();
}

Value Interpreter::eval_name(const Expr & e) {
    if (const Value * v = scope_->find(e.name)) {
        return *v;
    }
    Value builtin = global_function(e.name);
    return builtin.is_undefined() ? Value::undefined("'" + e.name + "' is undefined") : builtin;
}

Value Interpreter::eval_sequence(const Expr & e) {
    if (e.kind == ExprKind::LIST) {
        std::vector<Value> items;
        items.reserve(e.items.size());
        for (const ExprPtr & item : e.items) {
            items.push_back(eval(*item));
        }
        return Value::list(std::move(items), e.is_tuple);
    }
    Dict d;
    for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
        const Value key = eval(*e.items[i]);
        if (!key.is_string()) {
            fail("dict keys must be strings here, got " + key.type_name());
        }
        d.set(key.as_string(), eval(*e.items[i + 1]));
    }
    return Value::dict(std::move(d));
}

Value Interpreter::eval_slice(const Expr & e) {
    const Value obj = eval(*e.a);
    Value parts[3];
    for (size_t i = 0; i < 3; ++i) {
        parts[i] = e.items[i] ? eval(*e.items[i]) : Value::none();
    }
    return get_slice(obj, parts[0], parts[1], parts[2]);
}

Args Interpreter::eval_args(const Expr & e) {
    Args args;
    for (const ExprPtr & arg : e.items) {
        args.positional.push_back(eval(*arg));
    }
    for (const auto & [key, arg] : e.kwargs) {
        args.named.emplace_back(key, eval(*arg));
    }
    return args;
}

Value Interpreter::eval_call(const Expr & e) {
    const Value callee = eval(*e.a);
    Args args = eval_args(e);
    return call(callee, args);
}

Value Interpreter::call(const Value & callee, Args & args) {
    callee.defined_or_fail();
    if (!callee.is(Value::Kind::CALLABLE)) {
        fail("'" + callee.type_name() + "' object is not callable");
    }
    if (++call_depth_ > 100) {
        fail("calls nested too deeply (a macro calling itself without end?)");
    }
    Value result = callee.as_callable().fn(*this, args);
    --call_depth_;
    return result;
}

Value Interpreter::eval_filter(const Expr & e) {
    const Value input = eval(*e.a);
    Args args = eval_args(e);
    return apply_filter(*this, e.name, input, args);
}

Value Interpreter::eval_test(const Expr & e) {
    const Value input = eval(*e.a);
    Args args = eval_args(e);
    return Value::boolean(apply_test(*this, e.name, input, args) != e.negated);
}

Value Interpreter::eval_unary(const Expr & e) {
    const Value v = eval(*e.a);
    if (e.name == "not") {
        return Value::boolean(!v.truthy());
    }
    return negate(v, e.name == "-");
}

namespace {

bool compare_op(const std::string & op, const Value & a, const Value & b) {
    if (op == "==") {
        return equals(a, b);
    }
    if (op == "!=") {
        return !equals(a, b);
    }
    if (op == "in" || op == "not in") {
        return contains(b, a) == (op == "in");
    }
    const int c = compare(a.defined_or_fail(), b.defined_or_fail());
    return op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
}

}  // namespace

// a < b < c means a < b and b < c, each operand evaluated once.
Value Interpreter::eval_compare(const Expr & e) {
    Value left = eval(*e.items[0]);
    for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.items[i + 1]);
        if (!compare_op(e.ops[i], left, right)) {
            return Value::boolean(false);
        }
        left = std::move(right);
    }
    return Value::boolean(true);
}

}  // namespace tinkerd::chat_template
