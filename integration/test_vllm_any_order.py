"""Property order through a real ``vllm serve``: opt-in any-order objects, and the request-time lint."""

from __future__ import annotations

import json
import urllib.request

import jsonschema

MESSAGES = [{"role": "user", "content": "Describe the item."}]
ITEM = {
    "type": "object",
    "x-any-order": True,
    "properties": {"id": {"type": "integer"}, "name": {"type": "string", "maxLength": 8},
                   "ok": {"type": "boolean"}, "size": {"enum": ["s", "m", "l"]}},
    "required": ["id", "name", "ok"],
    "additionalProperties": False,
}


def strict_loads(text: str):
    """json.loads that refuses duplicate keys."""
    def pairs(items):
        keys = [k for k, _ in items]
        assert len(keys) == len(set(keys)), f"duplicate key in {text}"
        return dict(items)
    return json.loads(text, object_pairs_hook=pairs)


def test_any_order_object_output_is_strict_json_that_validates(client, bias):
    for seed in range(3):
        r = client.chat.completions.create(
            model="tiny", messages=MESSAGES, max_tokens=120, logit_bias=bias, seed=seed, temperature=1.0,
            response_format={"type": "json_schema", "json_schema": {"name": "item", "schema": ITEM}})
        jsonschema.validate(strict_loads(r.choices[0].message.content), ITEM)


def test_any_order_per_request_option(client, bias):
    schema = {k: v for k, v in ITEM.items() if k != "x-any-order"}
    r = client.chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=120, logit_bias=bias, seed=1,
        response_format={"type": "json_schema", "json_schema": {"name": "item", "schema": schema}},
        extra_body={"vllm_xargs": {"tagjit_any_order": 1}})
    jsonschema.validate(strict_loads(r.choices[0].message.content), schema)


def test_decision_before_reasoning_is_counted_on_metrics(client, bias, vllm_url):
    schema = {"type": "object", "properties": {"verdict": {"enum": ["yes", "no"]},
                                               "reasoning": {"type": "string", "maxLength": 10}},
              "required": ["verdict", "reasoning"]}
    client.chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=60, logit_bias=bias,
        response_format={"type": "json_schema", "json_schema": {"name": "v", "schema": schema}})
    with urllib.request.urlopen(vllm_url + "/metrics") as r:
        text = r.read().decode()
    lines = [line for line in text.splitlines()
             if line.startswith("tagjit_lint_findings_total") and "decision-before-reasoning" in line]
    assert lines and float(lines[0].split()[-1]) >= 1
