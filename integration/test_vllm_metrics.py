"""tagjit's metrics from the engine core appear on the API server's /metrics."""

from __future__ import annotations

import time
import urllib.request

from tagjit.runtime.matcher import FILL_SAMPLE_EVERY


def scrape(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics") as r:
        return r.read().decode()


def engine_total(text: str, sample: str, label: str = "") -> float:
    """A sample's value summed over the engine-core processes (those of its lines that hold ``label``)."""
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith(sample + "{") and 'process="engine-' in line and label in line)


def test_engine_compile_and_mask_metrics_are_on_metrics(client, bias, vllm_url):
    # More decode steps than the fill metric's sampling interval, whatever ran before (one digit per token).
    client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "m"}], max_tokens=FILL_SAMPLE_EVERY + 8, logit_bias=bias,
        extra_body={"structured_outputs": {"regex": "metrics-[0-9]{200}"}})
    # The engine core writes its snapshot every second (and once at start, with zero counts).
    deadline = time.monotonic() + 60
    while True:
        text = scrape(vllm_url)
        compiles = engine_total(text, "tagjit_compile_milliseconds_count", 'kind="regex"')  # not the start-up's
        fills = engine_total(text, "tagjit_mask_fill_microseconds_count")
        if (compiles >= 1 and fills >= 1) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert compiles >= 1 and fills >= 1
