// Parser, statement half (see syntax.h): the token-stream helpers, {% if %}, {% for %}, {% set %},
// {% macro %}, break/continue, {% generation %} (transformers' marker: its body is kept as is), and
// syntax errors that name the line, the column and the innermost open block.
#include <algorithm>

#include "chat_template/syntax.h"

namespace tinkerd::chat_template {

const Token & Parser::peek(size_t ahead) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
}

const Token & Parser::next() {
    const Token & t = peek();
    if (pos_ + 1 < tokens_.size()) {
        ++pos_;
    }
    return t;
}

bool Parser::at_op(const char * op, size_t ahead) const {
    return peek(ahead).type == TokenType::OP && peek(ahead).text == op;
}

bool Parser::at_name(const char * name, size_t ahead) const {
    return peek(ahead).type == TokenType::NAME && peek(ahead).text == name;
}

bool Parser::skip_op(const char * op) {
    return at_op(op) ? (next(), true) : false;
}

bool Parser::skip_name(const char * name) {
    return at_name(name) ? (next(), true) : false;
}

const Token & Parser::expect_op(const char * op) {
    if (!at_op(op)) {
        error(peek(), std::string("expected '") + op + "', got " + describe(peek()));
    }
    return next();
}

const Token & Parser::expect_name() {
    if (peek().type != TokenType::NAME) {
        error(peek(), "expected a name, got " + describe(peek()));
    }
    return next();
}

void Parser::expect_block_end() {
    if (peek().type != TokenType::BLOCK_END) {
        error(peek(), "expected end of statement block, got " + describe(peek()));
    }
    next();
}

void Parser::error(const Token & at, const std::string & message) const {
    std::string full = message;
    if (!open_blocks_.empty()) {
        full += " (inside the '" + open_blocks_.back().first + "' block opened at line " +
                std::to_string(open_blocks_.back().second) + ")";
    }
    syntax_error(at.line, at.column, full);
}

std::string Parser::describe(const Token & t) {
    switch (t.type) {
        case TokenType::TEXT:
            return "template text";
        case TokenType::VAR_BEGIN:
            return "'{{'";
        case TokenType::VAR_END:
            return "end of print statement";
        case TokenType::BLOCK_BEGIN:
            return "'{%'";
        case TokenType::BLOCK_END:
            return "end of statement block";
        case TokenType::END_OF_INPUT:
            return "end of template";
        default:
            return "'" + t.text + "'";
    }
}

// Deeper templates are refused rather than risking the stack (the tree is walked recursively).
constexpr int kMaxNesting = 256;

void Parser::enter(const Token & at) {
    if (++nesting_ > kMaxNesting) {
        error(at, "template nested too deeply");
    }
}

Program Parser::parse_program() {
    Program program;
    program.body = parse_body({}, nullptr);
    return program;
}

// Statements up to one of end_tags (whose name is stored in *found, the rest of that tag left unread),
// or to the end of input when end_tags is empty.
Body Parser::parse_body(const std::vector<std::string> & end_tags, std::string * found) {
    Body body;
    while (true) {
        const Token & t = peek();
        if (t.type == TokenType::END_OF_INPUT) {
            if (!end_tags.empty()) {
                error(t, "unexpected end of template, expected '" + end_tags.back() + "'");
            }
            return body;
        }
        if (t.type == TokenType::TEXT) {
            auto stmt = std::make_unique<Stmt>();
            stmt->kind = StmtKind::TEXT;
            stmt->line = t.line;
            stmt->text = next().text;
            body.push_back(std::move(stmt));
        } else if (t.type == TokenType::VAR_BEGIN) {
            body.push_back(parse_output());
        } else if (t.type == TokenType::BLOCK_BEGIN) {
            const Token & tag = peek(1);
            if (tag.type != TokenType::NAME) {
                error(tag, "expected a tag name, got " + describe(tag));
            }
            if (std::find(end_tags.begin(), end_tags.end(), tag.text) != end_tags.end()) {
                next();
                *found = next().text;
                return body;
            }
            next();
            parse_tag(next(), body);
        } else {
            error(t, "unexpected " + describe(t));
        }
    }
}

// {{ expression }}
StmtPtr Parser::parse_output() {
    auto stmt = std::make_unique<Stmt>();
    stmt->kind = StmtKind::OUTPUT;
    stmt->line = next().line;
    stmt->expr = parse_tuple(true);
    if (peek().type != TokenType::VAR_END) {
        error(peek(), "expected end of print statement, got " + describe(peek()));
    }
    next();
    return stmt;
}

Body Parser::parse_block_body(const std::string & tag, int line, const std::vector<std::string> & end_tags,
                              std::string * found) {
    open_blocks_.emplace_back(tag, line);
    Body body = parse_body(end_tags, found);
    open_blocks_.pop_back();
    return body;
}

void Parser::parse_tag(const Token & tag, Body & out) {
    enter(tag);
    const std::string & name = tag.text;
    if (name == "if") {
        out.push_back(parse_if(tag));
    } else if (name == "for") {
        out.push_back(parse_for(tag));
    } else if (name == "set") {
        out.push_back(parse_set(tag));
    } else if (name == "macro") {
        out.push_back(parse_macro(tag));
    } else if (name == "break" || name == "continue") {
        if (loop_depth_ == 0) {
            error(tag, "'" + name + "' outside a for loop");
        }
        expect_block_end();
        auto stmt = std::make_unique<Stmt>();
        stmt->kind = name == "break" ? StmtKind::BREAK : StmtKind::CONTINUE;
        stmt->line = tag.line;
        out.push_back(std::move(stmt));
    } else if (name == "generation") {  // transformers' assistant-mask marker: renders its body unchanged
        expect_block_end();
        std::string found;
        for (StmtPtr & stmt : parse_block_body("generation", tag.line, {"endgeneration"}, &found)) {
            out.push_back(std::move(stmt));
        }
        expect_block_end();
    } else {
        error(tag, "unknown tag '" + name + "'");
    }
    leave();
}

StmtPtr Parser::parse_if(const Token & tag) {
    auto stmt = std::make_unique<Stmt>();
    stmt->kind = StmtKind::IF;
    stmt->line = tag.line;
    ExprPtr condition = parse_tuple(false);
    expect_block_end();
    while (true) {
        std::string found;
        Body body = parse_block_body("if", tag.line, {"elif", "else", "endif"}, &found);
        stmt->branches.emplace_back(std::move(condition), std::move(body));
        if (found == "elif") {
            condition = parse_tuple(false);
            expect_block_end();
            continue;
        }
        expect_block_end();
        if (found == "else") {
            Body else_body = parse_block_body("if", tag.line, {"endif"}, &found);
            stmt->branches.emplace_back(nullptr, std::move(else_body));
            expect_block_end();
        }
        return stmt;
    }
}

// Assignment targets: `a` or `a, b` or `(a, b)`.
std::vector<std::string> Parser::parse_target_names() {
    const bool parens = skip_op("(");
    std::vector<std::string> names{expect_name().text};
    while (skip_op(",")) {
        if (peek().type != TokenType::NAME) {
            break;
        }
        names.push_back(next().text);
    }
    if (parens) {
        expect_op(")");
    }
    return names;
}

StmtPtr Parser::parse_for(const Token & tag) {
    auto stmt = std::make_unique<Stmt>();
    stmt->kind = StmtKind::FOR;
    stmt->line = tag.line;
    stmt->targets = parse_target_names();
    if (!skip_name("in")) {
        error(peek(), "expected 'in', got " + describe(peek()));
    }
    stmt->expr = parse_tuple(false);
    if (at_name("recursive")) {
        error(peek(), "recursive for loops are not supported");
    }
    if (skip_name("if")) {
        stmt->filter = parse_expression();
    }
    expect_block_end();
    std::string found;
    ++loop_depth_;
    stmt->body = parse_block_body("for", tag.line, {"endfor", "else"}, &found);
    --loop_depth_;
    expect_block_end();
    if (found == "else") {
        stmt->else_body = parse_block_body("for", tag.line, {"endfor"}, &found);
        expect_block_end();
    }
    return stmt;
}

StmtPtr Parser::parse_set(const Token & tag) {
    auto stmt = std::make_unique<Stmt>();
    stmt->kind = StmtKind::SET;
    stmt->line = tag.line;
    if (peek().type == TokenType::NAME && at_op(".", 1)) {  // set ns.attr = ...
        stmt->targets.push_back(next().text);
        next();
        stmt->attr = expect_name().text;
    } else {
        stmt->targets = parse_target_names();
    }
    if (skip_op("=")) {
        stmt->expr = parse_tuple(true);
        expect_block_end();
        return stmt;
    }
    if (stmt->targets.size() != 1 || !stmt->attr.empty()) {
        error(peek(), "expected '=', got " + describe(peek()));
    }
    expect_block_end();  // {% set x %}...{% endset %}
    stmt->kind = StmtKind::SET_BLOCK;
    std::string found;
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;  // break/continue may not leave a captured block
    stmt->body = parse_block_body("set", tag.line, {"endset"}, &found);
    loop_depth_ = saved_loop_depth;
    expect_block_end();
    return stmt;
}

StmtPtr Parser::parse_macro(const Token & tag) {
    auto stmt = std::make_unique<Stmt>();
    stmt->kind = StmtKind::MACRO;
    stmt->line = tag.line;
    stmt->name = expect_name().text;
    expect_op("(");
    while (!at_op(")")) {
        const Token & param = expect_name();
        ExprPtr fallback;
        if (skip_op("=")) {
            fallback = parse_expression();
        } else if (!stmt->params.empty() && stmt->params.back().second) {
            error(param, "non-default argument follows default argument");
        }
        stmt->params.emplace_back(param.text, std::move(fallback));
        if (!skip_op(",")) {
            break;
        }
    }
    expect_op(")");
    expect_block_end();
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;  // a macro body is not inside the caller's loop
    std::string found;
    stmt->body = parse_block_body("macro", tag.line, {"endmacro"}, &found);
    loop_depth_ = saved_loop_depth;
    expect_block_end();
    return stmt;
}

Program parse_template(const std::string & source) {
    return Parser(lex(source)).parse_program();
}

}  // namespace tinkerd::chat_template
