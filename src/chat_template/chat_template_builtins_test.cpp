// Chat template interpreter, builtin tests: str and dict methods, Jinja filters (incl. transformers'
// tojson), tests (`is defined`, `is mapping`, ...), and the global functions. Expected strings were
// rendered by Python Jinja2 3.1 with the settings transformers uses.
#include <ctime>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "chat_template/render_cases.h"

namespace tinkerd::chat_template {
namespace {

using nlohmann::json;

// str methods as Python has them, by character (not byte).
TEST(ChatTemplateMethods, StringMethodsLikePython) {
    expect_renders({
        {"[{{ '  pad \\n'.strip() }}] [{{ 'xxaxx'.strip('x') }}] [{{ '\\n\\nab\\n'.lstrip('\\n') }}] [{{ 'ab  "
         "'.rstrip() }}] [{{ '  ab'.lstrip() }}]",
         "[pad] [a] [ab\n] [ab] [ab]"},
        {"{{ 'a<think>b</think>c'.split('</think>') }} {{ 'a<think>b</think>c'.split('</think>')[-1] }} {{ ' a  b "
         "'.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a=b=c'.rsplit('=', 1) }}",
         "['a<think>b', 'c'] c ['a', 'b'] ['a', 'b,c'] ['a=b', 'c']"},
        {"{{ 'hello'.startswith('he') }} {{ 'hello'.endswith('lo') }} {{ 'hello'.startswith(('x', 'h')) }} {{ "
         "'hello'.endswith('x') }}",
         "True True True False"},
        {"{{ 'a b'.upper() }} {{ 'A B'.lower() }} {{ 'hello world x1y'.title() }} {{ 'hELLO'.capitalize() }} {{ "
         "'aXa'.replace('a', 'b') }} {{ 'aaa'.replace('a', 'b', 2) }}",
         "A B a b Hello World X1Y Hello bXb bba"},
        {"{{ 'abcb'.find('b') }} {{ 'abcb'.rfind('b') }} {{ 'abcb'.find('z') }} {{ 'abcb'.count('b') }} {{ "
         "'-'.join(['a', 'b', 'c']) }} {{ 'a\\nb\\r\\nc'.splitlines() }}",
         "1 3 -1 2 a-b-c ['a', 'b', 'c']"},
        {"{{ '123'.isdigit() }} {{ '12a'.isdigit() }} {{ ' \\n'.isspace() }}", "True False True"},
    });
}

// dict.get/items/keys/values; keys keep their order.
TEST(ChatTemplateMethods, DictMethods) {
    expect_renders({
        {"{{ {'a': 1}.get('a') }} {{ {'a': 1}.get('b') }} {{ {'a': 1}.get('b', 'dflt') }}", "1 None dflt"},
        {"{% for k, v in {'b': 1, 'a': 2}.items() %}{{ k }}={{ v }};{% endfor %} {{ {'b': 1, 'a': 2}.keys()|list }} {{ "
         "{'b': 1, 'a': 2}.values()|list }}",
         "b=1;a=2; ['b', 'a'] [1, 2]"},
        {"{{ {'b': 1, 'a': 2}.items()|list }} {{ {'b': 1, 'a': 2}|items|list }}",
         "[('b', 1), ('a', 2)] [('b', 1), ('a', 2)]"},
    });
}

// Jinja's filters with Jinja 3.1's semantics.
TEST(ChatTemplateFilters, JinjaFilters) {
    expect_renders({
        {"[{{ '  x  '|trim }}] [{{ 'xxyxx'|trim('x') }}] [{{ undefined_name|trim }}] {{ 'Hello'|lower }} {{ "
         "'Hello'|upper }} {{ 'hELLO wORLD'|capitalize }}",
         "[x] [y] [] hello HELLO Hello world"},
        {"{{ 'hello-world foo(bar) [baz] <q> they\\'re'|title }} {{ 'aXa'|replace('a', 'b') }} {{ 'aaa'|replace('a', "
         "'b', 2) }} {{ 'Ünï'|lower }} {{ 'éa'|upper }}",
         "Hello-World Foo(Bar) [Baz] <Q> They're bXb bba ünï ÉA"},
        {"{{ [1, 2, 3]|length }} {{ 'héllo'|length }} {{ {'a': 1}|count }} {{ undefined_name|length }}", "3 5 1 0"},
        {"{{ [1, 2, 3]|first }} {{ [1, 2, 3]|last }} {{ 'abc'|first }} [{{ []|first }}]", "1 3 a []"},
        {"{{ [1, 2]|join }} {{ ['a', 'b']|join(', ') }} {{ [{'n': 'x'}, {'n': 'y'}]|join('-', attribute='n') }}",
         "12 a, b x-y"},
        {"{{ undefined_name|default('dflt') }} [{{ ''|default('dflt') }}] {{ ''|default('dflt', true) }} {{ "
         "none|d('dflt') }} {{ 0|d('z', boolean=true) }}",
         "dflt [] dflt None z"},
        {"{{ '42'|int + 1 }} {{ '1.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ -3.9|int }} {{ '0x1A'|int "
         "}} {{ '1A'|int(base=16) }} {{ true|int }} {{ '2.5'|float }} {{ 'x'|float }} {{ 3|float }}",
         "43 1 0 7 3 -3 0 26 1 2.5 0.0 3.0"},
        {"{{ 5|string ~ 'x' }} {{ [1]|string }} {{ 'ab'|list }} {{ {'a': 1, 'b': 2}|list }} {{ none|string }}",
         "5x [1] ['a', 'b'] ['a', 'b'] None"},
        {"{{ [{'r': 'a', 'v': 1}, {'r': 'b'}, {'r': 'a', 'v': 3}]|selectattr('r', 'equalto', "
         "'a')|map(attribute='v')|list }} {{ [{'v': 1}, {'w': 2}]|selectattr('v', 'defined')|list }} {{ [{'v': 1}, "
         "{'w': 2}]|rejectattr('v', 'defined')|list }} {{ [{'v': 0}, {'v': 2}]|selectattr('v')|list }}",
         "[1, 3] [{'v': 1}] [{'w': 2}] [{'v': 2}]"},
        {"{{ [{'a': 1}, {'b': 2}]|map(attribute='a')|list }} {{ [{'a': 1}, {'b': 2}]|map(attribute='a', "
         "default=0)|list }} {{ ['a', 'b']|map('upper')|list }} {{ [' a ', 'b ']|map('trim')|join('|') }}",
         "[1, Undefined] [1, 0] ['A', 'B'] a|b"},
        {"{{ [1, 2, 3, 4]|select('even')|list }} {{ [1, 2, 3, 4]|reject('odd')|list }} {{ [0, 1, '', 'x']|select|list "
         "}} {{ [1, 5, 9]|select('gt', 4)|list }}",
         "[2, 4] [2, 4] [1, 'x'] [5, 9]"},
        {"{{ 'abc'|reverse }} {{ [1, 2, 3]|reverse|list }} {{ ['b', 'A', 'a', 'B']|unique|list }} {{ ['b', 'A', "
         "'a']|unique(case_sensitive=true)|list }} {{ [3, 1, 2]|sort }} {{ ['b', 'A', 'c']|sort }} {{ [3, 1, "
         "2]|sort(reverse=true) }} {{ [{'k': 2}, {'k': 1}]|sort(attribute='k') }}",
         "cba [3, 2, 1] ['b', 'A'] ['b', 'A', 'a'] [1, 2, 3] ['A', 'b', 'c'] [3, 2, 1] [{'k': 1}, {'k': 2}]"},
        {"{{ [1, 2, 3]|sum }} {{ [{'n': 2}, {'n': 5}]|sum(attribute='n') }} {{ [3, 1, 2]|min }} {{ [3, 1, 2]|max }} {{ "
         "-3|abs }} {{ '<a href=\"x\">&</a>'|e }} {{ 'x'|safe }}",
         "6 7 1 3 3 &lt;a href=&#34;x&#34;&gt;&amp;&lt;/a&gt; x"},
        {"{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ "
         "'x\\ny'|indent('> ') }}",
         "a\n    b\n\n    c|  a\n  b|a\n  \n  b|x\n> y"},
        {"{{ messages|map(attribute='role')|join(',') }} {{ messages|selectattr('role', 'equalto', 'user')|list|length "
         "}} {{ (messages|last).content }} {{ messages[0]|attr('role') }}",
         "system,user 1 Hi there "},
    });
}

// tojson is json.dumps(x, ensure_ascii=False) as transformers defines it: no HTML escaping, key order kept.
TEST(ChatTemplateFilters, TojsonIsTransformersJsonDumps) {
    expect_renders({
        {"{{ {'name': 'f', 'args': {'x': 1, 'y': [1.5, none, true, false]}, 'empty': {}, 'list': []}|tojson }}",
         "{\"name\": \"f\", \"args\": {\"x\": 1, \"y\": [1.5, null, true, false]}, \"empty\": {}, \"list\": []}"},
        {"{{ 'quote \" back \\\\ nl \\n tab \\t ctl \\x01 del \\x7f é 😀 </script>'|tojson }}",
         "\"quote \\\" back \\\\ nl \\n tab \\t ctl \\u0001 del \177 é 😀 </script>\""},
        {"{{ {'é': 'ü'}|tojson(ensure_ascii=true) }} {{ '😀'|tojson(true) }}",
         "{\"\\u00e9\": \"\\u00fc\"} \"\\ud83d\\ude00\""},
        {"{{ {'b': 1, 'a': [1, {'c': []}]}|tojson(indent=2) }}",
         "{\n  \"b\": 1,\n  \"a\": [\n    1,\n    {\n      \"c\": []\n    }\n  ]\n}"},
        {"{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }} {{ {'a': [1, 2]}|tojson(separators=(',', ':')) }} {{ [1, "
         "[2]]|tojson(indent='\\t') }}",
         "{\"a\": 2, \"b\": 1} {\"a\":[1,2]} [\n\t1,\n\t[\n\t\t2\n\t]\n]"},
        {"{{ 1|tojson }} {{ 1.0|tojson }} {{ 1e20|tojson }} {{ none|tojson }} {{ 'x'|tojson }} {{ (1, 2)|tojson }}",
         "1 1.0 1e+20 null \"x\" [1, 2]"},
    });
}

// `is` tests; note `true is number` and `0 is false` behave as in Python.
TEST(ChatTemplateTests, IsTests) {
    expect_renders({
        {"{{ x is defined }} {{ x is undefined }} {{ messages is defined }} {{ none is none }} {{ 0 is none }} {{ 1 is "
         "not none }}",
         "False True True True False True"},
        {"{{ 'a' is string }} {{ 1 is string }} {{ {} is mapping }} {{ [] is mapping }} {{ [] is iterable }} {{ 'a' is "
         "iterable }} {{ 1 is iterable }} {{ 'a' is sequence }} {{ {} is sequence }} {{ 1 is sequence }}",
         "True False True False True True False True True False"},
        {"{{ 1 is number }} {{ 1.5 is number }} {{ true is number }} {{ 'a' is number }} {{ 1 is integer }} {{ true is "
         "integer }} {{ 1.0 is float }} {{ true is boolean }} {{ 1 is boolean }}",
         "True True True False True False True True False"},
        {"{{ false is false }} {{ 0 is false }} {{ true is true }} {{ 1 is true }} {{ none is false }}",
         "True False True False False"},
        {"{{ 3 is odd }} {{ 3 is even }} {{ 4 is divisibleby(2) }} {{ 4 is divisibleby 3 }} {{ 2 is eq 2 }} {{ 2 is "
         "equalto 3 }} {{ 2 is gt 1 }} {{ 2 is lt 1 }} {{ 1 is in [1] }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ "
         "none is sameas none }} {{ range is callable }}",
         "True False True False True False True False True True True True True"},
    });
}

TEST(ChatTemplateGlobals, StrftimeNowFormatsTheCurrentDate) {
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char year[8];
    std::strftime(year, sizeof year, "%Y", &local);
    const std::string out = render("{{ strftime_now('%Y') }}|{{ strftime_now('%d %b %Y')|length }}");
    // Around midnight on New Year's Eve the year could change between the two calls; that is all.
    EXPECT_TRUE(out == std::string(year) + "|11" || out.size() == 7) << out;
}

TEST(ChatTemplateGlobals, TemplateVariablesCanShadowGlobals) {
    EXPECT_EQ(render("{% set range = 'mine' %}{{ range }}"), "mine");
    EXPECT_EQ(render("{{ namespace is defined }} {{ raise_exception is defined }}"), "True True");
}

}  // namespace
}  // namespace tinkerd::chat_template
