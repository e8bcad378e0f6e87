"""Adversarial requests against a real ``vllm serve`` with tagjit: a clear 400 (or a valid output), then
the next request is still served."""

from __future__ import annotations

import json
import re

import httpx
import openai
import pytest

MESSAGES = [{"role": "user", "content": "Answer in the requested format."}]


def chat(client, bias, **kwargs):
    kwargs.setdefault("max_tokens", 40)
    return client.chat.completions.create(model="tiny", messages=MESSAGES, logit_bias=bias, temperature=1.0,
                                          seed=3, **kwargs)


def assert_alive(client, bias) -> None:
    r = chat(client, bias, extra_body={"structured_outputs": {"choice": ["still", "alive"]}})
    assert r.choices[0].message.content in {"still", "alive"}


def nested_schema(depth: int) -> str:
    return '{"type": "array", "items": ' * depth + "{}" + "}" * depth


BAD = [
    ("schema nested 1000 deep", {"extra_body": {"structured_outputs": {"json": nested_schema(1000)}}}, "nested too deeply|deeper than"),
    ("enum of 100000 values", {"response_format": {"type": "json_schema", "json_schema": {
        "name": "e", "schema": {"enum": [f"v{i}" for i in range(100_000)]}}}}, "limit of"),
    ("schema that is not JSON", {"extra_body": {"structured_outputs": {"json": '{"type": "object"'}}}, "not valid JSON"),
    ("lone surrogate in a schema", {"extra_body": {"structured_outputs": {"json": '{"enum": ["\\ud800"]}'}}},
     "surrogate"),
    ("regex of 100000 alternatives", {"extra_body": {"structured_outputs": {
        "regex": "|".join(f"v{i}" for i in range(100_000))}}}, "limit of"),
    ("token the vocabulary lacks", {"response_format": {"type": "structural_tag", "format": {
        "type": "token", "token": "<|no_such_token|>"}}}, "token"),
]


@pytest.mark.parametrize("name,kwargs,reason", BAD, ids=[b[0] for b in BAD])
def test_adversarial_constraint_is_a_400_and_the_server_keeps_serving(client, bias, name, kwargs, reason):
    with pytest.raises(openai.BadRequestError) as err:
        chat(client, bias, **kwargs)
    assert re.search(reason, str(err.value)), str(err.value)
    assert_alive(client, bias)


@pytest.mark.parametrize("regex", ["(a+)+", "(a|aa)*b", "a{1000000}"])
def test_catastrophic_regex_is_served(client, bias, regex):
    r = chat(client, bias, extra_body={"structured_outputs": {"regex": regex}}, max_tokens=20)
    text = r.choices[0].message.content
    assert re.fullmatch(r"a*b?", text), text
    assert_alive(client, bias)


def test_max_items_of_a_million_is_served(client, bias):
    schema = {"type": "array", "items": {"enum": [1, 2]}, "maxItems": 10**6}
    r = chat(client, bias, response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}},
             max_tokens=60)
    assert r.choices[0].message.content.startswith("[")
    assert_alive(client, bias)


def test_client_disconnect_mid_stream_leaves_the_server_serving(client, bias, vllm_url):
    body = {"model": "tiny", "messages": MESSAGES, "max_tokens": 400, "stream": True, "logit_bias": bias,
            "response_format": {"type": "json_object"}}
    with httpx.Client(timeout=60) as http:
        with http.stream("POST", vllm_url + "/v1/chat/completions", json=body) as response:
            assert response.status_code == 200
            lines = response.iter_lines()
            first = next(line for line in lines if line.startswith("data:"))
            assert json.loads(first[5:])["choices"]
        # leaving the block closes the connection mid-stream
    assert_alive(client, bias)


def test_request_aborted_by_a_client_timeout_leaves_the_server_serving(client, bias, vllm_url):
    # 1500 letters take hundreds of decode steps: far longer than the client waits.
    body = {"model": "tiny", "messages": MESSAGES, "max_tokens": 2000, "logit_bias": bias,
            "structured_outputs": {"regex": "[a-z]{1500}"}}
    with pytest.raises(httpx.TimeoutException):
        httpx.post(vllm_url + "/v1/chat/completions", json=body, timeout=0.05)
    assert_alive(client, bias)
