// Syntax: the lexer's tokens, the tree the parser builds, and the Parser itself. The lexer (lexer.cpp)
// owns all whitespace rules; the parser is split into statements (parser.cpp) and expressions
// (parse_expr.cpp, Jinja's precedence: filters and tests bind tighter than arithmetic). Internal.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat_template/value.h"

namespace tinkerd::chat_template {

// ---- Tokens (lexer.cpp): {%- -%} {{- -}} {#- -#}, {%+ +%}, trim_blocks and lstrip_blocks as Jinja
// applies them, comments, {% raw %}, newline normalisation and the dropped final newline
// (keep_trailing_newline=False) are all resolved here.

enum class TokenType {
    TEXT,         // literal template text, already whitespace-trimmed
    VAR_BEGIN,    // {{
    VAR_END,      // }}
    BLOCK_BEGIN,  // {%
    BLOCK_END,    // %}
    NAME,
    STRING,  // text holds the unescaped value
    INT,
    FLOAT,
    OP,  // text holds the operator: + - * / // % ** ~ == != < <= > >= ( ) [ ] { } , . : | =
    END_OF_INPUT,
};

struct Token {
    TokenType type = TokenType::END_OF_INPUT;
    std::string text;
    int64_t int_value = 0;
    double float_value = 0.0;
    int line = 1;
    int column = 1;
};

// Throws TemplateError("syntax error at line L, column C: ...") on malformed input.
std::vector<Token> lex(const std::string & source);

// "line L, column C" prefix used by every syntax error.
[[noreturn]] void syntax_error(int line, int column, const std::string & message);

// ---- The syntax tree: small tagged nodes that keep their source line (runtime errors name it).

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
    LITERAL,   // literal
    NAME,      // name
    LIST,      // items (tuple: is_tuple)
    DICT,      // items: key, value, key, value, ...
    ATTR,      // a.name
    ITEM,      // a[b]
    SLICE,     // a[items[0]:items[1]:items[2]], each possibly null
    CALL,      // a(items..., kwargs...)
    FILTER,    // a | name(items..., kwargs...)
    TEST,      // a is [not] name(items..., kwargs...)
    UNARY,     // name ("-", "+", "not") a
    BINARY,    // a name b, name one of + - * / // % ** ~
    COMPARE,   // items[0] ops[0] items[1] ops[1] items[2] ...  (Python chaining)
    AND,       // a and b
    OR,        // a or b
    CONDITION  // a if b else c (c may be null: undefined)
};

struct Expr {
    ExprKind kind = ExprKind::LITERAL;
    int line = 0;
    Value literal;
    std::string name;
    ExprPtr a, b, c;
    std::vector<ExprPtr> items;
    std::vector<std::pair<std::string, ExprPtr>> kwargs;
    std::vector<std::string> ops;
    bool negated = false;  // TEST: `is not`
    bool is_tuple = false;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind {
    TEXT,       // text
    OUTPUT,     // {{ expr }}
    IF,         // branches: (condition, body) ...; the else branch has a null condition
    FOR,        // for targets in expr [if filter] body [else else_body]
    SET,        // set targets = expr; set targets[0].attr = expr (namespace)
    SET_BLOCK,  // set targets[0] %} body {% endset
    MACRO,      // macro name(params) body
    BREAK,
    CONTINUE,
};

struct Stmt {
    StmtKind kind = StmtKind::TEXT;
    int line = 0;
    std::string text;
    ExprPtr expr;
    ExprPtr filter;
    std::vector<std::string> targets;
    std::string attr;  // SET on a namespace attribute
    std::vector<std::pair<ExprPtr, Body>> branches;
    Body body;
    Body else_body;
    std::string name;
    std::vector<std::pair<std::string, ExprPtr>> params;  // MACRO: name and default (may be null)
};

struct Program {
    Body body;
};

// Parses a whole template (see parser.cpp); throws TemplateError with line and column on bad syntax.
Program parse_template(const std::string & source);

// ---- The parser: tokens -> syntax tree.

class Parser {
  public:
    explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}
    Program parse_program();

  private:
    std::vector<Token> tokens_;
    size_t pos_ = 0;
    int loop_depth_ = 0;                                    // for break/continue
    int nesting_ = 0;                                       // recursion guard for deeply nested input
    std::vector<std::pair<std::string, int>> open_blocks_;  // innermost last: tag name and line, for errors

    // Token stream.
    const Token & peek(size_t ahead = 0) const;
    const Token & next();
    bool at_op(const char * op, size_t ahead = 0) const;
    bool at_name(const char * name, size_t ahead = 0) const;
    bool skip_op(const char * op);
    bool skip_name(const char * name);
    const Token & expect_op(const char * op);
    const Token & expect_name();
    void expect_block_end();
    [[noreturn]] void error(const Token & at, const std::string & message) const;
    static std::string describe(const Token & t);
    void enter(const Token & at);  // nesting_ guard
    void leave() { --nesting_; }
    // Each link of a left-nested chain (a + b + c, x.y.z, x|f|g) deepens the tree as a nested
    // expression does, so it counts against the same budget until the chain is parsed.
    struct ChainDepth {
        Parser & parser;
        int links = 0;
        void add(const Token & at) {
            parser.enter(at);
            ++links;
        }
        ~ChainDepth() { parser.nesting_ -= links; }
    };

    // Statements (parser.cpp).
    Body parse_body(const std::vector<std::string> & end_tags, std::string * found);
    StmtPtr parse_output();
    void parse_tag(const Token & tag, Body & out);
    StmtPtr parse_if(const Token & tag);
    StmtPtr parse_for(const Token & tag);
    StmtPtr parse_set(const Token & tag);
    StmtPtr parse_macro(const Token & tag);
    std::vector<std::string> parse_target_names();
    Body parse_block_body(const std::string & tag, int line, const std::vector<std::string> & end_tags,
                          std::string * found);

    // Expressions (parse_expr.cpp).
    ExprPtr parse_tuple(bool with_condition);
    ExprPtr parse_expression();
    ExprPtr parse_or();
    ExprPtr parse_and();
    ExprPtr parse_not();
    ExprPtr parse_compare();
    ExprPtr parse_binary_level(int level);
    ExprPtr parse_unary(bool with_filter);
    ExprPtr parse_primary();
    ExprPtr parse_sequence(const Token & open, const char * close, bool is_dict);
    ExprPtr parse_postfix(ExprPtr node);
    ExprPtr parse_dot(ExprPtr node);
    ExprPtr parse_call(ExprPtr callee);
    ExprPtr parse_subscript(ExprPtr node);
    ExprPtr parse_filter_expr(ExprPtr node);
    ExprPtr parse_test(ExprPtr node);
    void parse_call_args(Expr & call);
    ExprPtr make(ExprKind kind, const Token & at) const;
};

}  // namespace tinkerd::chat_template
