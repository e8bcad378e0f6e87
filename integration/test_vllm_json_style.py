"""tagjit's default JSON style through ``vllm serve``: every JSON answer is spaced exactly as json.dumps spaces it;
a whitespace bound set for the server (``TAGJIT_MAX_WHITESPACE``) brings the free style back."""

from __future__ import annotations

import json

import openai
import pytest

from sample_tools import EOS
from server import MODEL_DIR, build, vllm_server

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
def free_client():
    with vllm_server("tagjit", env={"TAGJIT_MAX_WHITESPACE": "1"}) as url:
        yield openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)


def plan_a_trip(client: openai.OpenAI, bias: dict[str, float], seed: int, pull: dict[str, float] | None = None):
    return client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Plan a trip."}], max_tokens=160, seed=seed,
        temperature=1.0, logit_bias={**bias, **(pull or {}), EOS: 8.0},
        response_format={"type": "json_schema", "json_schema": {"name": "trip", "schema": SCHEMA}})


def test_the_spacing_check_finds_what_json_dumps_would_not_write():
    assert spacing_faults(json.dumps({"a": [1, "x, y: z"], "b": {"c": None}})) == []
    assert spacing_faults('{"a":1}') and spacing_faults('{"a": 1 }') and spacing_faults('{"a": 1,\n"b": 2}')


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_json_schema_answers_are_spaced_as_json_dumps_spaces_them(client, bias, seed):
    out = plan_a_trip(client, bias, seed)
    text = out.choices[0].message.content
    assert text.startswith('{"city": "') and spacing_faults(text) == [], text
    if out.choices[0].finish_reason == "stop":
        assert list(json.loads(text)) == ["city", "days", "tags"]


def newline_bias() -> dict[str, float]:
    """A strong pull towards the newline token, which only the free style lets through."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(build(MODEL_DIR))
    return {str(tok.convert_tokens_to_ids("<0x0A>")): 12.0}


def test_a_whitespace_bound_set_for_the_server_brings_the_free_style_back(client, free_client, bias):
    pull = newline_bias()
    default = [plan_a_trip(client, bias, seed, pull=pull).choices[0].message.content for seed in (1, 2)]
    free = [plan_a_trip(free_client, bias, seed, pull=pull).choices[0].message.content for seed in (1, 2)]
    assert all(spacing_faults(text) == [] for text in default), default
    assert all("\n" in text for text in free), free
