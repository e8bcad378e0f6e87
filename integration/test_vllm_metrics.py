"""tagjit's metrics from the engine core appear on the API server's /metrics."""

from __future__ import annotations

import time
import urllib.request


def scrape(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics") as r:
        return r.read().decode()


def test_engine_compile_and_mask_metrics_are_on_metrics(client, bias, vllm_url):
    client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "m"}], max_tokens=20, logit_bias=bias,
        extra_body={"structured_outputs": {"regex": "metrics-[0-9]{3}"}})
    deadline = time.monotonic() + 15
    while True:
        text = scrape(vllm_url)
        compiles = [line for line in text.splitlines()
                    if line.startswith("tagjit_compile_milliseconds_count") and 'process="engine-' in line]
        fills = [line for line in text.splitlines()
                 if line.startswith("tagjit_mask_fill_microseconds_count") and 'process="engine-' in line]
        if (compiles and fills) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert compiles and float(compiles[0].split()[-1]) >= 1
    assert fills and float(fills[0].split()[-1]) >= 1
