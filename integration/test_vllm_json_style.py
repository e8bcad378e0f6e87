"""``TAGJIT_JSON_STYLE=dumps`` through ``vllm serve``: every JSON answer is spaced exactly as json.dumps spaces it."""

from __future__ import annotations

import json

import openai
import pytest

from sample_tools import EOS
from server import vllm_server

SCHEMA = {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"},
    "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2}},
    "required": ["city", "days", "tags"]}


def spacing_faults(text: str) -> list[str]:
    """Where text (a whole JSON value or its prefix) is spaced otherwise than json.dumps spaces it."""
    faults, in_string, escaped = [], False, False
    for i, c in enumerate(text):
        if in_string:
            escaped, in_string = (not escaped and c == "\\"), (escaped or c != '"')
        elif c == '"':
            in_string = True
        elif c in ",:" and text[i + 1:i + 2] not in (" ", ""):
            faults.append(f"{c!r} without a space at {i}")
        elif c in " \t\r\n" and not (c == " " and i > 0 and text[i - 1] in ",:"):
            faults.append(f"{c!r} at {i}")
    return faults


@pytest.fixture(scope="module")
def dumps_client():
    with vllm_server("tagjit", env={"TAGJIT_JSON_STYLE": "dumps"}) as url:
        yield openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)


def test_the_spacing_check_finds_what_json_dumps_would_not_write():
    assert spacing_faults(json.dumps({"a": [1, "x, y: z"], "b": {"c": None}})) == []
    assert spacing_faults('{"a":1}') and spacing_faults('{"a": 1 }') and spacing_faults('{"a": 1,\n"b": 2}')


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_json_schema_answers_are_spaced_as_json_dumps_spaces_them(dumps_client, bias, seed):
    out = dumps_client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Plan a trip."}], max_tokens=160, seed=seed,
        temperature=1.0, logit_bias={**bias, EOS: 8.0},
        response_format={"type": "json_schema", "json_schema": {"name": "trip", "schema": SCHEMA}})
    text = out.choices[0].message.content
    assert text.startswith('{"city": "') and spacing_faults(text) == [], text
    if out.choices[0].finish_reason == "stop":
        assert list(json.loads(text)) == ["city", "days", "tags"]
