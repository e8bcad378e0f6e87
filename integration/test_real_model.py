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
