"""The demo: a tiny random-weight Llama served by vLLM on CPU with tagjit, answering real requests.

Starts ``vllm serve`` on 127.0.0.1 with ``--structured-outputs-config.backend tagjit``, sends
json_schema, regex, choice and tool_choice=required requests through the OpenAI client,
validates every answer against its own constraint, prints a table and stops the server.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

import jsonschema  # noqa: E402
from openai import OpenAI  # noqa: E402

from server import closer_bias, vllm_server  # noqa: E402

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "role": {"enum": ["admin", "user", "guest"]},
    },
    "required": ["name", "age", "role"],
    "additionalProperties": False,
}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20},
                           "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
        },
    },
}
REGEX = r"[A-Z]{3}-[0-9]{4}"
EOS = "2"  # </s> in the tiny model's vocabulary
CHOICES = ["positive", "negative", "neutral"]


def main() -> int:
    """Run the demo; exit status 0 when every answer satisfies its constraint."""
    print("starting vllm serve with tagjit (tiny random Llama on CPU) ...", flush=True)
    started = time.perf_counter()
    with vllm_server("tagjit", "--enable-auto-tool-choice", "--tool-call-parser", "hermes") as url:
        print(f"server up at {url} after {time.perf_counter() - started:.0f} s", flush=True)
        client = OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
        bias = closer_bias()
        messages = [{"role": "user", "content": "Tell me about someone."}]
        rows = []

        def run(name: str, check, stop_bias: float = 0.0, **kwargs) -> None:
            t = time.perf_counter()
            r = client.chat.completions.create(model="tiny", messages=messages, max_tokens=160,
                                               logit_bias={**bias, EOS: stop_bias} if stop_bias else bias,
                                               temperature=1.0, **kwargs)
            ms = (time.perf_counter() - t) * 1000
            msg = r.choices[0].message
            ok, shown = check(msg)
            rows.append((name, "ok" if ok else "FAIL", f"{ms:.0f}", shown))
            print(f"  {name:<24} {'ok' if ok else 'FAIL'}", flush=True)

        def check_json(msg):
            try:
                jsonschema.validate(json.loads(msg.content), PERSON)
                return True, msg.content
            except Exception as e:
                return False, f"{msg.content!r} ({e.__class__.__name__})"

        def check_tool(msg):
            calls = msg.tool_calls or []
            try:
                args = json.loads(calls[0].function.arguments)
                jsonschema.validate(args, WEATHER_TOOL["function"]["parameters"])
                return calls[0].function.name == "get_weather", f"{calls[0].function.name}({calls[0].function.arguments})"
            except Exception as e:
                return False, f"{msg.content!r} {calls!r} ({e.__class__.__name__})"

        run("json_schema", check_json,
            response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}})
        run("regex", lambda m: (re.fullmatch(REGEX, m.content or "") is not None, m.content),
            extra_body={"structured_outputs": {"regex": REGEX}})
        run("choice", lambda m: (m.content in CHOICES, m.content),
            extra_body={"structured_outputs": {"choice": CHOICES}})
        # A random model would go on calling tools; favouring </s> lets it stop once the grammar allows.
        run("tool_choice=required", check_tool, stop_bias=8.0, tools=[WEATHER_TOOL], tool_choice="required")

        print()
        print(f"{'request':<24} {'valid':<6} {'ms':>6}  output")
        print("-" * 100)
        for name, ok, ms, shown in rows:
            print(f"{name:<24} {ok:<6} {ms:>6}  {json.dumps(shown, ensure_ascii=False)[:70]}")
        failed = sum(1 for r in rows if r[1] != "ok")
        print(f"\n{len(rows) - failed} of {len(rows)} answers satisfy their constraint")
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
