// Unit tests of the Jinja engine, one construct at a time. Every expected string was written by
// hand and checked against jinja2 3.1 in transformers' environment (tests/text/check_jinja_cases.py
// re-checks the table: it extracts kCases from this file).
#include <gtest/gtest.h>

#include <cctype>
#include <nlohmann/json.hpp>
#include <ostream>

#include "text/chat_template.h"

namespace epserve::text {
namespace {

struct Case {
  const char* name;
  const char* tpl;
  const char* ctx;  // JSON object
  const char* want;
};

// clang-format off
const Case kCases[] = {
  // Output, literals, whitespace control.
  {"text", R"J(plain text)J", R"J({})J", R"J(plain text)J"},
  {"print", R"J({{ a }}|{{ 'x' }}|{{ "y" }}|{{ 1 + 2 }})J", R"J({"a": "A"})J", R"J(A|x|y|3)J"},
  {"literals", R"J({{ true }} {{ True }} {{ none }} {{ None }} {{ 1.5 }} {{ 10 }} {{ -3 }})J", R"J({})J", R"J(True True None None 1.5 10 -3)J"},
  {"floats", R"J({{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1.5e-5 }} {{ 7 / 2 }} {{ 4 / 2 }})J", R"J({})J", R"J(1.0 0.30000000000000004 1e+20 1.5e-05 3.5 2.0)J"},
  {"escapes", R"J({{ 'a\nb\t\'q\' \\ \x41\u00e9' }})J", R"J({})J", "a\nb\t'q' \\ A\xc3\xa9"},
  {"adjacent strings", R"J({{ 'a' "b" 'c' }})J", R"J({})J", R"J(abc)J"},
  {"comment", R"J(a{# hidden {{ x }} #}b)J", R"J({})J", R"J(ab)J"},
  {"minus strips", "a  \n {{- 'b' -}} \n  c", R"J({})J", R"J(abc)J"},
  {"block minus", "x\n  {%- if true -%}\n  y\n  {%- endif -%}\n  z", R"J({})J", R"J(xyz)J"},
  {"trim_blocks", "{% if true %}\nline\n{% endif %}\nend", R"J({})J", "line\nend"},
  {"lstrip_blocks", "  {% if true %}\n  x\n  {% endif %}\n  {{ 'y' }}  {% if true %}z{% endif %}", R"J({})J", "  x\n  y  z"},
  {"plus disables lstrip", "  {%+ if true %}x{% endif %}", R"J({})J", "  x"},
  {"plus disables trim", "{% if true +%}\nx{% endif %}", R"J({})J", "\nx"},
  {"comment trims", "a\n  {# note #}\nb", R"J({})J", "a\nb"},
  {"var does not trim", "{{ 'a' }}\nb", R"J({})J", "a\nb"},
  {"trailing newline dropped", "x\n", R"J({})J", "x"},
  {"crlf normalized", "a\r\nb\rc", R"J({})J", "a\nb\nc"},
  // Expressions.
  {"arithmetic", R"J({{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 * 3 + 1 }} {{ (1 + 2) * 3 }})J", R"J({})J", R"J(3 -4 1 2 1024 7 9)J"},
  {"concat", R"J({{ 'a' ~ 1 ~ none ~ undefined_name }}|{{ 'ab' + 'cd' }}|{{ 'ab' * 2 }})J", R"J({})J", R"J(a1None|abcd|abab)J"},
  {"lists", R"J({{ [1, 'a', none, true, 1.5] }} {{ [1] + [2] }} {{ (1, 2) }} {{ (1,) }})J", R"J({})J", R"J([1, 'a', None, True, 1.5] [1, 2] (1, 2) (1,))J"},
  {"dict literal", R"J({{ {'k': 'v', "n": 1} }} {{ {'a': 1}['a'] }})J", R"J({})J", R"J({'k': 'v', 'n': 1} 1)J"},
  {"str repr quotes", R"J({{ ["it's", 'a"b', 'x\ny'] }})J", R"J({})J", R"J(["it's", 'a"b', 'x\ny'])J"},
  {"comparisons", R"J({{ 1 < 2 }} {{ 2 <= 1 }} {{ 'a' == 'a' }} {{ 1 == 1.0 }} {{ 1 != 2 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }})J", R"J({})J", R"J(True False True True True True False)J"},
  {"in", R"J({{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ 'x' in missing }})J", R"J({})J", R"J(True True True True False)J"},
  {"logic", R"J({{ true and 'x' }} {{ false or 'y' }} {{ not 0 }} {{ '' or [] or 'z' }} {{ none and 1 }})J", R"J({})J", R"J(x y True z None)J"},
  {"conditional expr", R"J({{ 'a' if x else 'b' }}|{{ 'c' if not x }}|{{ 1 if x else 2 if y else 3 }})J", R"J({"x": false, "y": true})J", R"J(b|c|2)J"},
  {"attribute and item", R"J({{ m.role }} {{ m['content'] }} {{ m.nested.k }} {{ l[0] }} {{ l[-1] }} {{ l.1 }})J", R"J({"m": {"role": "user", "content": "hi", "nested": {"k": 5}}, "l": [10, 20, 30]})J", R"J(user hi 5 10 30 20)J"},
  {"slices", R"J({{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ l[::2] }} {{ 'hello'[1:3] }} {{ 'héllo'[::-1] }})J", R"J({"l": [1, 2, 3, 4]})J", R"J([2, 3, 4] [1, 2, 3] [4, 3, 2, 1] [1, 3] el olléh)J"},
  {"string index unicode", R"J({{ s[0] }}{{ s[1] }}{{ s|length }})J", R"J({"s": "ñé😀"})J", R"J(ñé3)J"},
  {"percent format", R"J({{ '%s is %d years' % ('Ann', 30) }} {{ '%05.1f|%x' % (3.14159, 255) }} {{ '%s' % 'one' }} {{ '%-4s|%3s|%.2s' % ('ab', 'é', 'xyz') }})J", R"J({})J", R"J(Ann is 30 years 003.1|ff one ab  |  é|xy)J"},
  // Undefined.
  {"undefined prints empty", R"J([{{ nope }}][{{ d.missing }}][{{ l[9] }}])J", R"J({"d": {}, "l": []})J", R"J([][][])J"},
  {"undefined tests", R"J({{ nope is defined }} {{ nope is undefined }} {{ d.missing is defined }} {{ d.k is defined }})J", R"J({"d": {"k": null}})J", R"J(False True False True)J"},
  {"undefined in conditions", R"J({% if nope %}a{% else %}b{% endif %}{{ nope | length }}{% for x in nope %}x{% endfor %})J", R"J({})J", R"J(b0)J"},
  {"undefined default", R"J({{ nope | default('dflt') }} {{ '' | default('e', true) }} {{ none | d('n') }})J", R"J({})J", R"J(dflt e None)J"},
  // Statements.
  {"if elif else", R"J({% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %} {% endfor %})J", R"J({})J", R"J(one two many )J"},
  {"for loop vars", R"J({% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %})J", R"J({})J", R"J(1032TrueFalse3;2121FalseFalse3;3210FalseTrue3;)J"},
  {"previtem nextitem", R"J({% for x in [1, 2, 3] %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }} {% endfor %})J", R"J({})J", R"J(<1>2 1<2>3 2<3> )J"},
  {"loop cycle", R"J({% for x in range(4) %}{{ loop.cycle('a', 'b') }}{% endfor %})J", R"J({})J", R"J(abab)J"},
  {"for else", R"J({% for x in [] %}x{% else %}empty{% endfor %})J", R"J({})J", R"J(empty)J"},
  {"for filter", R"J({% for x in range(10) if x % 3 == 0 %}{{ x }}{{ '/' ~ loop.length if loop.last }},{% endfor %})J", R"J({})J", R"J(0,3,6,9/4,)J"},
  {"for unpack items", R"J({% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %})J", R"J({"d": {"b": 1, "a": 2}})J", R"J(b=1;a=2;)J"},
  {"for over dict", R"J({% for k in d %}{{ k }}{% endfor %})J", R"J({"d": {"x": 1, "y": 2}})J", R"J(xy)J"},
  {"nested loops", R"J({% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ b }}{% endfor %}{{ loop.index }};{% endfor %})J", R"J({})J", R"J(1x2y1;1x2y2;)J"},
  {"break continue", R"J({% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %})J", R"J({})J", R"J(0134)J"},
  {"set scoping", R"J({% set y = 1 %}{% for x in [1, 2] %}{% if loop.first %}{% set y = 5 %}{% endif %}[{{ y }}]{% endfor %}{{ y }})J", R"J({})J", R"J([5][1]1)J"},
  {"set in if is visible", R"J({% if true %}{% set v = 'in' %}{% endif %}{{ v }})J", R"J({})J", R"J(in)J"},
  {"namespace", R"J({% set ns = namespace(n=0, s='') %}{% for x in [1, 2, 3] %}{% set ns.n = ns.n + x %}{% set ns.s = ns.s ~ x %}{% endfor %}{{ ns.n }} {{ ns.s }})J", R"J({})J", R"J(6 123)J"},
  {"set tuple", R"J({% set a, b = [1, 2] %}{{ b }}{{ a }})J", R"J({})J", R"J(21)J"},
  {"block set", R"J({% set body %}Hi {{ name }}!{% endset %}[{{ body }}]{% set t | upper %} x {% endset %}[{{ t }}])J", R"J({"name": "Bo"})J", R"J([Hi Bo!][ X ])J"},
  {"macro", R"J({% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }})J", R"J({})J", R"J(Hello A! Hello B? Hello C.)J"},
  {"macro recursion", R"J({% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }})J", R"J({})J", R"J(120)J"},
  {"filter block", R"J({% filter upper %}abc{{ 'd' }}{% endfilter %})J", R"J({})J", R"J(ABCD)J"},
  {"generation tag", R"J({% generation %}kept{% endgeneration %})J", R"J({})J", R"J(kept)J"},
  // Filters.
  {"trim and case", R"J([{{ '  a b \n'|trim }}] {{ 'abc'|upper }} {{ 'ABC'|lower }} {{ 'hELLO wORLD'|capitalize }} {{ 'hello big-world(x)'|title }})J", R"J({})J", R"J([a b] ABC abc Hello world Hello Big-World(X))J"},
  {"length join", R"J({{ [1, 2]|length }} {{ 'héllo'|count }} {{ [1, 2, 3]|join(', ') }} {{ users|join('/', attribute='n') }})J", R"J({"users": [{"n": "a"}, {"n": "b"}]})J", R"J(2 5 1, 2, 3 a/b)J"},
  {"replace first last", R"J({{ 'aXbXc'|replace('X', '-') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ [3, 4]|first }} {{ [3, 4]|last }} {{ 'xyz'|first }})J", R"J({})J", R"J(a-b-c bba 3 4 x)J"},
  {"list string int float", R"J({{ 'ab'|list }} {{ 12|string ~ 'x' }} {{ '42'|int + 1 }} {{ '3.7'|int }} {{ 'x'|int(7) }} {{ '2.5'|float }} {{ 3|float }})J", R"J({})J", R"J(['a', 'b'] 12x 43 3 7 2.5 3.0)J"},
  {"items dictsort", R"J({{ d|items|list }} {{ d|dictsort }} {{ d|dictsort(by='value', reverse=true) }})J", R"J({"d": {"b": 1, "A": 3, "c": 2}})J", R"J([('b', 1), ('A', 3), ('c', 2)] [('A', 3), ('b', 1), ('c', 2)] [('A', 3), ('c', 2), ('b', 1)])J"},
  {"map select", R"J({{ ms|map(attribute='role')|list }} {{ ms|selectattr('role', 'equalto', 'user')|map(attribute='c')|join }} {{ ms|rejectattr('role', 'eq', 'user')|list|length }} {{ [1, 0, 2, none]|select|list }} {{ [1, 2, 3, 4]|reject('odd')|list }} {{ ['a', 'B']|map('upper')|list }})J", R"J({"ms": [{"role": "user", "c": "x"}, {"role": "bot", "c": "y"}, {"role": "user", "c": "z"}]})J", R"J(['user', 'bot', 'user'] xz 1 [1, 2] [2, 4] ['A', 'B'])J"},
  {"selectattr truthiness", R"J({{ ms|selectattr('tool_calls')|list|length }})J", R"J({"ms": [{"tool_calls": [1]}, {"tool_calls": []}, {}]})J", R"J(1)J"},
  {"unique sort reverse", R"J({{ ['a', 'B', 'A', 'b']|unique|list }} {{ [3, 1, 2]|sort }} {{ ['b', 'A', 'c']|sort(reverse=true) }} {{ [1, 2, 3]|reverse|list }} {{ 'abc'|reverse }})J", R"J({})J", R"J(['a', 'B'] [1, 2, 3] ['c', 'b', 'A'] [3, 2, 1] cba)J"},
  {"numeric filters", R"J({{ -3|abs }} {{ 2.5|round }} {{ 3.14159|round(2) }} {{ 2.1|round(0, 'ceil') }} {{ [1, 2, 3]|sum }} {{ [4, 2, 8]|max }} {{ [4, 2, 8]|min }})J", R"J({})J", R"J(3 2.0 3.14 3.0 6 8 2)J"},
  {"indent", R"J([{{ 'a\nb\n\nc'|indent(2) }}] [{{ 'a\nb'|indent(2, true) }}] [{{ 'a\n\nb'|indent('>', blank=true) }}])J", R"J({})J", "[a\n  b\n\n  c] [  a\n  b] [a\n>\n>b]"},
  {"safe escape format", R"J({{ '<b>'|safe }} {{ '<a href="x">&\'</a>'|escape }} {{ '%s-%s'|format('a', 2) }})J", R"J({})J", R"J(<b> &lt;a href=&#34;x&#34;&gt;&amp;&#39;&lt;/a&gt; a-2)J"},
  {"tojson", R"J({{ d|tojson }}|{{ [1, 'é', none, true, 1.5]|tojson }}|{{ 'q"\\'|tojson }})J", R"J({"d": {"b": 1, "a": [2, {"c": null}]}})J", R"J({"b": 1, "a": [2, {"c": null}]}|[1, "é", null, true, 1.5]|"q\"\\")J"},
  {"tojson options", R"J({{ d|tojson(indent=2) }}|{{ d|tojson(sort_keys=true, separators=[',', ':']) }}|{{ 'é'|tojson(ensure_ascii=true) }}|{{ []|tojson(indent=2) }})J", R"J({"d": {"b": 1, "a": [2, 3]}})J", "{\n  \"b\": 1,\n  \"a\": [\n    2,\n    3\n  ]\n}|{\"a\":[2,3],\"b\":1}|\"\\u00e9\"|[]"},
  {"unicode case", R"J({{ 'straße ñandú'|upper }} {{ 'ÉCOLE Ωmega'|lower }} {{ 'élan vital 1st'.title() }} {{ 'ñU'|capitalize }} {{ 'ñu-é'|title }} {{ 'Ñ'.isupper() }})J", R"J({})J", R"J(STRASSE ÑANDÚ école ωmega Élan Vital 1St Ñu Ñu-É True)J"},
  {"python numerics", R"J({{ 3|round }} {{ 2.5 is odd }} {{ 3.0 is odd }} {{ 3 % -1.5 }} [{{ '' % [1] }}] {{ 2 ** -1 }})J", R"J({})J", R"J(3 False True -0.0 [] 0.5)J"},
  // Tests.
  {"type tests", R"J({{ 's' is string }} {{ 1 is number }} {{ 1 is integer }} {{ 1.0 is integer }} {{ 1.0 is float }} {{ d is mapping }} {{ l is iterable }} {{ 's' is sequence }} {{ none is none }} {{ true is boolean }})J", R"J({"d": {}, "l": []})J", R"J(True True True False True True True True True True)J"},
  {"value tests", R"J({{ false is false }} {{ 0 is false }} {{ true is true }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 'a' is eq 'a' }} {{ 2 is gt 1 }} {{ 'b' is in 'abc' }} {{ 'x' is not equalto 'y' }} {{ 'ab' is lower }})J", R"J({})J", R"J(True False True True True True True True True True True)J"},
  {"callable test", R"J({% macro m() %}{% endmacro %}{{ m is callable }} {{ 'x' is callable }})J", R"J({})J", R"J(True False)J"},
  // Methods and globals.
  {"string methods", R"J({{ 'a,b,,c'.split(',') }} {{ ' x  y '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a b c'.rsplit(' ', 1) }} {{ '--x--'.strip('-') }} {{ '  y'.lstrip() }} {{ 'Hi'.startswith('H') }} {{ 'Hi'.endswith(('x', 'i')) }})J", R"J({})J", R"J(['a', 'b', '', 'c'] ['x', 'y'] ['a', 'b c'] ['a b', 'c'] x y True True)J"},
  {"more string methods", R"J({{ 'abcabc'.find('c') }} {{ 'abc'.find('z') }} {{ 'abcabc'.rfind('a') }} {{ 'aXa'.replace('a', 'b') }} {{ 'abab'.count('ab') }} {{ '-'.join(['a', 'b']) }} {{ 'hello world'.title() }} {{ 'x'.upper() }} {{ '{} and {name}'.format(1, name='n') }})J", R"J({})J", R"J(2 -1 3 bXb 2 a-b Hello World X 1 and n)J"},
  {"dict methods", R"J({{ d.keys()|list }} {{ d.values()|list }} {{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 0) }} {{ d.items()|list }})J", R"J({"d": {"a": 1, "b": 2}})J", R"J(['a', 'b'] [1, 2] 1 None 0 [('a', 1), ('b', 2)])J"},
  {"range", R"J({{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(3, 0, -1)|list }})J", R"J({})J", R"J([0, 1, 2] [1, 3, 5] [3, 2, 1])J"},
  {"dict global", R"J({{ dict(a=1, b='x') }})J", R"J({})J", R"J({'a': 1, 'b': 'x'})J"},
  {"strftime_now fixed", R"J({{ strftime_now('%Y-%m-%d %H:%M %d %b %Y %A') }})J", R"J({"strftime_now_epoch": 1721952000})J", R"J(2024-07-26 00:00 26 Jul 2024 Friday)J"},
  {"content with jinja syntax is data", R"J({{ m }})J", R"J({"m": "{{ x }} {% if y %}"})J", R"J({{ x }} {% if y %})J"},
};
// clang-format on

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class JinjaCase : public testing::TestWithParam<Case> {};

TEST_P(JinjaCase, RendersLikeJinja2) {
  const Case& c = GetParam();
  auto tpl = ChatTemplate::Parse(c.tpl, "case");
  ASSERT_TRUE(tpl.ok()) << tpl.status().ToString();
  auto out = tpl->Render(nlohmann::ordered_json::parse(c.ctx));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, c.want);
}

std::string CaseName(const testing::TestParamInfo<Case>& info) {
  std::string name;
  for (const char* p = info.param.name; *p != '\0'; ++p)
    name += std::isalnum(static_cast<unsigned char>(*p)) ? *p : '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Constructs, JinjaCase, testing::ValuesIn(kCases), CaseName);

}  // namespace
}  // namespace epserve::text
