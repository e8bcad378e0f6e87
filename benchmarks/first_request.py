"""The first constrained request after start against the tenth, on freshly started ``vllm serve`` processes.

Each sample starts a new server per backend and scenario, waits until ``/health`` answers, sends one plain
request (so the first forward pass is paid outside the comparison, the same for every backend), then
``--requests`` constrained requests one at a time, each with a constraint new to the server:

  json    response_format json_schema, a JSONSchemaBench schema new to the server; sample s sends schema s first
          and schema s + 1 last, so over the samples the first and the last requests carry nearly the same
          schemas and their ratio measures the server's warmth, not the schemas' differences
  tools   tool_choice=required with ``--tools`` tools renamed for each request (hermes parser), BFCL's or
          (``--tool-pool jsonschemabench``) JSONSchemaBench object schemas as strict tools, drawn as the json
          scenario draws its schemas: every request's tools new to the server (while the pool lasts), the first
          request's of sample s the last request's of sample s - 1

Latency is that of the request cut to one generated token (what a constraint adds to time to first token).
Reported per backend and scenario, median and range over the samples: the time to healthy (what tagjit's
start-up work costs), the first request, the tenth, and their ratio; for tagjit also its own start-up steps
as ``/metrics`` shows them (``tagjit_warmup_milliseconds``). Prints a table, can write JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "integration"))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "src"))

from server import closer_bias, vllm_server  # noqa: E402
from tiny_model import PLAIN_TEMPLATE, build  # noqa: E402
from ttft import DATA, load_schemas, renamed, schema_tools  # noqa: E402


def warmup_steps(url: str) -> dict[str, float]:
    """tagjit's start-up steps in ms, summed over the engine's processes, from ``/metrics``."""
    with urllib.request.urlopen(url + "/metrics") as r:
        text = r.read().decode()
    steps: dict[str, float] = {}
    for m in re.finditer(r'^tagjit_warmup_milliseconds_sum\{[^}]*step="([a-z_]+)"[^}]*\} ([0-9.e+-]+)$', text, re.M):
        steps[m[1]] = steps.get(m[1], 0.0) + float(m[2])
    return steps


def one_token_ms(client, **kwargs) -> float:
    """Latency in ms of a request cut to one generated token."""
    start = time.perf_counter()
    client.chat.completions.create(**{**kwargs, "max_tokens": 1})
    return (time.perf_counter() - start) * 1000


def schema_index(sample: int, i: int, samples: int, requests: int) -> int:
    """Which schema request ``i`` of a sample sends: ``sample`` first, ``sample + 1`` last, the rest unshared."""
    if i == 0:
        return sample
    if i == requests - 1:
        return sample + 1
    return samples + 1 + sample * requests + i


def run_server(backend: str, scenario: str, sample: int, args, model: str, schemas: list, tools: list) -> dict:
    """One fresh server: time to healthy, a plain request, then the constrained ones."""
    from openai import OpenAI

    extra = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--no-enable-prefix-caching"]
    started = time.perf_counter()
    with vllm_server(backend, *extra, model_dir=model,
                     log_path=str(Path(args.out) / f"vllm-{backend}-{scenario}-{sample}.log")) as url:
        healthy_s = time.perf_counter() - started
        steps = warmup_steps(url) if backend == "tagjit" else {}
        client = OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=600)
        common = dict(model="tiny", logit_bias=closer_bias(model), temperature=1.0)
        plain = one_token_ms(client, messages=[{"role": "user", "content": f"hello {sample}"}], **common)
        latencies = []
        for i in range(args.requests):
            messages = [{"role": "user", "content": f"request {i} of sample {sample}"}]
            if scenario == "json":
                schema = {**schemas[schema_index(sample, i, args.samples, args.requests) % len(schemas)],
                          "description": f"copy {sample}-{i}"}
                body = {"response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}}
            else:
                start = schema_index(sample, i, args.samples, args.requests) * args.tools % len(tools)
                picked = [renamed(t, sample * 1000 + i) for t in (tools * 2)[start:start + args.tools]]
                body = {"tools": picked, "tool_choice": "required"}
            latencies.append(one_token_ms(client, messages=messages, **common, **body))
    return {"backend": backend, "scenario": scenario, "sample": sample, "healthy_s": healthy_s, "plain_ms": plain,
            "latencies_ms": latencies, "warmup_ms": steps}


def summarize(rows: list[dict]) -> list[dict]:
    """Median and range per backend and scenario."""
    out = []
    for key in dict.fromkeys((r["backend"], r["scenario"]) for r in rows):
        group = [r for r in rows if (r["backend"], r["scenario"]) == key]
        first = [r["latencies_ms"][0] for r in group]
        last = [r["latencies_ms"][-1] for r in group]
        steps = {s: statistics.median(r["warmup_ms"].get(s, 0.0) for r in group)
                 for s in dict.fromkeys(s for r in group for s in r["warmup_ms"])}
        out.append({"backend": key[0], "scenario": key[1], "samples": len(group),
                    "healthy_s": statistics.median(r["healthy_s"] for r in group),
                    "plain_ms": statistics.median(r["plain_ms"] for r in group),
                    "first_ms": statistics.median(first), "first_range": [min(first), max(first)],
                    "last_ms": statistics.median(last), "last_range": [min(last), max(last)],
                    "first_over_last": statistics.median(f / t for f, t in zip(first, last)),
                    "warmup_ms": steps})
    return out


def print_table(summary: list[dict], requests: int) -> None:
    """The comparison table."""
    print(f"\n{'scenario':<8} {'backend':<9} {'n':>2} {'healthy s':>9} {'plain ms':>8} {'first ms (range)':>20} "
          f"{f'#{requests} ms (range)':>18} {'first/#' + str(requests):>9}")
    print("-" * 90)
    for r in summary:
        first = f"{r['first_ms']:.0f} ({r['first_range'][0]:.0f}-{r['first_range'][1]:.0f})"
        last = f"{r['last_ms']:.0f} ({r['last_range'][0]:.0f}-{r['last_range'][1]:.0f})"
        print(f"{r['scenario']:<8} {r['backend']:<9} {r['samples']:>2} {r['healthy_s']:>9.1f} {r['plain_ms']:>8.0f} "
              f"{first:>20} {last:>18} {r['first_over_last']:>8.2f}x")
    for r in summary:
        if r["warmup_ms"]:
            steps = ", ".join(f"{k} {v:.0f}" for k, v in r["warmup_ms"].items())
            print(f"tagjit start-up steps ({r['scenario']} servers, ms, median): {steps}; "
                  f"total {sum(r['warmup_ms'].values()):.0f} ms")


def main() -> int:
    """Run the benchmark."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backends", default="tagjit,xgrammar")
    p.add_argument("--scenarios", default="json,tools")
    p.add_argument("--samples", type=int, default=3)
    p.add_argument("--requests", type=int, default=10)
    p.add_argument("--tools", type=int, default=20, help="tools per request in the tools scenario")
    p.add_argument("--tool-pool", choices=("bfcl", "jsonschemabench"), default="bfcl")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--out", default="out/first_request")
    p.add_argument("--json", help="write rows and summary to this file")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    from tagjit.tools.bfcl import load_tools

    model = build(os.path.join(os.environ.get("TMPDIR", "/tmp"), f"tagjit-bench-llama-{args.hidden}x{args.layers}"),
                  hidden=args.hidden, layers=args.layers, chat_template=PLAIN_TEMPLATE)
    schemas = load_schemas((args.samples + 1) * (args.requests + 1))
    blocks = (args.samples + 1) * (args.requests + 1)  # the tools of each request new to its server (see schema_index)
    tools = load_tools(str(DATA / "bfcl"), strict=True) if args.tool_pool == "bfcl" else schema_tools(blocks * args.tools)
    rows = []
    total = args.samples * len(args.backends.split(",")) * len(args.scenarios.split(","))
    for sample in range(args.samples):  # backends interleaved per sample, so drift of the machine hits both
        for scenario in args.scenarios.split(","):
            for backend in args.backends.split(","):
                print(f"[{len(rows) + 1}/{total}] {backend} {scenario} sample {sample}: starting vllm serve ...",
                      flush=True)
                row = run_server(backend, scenario, sample, args, model, schemas, tools)
                rows.append(row)
                print(f"  healthy after {row['healthy_s']:.1f} s; first {row['latencies_ms'][0]:.0f} ms, "
                      f"#{args.requests} {row['latencies_ms'][-1]:.0f} ms", flush=True)
    summary = summarize(rows)
    print_table(summary, args.requests)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "summary": summary, "args": vars(args)}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
