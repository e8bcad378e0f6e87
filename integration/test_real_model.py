"""Every request kind on trained weights: SmolLM2-135M-Instruct under tagjit through a real ``vllm serve``.

The answers are judged only for validity (JSON under the schema, calls the engine's own parser returns
with arguments that validate), never for accuracy or speed. String arguments are bounded so that the
grammar, not the model's luck, decides that every answer ends within ``max_tokens``.
"""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from demo import PERSON, TOOLS
from real_model import serve

SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
WEATHER_QUESTION = [{"role": "user", "content": "What's the weather like in Tokyo?"}]
STRICT_WEATHER = [{**TOOLS[0], "function": {**TOOLS[0]["function"], "strict": True}}, *TOOLS[1:]]


@pytest.fixture(scope="module", params=["hermes", "qwen3_coder"])
def parser(request) -> str:
    """The vLLM tool parser (and the matching chat template) the server uses."""
    return request.param


@pytest.fixture(scope="module")
def client(parser: str):
    """An OpenAI client for ``vllm serve`` of SmolLM2 with tagjit and the given tool parser."""
    with serve("tagjit", parser) as url:
        yield openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=300)


def ask(client, messages, **fields):
    return client.chat.completions.create(model="smollm2", messages=messages, **{"temperature": 0, "max_tokens": 200,
                                                                                 **fields}).choices[0]


def assert_valid_calls(calls, names=tuple(SCHEMAS)) -> None:
    assert calls, "the parser returned no tool call"
    for c in calls:
        assert c.function.name in names
        jsonschema.validate(json.loads(c.function.arguments), SCHEMAS[c.function.name])


def test_json_schema_answer_follows_the_schema(client):
    choice = ask(client, [{"role": "user", "content": "Extract the person: Maria Lopez is 34 and lives in Madrid."}],
                 response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}})
    jsonschema.validate(json.loads(choice.message.content), PERSON)


def test_required_gives_calls_the_parser_returns_with_valid_arguments(client):
    choice = ask(client, WEATHER_QUESTION, tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
    assert len(choice.message.tool_calls) == 1
    assert_valid_calls(choice.message.tool_calls)


def test_named_tool_gives_that_tool_with_valid_arguments(client):
    choice = ask(client, [{"role": "user", "content": "Convert 100 US dollars to euros."}], tools=TOOLS,
                 tool_choice={"type": "function", "function": {"name": "convert_currency"}})
    assert_valid_calls(choice.message.tool_calls, names=("convert_currency",))


def test_auto_with_a_strict_tool_gives_valid_calls_or_plain_text(client):
    choice = ask(client, WEATHER_QUESTION, tools=STRICT_WEATHER, tool_choice="auto", parallel_tool_calls=False)
    if choice.message.tool_calls:
        assert_valid_calls(choice.message.tool_calls)
    else:
        assert "<tool_call>" not in (choice.message.content or "")


# -- an agent loop: tools and a structured final answer in every request ---------------------------

WEATHER_REPORT = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 40},
    "conditions": {"type": "string", "enum": ["sunny", "cloudy", "rainy", "snowy"]},
    "advice": {"type": "string", "maxLength": 80}},
    "required": ["city", "conditions", "advice"], "additionalProperties": False}
REPORT_FORMAT = {"type": "json_schema", "json_schema": {"name": "weather_report", "schema": WEATHER_REPORT}}


def test_an_agent_loop_calls_a_tool_then_answers_in_the_schema(client):
    """Every turn carries the tools and the answer's schema, as agent frameworks send them: the first turn must
    call (required), a later turn may call again or answer (auto), the last answers (none); each output is read
    by vLLM's own tool parser into tool_calls or content, and each is valid."""
    messages = [{"role": "user", "content": "What's the weather like in Tokyo? Then give me a short report."}]
    for turn, tool_choice in enumerate(("required", "auto", "auto", "none")):
        choice = ask(client, messages, tools=TOOLS, tool_choice=tool_choice, response_format=REPORT_FORMAT,
                     parallel_tool_calls=False)
        calls = choice.message.tool_calls
        if not calls:
            assert tool_choice != "required", "required gave no tool call"
            report = json.loads(choice.message.content)
            jsonschema.validate(report, WEATHER_REPORT)
            return
        assert tool_choice != "none" and len(calls) == 1
        assert_valid_calls(calls)
        messages += [{"role": "assistant", "content": None, "tool_calls": [c.model_dump() for c in calls]},
                     {"role": "tool", "tool_call_id": calls[0].id,
                      "content": json.dumps({"city": "Tokyo", "conditions": "rainy", "temperature_c": 14})}]
    raise AssertionError("the loop ended without an answer")


def test_auto_with_an_answer_schema_gives_a_valid_call_or_a_valid_answer(client):
    choice = ask(client, WEATHER_QUESTION, tools=TOOLS, tool_choice="auto", response_format=REPORT_FORMAT)
    if choice.message.tool_calls:
        assert_valid_calls(choice.message.tool_calls)
    else:
        jsonschema.validate(json.loads(choice.message.content), WEATHER_REPORT)
