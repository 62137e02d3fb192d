// Chat template interpreter, language tests: whitespace control (trim_blocks, lstrip_blocks, -/+ markers,
// comments, raw), literals and Python printing, operators, attribute/item/slice access, loops, set,
// namespace and macros, and errors (syntax errors with positions, runtime errors with lines). Expected
// strings were rendered by Python Jinja2 3.1 with the settings transformers uses.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "chat_template/render_cases.h"

namespace tinkerd::chat_template {
namespace {

using nlohmann::json;

// trim_blocks eats the newline after a block tag, lstrip_blocks its indentation; - and + override.
TEST(ChatTemplateWhitespace, TrimBlocksLstripBlocksAndMarkers) {
    expect_renders({
        {"{% if true %}\nyes\n{% endif %}\nafter", "yes\nafter"},
        {"<ul>\n    {% for r in ['a', 'b'] %}\n    <li>{{ r }}</li>\n    {% endfor %}\n</ul>",
         "<ul>\n    <li>a</li>\n    <li>b</li>\n</ul>"},
        {"a  {%- if true -%}  b  {%- endif -%}  c", "abc"},
        {"a\n  {{- 'b' -}}\n  c", "abc"},
        {"  {{ 'v' }}  \n{{ 'w' }}", "  v  \nw"},
        {"x\n    {%+ if true %}kept indent{% endif %}", "x\n    kept indent"},
        {"{% if true +%}\nkept newline{% endif %}", "\nkept newline"},
        {"a{# a comment #}\nb", "ab"},
        {"a\n    {# indented comment #}\nb", "a\nb"},
        {"a {#- strip both -#} b", "ab"},
        {"{% raw %}{{ not evaluated }} {% if %}{% endraw %}\nz", "{{ not evaluated }} {% if %}z"},
        {"line1\r\nline2\r\n{% if true %}\r\nx\r\n{% endif %}\r\n", "line1\nline2\nx\n"},
        {"trailing newline dropped\n", "trailing newline dropped"},
        {"two trailing newlines keep one\n\n", "two trailing newlines keep one\n"},
        {"{{ 'a' }}{{ 'b' }}\n{{ 'c' }}", "ab\nc"},
        {"{% set x = 1 %}\n{% set y = 2 %}\n{{ x + y }}", "3"},
        {"{%- for m in messages %}\n    {{- m.role }}\n    {%- if not loop.last %}, {% endif %}\n{%- endfor %}",
         "system, user"},
        {"\t{% if true %}\ttab{% endif %}", "\ttab"},
    });
}

// Literals, and values printed as Python's str()/repr() would.
TEST(ChatTemplateLiterals, PrintLikePython) {
    expect_renders({
        {"{{ none }} {{ None }} {{ true }} {{ False }} {{ 42 }} {{ -7 }} {{ 1_000 }} {{ 0x1F }}",
         "None None True False 42 -7 1000 31"},
        {"{{ 1.0 }} {{ 2.50 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 0.1 + 0.2 }} {{ -0.0 }} {{ 1.5e-7 "
         "}}",
         "1.0 2.5 1e+16 1000000000000000.0 0.0001 1e-05 0.30000000000000004 -0.0 1.5e-07"},
        {"{{ 'single' }} {{ \"double\" }} {{ 'esc\\'aped' }} {{ \"tab\\there\" }} {{ 'a' 'b' }} {{ '\\u00e9\\x41\\101' "
         "}}",
         "single double esc'aped tab\there ab éAA"},
        {"{{ [1, 'two', none, true, 2.5] }}", "[1, 'two', None, True, 2.5]"},
        {"{{ {'k': 'v', 'n': [1, {'x': none}]} }}", "{'k': 'v', 'n': [1, {'x': None}]}"},
        {"{{ (1, 'a') }} {{ (1,) }} {{ () }} {{ 1, 2 }}", "(1, 'a') (1,) () (1, 2)"},
        {"{{ [\"it's\", 'say \"hi\"', 'both \\'\"', 'nl\\n', 'back\\\\slash'] }}",
         "[\"it's\", 'say \"hi\"', 'both \\'\"', 'nl\\n', 'back\\\\slash']"},
        {"{{ ['\\x01', '\\x7f', '\\u00a0', 'é', '\\u2028'] }}", "['\\x01', '\\x7f', '\\xa0', 'é', '\\u2028']"},
        {"{{ {'a': 1}['a'] }}{{ [1, 2][1] }}{{ 'xyz'[2] }}", "12z"},
    });
}

// Arithmetic, concatenation, comparisons, and/or/not, inline if, and Jinja's precedence.
TEST(ChatTemplateOperators, PythonArithmeticComparisonAndLogic) {
    expect_renders({
        {"{{ 1 + 2 }} {{ 7 - 10 }} {{ 3 * 4 }} {{ 7 / 2 }} {{ 6 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % "
         "3 }} {{ 2 ** 10 }} {{ 2 ** -1 }}",
         "3 -3 12 3.5 3.0 3 -4 1 2 1024 0.5"},
        {"{{ 1.5 + 1 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ true + true }}", "2.5 3.0 0.5 2"},
        {"{{ 'ab' + 'cd' }} {{ [1] + [2, 3] }} {{ 'ab' * 3 }} {{ 2 * [0] }}", "abcd [1, 2, 3] ababab [0, 0]"},
        {"{{ 'a' ~ 1 ~ none ~ true ~ 2.0 ~ undefined_name }}", "a1NoneTrue2.0"},
        {"{{ 2 + 3 * 4 }} {{ (2 + 3) * 4 }} {{ 2 * 3 ~ 4 }} {{ -2 ** 2 }} {{ 10 - 2 - 3 }} {{ 2 ** 3 ** 2 }}",
         "14 20 64 4 5 64"},
        {"{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' != 'b' }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'abc' < 'abd' }} {{ [1, "
         "2] < [1, 3] }} {{ 2 >= 2 }} {{ 1 <= 0 }}",
         "True True True True False True True True False"},
        {"{{ 1 in [1, 2] }} {{ 3 not in [1, 2] }} {{ 'ell' in 'hello' }} {{ 'k' in {'k': 1} }} {{ 'x' in "
         "undefined_name }}",
         "True True True True False"},
        {"{{ 1 and 'x' }}|{{ 0 and 'x' }}|{{ 0 or 'y' }}|{{ '' or [] }}|{{ not 0 }}|{{ not 'a' == 'a' }}",
         "x|0|y|[]|True|False"},
        {"{{ 'yes' if 1 else 'no' }} {{ 'yes' if 0 else 'no' }} [{{ 'only' if false }}] {{ 'a' if 0 else 'b' if 0 else "
         "'c' }}",
         "yes no [] c"},
        {"{{ messages|length - 1 }} {{ [3, 4]|first + 1 }}", "1 4"},
        {"{{ undefined_name == undefined_name }} {{ undefined_name == none }} {{ none == none }} {{ {'a': 1} == {'a': "
         "1.0} }} {{ (1, 2) == [1, 2] }}",
         "True False True True False"},
    });
}

// Attribute/item access and slices; what is missing is undefined and prints nothing.
TEST(ChatTemplateAccess, AttributesItemsSlicesAndUndefined) {
    expect_renders({
        {"{{ messages[0].role }} {{ messages[0]['content'] }} {{ messages.1.role }} {{ messages[-1].content }}",
         "system Be brief. user Hi there"},
        {"[{{ messages[0].missing }}] [{{ messages[7] }}] [{{ messages[0].missing is defined }}] [{{ none.attr }}]",
         "[] [] [False] []"},
        {"{{ messages[1:]|length }} {{ (messages[::-1]|first).role }} {{ [1, 2, 3, 4, 5][1:4] }} {{ [1, 2, 3, 4, "
         "5][::2] }} {{ [1, 2, 3, 4, 5][4:0:-2] }} {{ [1, 2, 3][-10:10] }} {{ [1, 2, 3][:-1] }}",
         "1 user [2, 3, 4] [1, 3, 5] [5, 3] [1, 2, 3] [1, 2]"},
        {"{{ 'héllo'[1] }} {{ 'héllo'[::-1] }} {{ 'héllo'[1:3] }} {{ 'abcdef'[1:5:2] }} {{ 'abc'[-1] }}",
         "é olléh él bd c"},
        {"{{ {'items': 'key'}['items'] }} {{ {'a': {'b': [10, 20]}}.a.b[1] }}", "key 20"},
    });
}

// for loops: the loop object, if-filters, else, break/continue, unpacking, per-iteration scope.
TEST(ChatTemplateLoops, LoopVariablesFiltersElseBreakContinueAndScope) {
    expect_renders({
        {"{% for a in ['x', 'y', 'z'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ "
         "loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}",
         "1032TrueFalse3y;2121FalseFalse3xz;3210FalseTrue3y;"},
        {"{% for a in [1, 2, 3, 4] if a is even %}{{ loop.index }}:{{ a }}/{{ loop.length }} {% endfor %}",
         "1:2/2 2:4/2 "},
        {"{% for a in [] %}x{% else %}empty{% endfor %} {% for a in [1, 3] if a is even %}x{% else %}none even{% "
         "endfor %} {% for a in undefined_name %}x{% else %}undef is empty{% endfor %}",
         "empty none even undef is empty"},
        {"{% for a in [1, 2, 3, 4] %}{% if a == 2 %}{% continue %}{% endif %}{{ a }}{% if a == 3 %}{% break %}{% endif "
         "%}{% endfor %}",
         "13"},
        {"{% for a in [1, 2] %}{% for b in [1, 2, 3] %}{% if b == 3 %}{% break %}{% endif %}{{ a }}{{ b }} {% endfor "
         "%}{% endfor %}",
         "11 12 21 22 "},
        {"{% for k, v in {'b': 1, 'a': 2}|items %}{{ k }}={{ v }} {% endfor %}{% for (x, y) in [[1, 2], [3, 4]] %}{{ x "
         "+ y }} {% endfor %}{% for k in {'p': 1, 'q': 2} %}{{ k }}{% endfor %} {% for c in 'hé' %}[{{ c }}]{% endfor "
         "%}",
         "b=1 a=2 3 7 pq [h][é]"},
        {"{% for a in [1, 2, 3] %}{{ loop.cycle('odd', 'even') }} {% endfor %}", "odd even odd "},
        {"{% for a in [1, 2] %}{% for b in [3, 4] %}{{ loop.index }}{% endfor %}/{{ loop.index }} {% endfor %}",
         "12/1 12/2 "},
        {"{% for i in [1, 2] %}{% if i == 2 %}[{{ y }}]{% endif %}{% set y = i %}{% endfor %}[{{ y }}]", "[][]"},
        {"{% set x = 'outer' %}{% for i in [1, 2] %}{{ x }}-{% set x = 'inner' %}{{ x }} {% endfor %}{{ x }}",
         "outer-inner outer-inner outer"},
        {"{% for m in messages %}{{ loop.index0 }}:{{ messages[loop.index0 - 1].role }} {% endfor %}",
         "0:user 1:system "},
        {"{% for m in messages[::-1] %}{% set index = (messages|length - 1) - loop.index0 %}{{ index }}{{ m.role[0] }} "
         "{% endfor %}",
         "1u 0s "},
    });
}

// set (plain, tuple, block), namespace(), macros with defaults and recursion, range/dict.
TEST(ChatTemplateStatements, SetNamespaceMacrosAndGlobals) {
    expect_renders({
        {"{% set a = 1 %}{% set b, c = [2, 3] %}{% set d = 4, 5 %}{{ a }}{{ b }}{{ c }}{{ d }}", "123(4, 5)"},
        {"{% if true %}{% set z = 'from if' %}{% endif %}{{ z }}", "from if"},
        {"{% set ns = namespace(count=0, found=false) %}{% for m in messages %}{% set ns.count = ns.count + 1 %}{% if "
         "m.role == 'user' %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.count }} {{ ns.found }} [{{ "
         "ns.missing }}] {{ ns }}",
         "2 True [] <Namespace {'count': 2, 'found': True}>"},
        {"{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}", "12"},
        {"{% set block %}\n  captured {{ 1 + 1 }}\n{% endset %}[{{ block }}]", "[  captured 2\n]"},
        {"{% macro tag(name, cls='plain') %}<{{ name }} class=\"{{ cls }}\">{% endmacro %}{{ tag('a') }}{{ tag('b', "
         "'fancy') }}{{ tag(cls='kw', name='c') }}",
         "<a class=\"plain\"><b class=\"fancy\"><c class=\"kw\">"},
        {"{% macro show(v) %}[{{ v }}]{% endmacro %}{{ show() }}{{ show }}", "[]<Macro 'show'>"},
        {"{% macro greet() %}{{ greeting }}, {{ who }}{% endmacro %}{% set greeting = 'Hello' %}{% set who = 'world' "
         "%}{{ greet() }}",
         "Hello, world"},
        {"{% macro count_down(n) %}{% if n > 0 %}{{ n }} {{ count_down(n - 1) }}{% endif %}{% endmacro %}{{ "
         "count_down(3) }}",
         "3 2 1 "},
        {"{% macro m(a, b=a ~ '!') %}{{ b }}{% endmacro %}{{ m('hi') }}", "hi!"},
        {"{% set messages = messages[1:] %}{{ messages|length }} {{ messages[0].role }}", "1 user"},
        {"{% for i in [1, 2] %}{% set x = i * 10 %}{% macro show() %}{{ i }}:{{ x }}:{{ loop.index }} {% endmacro %}{{ "
         "show() }}{% endfor %}",
         "1:10:1 2:20:2 "},
        {"{% set ns = namespace(a=1) %}{% set ns.self = ns %}{% for i in [1] %}{% macro m() %}{{ ns.a }}{% endmacro "
         "%}{% set ns.m = m %}{% endfor %}{{ ns.m() }}{{ ns.self.self.a }}",
         "11"},
        {"{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }} {{ dict(a=1, b='x') }} {{ "
         "dict({'k': 1}, v=2) }}",
         "[0, 1, 2] [1, 3, 5] [5, 3, 1] {'a': 1, 'b': 'x'} {'k': 1, 'v': 2}"},
    });
}

struct ErrorCase {
    const char * source;
    const char * message;  // the whole error message
};

TEST(ChatTemplateErrors, SyntaxErrorsNameLineAndColumn) {
    const std::vector<ErrorCase> cases = {
        {"{% if %}{% endif %}",
         "chat template syntax error at line 1, column 7: expected an expression, got end of statement block"},
        {"line1\n  {{ 1 +\n }}",
         "chat template syntax error at line 3, column 2: expected an expression, got end of print statement"},
        {"{% endfor %}", "chat template syntax error at line 1, column 4: unknown tag 'endfor'"},
        {"a\n{% if 1 %}\nb",
         "chat template syntax error at line 3, column 2: unexpected end of template, expected 'endif' (inside the "
         "'if' block opened at line 2)"},
        {"{% if x %}{% for a in b %}{% endif %}",
         "chat template syntax error at line 1, column 30: unknown tag 'endif' (inside the 'for' block opened at line "
         "1)"},
        {"{{ \"abc }}", "chat template syntax error at line 1, column 4: unterminated string literal"},
        {"{{ (1 }}", "chat template syntax error at line 1, column 7: unexpected '}', expected ')'"},
        {"{% break %}", "chat template syntax error at line 1, column 4: 'break' outside a for loop"},
        {"{# never closed", "chat template syntax error at line 1, column 1: missing end of comment tag"},
        {"{{ 1 }", "chat template syntax error at line 1, column 6: unexpected '}'"},
        {"{% raw %}abc", "chat template syntax error at line 1, column 1: missing {% endraw %} for this {% raw %}"},
        {"{{ '\\x4' }}", "chat template syntax error at line 1, column 8: truncated \\x escape"},
        {"{% macro f(a=1, b) %}{% endmacro %}",
         "chat template syntax error at line 1, column 17: non-default argument follows default argument"},
        {"{{ f(a=1, 2) }}",
         "chat template syntax error at line 1, column 11: positional argument after a keyword argument"},
        {"{{ $ }}", "chat template syntax error at line 1, column 4: unexpected character '$'"},
        {"{% for x in xs recursive %}{% endfor %}",
         "chat template syntax error at line 1, column 16: recursive for loops are not supported"},
    };
    for (const ErrorCase & c : cases) {
        auto tmpl = ChatTemplate::compile(c.source);
        ASSERT_FALSE(tmpl.ok()) << c.source;
        EXPECT_EQ(tmpl.error().kind, ErrorKind::INVALID_ARGUMENT);
        EXPECT_EQ(tmpl.error().message, c.message);
    }
}

TEST(ChatTemplateErrors, RuntimeErrorsNameTheLine) {
    const std::vector<ErrorCase> cases = {
        {"{{ x.y }}", "ERROR: chat template error at line 1: 'x' is undefined"},
        {"\n\n{{ messages[0].missing.deeper }}",
         "ERROR: chat template error at line 3: 'dict object' has no attribute 'missing'"},
        {"{{ 'a' + 1 }}", "ERROR: chat template error at line 1: can only concatenate str (not \"int\") to str"},
        {"{{ undefined_name + 1 }}", "ERROR: chat template error at line 1: 'undefined_name' is undefined"},
        {"{{ 1 / 0 }}", "ERROR: chat template error at line 1: division by zero"},
        {"{% for x in none %}{% endfor %}", "ERROR: chat template error at line 1: 'NoneType' object is not iterable"},
        {"{{ x | no_such_filter }}", "ERROR: chat template error at line 1: no filter named 'no_such_filter'"},
        {"{{ x is no_such_test }}", "ERROR: chat template error at line 1: no test named 'no_such_test'"},
        {"{% set x = 1 %}\n{% set x.y = 2 %}",
         "ERROR: chat template error at line 2: cannot assign attribute on non-namespace object 'x'"},
        {"{% set a, b = [1] %}", "ERROR: chat template error at line 1: cannot unpack 1 values into 2 names"},
        {"{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}",
         "ERROR: chat template error at line 1: macro 'f' takes not more than 1 argument(s)"},
        {"{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
         "ERROR: chat template error at line 1: calls nested too deeply (a macro calling itself without end?)"},
        {"{{ range(200000)|length }}", "ERROR: chat template error at line 1: range too big (more than 100000 items)"},
        {"{{ 9223372036854775807 + 1 }}",
         "ERROR: chat template error at line 1: integer overflow in a template expression"},
        {"{{ {}.pop('a') }}",
         "ERROR: chat template error at line 1: dict.pop() is not allowed: chat templates cannot change values"},
        {"{{ '%s' % 1 }}",
         "ERROR: chat template error at line 1: printf-style string formatting (str % args) is not supported in chat "
         "templates"},
    };
    for (const ErrorCase & c : cases) {
        EXPECT_EQ(render(c.source), c.message) << c.source;
    }
}

TEST(ChatTemplateErrors, RaiseExceptionGivesTheTemplatesMessage) {
    auto tmpl = ChatTemplate::compile(
        "{% if messages[0].role != 'user' %}{{ raise_exception('Conversation roles must alternate ' ~ "
        "'user/assistant') }}{% endif %}");
    ASSERT_TRUE(tmpl.ok()) << tmpl.error().message;
    auto out = tmpl->render(default_messages(), false, nullptr, "", "");
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.error().kind, ErrorKind::INVALID_ARGUMENT);
    EXPECT_EQ(out.error().message, "Conversation roles must alternate user/assistant");
}

TEST(ChatTemplateErrors, DeepNestingIsASyntaxErrorNotACrash) {
    const auto repeat = [](const std::string & s, int n) {
        std::string out;
        for (int i = 0; i < n; ++i) {
            out += s;
        }
        return out;
    };
    const std::vector<std::string> deep = {
        "{{ " + repeat("(", 5000) + "1" + repeat(")", 5000) + " }}",
        "{{ x" + repeat(".a", 20000) + " }}",
        "{{ 1" + repeat(" + 1", 20000) + " }}",
        "{{ x" + repeat("|trim", 20000) + " }}",
        repeat("{% if 1 %}", 5000) + repeat("{% endif %}", 5000),
    };
    for (const std::string & source : deep) {
        auto tmpl = ChatTemplate::compile(source);
        ASSERT_FALSE(tmpl.ok());
        EXPECT_NE(tmpl.error().message.find("nested too deeply"), std::string::npos) << tmpl.error().message;
    }
    // Chains well past what real templates use still compile.
    EXPECT_EQ(render("{{ ''" + repeat(" ~ 'a'", 100) + " }}"), repeat("a", 100));
}

}  // namespace
}  // namespace tinkerd::chat_template
