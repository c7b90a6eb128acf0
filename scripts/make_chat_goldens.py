#!/usr/bin/env python3
"""Goldens for tracelm's Jinja engine (src/chat/jinja), rendered by Python jinja2 exactly as Hugging Face
transformers' apply_chat_template renders chat templates: ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True, extensions=[loopcontrols]), transformers' tojson filter (json.dumps with ensure_ascii=False) and
its raise_exception and strftime_now globals, and the variables it passes (messages, tools, documents,
add_generation_prompt, the special tokens, extra keyword arguments). strftime_now reads a fixed time,
FIXED_NOW (UTC), which the C++ tests pass to the renderer too.

Writes:
  testdata/goldens/chat_templates.json  every template of testdata/chat_templates/ over every conversation below:
                                        the text, or that the template raised (and its message)
  testdata/goldens/jinja_snippets.json  small templates, one feature each, with their output or that they raise

Run once (needs: jinja2 3.1, as Debian 12's python3-jinja2 or pip install jinja2==3.1.6):
  python3 scripts/make_chat_goldens.py
"""
import datetime
import json
import pathlib

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXED_NOW = 1736944496  # 2025-01-15 12:34:56 UTC

# Each template's special tokens as its tokenizer_config.json (or GGUF) has them; None: the tokenizer has none, so
# the template does not see the variable at all.
TEMPLATES = {
    "qwen3": (None, "<|im_end|>"),
    "qwen2.5-7b-instruct": (None, "<|im_end|>"),
    "llama-3.1-8b-instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama-3.2-3b-instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama-3.3-70b-instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "gemma-3-it": ("<bos>", "<eos>"),
    "gemma-2-2b-it": ("<bos>", "<eos>"),
    "mistral-nemo-instruct-2407": ("<s>", "</s>"),
    "mistral-small-3.2-24b-instruct-2506": ("<s>", "</s>"),
    "deepseek-r1-distill-qwen-32b": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "phi-4": ("<|endoftext|>", "<|im_end|>"),
    "smollm2-135m-instruct": ("<|im_start|>", "<|im_end|>"),
    "smollm3-3b-unsloth": (None, "<|im_end|>"),
    "gpt-oss-120b": ("<|startoftext|>", "<|return|>"),
    "hermes-3-llama-3.1-8b-tool-use": ("<|begin_of_text|>", "<|im_end|>"),
    "granite-3.3-2b-instruct": ("<|end_of_text|>", "<|end_of_text|>"),
}

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
                "days": {"type": "integer", "description": "Days of forecast", "default": 1},
            },
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for"},
                "filters": {"type": "array", "items": {"type": "string"}, "description": "Site filters"},
                "options": {"type": "object", "properties": {"safe": {"type": "boolean"}}},
            },
            "required": ["query", "filters"],
        },
    },
}
TOOLS = [WEATHER, SEARCH]
# Mistral's templates want 9 alphanumeric characters in a tool call id.
CALL_DICT = {"id": "call00001", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}
CALL_STR = {"id": "call00002", "type": "function",
            "function": {"name": "search", "arguments": "{\"query\": \"tracelm\", \"filters\": [\"github.com\"]}"}}
DOCUMENTS = [{"title": "Paris", "text": "Paris is the capital of France."},
             {"title": "Rome", "text": "Rome is the capital of Italy."}]

U = {"role": "user", "content": "What is the capital of France?"}
S = {"role": "system", "content": "You are a concise assistant."}

# name, messages, extra variables (tools, documents, chat template keyword arguments)
CONVERSATIONS = [
    ("user", [U], {}),
    ("system_user", [S, U], {}),
    ("multi_turn", [S, U, {"role": "assistant", "content": "Paris."},
                    {"role": "user", "content": "And of Italy?\n"}], {}),
    ("unicode", [{"role": "user", "content": "Grüße 世界 🎉 \"quoted\" {braces} {{ not a tag }}\ttab\n"}], {}),
    ("empty_contents", [{"role": "system", "content": ""}, {"role": "user", "content": ""},
                        {"role": "assistant", "content": ""}, {"role": "user", "content": "Hi"}], {}),
    ("content_parts", [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                       {"role": "user", "content": [{"type": "text", "text": "Hello"},
                                                    {"type": "text", "text": " there"}]}], {}),
    ("reasoning", [U, {"role": "assistant", "content": "Paris.", "reasoning_content": "The user asks a fact."},
                   {"role": "user", "content": "Thanks!"}], {}),
    ("think_tags", [U, {"role": "assistant", "content": "<think>\nEasy one.\n</think>\n\nParis."},
                    {"role": "user", "content": "Sure?"}], {}),
    ("no_thinking", [U], {"enable_thinking": False}),
    ("tools", [S, U], {"tools": TOOLS}),
    ("tools_no_system", [U], {"tools": TOOLS}),
    ("tool_call_dict", [{"role": "user", "content": "Weather in Paris?"},
                        {"role": "assistant", "content": "", "tool_calls": [CALL_DICT]},
                        {"role": "tool", "tool_call_id": "call00001", "name": "get_weather",
                         "content": "{\"temperature\": 21, \"sky\": \"clear\"}"}], {"tools": TOOLS}),
    ("tool_call_string", [S, {"role": "user", "content": "Search tracelm"},
                          {"role": "assistant", "content": "", "tool_calls": [CALL_STR]},
                          {"role": "tool", "tool_call_id": "call00002", "name": "search", "content": "3 results"},
                          {"role": "assistant", "content": "I found 3 results."},
                          {"role": "user", "content": "Thanks"}], {"tools": TOOLS}),
    ("two_tool_calls", [{"role": "user", "content": "Weather and news?"},
                        {"role": "assistant", "content": None, "tool_calls": [CALL_DICT, CALL_STR]},
                        {"role": "tool", "tool_call_id": "call00001", "content": "21C"},
                        {"role": "tool", "tool_call_id": "call00002", "content": "none"}], {"tools": TOOLS}),
    ("documents", [U], {"documents": DOCUMENTS}),
    ("continue_final", [U, {"role": "assistant", "content": "The capital of France is"}], {}),
    ("alternation_broken", [U, {"role": "user", "content": "Hello again"}], {}),
]
# Conversations rendered with add_generation_prompt both true and false; the others with true only, except a
# conversation that ends with the assistant, which is rendered with false only (to be continued).
BOTH = {"user", "multi_turn", "tool_call_dict"}


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def strftime_now(fmt):
    return datetime.datetime.fromtimestamp(FIXED_NOW, datetime.timezone.utc).strftime(fmt)


class AssistantTracker(jinja2.ext.Extension):
    """transformers' {% generation %} block (it also records where assistant text lies, which rendering ignores)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context, caller):
        return caller()


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, source, variables):
    try:
        return {"text": env.from_string(source).render(**variables)}
    except jinja2.exceptions.TemplateError as e:
        # A TemplateError that is not a syntax error came from raise_exception: tracelm must say the same.
        raised = type(e) is jinja2.exceptions.TemplateError
        return {"error": str(e), "raised": raised}
    except Exception as e:  # Python refused an operation (TypeError, ...): tracelm must refuse too
        return {"error": f"{type(e).__name__}: {e}", "raised": False}


def chat_goldens(env):
    conversations = [{"name": n, "messages": m, "variables": v} for n, m, v in CONVERSATIONS]
    cases = []
    for name, (bos, eos) in TEMPLATES.items():
        source = (ROOT / "testdata" / "chat_templates" / f"{name}.jinja").read_text(encoding="utf-8")
        for conv_name, messages, extra in CONVERSATIONS:
            ends_with_assistant = messages[-1]["role"] == "assistant"
            gens = [False] if ends_with_assistant else [True, False] if conv_name in BOTH else [True]
            for gen in gens:
                # As apply_chat_template: tools and documents are always passed (None when absent), then the
                # special tokens the tokenizer has, then the keyword arguments.
                variables = {"messages": messages, "tools": None, "documents": None, "add_generation_prompt": gen}
                if bos is not None:
                    variables["bos_token"] = bos
                if eos is not None:
                    variables["eos_token"] = eos
                variables.update(extra)
                case = {"template": name, "conversation": conv_name, "add_generation_prompt": gen}
                case.update(render(env, source, variables))
                cases.append(case)
    tokens = {n: {"bos_token": b, "eos_token": e} for n, (b, e) in TEMPLATES.items()}
    return {"fixed_now": FIXED_NOW, "templates": tokens, "conversations": conversations, "cases": cases}


# (feature, template, variables): each a small template exercising one statement, filter, test or method.
SNIPPETS = [
    # whitespace control, trim_blocks, lstrip_blocks, comments, raw
    ("lstrip_trim", "  {% if true %}\n  x\n  {% endif %}\n  {{ 'y' }}\n  {# c #}\nz", {}),
    ("minus_plus", "a {%- if true -%} b {%+ if true %}c{% endif +%}\nd{% endif %}", {}),
    ("var_minus", "a\n  {{- 'b' -}}  \n c", {}),
    ("comment_minus", "a  {#- c -#}  b\n{# x #}\nc", {}),
    ("raw", "{% raw %}{{ not rendered }}{% endraw %}\n{%- raw -%}  x  {%- endraw %}", {}),
    ("trailing_newline", "a\n", {}),
    ("crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n", {}),
    # literals and printing (Python repr inside containers)
    ("print_values", "{{ none }} {{ true }} {{ false }} {{ 1 }} {{ 1.0 }} {{ 1.5e3 }} {{ 1_000 }} {{ 0x1F }} "
                     "{{ 'a' 'b' }}", {}),
    ("print_containers", "{{ [1, 'a', none, true, 1.0, {'k': \"it's\"}] }} {{ (1,) }} {{ () }} {{ 1, 2 }}", {}),
    ("repr_strings", "{{ [\"it's\", 'a\"b', \"x'y\\\"z\", '\\n\\t\\\\', 'é', '\\x00', '\\u2028', '\\x7f'] }}", {}),
    ("float_repr", "{{ 1e16 }} {{ 1e-5 }} {{ 0.1 + 0.2 }} {{ 1e15 }} {{ 123456789012345678.0 }} {{ -0.0 }} "
                   "{{ 2.5e-7 }} {{ 1/3 }}", {}),
    ("string_escapes", "{{ 'a\\tb\\x41\\u00e9\\101\\q' }}", {}),
    ("json_values", "{{ d }} {{ d.b }} {{ d.c }} {{ d.e }}", {"d": {"b": [1, 2.5, None, True], "c": "x", "e": {}}}),
    # operators
    ("arithmetic", "{{ 10 / 4 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} "
                   "{{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 1 + true }} {{ 3 - 1.5 }}", {}),
    ("string_ops", "{{ 'a' + 'b' }} {{ 'ab' * 3 }} {{ 3 * 'c' }} {{ [1] * 2 }} {{ [1] + [2] }} {{ 'x' ~ 1 ~ none }}",
     {}),
    ("comparisons", "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'b' > 'a' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} "
                    "{{ true == 1 }} {{ none == none }} {{ 'a' != 'b' }} {{ 2 >= 2 }}", {}),
    ("in_operator", "{{ 'a' in 'cat' }} {{ 1 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} "
                    "{{ 'x' in undefined_name }}", {}),
    ("logic", "{{ 0 or 'x' }} {{ 1 and 'y' }} {{ [] or [] }} {{ not none }} {{ none and 1 }} "
              "{{ 'a' if 0 else 'b' }} [{{ 'c' if false }}]", {}),
    ("percent_format", "{{ '%s and %s' % ('a', 'b') }}|{{ '%d%%' % 5 }}|{{ '%5.2f|%-5s|%05d|%x|%#o|%e|%g|%r' % "
                       "(3.14159, 'ab', 42, 255, 8, 12345.678, 0.0001, 'q') }}"
                       "|{{ '%(n)s=%(v).1f' % {'n': 'x', 'v': 2} }}|{{ '%s' % [1, 'a'] }}|{{ '%c%.2s' % (65, 'hello') }}|{{ '%d' % 3.9 }}", {}),
    ("percent_format_missing_argument", "{{ '%s %s' % ('a',) }}", {}),
    ("bad_add", "{{ 'x' + 1 }}", {}),
    ("bad_compare", "{{ 'a' < 1 }}", {}),
    ("divide_by_zero", "{{ 1 / 0 }}", {}),
    # variables, attributes, items, slices, undefined
    ("attr_vs_item",
     "{{ d.items is callable }}|{{ d['items'] }}|{{ d.keys() | list }}|{{ d.get('x', 'dflt') }}|{{ d.x }}",
     {"d": {"items": 3, "x": None}}),
    ("indexing", "{{ l[0] }} {{ l[-1] }} {{ l[5] }}|{{ s[1] }} {{ s[-1] }} {{ l.0 }}", {"l": [1, 2, 3], "s": "héllo"}),
    ("slicing", "{{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ l[::2] }} {{ s[1:3] }} {{ s[::-1] }} {{ l[5:] }} "
                "{{ l[-2:] }}", {"l": [1, 2, 3, 4], "s": "héllo wörld"}),
    ("undefined_printing", "[{{ nothing }}] {{ nothing is defined }} {{ nothing | length }} [{{ nothing | trim }}] "
                           "{{ nothing == nothing }} {{ nothing | default('d') }} {{ d.missing is defined }}",
     {"d": {}}),
    ("undefined_attribute_error", "{{ nothing.attr }}", {}),
    ("undefined_add_error", "{{ nothing + 1 }}", {}),
    ("missing_attr_of_missing", "{{ d.a.b }}", {"d": {}}),
    ("none_attribute", "[{{ n.x }}] {{ n.x is defined }}", {"n": None}),
    # statements
    ("if_elif_else", "{% for v in [0, 1, 2] %}{% if v == 0 %}zero{% elif v == 1 %}one{% else %}many{% endif %} "
                     "{% endfor %}", {}),
    ("for_else", "{% for x in [] %}x{% else %}empty{% endfor %}{% for x in [1] if x > 5 %}x{% else %}none{% endfor %}",
     {}),
    ("for_filter_loop", "{% for x in range(10) if x is odd %}{{ loop.index }}:{{ x }}/{{ loop.length }} {% endfor %}",
     {}),
    ("loop_vars", "{% for i in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
                  "{{ loop.first }}{{ loop.last }}{{ loop.length }}[{{ loop.previtem }}][{{ loop.nextitem }}]"
                  "{{ loop.cycle('x', 'y') }}{{ loop.depth }} {% endfor %}", {}),
    ("loop_changed", "{% for i in [1, 1, 2, 2, 3] %}{{ loop.changed(i) }} {% endfor %}", {}),
    ("loop_dict_and_unpack", "{% for k in d %}{{ k }}{% endfor %} {% for k, v in d.items() %}{{ k }}={{ v }} "
                             "{% endfor %}{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %}",
     {"d": {"z": 1, "a": 2}}),
    ("nested_loops", "{% for a in [1, 2] %}{% for b in [3, 4] %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}"
                     "{% endfor %}", {}),
    ("break_continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}"
                       "{% endif %}{{ i }}{% endfor %}", {}),
    ("set_scoping", "{% set x = 1 %}{% for i in range(3) %}{{ x }}{% set x = x + 1 %}{{ x }};{% endfor %}{{ x }}"
                    "{% if true %}{% set y = 7 %}{% endif %}{{ y }}", {}),
    ("set_tuple_and_block", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t %}  block {{ a }}  {% endset %}[{{ t }}]"
                            "{% set u | trim | upper %}  text  {% endset %}[{{ u }}]", {}),
    ("namespace", "{% set ns = namespace(found=false, n=0, items=[]) %}{% for i in range(3) %}"
                  "{% set ns.n = ns.n + i %}{% if i == 1 %}{% set ns.found = true %}{% endif %}{% endfor %}"
                  "{{ ns.found }} {{ ns.n }} {{ ns.missing is defined }} {{ ns }}", {}),
    ("namespace_on_non_namespace", "{% set d = {} %}{% set d.x = 1 %}", {}),
    ("macro", "{% macro greet(name, greeting='Hello', punct=greeting[0]) %}{{ greeting }}, {{ name }}{{ punct }}"
              "{% endmacro %}{{ greet('A') }}|{{ greet('B', 'Hi') }}|{{ greet(name='C', punct='!') }}|{{ greet }}",
     {}),
    ("macro_scope", "{% macro m() %}{{ y }}{% endmacro %}{{ m() }}{% set y = 4 %}{{ m() }}{% set x = 1 %}"
                    "{% macro n() %}{% set x = 2 %}{{ x }}{% endmacro %}{{ n() }}{{ x }}", {}),
    ("macro_recursion", "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}", {}),
    ("macro_varargs_kwargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k=4) }}",
     {}),
    ("macro_too_many_args", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", {}),
    ("call_block", "{% macro box(title) %}[{{ title }}: {{ caller() }}]{% endmacro %}"
                   "{% call box('t') %}body{% endcall %}"
                   "{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}"
                   "{% call(v) each([1, 2]) %}<{{ v }}>{% endcall %}", {}),
    ("filter_block", "{% filter upper %}hello {{ 'world' }}{% endfilter %}", {}),
    ("with_block", "{% set x = 1 %}{% with x = 2, y = x %}{{ x }}{{ y }}{% endwith %}{{ x }}", {}),
    ("generation_block", "a{% set x = 1 %}{% generation %}b{{ 'c' }}{% set x = 2 %}{{ x }}{% endgeneration %}{{ x }}",
     {}),
    ("print_tag", "{% print 'p' ~ 1 %}", {}),
    ("raise_exception", "{{ raise_exception('Conversation roles must alternate!') }}", {}),
    ("strftime_now", "{{ strftime_now('%Y-%m-%d %H:%M:%S %d %b %Y %A') }}", {}),
    ("range_and_dict", "{{ range(3) | list }} {{ range(1, 10, 3) | list }} {{ range(5, 0, -2) | list }} "
                       "{{ dict(a=1, b='x') }} {{ dict([('k', 2)]) }}", {}),
    ("range_too_big", "{{ range(100001) | length }}", {}),
    ("cycler_joiner", "{% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}"
                      "{% set j = joiner('|') %}{% for i in range(3) %}{{ j() }}{{ i }}{% endfor %}", {}),
    ("unsafe_method", "{% set l = [] %}{{ l.append(1) }}", {}),
    # filters
    ("trim_length", "[{{ '  a b  ' | trim }}] [{{ 'xxhixx' | trim('x') }}] {{ 'héllo' | length }} "
                    "{{ [1, 2] | count }} "
                    "{{ {'a': 1} | length }}", {}),
    ("case_filters", "{{ 'hELLO wORLD' | lower }} {{ 'ab' | upper }} {{ 'hello world-foo (bar) [baz]' | title }} "
                     "{{ 'hELLO wORLD' | capitalize }} {{ 'ÉCOLE' | lower }}", {}),
    ("string_int_float", "{{ 1 | string }} {{ none | string }} {{ 3.7 | int }} {{ '42' | int }} {{ '3.5' | int }} "
                         "{{ ' 7 ' | int }} {{ 'x' | int }} {{ 'x' | int(5) }} {{ '1_000' | int }} {{ true | int }} "
                         "{{ 1 | float }} {{ '2.5' | float }} {{ 'nan?' | float }} {{ '1e3' | float }}", {}),
    ("replace_join", "{{ 'aaa' | replace('a', 'b', 2) }} {{ 'abc' | replace('', '-') }} {{ [1, 2, 3] | join(', ') }} "
                     "{{ [{'n': 'a'}, {'n': 'b'}] | join('/', attribute='n') }} {{ 'abc' | join('.') }}", {}),
    ("first_last_default", "{{ [1, 2] | first }} {{ [1, 2] | last }} {{ 'abc' | first }} [{{ [] | first }}] "
                           "{{ nothing | default('d') }} {{ '' | default('e', true) }} {{ none | d('f') }} "
                           "{{ 0 | default(5, boolean=true) }}", {}),
    ("list_items", "{{ 'ab' | list }} {{ {'x': 1} | list }} {{ {'b': 1, 'a': 2} | items | list }} "
                   "{{ nothing | items | list }}", {}),
    ("select_reject", "{{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 2, 3, 4] | reject('odd') | list }} "
                      "{{ [0, 1, '', 'a'] | select | list }} {{ [1, 5, 10] | select('>', 3) | list }} "
                      "{{ [1, 2] | select('in', [2, 3]) | list }}", {}),
    ("selectattr_rejectattr", "{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }} "
                              "{{ ms | rejectattr('role', 'eq', 'user') | list | length }} "
                              "{{ ms | selectattr('tool_calls', 'defined') | list | length }} "
                              "{{ ms | selectattr('tool_calls') | list | length }}",
     {"ms": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "tool_calls": [1]},
             {"role": "user", "content": "c"}]}),
    ("map", "{{ ['a', 'b'] | map('upper') | join }} {{ [1.4, 2.6] | map('round') | list }} "
            "{{ [{'a': {'b': 1}}, {}] | map(attribute='a.b', default=0) | list }} "
            "{{ [[1, 2], [3, 4]] | map(attribute='1') | list }} {{ ['x'] | map('replace', 'x', 'y') | list }}", {}),
    ("generator_has_no_length", "{{ [1, 2] | select('odd') | length }}", {}),
    ("generator_is_true_and_single_use", "{% set g = [1, 2, 3] | select('even') %}{% if [] | select %}T{% endif %}"
                                         "{% for a in g %}{{ a }}{% endfor %}|{% for a in g %}{{ a }}{% endfor %}", {}),
    ("sort_unique_minmax", "{{ ['b', 'A', 'a', 'C'] | sort }} {{ ['b', 'A', 'a'] | sort(case_sensitive=true) }} "
                           "{{ [3, 1, 2] | sort(reverse=true) }} {{ [{'n': 2}, {'n': 1}] | sort(attribute='n') }} "
                           "{{ ['b', 'A', 'a', 'B'] | unique | list }} {{ ['b', 'A', 'a'] | max }} "
                           "{{ ['b', 'A', 'a'] | min }} {{ [{'n': 2}, {'n': 7}] | max(attribute='n') }} "
                           "[{{ [] | max }}]", {}),
    ("sort_mixed_error", "{{ [3, 'B'] | sort }}", {}),
    ("reverse", "{{ 'abc' | reverse }} {{ [1, 2, 3] | reverse | list }} {{ {'a': 1, 'b': 2} | reverse | list }}", {}),
    ("sum_abs_round", "{{ [1, 2, 3] | sum }} {{ [1.5, 2] | sum(start=10) }} "
                      "{{ [{'v': 2}, {'v': 3}] | sum(attribute='v') }} {{ -3 | abs }} {{ -2.5 | abs }} "
                      "{{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ 2.1 | round(0, 'ceil') }} "
                      "{{ 2.9 | round(method='floor') }} {{ 5 | round }} {{ 1234.5 | round(-2) }}", {}),
    ("indent", "[{{ 'a\\n  b\\n\\nc' | indent }}] [{{ 'a\\nb' | indent(2, true) }}] "
               "[{{ 'a\\n\\nb' | indent(2, blank=true) }}] [{{ 'a\\nb\\n' | indent('> ') }}]", {}),
    ("escape_safe_wordcount", "{{ '<a href=\"x\">&\\'</a>' | escape }} {{ '<b>' | e }} {{ '<i>' | safe }} "
                              "{{ 'one two-three  four_five' | wordcount }} {{ 'x' | center(5) }}|", {}),
    ("dictsort_batch_attr", "{{ {'b': 1, 'A': 2, 'a': 3} | dictsort }} {{ {'b': 1, 'a': 2} | dictsort(by='value') }} "
                            "{{ [1, 2, 3, 4, 5] | batch(2) | list }} {{ [1, 2, 3] | batch(2, 0) | list }} "
                            "{{ {'k': 1} | attr('k') }}", {}),
    ("tojson", "{{ d | tojson }} {{ d | tojson(indent=2) }} {{ [] | tojson(indent=2) }} {{ {} | tojson }} "
               "{{ d | tojson(sort_keys=true) }} {{ d | tojson(separators=(',', ':')) }} "
               "{{ 'é\\u2028\"\\\\\\n\\x01' | tojson }} {{ 'é' | tojson(ensure_ascii=true) }} "
               "{{ [1.0, 1e20, 0.5, -0.0] | tojson }} {{ (1, 2) | tojson }}",
     {"d": {"z": [1, 2.5, None, True, "s"], "a": {"nested": {}}}}),
    ("markup", "{{ '<b>' | safe + '<i>' }} {{ '<u>' + ('&' | e) }} {{ ('x' | safe) * 2 + '\"' }} "
               "{{ 'a' | safe ~ '<' }} {{ '<' | e | e }} {{ ('a' | safe) is escaped }} {{ 'a' is escaped }} "
               "{{ ['s' | safe] }} {{ ('<' | safe) == '<' }}", {}),
    ("tojson_undefined_error", "{{ nothing | tojson }}", {}),
    ("unknown_filter_in_branch", "{% if false %}{{ x | no_such_filter }}{% endif %}ok", {}),
    ("unknown_filter", "{{ x | no_such_filter }}", {}),
    # tests
    ("tests", "{{ 5 is divisibleby 5 }} {{ 1 is odd }} {{ 2 is even }} {{ 'a' is lower }} {{ 'A' is upper }} "
              "{{ none is none }} {{ 1 is number }} {{ true is number }} {{ true is integer }} {{ 1 is integer }} "
              "{{ 1.0 is float }} {{ {} is mapping }} {{ 'a' is iterable }} {{ 1 is iterable }} "
              "{{ 'a' is sequence }} {{ {} is sequence }} {{ true is boolean }} {{ true is true }} "
              "{{ 0 is false }} {{ x is undefined }} {{ range is callable }} {{ 'a' is callable }} "
              "{{ 1 is sameas 1 }} {{ 1 is eq 1.0 }} {{ 1 is ne 2 }} {{ 1 is in [1] }} {{ 3 is gt 2 }} "
              "{{ 3 is ge 4 }} {{ 1 is lt 2 }} {{ 1 is le 0 }} {{ 'a' is string }} {{ 'upper' is filter }} "
              "{{ 'odd' is test }} {{ x is not defined }} {{ [] is string }}", {}),
    # Python methods
    ("str_methods", "{{ ' a b '.strip() }}|{{ 'xxhixx'.lstrip('x') }}|{{ 'xxhixx'.rstrip('x') }}|"
                    "{{ 'Hello World'.split() }}{{ ' a  b '.split(' ') }}{{ 'a,b,c'.split(',', 1) }}"
                    "{{ 'a,b,c'.rsplit(',', 1) }}{{ '  a  b  c  '.split(none, 1) }}{{ '  a  b  c  '.rsplit(none, 1) }}"
                    "{{ 'a\\nb\\r\\nc'.splitlines() }}{{ 'a\\nb'.splitlines(true) }}", {}),
    ("str_methods_2", "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} {{ 'hello'.upper() }} "
                      "{{ 'HeLLo'.lower() }} {{ 'hello world'.title() }} {{ 'hello'.capitalize() }} "
                      "{{ 'héllo'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.find('z') }} "
                      "{{ 'hello'.count('l') }} {{ 'a-b-c'.replace('-', '+', 1) }} {{ ', '.join(['a', 'b']) }} "
                      "{{ '123'.isdigit() }} {{ 'ab'.isalpha() }} {{ ' '.isspace() }} "
                      "{{ 'prefix_x'.removeprefix('prefix_') }}",
     {}),
    ("str_index_error", "{{ 'hello'.index('z') }}", {}),
    ("dict_list_methods", "{{ d.items() | list }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.get('a') }} "
                          "{{ d.get('zz') }} {{ d.get('zz', 0) }} {{ [1, 2, 1].count(1) }} {{ [1, 2].index(2) }}",
     {"d": {"a": 1, "b": [2]}}),
    ("method_on_message", "{% for m in messages %}{{ m.content.strip().split('\\n')[0] | upper }};{% endfor %}",
     {"messages": [{"role": "user", "content": "  first line\nsecond  "}, {"role": "user", "content": "x"}]}),
    # syntax errors and refused statements
    ("syntax_unclosed_block", "{% if true %}x", {}),
    ("syntax_unknown_tag", "{% frobnicate %}", {}),
    ("syntax_bad_expression", "{{ 1 + }}", {}),
    ("syntax_include", "{% include 'other.jinja' %}", {}),
    ("syntax_import", "{% import 'macros.jinja' as m %}", {}),
    ("syntax_extends", "{% extends 'base.jinja' %}", {}),
    ("syntax_break_outside_loop", "{% break %}", {}),
    ("syntax_do", "{% do x %}", {}),
]


def snippet_goldens(env):
    cases = []
    for feature, source, variables in SNIPPETS:
        case = {"feature": feature, "template": source, "variables": variables}
        case.update(render(env, source, variables))
        cases.append(case)
    return {"fixed_now": FIXED_NOW, "cases": cases}


def write(path, data):
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def main():
    env = environment()
    write(ROOT / "testdata" / "goldens" / "chat_templates.json", chat_goldens(env))
    write(ROOT / "testdata" / "goldens" / "jinja_snippets.json", snippet_goldens(env))


if __name__ == "__main__":
    main()
