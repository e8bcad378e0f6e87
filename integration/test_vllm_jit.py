"""The JIT policy in a real server: an idle engine overlaps even a long compile with prefill."""

from __future__ import annotations

import json
import os
import time
import urllib.request
from pathlib import Path

from tagjit.tools.bfcl import load_tools
from tagjit.tools import build_tool_tag
from tagjit.tools import load_format

DATA = Path(os.environ.get("TAGJIT_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def decisions(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/metrics") as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("tagjit_jit_decisions_total{") and 'process="engine-' in line:
            label = line.split('decision="', 1)[1].split('"', 1)[0]
            out[label] = out.get(label, 0.0) + float(line.split()[-1])
    return out


def gauge(url: str, name: str) -> float:
    with urllib.request.urlopen(url + "/metrics") as r:
        return sum(float(line.rsplit(" ", 1)[1]) for line in r.read().decode().splitlines()
                   if line.startswith(name + "{") or line.startswith(name + " "))


def quiet(url: str) -> dict[str, float]:
    """The decision counts once the engine holds no request and its metrics snapshot has caught up
    (earlier tests' aborted requests may still be finishing)."""
    deadline = time.monotonic() + 60
    last = None
    while time.monotonic() < deadline:
        live = gauge(url, "vllm:num_requests_running") + gauge(url, "vllm:num_requests_waiting")
        now = decisions(url)
        if live == 0 and now == last:
            return now
        last = now
        time.sleep(1.5)  # more than the engine's 1 s metrics snapshot interval
    raise AssertionError("the server did not become idle within 60 s")


def settled(url: str, before: dict[str, float]) -> dict[str, float]:
    """The engine's decision counts once its metrics snapshot shows one more decision than before."""
    deadline = time.monotonic() + 20
    while True:
        now = decisions(url)
        if sum(now.values()) > sum(before.values()) or time.monotonic() > deadline:
            return now
        time.sleep(0.5)


def test_idle_engine_overlaps_a_long_compile_with_a_short_prompt(client, bias, vllm_url):
    # A tag of 150 tools no request has sent, after a one-word prompt: a compile far longer than the
    # prefill, which the stall budget alone would hold back; with no other request live, waiting would
    # delay only this request.
    tools = load_tools(str(DATA / "bfcl"), strict=True)[-150:]
    tag = build_tool_tag(load_format("hermes"), tools, "required", True)
    before = quiet(vllm_url)
    client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}], max_tokens=4,
                                   logit_bias=bias, extra_body={"structured_outputs": {"structural_tag": json.dumps(tag)}})
    after = settled(vllm_url, before)
    assert after.get("overlap", 0) == before.get("overlap", 0) + 1
    assert after.get("wait", 0) == before.get("wait", 0)
