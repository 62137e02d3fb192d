// Parser, expression half (see syntax.h). Precedence, loosest first, as in Jinja: inline if; or; and;
// not; comparisons (chained, in, not in); + -; ~; * / // %; **; unary - +; then primaries with their
// postfix parts (.attr, [item], [a:b:c], calls) and filter/test chains (| name, is [not] name).
#include <array>

#include "chat_template/syntax.h"

namespace tinkerd::chat_template {

ExprPtr Parser::make(ExprKind kind, const Token & at) const {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    return e;
}

// `a` or `a, b, ...` (a tuple). Without with_condition, `x if y` is not read (for loops use `if`).
ExprPtr Parser::parse_tuple(bool with_condition) {
    const Token & start = peek();
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
        const bool at_end = peek().type == TokenType::BLOCK_END || peek().type == TokenType::VAR_END || at_op(")") ||
                            at_name("if") || at_name("recursive");
        if (!items.empty() && at_end) {
            break;
        }
        items.push_back(with_condition ? parse_expression() : parse_or());
        if (!skip_op(",")) {
            break;
        }
        is_tuple = true;
    }
    if (!is_tuple) {
        return std::move(items.front());
    }
    ExprPtr tuple = make(ExprKind::LIST, start);
    tuple->items = std::move(items);
    tuple->is_tuple = true;
    return tuple;
}

ExprPtr Parser::parse_expression() {
    enter(peek());
    ExprPtr e = parse_or();
    ChainDepth depth{*this};
    while (at_name("if")) {
        depth.add(peek());
        const Token & at = next();
        ExprPtr condition = make(ExprKind::CONDITION, at);
        condition->a = std::move(e);
        condition->b = parse_or();
        if (skip_name("else")) {
            condition->c = parse_expression();
        }
        e = std::move(condition);
    }
    leave();
    return e;
}

ExprPtr Parser::parse_or() {
    ExprPtr left = parse_and();
    ChainDepth depth{*this};
    while (at_name("or")) {
        depth.add(peek());
        ExprPtr node = make(ExprKind::OR, next());
        node->a = std::move(left);
        node->b = parse_and();
        left = std::move(node);
    }
    return left;
}

ExprPtr Parser::parse_and() {
    ExprPtr left = parse_not();
    ChainDepth depth{*this};
    while (at_name("and")) {
        depth.add(peek());
        ExprPtr node = make(ExprKind::AND, next());
        node->a = std::move(left);
        node->b = parse_not();
        left = std::move(node);
    }
    return left;
}

ExprPtr Parser::parse_not() {
    if (!at_name("not")) {
        return parse_compare();
    }
    enter(peek());
    ExprPtr node = make(ExprKind::UNARY, next());
    node->name = "not";
    node->a = parse_not();
    leave();
    return node;
}

ExprPtr Parser::parse_compare() {
    static const std::array<const char *, 6> ops = {"==", "!=", "<", "<=", ">", ">="};
    ExprPtr first = parse_binary_level(0);
    ExprPtr node = make(ExprKind::COMPARE, peek());
    while (true) {
        std::string op;
        for (const char * candidate : ops) {
            if (at_op(candidate)) {
                op = candidate;
            }
        }
        if (op.empty() && at_name("in")) {
            op = "in";
        } else if (op.empty() && at_name("not") && at_name("in", 1)) {
            next();
            op = "not in";
        }
        if (op.empty()) {
            break;
        }
        next();
        node->ops.push_back(op);
        node->items.push_back(parse_binary_level(0));
    }
    if (node->ops.empty()) {
        return first;
    }
    node->items.insert(node->items.begin(), std::move(first));
    return node;
}

// Binary operator levels, loosest first; the last level's operands are unary expressions.
ExprPtr Parser::parse_binary_level(int level) {
    static const std::array<std::vector<const char *>, 4> levels = {{{"+", "-"}, {"~"}, {"*", "/", "//", "%"}, {"**"}}};
    if (level == static_cast<int>(levels.size())) {
        return parse_unary(true);
    }
    ExprPtr left = parse_binary_level(level + 1);
    ChainDepth depth{*this};
    while (true) {
        const char * op = nullptr;
        for (const char * candidate : levels[static_cast<size_t>(level)]) {
            op = at_op(candidate) ? candidate : op;
        }
        if (op == nullptr) {
            return left;
        }
        depth.add(peek());
        ExprPtr node = make(ExprKind::BINARY, next());
        node->name = op;
        node->a = std::move(left);
        node->b = parse_binary_level(level + 1);
        left = std::move(node);
    }
}

ExprPtr Parser::parse_unary(bool with_filter) {
    enter(peek());
    ExprPtr node;
    if (at_op("-") || at_op("+")) {
        node = make(ExprKind::UNARY, peek());
        node->name = next().text;
        node->a = parse_unary(false);
    } else {
        node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) {
        node = parse_filter_expr(std::move(node));
    }
    leave();
    return node;
}

ExprPtr Parser::parse_primary() {
    const Token & t = peek();
    ExprPtr node = make(ExprKind::LITERAL, t);
    if (t.type == TokenType::NAME) {
        const std::string & n = next().text;
        if (n == "true" || n == "True" || n == "false" || n == "False") {
            node->literal = Value::boolean(n == "true" || n == "True");
        } else if (n == "none" || n == "None") {
            node->literal = Value::none();
        } else {
            node->kind = ExprKind::NAME;
            node->name = n;
        }
    } else if (t.type == TokenType::STRING) {
        std::string s;
        while (peek().type == TokenType::STRING) {  // adjacent literals join, as in Python
            s += next().text;
        }
        node->literal = Value::string(std::move(s));
    } else if (t.type == TokenType::INT) {
        node->literal = Value::integer(next().int_value);
    } else if (t.type == TokenType::FLOAT) {
        node->literal = Value::number(next().float_value);
    } else if (at_op("(")) {
        next();
        if (skip_op(")")) {
            node->kind = ExprKind::LIST;
            node->is_tuple = true;
            return node;
        }
        node = parse_tuple(true);
        expect_op(")");
    } else if (at_op("[") || at_op("{")) {
        const bool is_dict = at_op("{");
        return parse_sequence(next(), is_dict ? "}" : "]", is_dict);
    } else {
        error(t, "expected an expression, got " + describe(t));
    }
    return node;
}

// [a, b, ...] or {k: v, ...}; a trailing comma is allowed.
ExprPtr Parser::parse_sequence(const Token & open, const char * close, bool is_dict) {
    ExprPtr node = make(is_dict ? ExprKind::DICT : ExprKind::LIST, open);
    while (!at_op(close)) {
        node->items.push_back(parse_expression());
        if (is_dict) {
            expect_op(":");
            node->items.push_back(parse_expression());
        }
        if (!skip_op(",")) {
            break;
        }
    }
    expect_op(close);
    return node;
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
    ChainDepth depth{*this};
    while (at_op(".") || at_op("[") || at_op("(")) {
        depth.add(peek());
        if (at_op(".")) {
            node = parse_dot(std::move(node));
        } else if (at_op("[")) {
            node = parse_subscript(std::move(node));
        } else {
            node = parse_call(std::move(node));
        }
    }
    return node;
}

// x.name, or x.0 (which is x[0]).
ExprPtr Parser::parse_dot(ExprPtr node) {
    const Token & dot = next();
    if (peek().type == TokenType::INT) {
        ExprPtr item = make(ExprKind::ITEM, dot);
        item->a = std::move(node);
        item->b = make(ExprKind::LITERAL, peek());
        item->b->literal = Value::integer(next().int_value);
        return item;
    }
    ExprPtr attr = make(ExprKind::ATTR, dot);
    attr->a = std::move(node);
    attr->name = expect_name().text;
    return attr;
}

ExprPtr Parser::parse_call(ExprPtr callee) {
    ExprPtr call = make(ExprKind::CALL, peek());
    call->a = std::move(callee);
    parse_call_args(*call);
    return call;
}

// x[i] or x[start:stop:step] with any part left out.
ExprPtr Parser::parse_subscript(ExprPtr node) {
    const Token & open = next();
    ExprPtr start;
    if (!at_op(":")) {
        start = parse_expression();
        if (skip_op("]")) {
            ExprPtr item = make(ExprKind::ITEM, open);
            item->a = std::move(node);
            item->b = std::move(start);
            return item;
        }
    }
    ExprPtr slice = make(ExprKind::SLICE, open);
    slice->a = std::move(node);
    expect_op(":");
    ExprPtr stop = at_op(":") || at_op("]") ? nullptr : parse_expression();
    ExprPtr step;
    if (skip_op(":") && !at_op("]")) {
        step = parse_expression();
    }
    expect_op("]");
    slice->items.push_back(std::move(start));
    slice->items.push_back(std::move(stop));
    slice->items.push_back(std::move(step));
    return slice;
}

// Filters, tests and calls, in any order: x|f(1) is defined, f(x)|g.
ExprPtr Parser::parse_filter_expr(ExprPtr node) {
    ChainDepth depth{*this};
    while (at_op("|") || at_name("is") || at_op("(")) {
        depth.add(peek());
        if (at_op("|")) {
            ExprPtr filter = make(ExprKind::FILTER, next());
            filter->name = expect_name().text;
            filter->a = std::move(node);
            if (at_op("(")) {
                parse_call_args(*filter);
            }
            node = std::move(filter);
        } else if (at_name("is")) {
            node = parse_test(std::move(node));
        } else {
            node = parse_call(std::move(node));
        }
    }
    return node;
}

// `is [not] name`, `is name(args)` or `is name arg` (one primary argument, e.g. `is sameas false`).
ExprPtr Parser::parse_test(ExprPtr node) {
    ExprPtr test = make(ExprKind::TEST, next());
    test->negated = skip_name("not");
    test->name = expect_name().text;
    test->a = std::move(node);
    if (at_op("(")) {
        parse_call_args(*test);
        return test;
    }
    const Token & t = peek();
    static const std::array<const char *, 8> stop_words = {"else", "or", "and", "if", "in", "not", "is", "recursive"};
    bool takes_arg = t.type == TokenType::STRING || t.type == TokenType::INT || t.type == TokenType::FLOAT ||
                     at_op("[") || at_op("{") || t.type == TokenType::NAME;
    for (const char * word : stop_words) {
        takes_arg = takes_arg && !at_name(word);
    }
    if (takes_arg) {
        test->items.push_back(parse_postfix(parse_primary()));
    }
    return test;
}

void Parser::parse_call_args(Expr & call) {
    expect_op("(");
    while (!at_op(")")) {
        if (at_op("*") || at_op("**")) {
            error(peek(), "*args and **kwargs in calls are not supported");
        }
        if (peek().type == TokenType::NAME && at_op("=", 1)) {
            const std::string key = next().text;
            next();
            call.kwargs.emplace_back(key, parse_expression());
        } else {
            if (!call.kwargs.empty()) {
                error(peek(), "positional argument after a keyword argument");
            }
            call.items.push_back(parse_expression());
        }
        if (!skip_op(",")) {
            break;
        }
    }
    expect_op(")");
}

}  // namespace tinkerd::chat_template
