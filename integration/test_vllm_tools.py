"""Tool calls end to end: tagjit's structural tags in the parser's native format through ``vllm serve``."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from sample_tools import CLOCK, EOS, TOOLS, WEATHER
from server import vllm_server

MESSAGES = [{"role": "user", "content": "What is the weather in Paris, and what time is it?"}]


@pytest.fixture(scope="module", params=["hermes", "qwen3_coder"])
def tool_client(request, vllm_url):
    """An OpenAI client for a server using the given tool parser (hermes reuses the session server)."""
    if request.param == "hermes":
        yield openai.OpenAI(base_url=vllm_url + "/v1", api_key="none", max_retries=0, timeout=120)
        return
    with vllm_server("tagjit", "--enable-auto-tool-choice", "--tool-call-parser", request.param) as url:
        yield openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)


def call(client, bias, **kwargs):
    return client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=250,
                                          logit_bias={**bias, EOS: 8.0}, temperature=1.0, seed=3,
                                          tools=[WEATHER, CLOCK], **kwargs).choices[0].message


def assert_valid_calls(calls) -> None:
    assert calls
    for c in calls:
        jsonschema.validate(json.loads(c.function.arguments), TOOLS[c.function.name]["function"]["parameters"])


def test_required_gives_valid_native_calls(tool_client, bias):
    message = call(tool_client, bias, tool_choice="required")
    assert_valid_calls(message.tool_calls)


def test_required_without_parallel_gives_one_call(tool_client, bias):
    message = call(tool_client, bias, tool_choice="required", parallel_tool_calls=False)
    assert len(message.tool_calls) == 1
    assert_valid_calls(message.tool_calls)


def test_named_tool_gives_exactly_that_tool(tool_client, bias):
    message = call(tool_client, bias, tool_choice={"type": "function", "function": {"name": "get_weather"}})
    if message.tool_calls:
        assert [c.function.name for c in message.tool_calls] == ["get_weather"]
        assert_valid_calls(message.tool_calls)
    else:  # vLLM reports a forced named call's arguments as content for some parsers
        jsonschema.validate(json.loads(message.content), WEATHER["function"]["parameters"])


def test_auto_without_parallel_calls_is_constrained(tool_client, bias):
    message = call(tool_client, bias, tool_choice="auto", parallel_tool_calls=False)
    if message.tool_calls:
        assert len(message.tool_calls) == 1
        assert_valid_calls(message.tool_calls)
    else:
        assert "<tool_call>" not in (message.content or "")


def test_none_gives_text_without_tool_call_openings(tool_client, bias):
    message = call(tool_client, bias, tool_choice="none")
    assert not message.tool_calls
    assert "<tool_call>" not in (message.content or "")


def test_named_tool_missing_from_tools_is_a_400(tool_client, bias):
    with pytest.raises(openai.BadRequestError):
        call(tool_client, bias, tool_choice={"type": "function", "function": {"name": "no_such_tool"}})


# A tool as real tool lists have it: a required parameter whose enum contradicts its type, so it can never be called.
HOTEL = {"type": "function", "function": {"name": "book_hotel", "parameters": {
    "type": "object", "properties": {"wifi": {"type": "boolean", "enum": ["True", "False", "dontcare"]}},
    "required": ["wifi"]}}}


def test_a_tool_that_can_never_be_called_does_not_sink_the_request(tool_client, bias):
    message = tool_client.chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=250, logit_bias={**bias, EOS: 8.0}, temperature=1.0, seed=3,
        tools=[HOTEL, WEATHER, CLOCK], tool_choice="required").choices[0].message
    assert_valid_calls(message.tool_calls)
    assert "book_hotel" not in {c.function.name for c in message.tool_calls}


def test_a_request_whose_only_tool_can_never_be_called_is_a_400_naming_it(tool_client, bias):
    with pytest.raises(openai.BadRequestError, match="book_hotel"):
        tool_client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=20, tools=[HOTEL],
                                            tool_choice="required")
    assert_valid_calls(call(tool_client, bias, tool_choice="required").tool_calls)  # the server still serves


# get_weather defined a second time, as merged tool lists have it: the place under another key.
WEATHER_AGAIN = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"place": {"enum": ["Paris", "Oslo"]}}, "required": ["place"],
    "additionalProperties": False}}}


def test_a_tool_list_that_defines_a_name_twice_is_served_with_calls_valid_for_either(tool_client, bias):
    raw = tool_client.chat.completions.with_raw_response.create(
        model="tiny", messages=MESSAGES, max_tokens=250, logit_bias={**bias, EOS: 8.0}, temperature=1.0, seed=3,
        tools=[WEATHER, CLOCK, WEATHER_AGAIN], tool_choice="required")
    message = raw.parse().choices[0].message
    assert message.tool_calls and {c.function.name for c in message.tool_calls} <= {"get_weather", "get_time"}
    relaxed = raw.headers.get("x-tagjit-relaxed")
    if relaxed is not None:  # XML arguments cannot carry the union: the name's arguments are loosened, and said so
        assert relaxed.startswith("tool 'get_weather':")
        return
    for c in message.tool_calls:
        args = json.loads(c.function.arguments)
        schemas = [WEATHER, WEATHER_AGAIN] if c.function.name == "get_weather" else [CLOCK]
        assert any(jsonschema.Draft202012Validator(t["function"]["parameters"]).is_valid(args) for t in schemas)


@pytest.fixture(scope="module")
def compact_client():
    """A server with vLLM's disable_any_whitespace: tagjit's grammars take compact JSON only."""
    with vllm_server("tagjit", "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
                     "--structured-outputs-config.disable_any_whitespace", "true") as url:
        yield openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)


def test_required_tool_calls_work_under_disable_any_whitespace(compact_client, bias):
    message = call(compact_client, bias, tool_choice="required")
    assert_valid_calls(message.tool_calls)


def test_json_schema_output_is_compact_under_disable_any_whitespace(compact_client, bias):
    schema = WEATHER["function"]["parameters"]
    out = compact_client.chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=200, logit_bias={**bias, EOS: 8.0}, temperature=1.0, seed=3,
        response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": schema}}).choices[0]
    jsonschema.validate(json.loads(out.message.content), schema)
    assert not set(outside_strings(out.message.content)) & set(" \n\r\t")


def outside_strings(text: str) -> str:
    """The characters of a JSON text that are not inside a string literal."""
    out, in_str, esc = [], False, False
    for ch in text:
        if in_str:
            esc, in_str = (False, True) if esc else (ch == "\\", ch != '"')
        elif ch == '"':
            in_str = True
        else:
            out.append(ch)
    return "".join(out)
