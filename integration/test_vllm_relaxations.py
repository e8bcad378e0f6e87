"""Schemas tagjit cannot enforce exactly, through ``vllm serve``: a tool takes the nearest relaxation and the
request is served; a response_format is refused unless it opts in; either way the user is told (a response
header, /metrics), and a server set to refuse such tools answers 400 naming the tool."""

from __future__ import annotations

import json
import urllib.request

import openai
import pytest

from sample_tools import EOS, WEATHER
from server import vllm_server

MESSAGES = [{"role": "user", "content": "Tag the photo."}]
# A real-world shape tagjit cannot enforce exactly: distinct tags (uniqueItems).
TAG_PHOTO = {"type": "function", "function": {
    "name": "tag_photo", "description": "Tag a photo",
    "parameters": {"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3, "uniqueItems": True}},
        "required": ["tags"]}}}
# Both branches accept an array of short strings; exactly one of them means "an item longer than 3" beside
# "strings only", which tagjit cannot write (it has no `contains`).
OVERLAPPING = {"type": "object", "properties": {
    "id": {"oneOf": [{"type": "array", "items": {"type": "string"}},
                     {"type": "array", "items": {"type": "string", "maxLength": 3}}]}},
    "required": ["id"]}


def chat(client, bias, **kwargs):
    """The raw response (headers and parsed body) of one chat completion."""
    return client.chat.completions.with_raw_response.create(
        model="tiny", messages=MESSAGES, max_tokens=120, logit_bias={**bias, EOS: 8.0}, temperature=1.0, seed=5,
        **kwargs)


def relaxation_count(url: str, relaxation: str, subject: str) -> float:
    with urllib.request.urlopen(url + "/metrics") as r:
        text = r.read().decode()
    wanted = (f'relaxation="{relaxation}"', f'subject="{subject}"')
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("tagjit_relaxations_total{") and all(w in line for w in wanted))


def test_a_tool_tagjit_cannot_enforce_is_served_by_its_relaxation_and_named_in_a_header(client, bias):
    raw = chat(client, bias, tools=[WEATHER, TAG_PHOTO], tool_choice="required")
    assert raw.headers["x-tagjit-relaxed"] == "tool 'tag_photo': uniqueItems at #/properties/tags"
    calls = raw.parse().choices[0].message.tool_calls
    assert calls
    for c in calls:
        assert c.function.name in ("get_weather", "tag_photo")
        assert isinstance(json.loads(c.function.arguments), dict)


def test_a_relaxed_tool_is_counted_on_metrics(client, bias, vllm_url):
    before = relaxation_count(vllm_url, "uniqueItems", "tool")
    chat(client, bias, tools=[TAG_PHOTO], tool_choice="required")
    assert relaxation_count(vllm_url, "uniqueItems", "tool") == before + 1


def test_a_request_served_exactly_has_no_relaxation_header(client, bias):
    raw = chat(client, bias, tools=[WEATHER], tool_choice="required")
    assert "x-tagjit-relaxed" not in raw.headers


def test_a_response_format_tagjit_cannot_enforce_is_a_400_naming_the_opt_in(client, bias):
    with pytest.raises(openai.BadRequestError) as err:
        chat(client, bias, response_format={"type": "json_schema", "json_schema": {
            "name": "ids", "schema": OVERLAPPING}})
    assert "oneOf whose branches 0 and 1 may both match" in str(err.value)
    assert '"x-tagjit-relax": ["oneOf"]' in str(err.value)


def test_a_response_format_that_opts_into_a_relaxation_is_served_and_reported(client, bias, vllm_url):
    before = relaxation_count(vllm_url, "oneOf", "schema")
    raw = chat(client, bias, response_format={"type": "json_schema", "json_schema": {
        "name": "ids", "schema": {**OVERLAPPING, "x-tagjit-relax": ["oneOf"]}}})
    assert raw.headers["x-tagjit-relaxed"] == "schema: oneOf at #/properties/id"
    assert relaxation_count(vllm_url, "oneOf", "schema") == before + 1
    choice = raw.parse().choices[0]
    if choice.finish_reason == "stop":
        value = json.loads(choice.message.content)
        assert isinstance(value["id"], list) and all(isinstance(x, str) for x in value["id"])


@pytest.fixture(scope="module")
def refusing_url():
    with vllm_server("tagjit", "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
                     env={"TAGJIT_UNENFORCEABLE_TOOLS": "refuse"}) as url:
        yield url


def test_a_server_set_to_refuse_answers_400_naming_the_tool_and_keeps_serving(refusing_url, bias):
    client = openai.OpenAI(base_url=refusing_url + "/v1", api_key="none", max_retries=0, timeout=120)
    with pytest.raises(openai.BadRequestError) as err:
        chat(client, bias, tools=[WEATHER, TAG_PHOTO], tool_choice="required")
    assert "tool 'tag_photo'" in str(err.value) and "'uniqueItems' at #/properties/tags" in str(err.value)
    raw = chat(client, bias, tools=[WEATHER], tool_choice="required")
    assert raw.parse().choices[0].message.tool_calls
