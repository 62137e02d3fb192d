// Statement execution: output, if/elif/else, for loops (the `loop` object, `if` filters, else, break,
// continue, unpacking), set (plain, tuple, namespace attribute, block) and macros. Scoping follows
// Jinja: each loop iteration and macro call has its own scope, if blocks do not.
#include "chat_template/interpreter.h"

namespace tinkerd::chat_template {

const Value * Scope::find(const std::string & name) const {
    for (const Scope * s = this; s != nullptr; s = s->parent) {
        const auto it = s->vars.find(name);
        if (it != s->vars.end()) {
            return &it->second;
        }
    }
    return nullptr;
}

namespace {

// Points the interpreter at another scope (and output) for the lifetime of the guard.
template <typename T>
class Swap {
  public:
    Swap(T & slot, T value) : slot_(slot), saved_(slot) { slot_ = value; }
    ~Swap() { slot_ = saved_; }
    Swap(const Swap &) = delete;
    Swap & operator=(const Swap &) = delete;

  private:
    T & slot_;
    T saved_;
};

void assign(Scope & scope, const std::vector<std::string> & targets, const Value & value) {
    if (targets.size() == 1) {
        scope.vars[targets[0]] = value;
        return;
    }
    const std::vector<Value> parts = iterate(value.defined_or_fail());
    if (parts.size() != targets.size()) {
        fail("cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(targets.size()) +
             " names");
    }
    for (size_t i = 0; i < targets.size(); ++i) {
        scope.vars[targets[i]] = parts[i];
    }
}

Value loop_object(const std::vector<Value> & items, size_t i) {
    const auto n = static_cast<int64_t>(items.size());
    const auto k = static_cast<int64_t>(i);
    Dict loop;
    loop.set("index", Value::integer(k + 1));
    loop.set("index0", Value::integer(k));
    loop.set("revindex", Value::integer(n - k));
    loop.set("revindex0", Value::integer(n - k - 1));
    loop.set("first", Value::boolean(k == 0));
    loop.set("last", Value::boolean(k == n - 1));
    loop.set("length", Value::integer(n));
    loop.set("depth", Value::integer(1));
    loop.set("depth0", Value::integer(0));
    if (i > 0) {
        loop.set("previtem", items[i - 1]);
    }
    if (i + 1 < items.size()) {
        loop.set("nextitem", items[i + 1]);
    }
    loop.set("cycle", Value::callable("<bound method LoopContext.cycle>", [i](Interpreter &, Args & args) {
                 if (args.positional.empty()) {
                     fail("loop.cycle() needs at least one value");
                 }
                 return args.positional[i % args.positional.size()];
             }));
    return Value::dict(std::move(loop));
}

}  // namespace

Flow Interpreter::exec(const Body & body) {
    for (const StmtPtr & stmt : body) {
        const Flow flow = exec_stmt(*stmt);
        if (flow != Flow::NORMAL) {
            return flow;
        }
    }
    return Flow::NORMAL;
}

Flow Interpreter::exec_stmt(const Stmt & s) {
    line_ = s.line;
    switch (s.kind) {
        case StmtKind::TEXT:
            *out_ += s.text;
            return Flow::NORMAL;
        case StmtKind::OUTPUT:
            *out_ += eval(*s.expr).str();
            return Flow::NORMAL;
        case StmtKind::IF:
            return exec_if(s);
        case StmtKind::FOR:
            return exec_for(s);
        case StmtKind::SET:
        case StmtKind::SET_BLOCK:
            exec_set(s);
            return Flow::NORMAL;
        case StmtKind::MACRO:
            define_macro(s);
            return Flow::NORMAL;
        case StmtKind::BREAK:
            return Flow::BREAK;
        case StmtKind::CONTINUE:
            return Flow::CONTINUE;
    }
    return Flow::NORMAL;
}

Flow Interpreter::exec_if(const Stmt & s) {
    for (const auto & [condition, body] : s.branches) {
        if (!condition || eval(*condition).truthy()) {
            return exec(body);
        }
    }
    return Flow::NORMAL;
}

Flow Interpreter::exec_for(const Stmt & s) {
    std::vector<Value> items = iterate(eval(*s.expr));
    if (s.filter) {  // `for x in xs if cond`: filtered first, so loop.length counts what is kept
        std::vector<Value> kept;
        for (Value & item : items) {
            Scope probe{scope_, {}};
            assign(probe, s.targets, item);
            Swap<Scope *> in_probe(scope_, &probe);
            if (eval(*s.filter).truthy()) {
                kept.push_back(std::move(item));
            }
        }
        items = std::move(kept);
    }
    if (items.empty()) {
        return exec(s.else_body);
    }
    for (size_t i = 0; i < items.size(); ++i) {
        Flow flow = Flow::NORMAL;
        run_iteration(s, items, i, flow);
        if (flow == Flow::BREAK) {
            break;
        }
    }
    return Flow::NORMAL;
}

void Interpreter::run_iteration(const Stmt & s, const std::vector<Value> & items, size_t i, Flow & flow) {
    Scope iteration{scope_, {}};
    assign(iteration, s.targets, items[i]);
    iteration.vars["loop"] = loop_object(items, i);
    Swap<Scope *> in_iteration(scope_, &iteration);
    flow = exec(s.body);
}

void Interpreter::exec_set(const Stmt & s) {
    if (s.kind == StmtKind::SET_BLOCK) {
        Scope block{scope_, {}};
        scope_->vars[s.targets[0]] = Value::string(capture(s.body, block));
        return;
    }
    const Value value = eval(*s.expr);
    if (s.attr.empty()) {
        assign(*scope_, s.targets, value);
        return;
    }
    const Value * target = scope_->find(s.targets[0]);
    if (target == nullptr || !target->is(Value::Kind::NAMESPACE)) {
        fail("cannot assign attribute on non-namespace object '" + s.targets[0] + "'");
    }
    target->as_namespace().attrs.set(s.attr, value);
}

std::string Interpreter::capture(const Body & body, Scope & scope) {
    std::string captured;
    Swap<std::string *> to_capture(out_, &captured);
    Swap<Scope *> in_scope(scope_, &scope);
    exec(body);
    return captured;
}

// A macro defined inside a loop or another macro sees that scope's variables as they are now (a
// snapshot the interpreter keeps); one defined at the top level sees the top level at call time.
void Interpreter::define_macro(const Stmt & s) {
    const Stmt * macro = &s;  // the tree outlives every render
    const Scope * closure = &globals_;
    if (scope_ != &globals_) {
        closures_.push_back(std::make_unique<Scope>(Scope{&globals_, {}}));
        for (const Scope * level = scope_; level != &globals_; level = level->parent) {
            for (const auto & [name, value] : level->vars) {
                closures_.back()->vars.emplace(name, value);  // inner scopes come first and win
            }
        }
        closure = closures_.back().get();
    }
    scope_->vars[s.name] = Value::callable("<Macro '" + s.name + "'>", [macro, closure](Interpreter & in, Args & args) {
        return in.call_macro(*macro, args, *closure);
    });
}

Interpreter::~Interpreter() {
    for (const auto & ns : namespaces_) {
        ns->attrs = Dict();  // breaks reference cycles such as `set ns.self = ns`
    }
}

// Arguments bind by position, then by name; missing ones take their default (evaluated in the call's
// scope, so it may use earlier parameters) or are undefined.
Value Interpreter::call_macro(const Stmt & macro, Args & args, const Scope & closure) {
    if (args.positional.size() > macro.params.size()) {
        fail("macro '" + macro.name + "' takes not more than " + std::to_string(macro.params.size()) + " argument(s)");
    }
    Scope local{&closure, {}};
    for (size_t i = 0; i < args.positional.size(); ++i) {
        local.vars[macro.params[i].first] = args.positional[i];
    }
    for (const auto & [key, value] : args.named) {
        const auto it = std::find_if(macro.params.begin(), macro.params.end(),
                                     [&key = key](const auto & p) { return p.first == key; });  // clang 14
        if (it == macro.params.end()) {
            fail("macro '" + macro.name + "' has no argument named '" + key + "'");
        }
        local.vars[key] = value;
    }
    Swap<Scope *> in_call(scope_, &local);
    for (const auto & [name, fallback] : macro.params) {
        if (!local.vars.count(name)) {
            local.vars[name] = fallback ? eval(*fallback) : Value::undefined("'" + name + "' is undefined");
        }
    }
    const int saved_line = line_;
    std::string rendered = capture(macro.body, local);
    line_ = saved_line;
    return Value::string(std::move(rendered));
}

}  // namespace tinkerd::chat_template
