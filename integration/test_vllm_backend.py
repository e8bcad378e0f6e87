"""tagjit behind a real ``vllm serve`` (tiny random Llama on CPU), driven with the OpenAI client."""

from __future__ import annotations

import json
import re

import jsonschema
import openai
import pytest

from transformers import AutoTokenizer

from sample_tools import CLOCK, EOS, TOOLS, WEATHER
from server import MODEL_DIR, build

MESSAGES = [{"role": "user", "content": "Answer in the requested format."}]
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0},
                   "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


def chat(client, bias, **kwargs):
    return client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=200, logit_bias=bias,
                                          temperature=1.0, seed=7, **kwargs)


def test_json_schema_output_validates(client, bias):
    r = chat(client, bias, response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}})
    jsonschema.validate(json.loads(r.choices[0].message.content), PERSON)


def test_a_long_bounded_string_takes_escapes_and_is_counted_to_both_bounds(client, bias):
    # Bounds above the grammar's count rules (256): the token filter counts the characters in the engine's masks.
    # The closing-character bias pushes for the shortest string, maxLength stops the longest, and a backslash bias
    # asks for escapes, which the bounded string took none of before.
    schema = {"type": "object", "properties": {"note": {"type": "string", "minLength": 260, "maxLength": 270}},
              "required": ["note"], "additionalProperties": False}
    backslash = {str(i): 8.0 for t, i in AutoTokenizer.from_pretrained(build(MODEL_DIR)).get_vocab().items()
                 if t.replace("\u2581", "") == "\\"}
    r = client.chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=600, logit_bias={**bias, **backslash}, temperature=1.0, seed=7,
        response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": schema}})
    text = r.choices[0].message.content
    assert r.choices[0].finish_reason == "stop", text
    jsonschema.validate(json.loads(text), schema)
    assert "\\" in text


def test_json_object_output_is_an_object(client, bias):
    r = chat(client, bias, response_format={"type": "json_object"})
    assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_regex_output_matches(client, bias):
    r = chat(client, bias, extra_body={"structured_outputs": {"regex": r"[a-z]{2,5}-[0-9]{2}"}})
    assert re.fullmatch(r"[a-z]{2,5}-[0-9]{2}", r.choices[0].message.content)


def test_choice_output_is_one_of_the_choices(client, bias):
    r = chat(client, bias, extra_body={"structured_outputs": {"choice": ["red", "green", "blue"]}})
    assert r.choices[0].message.content in {"red", "green", "blue"}


def test_grammar_output_matches(client, bias):
    r = chat(client, bias, extra_body={"structured_outputs": {"grammar": 'root ::= "go " ("left" | "right")'}})
    assert r.choices[0].message.content in {"go left", "go right"}


def test_response_format_structural_tag(client, bias):
    fmt = {"type": "tag", "begin": "<result>", "end": "</result>",
           "content": {"type": "json_schema", "json_schema": PERSON}}
    r = chat(client, bias, response_format={"type": "structural_tag", "format": fmt})
    text = r.choices[0].message.content
    m = re.fullmatch(r"<result>(.*)</result>", text, re.S)
    assert m, text
    jsonschema.validate(json.loads(m.group(1)), PERSON)


def test_tool_choice_required_returns_valid_calls(client, bias):
    r = chat(client, {**bias, EOS: 8.0}, tools=[WEATHER, CLOCK], tool_choice="required")
    calls = r.choices[0].message.tool_calls
    assert calls, r.choices[0].message.content
    for call in calls:
        jsonschema.validate(json.loads(call.function.arguments), TOOLS[call.function.name]["function"]["parameters"])


def test_required_without_parallel_calls_returns_exactly_one_call(client, bias):
    r = chat(client, bias, tools=[WEATHER, CLOCK], tool_choice="required", parallel_tool_calls=False)
    (call,) = r.choices[0].message.tool_calls
    jsonschema.validate(json.loads(call.function.arguments), TOOLS[call.function.name]["function"]["parameters"])


def test_named_tool_choice_calls_exactly_that_tool(client, bias):
    r = chat(client, bias, tools=[WEATHER, CLOCK],
             tool_choice={"type": "function", "function": {"name": "get_time"}})
    message = r.choices[0].message
    if message.tool_calls:
        (call,) = message.tool_calls
        name, arguments = call.function.name, call.function.arguments
    else:  # vLLM returns a named call's arguments as the content for some parsers
        name, arguments = "get_time", message.content
    assert name == "get_time"
    jsonschema.validate(json.loads(arguments), CLOCK["function"]["parameters"])


BAD_INPUTS = [
    ("invalid json schema", {"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "properties": {"a": {"type": "strng"}}}}}}, "properties/a/type"),
    ("unsupported schema feature", {"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "array", "uniqueItems": True}}}}, "uniqueItems"),
    ("invalid regex", {"extra_body": {"structured_outputs": {"regex": "([a-z]"}}}, "regex"),
    ("invalid ebnf", {"extra_body": {"structured_outputs": {"grammar": "root ::= undefined_rule"}}}, "undefined_rule"),
    ("invalid structural tag", {"extra_body": {"structured_outputs": {
        "structural_tag": json.dumps({"format": {"type": "no_such_type"}})}}}, "no_such_type"),
]


@pytest.mark.parametrize("name,kwargs,reason", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_is_a_400_naming_the_problem_and_the_server_keeps_serving(client, bias, name, kwargs, reason):
    with pytest.raises(openai.BadRequestError) as err:
        chat(client, bias, **kwargs)
    assert reason in str(err.value)
    r = chat(client, bias, extra_body={"structured_outputs": {"choice": ["still", "alive"]}})
    assert r.choices[0].message.content in {"still", "alive"}
