# Regenerates unit_cases.inc: small templates rendered by Python jinja2 configured as
# transformers does (see parity.py). Run: python3 gen_unit_cases.py > unit_cases.inc
import json, sys
sys.path.insert(0, __import__("os").path.dirname(__file__))
from parity import compile_template

CTX = {"msgs": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "yo", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1, "b": [1, 2.5, None, True]}}}]},
                {"role": "user", "content": "bye"}],
       "d": {"b": 2, "a": 1, "C": 3, "items": "key-items"}, "s": "  Hello, World!  ", "n": 7, "f": 2.5,
       "l": [3, 1, 2], "words": ["b", "A", "a", "c"], "e": "", "none": None, "t": True,
       "u": "héllo wörld ✓", "people": [{"name": "Ann", "age": 31}, {"name": "bob", "age": 25}, {"name": "Cy", "age": 31}]}

CASES = [
  # statements
  "{% if n > 5 %}big{% elif n > 2 %}mid{% else %}small{% endif %}",
  "{% if missing %}x{% elif e %}y{% else %}z{% endif %}",
  "{% for m in msgs %}{{ loop.index }}/{{ loop.length }}:{{ m.role }}{% if not loop.last %},{% endif %}{% endfor %}",
  "{% for m in msgs %}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %}",
  "{% for x in l %}{{ loop.previtem is defined }}{{ loop.previtem }}-{{ loop.nextitem }}|{% endfor %}",
  "{% for x in [] %}a{% else %}empty{% endfor %}",
  "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
  "{% for k in d %}{{ k }}{% endfor %}",
  "{% for m in msgs if m.role == 'user' %}{{ loop.index }}{{ m.content }}{{ loop.length }}{% endfor %}",
  "{% for x in l %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}",
  "{% for i in range(3) %}{% for j in range(i) %}{{ i }}{{ j }} {% endfor %}{% endfor %}",
  "{% for a, b in [(1, 2), (3, 4)] %}{{ a + b }}{% endfor %}",
  "{% for c in 'abc' %}{{ loop.cycle('x', 'y') }}{{ c }}{% endfor %}",
  "{% set x = 1 %}{% for i in range(3) %}{{ x }}{% set x = 2 %}{% endfor %}{{ x }}",
  "{% set ns = namespace(n=0, s='') %}{% for i in l %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }}/{{ ns.s }}",
  "{% set a, b = 1, 2 %}{{ a }}{{ b }}",
  "{% set block %}  inner {{ n }} {% endset %}[{{ block }}]",
  "{% set block | trim | upper %}  inner {{ n }} {% endset %}[{{ block }}]",
  "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', '?') }} {{ greet(punct='.', name='Cy') }}",
  "{% macro rec(n) %}{% if n > 0 %}{{ n }}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(3) }}",
  "{% macro m(a) %}{{ a is defined }}{{ n }}{% endmacro %}{{ m() }}",
  "{% raw %}{{ not rendered }}{% if %}{% endraw %}",
  "{% filter upper %}shout {{ n }}{% endfilter %}",
  "{% generation %}gen {{ n }}{% endgeneration %}",
  "a{# comment #}b{#- trimmed -#}  c",
  # whitespace control, trim_blocks, lstrip_blocks
  "line1\n  {% if t %}\n  body\n  {% endif %}\nline2\n",
  "  {{ n }}  {% if t %}  x {% endif %}  \n",
  "a  {%- if t -%}  b  {%- endif -%}  c",
  "a\n{{- n -}}\nb",
  "{% for i in l %}\n    {{ i }}\n{% endfor %}\n",
  "x {%+ if t %}y{% endif %}\n",
  "{% if t +%}\nkeep{% endif %}",
  "{# c #}\n  {# d #}\nx",
  "{% raw %}\n{{ x }}{% endraw %}\nz",
  "trailing newline\n",
  "crlf\r\n{% if t %}\r\nx{% endif %}",
  # expressions
  "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 6 / 2 }}",
  "{{ 'a' ~ 1 ~ none ~ t ~ missing }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ 1 + 2.5 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e-5 }} {{ 1.5e300 * 1 }}",
  "{{ n > 5 and n < 10 }} {{ not t }} {{ e or 'default' }} {{ t and 'yes' }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}",
  "{{ 'ell' in s }} {{ 'x' not in s }} {{ 2 in l }} {{ 'a' in d }} {{ 'z' in d }} {{ 'x' in missing }}",
  "{{ 'yes' if t else 'no' }} {{ 'yes' if e else 'no' }} [{{ 'a' if e }}]",
  "{{ l[0] }} {{ l[-1] }} {{ l[1:] }} {{ l[::-1] }} {{ l[:2] }} {{ s[2:7] }} {{ u[::-1] }} {{ u[1] }} {{ l[5] is defined }}",
  "{{ msgs[0]['role'] }} {{ msgs[0].role }} {{ msgs.0.content }} {{ d['items'] }} {{ d.items is callable }}",
  "{{ [1, 'a', none, true, 1.5, {'k': 'v'}, (1,), (1, 2)] }} {{ {'a': 1, 'b': 'x'} }} {{ d }}",
  "{{ \"it's\" }} {{ ['it\\'s', 'a\"b', 'a\\nb', '\\u00e9\\x41\\t'] }}",
  "{{ 'adjacent' 'strings' }} {{ -n }} {{ +f }} {{ -f|abs }} {{ 1_000 }}",
  "{{ none }} {{ t }} {{ missing }} {{ n is number }} {{ none is none }}",
  # tests
  "{{ n is defined }}{{ missing is defined }}{{ missing is undefined }}{{ none is none }}{{ s is string }}{{ d is mapping }}{{ l is iterable }}{{ s is iterable }}{{ n is iterable }}{{ missing is iterable }}",
  "{{ l is sequence }}{{ n is sequence }}{{ t is boolean }}{{ n is boolean }}{{ t is true }}{{ e is false }}{{ false is false }}{{ n is integer }}{{ f is float }}{{ t is number }}",
  "{{ n is odd }}{{ n is even }}{{ 9 is divisibleby 3 }}{{ n is equalto 7 }}{{ n is eq 8 }}{{ n is ne 8 }}{{ n is gt 3 }}{{ n is lt 3 }}{{ 'a' is in 'abc' }}{{ 'abc' is lower }}{{ 'ABC' is upper }}",
  "{{ msgs[2].tool_calls is defined }}{{ msgs[1].tool_calls is defined }}{{ msgs[2].content is not none }}{{ none is not none }}{{ n is not string }}",
  # filters
  "{{ s|trim }}|{{ 'xxhixx'|trim('x') }}|{{ s|upper }}|{{ s|lower }}|{{ 'hello world-foo(bar'|title }}|{{ 'hELLO world'|capitalize }}",
  "{{ l|length }} {{ s|length }} {{ u|length }} {{ d|count }} {{ missing|length }} {{ l|first }} {{ l|last }} {{ 'abc'|first }}",
  "{{ l|join(', ') }} {{ words|join }} {{ people|join(', ', attribute='name') }}",
  "{{ missing|default('dflt') }} {{ e|default('dflt') }} {{ e|default('dflt', true) }} {{ missing|d('x') }} {{ none|default('n') }}",
  "{{ 'a-b-a'|replace('a', 'x') }} {{ 'a-b-a'|replace('a', 'x', 1) }} {{ d|items|list }} {{ 'abc'|list }} {{ l|string }} {{ t|string }}",
  "{{ '42'|int }} {{ '42.7'|int }} {{ 'x'|int }} {{ 'x'|int(5) }} {{ 3.9|int }} {{ '0x1A'|int(0, 16) }} {{ '2.5'|float }} {{ 'x'|float }} {{ 3|float }}",
  "{{ -3|abs }} {{ -2.5|abs }} {{ 2.675|round(2) }} {{ 2.5|round }} {{ 3.5|round }} {{ 7|round }} {{ 2.1|round(0, 'ceil') }} {{ 2.9|round(0, 'floor') }}",
  "{{ people|map(attribute='name')|list }} {{ words|map('upper')|join }} {{ l|select('odd')|list }} {{ l|reject('odd')|list }} {{ [0, 1, '', 'a']|select|list }}",
  "{{ people|selectattr('age', 'equalto', 31)|map(attribute='name')|join(',') }} {{ people|rejectattr('age', 'gt', 30)|map(attribute='name')|list }} {{ msgs|selectattr('tool_calls', 'defined')|list|length }}",
  "{{ words|unique|list }} {{ words|unique(true)|list }} {{ l|reverse|list }} {{ 'abc'|reverse }} {{ l|sort }} {{ words|sort }} {{ words|sort(case_sensitive=true) }} {{ l|sort(reverse=true) }}",
  "{{ people|sort(attribute='age')|map(attribute='name')|join }} {{ d|dictsort }} {{ d|dictsort(reverse=true) }} {{ {'b': 2, 'a': 1, 'c': 0}|dictsort(by='value') }}",
  "{{ l|batch(2)|list }} {{ range(7)|batch(3, 'x')|list }} {{ l|sum }} {{ people|sum(attribute='age') }} {{ l|min }} {{ l|max }} {{ words|max }}",
  "{{ 'a\nb\n\nc'|indent(2) }}|{{ 'a\nb'|indent(2, true) }}|{{ 'a\n\nb'|indent('> ', blank=true) }}",
  "{{ 'one two  three-four'|wordcount }} {{ '<a href=\"x\">&\\'</a>'|escape }} {{ '<b>'|safe }} {{ '%s=%d'|format('x', 3) }} {{ 'v'|center(5) }}|",
  "{{ msgs[2]|tojson }}",
  "{{ msgs[2].tool_calls[0].function.arguments|tojson(indent=2) }}",
  "{{ d|tojson(sort_keys=true) }} {{ d|tojson(separators=(',', ':')) }} {{ u|tojson }} {{ u|tojson(ensure_ascii=true) }} {{ '\\u2028</script>\"\\\\'|tojson }}",
  "{{ [1.0, 2.50, -0.0, 1e16, 123456789.125, 1e-7]|tojson }} {{ {}|tojson(indent=2) }} {{ []|tojson(indent=2) }} {{ {'a': {}}|tojson(indent=1) }}",
  "{{ people|tojson(indent='\\t') }}",
  # methods
  "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ '\\n\\nx\\n'.strip('\\n') }}|{{ 'xyhixy'.strip('xy') }}|{{ 'abc'.lstrip('a') }}",
  "{{ 'a,b,,c'.split(',') }} {{ '  a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a b c'.rsplit(' ', 1) }} {{ 'x</think>y'.split('</think>')[-1] }} {{ 'l1\\nl2\\r\\nl3'.splitlines() }}",
  "{{ s.startswith('  He') }} {{ s.endswith('!  ') }} {{ 'abc'.startswith(('x', 'a')) }} {{ 'a-b'.replace('-', '+') }} {{ 'abc'.upper() }} {{ 'ABC'.lower() }} {{ 'hello world'.title() }} {{ 'hello'.capitalize() }}",
  "{{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.find('z') }} {{ 'hello'.count('l') }} {{ '-'.join(['a', 'b']) }} {{ '{} and {}'.format('x', 1) }} {{ '{0}{0}'.format('y') }}",
  "{{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ 'a1'.isalnum() }} {{ '  '.isspace() }} {{ 'Ab'.isupper() }} {{ 'ab'.islower() }} {{ 'x'.ljust(3) }}| {{ 'x'.rjust(3, '*') }} {{ 'xy'.zfill is defined }}",
  "{{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 'dd') }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }} {{ l.index(2) }} {{ l.count(3) }}",
  # globals
  "{{ range(3)|list }} {{ range(1, 4)|list }} {{ range(10, 0, -3)|list }} {{ dict(a=1, b='x') }} {{ namespace(a=1).a }}",
  "{% set n2 = namespace(items=[]) %}{% set n2.items = n2.items + [1] %}{% set n2.items = n2.items + [2] %}{{ n2.items }}",
  "%s|{{ '%s-%s' % ('a', 'b') }}|{{ '%05.1f' % 3.14159 }}|{{ '%d%%' % 50 }}",
  # idioms from other real chat templates (Llama 3.1, Mistral, GLM, Kimi, Qwen3-Coder, Phi)
  "{%- for arg_name, arg_val in msgs[2].tool_calls[0].function.arguments | items %}{{- arg_name + '=\"' ~ arg_val ~ '\"' }}{% endfor %}",
  "{{ ['a', 'code_interpreter', 'b'] | reject('equalto', 'code_interpreter') | join(', ') }}",
  "{{ msgs|selectattr('role', 'equalto', 'user')|list|length }} {{ msgs|selectattr('role', 'eq', 'system')|map(attribute='content')|first }}",
  "{{ '<|im_start|>' + msgs[0]['role'] + '\\n' + s | trim + '<|im_end|>' }}",
  "{% for m in msgs %}{% set content = m['content'] if m['content'] is string else m['content'] | selectattr('type', 'equalto', 'text') | map(attribute='text') | join('') %}{{ content }};{% endfor %}",
  "{% for m in msgs %}{% if m.tool_calls %}{% for tc in m.tool_calls %}{% if tc.function %}{% set tc = tc.function %}{% endif %}{% set args = tc.arguments %}{% if args is not string %}{% set args = args|tojson|safe %}{% endif %}{{ tc.name }}{{ args }}{% endfor %}{% endif %}{% endfor %}",
  "{% for k, v in msgs[2].tool_calls[0].function.arguments.items() %}<{{ k }}>{{ v | tojson(ensure_ascii=False) if v is not string else v }}</{{ k }}>{% endfor %}",
  "{% for x in [{'a': 1}, [1, 2], 'str', 5] %}{{ x | tojson | safe if x is mapping or (x is sequence and x is not string) else x | string }};{% endfor %}",
  "{% set handled = ['a', 'C'] %}{% for key in d if key not in handled %}{{ key }}{% endfor %}",
  "{{ d.get('zz', {}).get('b') }} {{ msgs[1].get('tool_calls') is none }} {{ (msgs|last).content }} {{ msgs[-1]['content'] }}",
  "{% for m in msgs %}{{ loop.previtem.role if loop.previtem is defined else 'START' }}>{{ m.role }} {% endfor %}",
  "{% for m in msgs %}{% if not (m.content.startswith('<tool') and m.content.endswith('>')) %}{{ m.content[:1] }}{% endif %}{% endfor %}",
  "{{ msgs[2].tool_calls[0].id is defined }} {{ (msgs[2].tool_calls|length) > 0 }} {{ msgs[2].tool_calls[0].function.name|length != 9 }}",
  "{%- set system_message = msgs[0]['content']|trim %}{%- set loop_messages = msgs[1:] %}{{ system_message }}{% for m in loop_messages %}{{ loop.index0 % 2 }}{% endfor %}",
  "{%- macro render_content(msg) -%}{%- set c = msg.get('content') -%}{%- if c is string -%}{{ c }}{%- elif c is not none -%}{% for part in c -%}{{ part.text }}{%- endfor -%}{%- endif -%}{%- endmacro -%}{% for m in msgs %}[{{ render_content(m) }}]{% endfor %}",
  "{% set ns = namespace(found=false) %}{% for m in msgs %}{% if m['role'] == 'system' %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }}",
  "{% set acc = [] %}{% for i in range(3) %}{% set acc = acc + [i] %}{{ acc }}{% endfor %}{{ acc }}",
  "{{ 'Today Date: ' + strftime_now('%Y') | length | string }}",
  "{{ n|string + 'x' }} {{ (n ~ '')|length }} {{ 10|string|length }} {{ 'abc'[1:] ~ 'abc'[-1] }}",
  "{% if msgs[0].content is string and msgs[0].content|length > 0 %}ok{% endif %}{% if msgs is not mapping and msgs is sequence %}seq{% endif %}",
  "{{ 'a' if none is none }} {{ 1 if 0 else 2 if 0 else 3 }} {{ not missing is defined }} {{ not 1 == 2 }} {{ -2 ** 2 }}",
  "{{ people | map(attribute='missing', default='?') | join }} {{ people | map(attribute='age') | unique | list }}",
  # errors (jinja2 raises; ft must too)
  "{{ raise_exception('custom failure') }}",
  "{{ missing.attr }}",
  "{{ 'a' + 1 }}",
  "{{ none + 'a' }}",
  "{{ 'a' in none }}",
  "{{ l.append(4) }}",
  "{{ missing|tojson }}",
  "{{ n() }}",
  "{% for a, b in l %}{% endfor %}",
]

def cxx(s):
    d = "J"
    while ")" + d + '"' in s: d += "J"
    return 'R"' + d + "(" + s + ")" + d + '"'

ctx_json = json.dumps(CTX)
print("// Generated by gen_unit_cases.py from Python jinja2 (transformers' configuration). Do not edit.")
print("// {template, expected output or error text, is_error}; context: kUnitContext.")
print("static const char* kUnitContext = " + cxx(ctx_json) + ";")
print("static const UnitCase kUnitCases[] = {")
for t in CASES:
    try:
        out, err = compile_template(t).render(**CTX), False
    except Exception as e:
        out, err = str(e), True
    print("    {" + cxx(t) + ",\n     " + cxx(out) + ", " + ("true" if err else "false") + "},")
print("};")
