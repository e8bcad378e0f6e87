"""XML tool-call arguments: every text the tag allows parses, with vLLM's own parser, to valid arguments.

The grammars are compiled over the Qwen2 vocabulary; texts come from hand-written cases and from
seeded random walks that pick uniformly among the allowed tokens (a weak model); vLLM's composed
parser (the one its OpenAI server uses) reads them and the arguments are validated with jsonschema.
"""

from __future__ import annotations

import json
import random

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tagjit import Constraint, ConstraintError, Settings
from tagjit import report
from tagjit.tools import xml_args
from tagjit.tools import build_tool_tag
from tagjit.tools import load_format, parse_format

from shared_data import DATA
from test_tool_formats import parse
from walk import format_closers

vllm = pytest.importorskip("vllm")

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 16},
                                     "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "days"]}}}
RICH = {"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {
        "query": {"type": "string", "minLength": 1, "maxLength": 12},
        "code": {"type": "string"},
        "count": {"type": "integer", "minimum": 1, "maximum": 7},
        "ratio": {"type": "number"},
        "flag": {"type": "boolean"},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 3},
        "nick": {"type": ["string", "null"], "maxLength": 6},
        "day": {"type": "string", "format": "date"},
        "where": {"type": "object", "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
                  "required": ["lat", "lon"]}},
    "required": ["query", "count"]}}}
TOOLS = [WEATHER, RICH]
XML_FORMATS = ["qwen3_coder", "glm45", "glm47", "deepseek_v3_2", "deepseek_v4"]


def named(name: str) -> dict:
    return {"type": "function", "function": {"name": name}}


def grammar(svc, fmt: str, choice, tools=TOOLS, s: Settings | None = None):
    return svc.grammar(Constraint.of("structural_tag", build_tool_tag(fmt, tools, choice, True, s or Settings())))


def accepts(svc, fmt: str, text: str, tools=TOOLS, s: Settings | None = None) -> bool:
    g = grammar(svc, fmt, "required", tools, s)
    return g.accept_string(text) and g.is_completed()


def qwen_call(name: str, params: list[tuple[str, str]]) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params)
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def arguments(hf_tokenizer, fmt: str, text: str, tools=TOOLS) -> dict:
    _, calls = parse(load_format(fmt), hf_tokenizer, tools, "required", text)
    assert len(calls) == 1, text
    return json.loads(calls[0].arguments)


# -- the failure seen end to end, and whitespace -------------------------------------------------

def test_leading_space_that_the_parser_keeps_counts_toward_max_length(svc):
    # A random model wrote this; vLLM returns " Henosa arch戶ères" (17 characters) for maxLength 16.
    text = qwen_call("get_weather", [("city", " Henosa arch戶ères"), ("days", "3")])
    assert not accepts(svc, "qwen3_coder", text)


def test_a_value_with_leading_space_parses_to_exactly_that_value(svc, hf_tokenizer):
    text = qwen_call("get_weather", [("city", " Oslo"), ("days", "3")])
    assert accepts(svc, "qwen3_coder", text)
    assert arguments(hf_tokenizer, "qwen3_coder", text) == {"city": " Oslo", "days": 3}


def test_whitespace_between_parameters_is_only_the_templates(svc):
    good = qwen_call("get_weather", [("city", "Oslo"), ("days", "3")])
    assert accepts(svc, "qwen3_coder", good)
    assert not accepts(svc, "qwen3_coder", good.replace("</parameter>\n<parameter=days>",
                                                        "</parameter>\n" + " " * 40 + "<parameter=days>"))
    assert not accepts(svc, "qwen3_coder", good.replace("<parameter=days>\n3", "<parameter=days>\n   3"))


def test_whitespace_inside_a_json_value_is_bounded(svc):
    def where(pad: str) -> str:
        return qwen_call("search", [("query", "q"), ("count", "2"), ("where", "{" + pad + '"lat": 1, "lon": 2}')])

    assert accepts(svc, "qwen3_coder", where(""))
    assert not accepts(svc, "qwen3_coder", where(" " * 40))


@pytest.mark.parametrize("number", ["1e999", "9" * 400, "1e-999"])
def test_a_number_whose_float_is_not_finite_or_exact_is_rejected(svc, number):
    assert not accepts(svc, "qwen3_coder", qwen_call("search", [("query", "q"), ("count", "2"), ("ratio", number)]))


# -- markup inside values ----------------------------------------------------------------------

@pytest.mark.parametrize("inner", ["a</parameter>b", "a< / parameter >b", "a<parameter=x>b", "a</function>b",
                                   "a</tool_call>b"])
def test_markup_the_parser_cuts_at_cannot_appear_in_a_value(svc, inner):
    assert not accepts(svc, "qwen3_coder", qwen_call("search", [("query", "q"), ("code", inner), ("count", "2")]))


def test_other_angle_brackets_stay_in_a_text_value(svc, hf_tokenizer):
    code = "if a < b:\n    return '</div>'"
    text = qwen_call("search", [("query", "q"), ("code", code), ("count", "2")])
    assert accepts(svc, "qwen3_coder", text)
    assert arguments(hf_tokenizer, "qwen3_coder", text)["code"] == code


def test_a_json_string_inside_an_object_cannot_carry_markup(svc):
    tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"o": {"type": "object", "properties": {"s": {"type": "string"}}}}}}}
    bad = qwen_call("f", [("o", '{"s": "</parameter>"}')])
    escaped = qwen_call("f", [("o", '{"s": "\\u003c/parameter>"}')])
    assert not accepts(svc, "qwen3_coder", bad, [tool])
    assert accepts(svc, "qwen3_coder", escaped, [tool])


# -- schemas the parser cannot return valid ----------------------------------------------------

@pytest.mark.parametrize("prop", [
    {"anyOf": [{"type": "string"}, {"type": "integer", "maximum": 3}]},
    {"type": ["string", "object"]},
    {"const": 5},
    {"$ref": "#/$defs/point"},
])
def test_a_parameter_the_parser_would_coerce_wrongly_is_refused_with_the_reason(prop):
    tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"p": prop}, "$defs": {"point": {"type": "object"}}}}}
    with pytest.raises(ConstraintError, match="parameter 'p'"):
        build_tool_tag("qwen3_coder", [tool], "required", settings=Settings(unenforceable_tools="refuse"))


def test_a_parameter_the_parser_would_coerce_wrongly_is_relaxed_and_reported_by_default():
    tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"p": {"$ref": "#/$defs/point"}, "q": {"type": "integer"}},
        "$defs": {"point": {"type": "object"}}}}}
    with report.collecting() as relaxed:
        build_tool_tag("qwen3_coder", [tool], "required", settings=Settings())
    assert relaxed == ["tool 'f': type-only at #/properties/p"]


def test_a_tool_whose_only_values_the_parser_cannot_return_is_left_out_for_the_others():
    bad = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"p": {"const": 5}}, "required": ["p"]}}}
    good = {"type": "function", "function": {"name": "g", "parameters": {"type": "object", "properties": {}}}}
    with report.collecting() as relaxed:
        build_tool_tag("qwen3_coder", [bad, good], "required", settings=Settings())
    assert relaxed == ["tool 'f': uncallable at #"]


def test_deepseek_refuses_a_nested_value_its_recursive_coercion_would_change():
    # DeepSeek json-decodes {"n": 5} and then coerces 5 by the nested schema: a $ref reads as string, "5".
    tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"o": {"type": "object", "properties": {"n": {"$ref": "#/$defs/n"}}}},
        "$defs": {"n": {"type": "integer"}}}}}
    with pytest.raises(ConstraintError, match="parameter 'o'.*nested value .n"):
        build_tool_tag("deepseek_v4", [tool], "required", settings=Settings(unenforceable_tools="refuse"))
    assert build_tool_tag("qwen3_coder", [tool], "required", settings=Settings()) is not None


def test_a_nullable_string_is_written_as_text(svc, hf_tokenizer):
    text = qwen_call("search", [("query", "q"), ("count", "2"), ("nick", "null")])
    assert accepts(svc, "qwen3_coder", text)
    assert arguments(hf_tokenizer, "qwen3_coder", text)["nick"] is None


@pytest.mark.parametrize("fmt", ["qwen3_coder", "glm47", "deepseek_v4"])
def test_every_bfcl_tool_gets_a_tag(fmt):
    from tagjit.tools import bfcl

    for tool in bfcl.load_tools(str(DATA / "bfcl"), 100000):
        assert build_tool_tag(fmt, [tool], "required", settings=Settings()) is not None


def test_a_date_parameter_takes_only_dates(svc):
    def day(value: str) -> str:
        return qwen_call("search", [("query", "q"), ("count", "2"), ("day", value)])

    assert accepts(svc, "qwen3_coder", day("2024-02-29"))
    assert not accepts(svc, "qwen3_coder", day("2023-02-29"))


def test_parser_types_match_vllms_reading_of_a_schema():
    from vllm.tool_parsers.utils import extract_types_from_schema

    for prop in RICH["function"]["parameters"]["properties"].values():
        assert xml_args.parser_types(prop) == set(extract_types_from_schema(prop))


# -- formats are data --------------------------------------------------------------------------

def test_a_new_format_with_an_existing_style_needs_no_code(svc):
    fmt = parse_format({"name": "my_coder", "call": [{"begin": "<call>\n<function={name}>\n",
                                                     "end": "</function>\n</call>"}],
                        "arguments": "qwen_xml", "trigger": "<call>"})
    tag = build_tool_tag(fmt, [WEATHER], "required", settings=Settings())
    g = svc.grammar(Constraint.of("structural_tag", tag))
    text = qwen_call("get_weather", [("city", "Oslo"), ("days", "3")]).replace("tool_call>", "call>")
    assert g.accept_string(text) and g.is_completed()


def test_argument_syntax_without_the_key_placeholder_is_rejected():
    with pytest.raises(ConstraintError, match="key"):
        parse_format({"name": "x", "call": [{"begin": "<c>{name}", "end": "</c>"}], "trigger": "<c>",
                      "arguments": "glm_xml", "argument_syntax": {"begin": "<arg>", "end": "</arg>"}})


# -- a weak model: random walks through each XML format ------------------------------------------

@pytest.mark.parametrize("fmt", XML_FORMATS)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), tool=st.sampled_from(TOOLS))
def test_random_walks_parse_to_valid_arguments(fmt, seed, tool, svc, walker, hf_tokenizer):
    f = load_format(fmt)
    name = tool["function"]["name"]
    ends = format_closers(f) + [xml_args.style(f.arguments, f.argument_syntax).end]
    text = walker.random_walk(grammar(svc, fmt, named(name)), random.Random(seed), closers=ends)
    _, calls = parse(f, hf_tokenizer, TOOLS, named(name), text)
    assert len(calls) == 1, text
    assert calls[0].name == name
    jsonschema.validate(json.loads(calls[0].arguments), tool["function"]["parameters"])
