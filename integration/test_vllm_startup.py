"""tagjit's once-per-process work happens while ``vllm serve`` starts, before it reports healthy."""

from __future__ import annotations

import re
import urllib.request

import openai

from server import closer_bias, vllm_server

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL = {"type": "function", "function": {"name": "get_weather", "strict": True, "parameters": SCHEMA}}
ENGINE_STEPS = {"tables", "json", "tool_tag"}  # the engine core's, on /metrics
SERVER_STEPS = {"check_json", "check_tool_tag"}  # the API server's own (it checks each request before queueing it)
KERNEL_LINE = "tagjit: bitmask kernel compiled for cpu"  # the worker's (its own process: the log shows it)


def start_up_counts(url: str, process: str = "") -> dict[str, float]:
    """How often each tagjit start-up step ran, over the server's processes (or those whose ``process`` label
    starts with ``process``), as ``/metrics`` shows it."""
    with urllib.request.urlopen(url + "/metrics") as r:
        text = r.read().decode()
    counts: dict[str, float] = {}
    for m in re.finditer(r'^tagjit_warmup_milliseconds_count\{([^}]*)\} ([0-9.e+-]+)$', text, re.M):
        labels = dict(re.findall(r'([a-z_]+)="([^"]*)"', m[1]))
        if labels.get("process", "").startswith(process):
            counts[labels["step"]] = counts.get(labels["step"], 0.0) + float(m[2])
    return counts


def kernel_compiles(log_path) -> int:
    return log_path.read_text(errors="replace").count(KERNEL_LINE)


def test_start_up_work_is_done_before_healthy_and_not_again_at_the_first_requests(tmp_path):
    log_path = tmp_path / "vllm.log"
    with vllm_server("tagjit", "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
                     log_path=str(log_path)) as url:
        at_start = start_up_counts(url)
        assert at_start == {step: 1.0 for step in ENGINE_STEPS | SERVER_STEPS}
        assert start_up_counts(url, "server") == {step: 1.0 for step in SERVER_STEPS}
        assert kernel_compiles(log_path) == 1
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)
        common = dict(model="tiny", max_tokens=20, logit_bias=closer_bias())
        client.chat.completions.create(
            messages=[{"role": "user", "content": "Weather?"}], **common,
            response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": SCHEMA}})
        client.chat.completions.create(
            messages=[{"role": "user", "content": "Weather?"}], **common, tools=[TOOL], tool_choice="required")
        assert start_up_counts(url) == at_start
        assert kernel_compiles(log_path) == 1
