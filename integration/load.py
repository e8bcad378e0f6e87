"""Load on one ``vllm serve`` with tagjit: concurrent clients, distinct schemas and tool sets, cancels and aborts.

    python integration/load.py [--duration 300] [--warmup 150] [--clients 8] [--backend tagjit|xgrammar]
                               [--url http://127.0.0.1:PORT] [--json PATH]

Without ``--url`` a server (tiny random Llama, hermes tool parser) is started. Each client loops
over a mix of requests: a JSON schema from JSONSchemaBench (one tagjit compiles, a different one
each time), a BFCL tool set with ``tool_choice=required``, a streamed request the client cancels
after two chunks, and a request the client aborts by a 50 ms timeout. Checks, each a violation
that makes the exit status non-zero:
- no response with a 5xx status;
- every completed output validates against its own request's schema or tools (no cross-request leak);
- after the run, no request is left running or waiting in the engine (cancelled and aborted
  requests released, with their grammars);
- the memory of the processes that hold tagjit's grammars and caches, the API server and the
  engine core, grows by less than ``--rss-growth-mb`` over the steady phase (from ``--warmup``
  seconds to the end). The model worker, which only applies bitmasks, is reported but not judged:
  its RSS grows the same without any tagjit code in it and under vLLM's own backend (measured,
  150-300 s: +54 MB with tagjit, +65 MB with ``TAGJIT_VLLM_APPLY=0``, +35 MB under ``--backend
  xgrammar`` at a lower request rate; the engine core +10, +9 and +10 MB).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import sys
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

sys.path.insert(0, os.path.dirname(__file__))

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("TAGJIT_SHARED_DATA", ROOT.parent / "shared" / "data"))
MESSAGES = [{"role": "user", "content": "Answer in the requested format."}]
KINDS = ("schema", "tools", "cancel", "abort")


@dataclass
class Report:
    """Counts of the run and the violations found."""

    sent: Counter = field(default_factory=Counter)
    completed: Counter = field(default_factory=Counter)
    truncated: Counter = field(default_factory=Counter)
    client_errors: Counter = field(default_factory=Counter)
    server_errors: int = 0
    invalid: list[str] = field(default_factory=list)
    rss_mb: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    left_running: float = 0.0
    violations: list[str] = field(default_factory=list)


def workload(seed: int = 0) -> tuple[list[dict], list[list[dict]]]:
    """Distinct JSONSchemaBench schemas tagjit compiles and BFCL tool sets of 1-4 tools."""
    from tagjit import ConstraintError, Settings
    from tagjit.tools.bfcl import load_tools
    from tagjit.compile.service import validate
    from tagjit.constraint import Constraint, Kind

    schemas = []
    folder = DATA / "jsonschemabench" / "Glaiveai2K"
    for name in sorted(os.listdir(folder)):
        schema = json.loads((folder / name).read_text())
        try:
            validate(Constraint.of(Kind.JSON, schema), Settings(lint=False))  # the server lints; the client need not
        except ConstraintError:
            continue
        schemas.append(schema)
        if len(schemas) >= 400:
            break
    tools = load_tools(str(DATA / "bfcl"), count=120)
    rng = random.Random(seed)
    rng.shuffle(tools)
    tool_sets = [tools[i:i + n] for i, n in zip(range(0, len(tools), 3), itertools.cycle([1, 2, 3, 4]))]
    return schemas, [t for t in tool_sets if t]


ROLES = {"VLLM::EngineCore": "engine", "VLLM::Worker": "worker"}
JUDGED = ("api", "engine")  # where tagjit keeps grammars and caches


def server_rss_mb(port: int) -> dict[str, float]:
    """RSS per process of the server listening on the port: api (the API server), engine, worker, other."""
    import psutil

    for conn in psutil.net_connections(kind="tcp"):
        if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
            root = psutil.Process(conn.pid)
            out = {"api": root.memory_info().rss / 2**20}
            for child in root.children(recursive=True):
                try:
                    role = ROLES.get(child.name(), "other")
                    out[role] = out.get(role, 0.0) + child.memory_info().rss / 2**20
                except psutil.NoSuchProcess:
                    continue
            return out
    raise RuntimeError(f"no process listens on port {port}")


def engine_gauge(url: str, name: str) -> float:
    """Sum of a gauge on the server's /metrics (e.g. vllm:num_requests_running)."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


async def client_loop(cid: int, url: str, deadline: float, schemas: list[dict], tool_sets: list[list[dict]],
                      bias: dict, report: Report) -> None:
    import httpx
    import jsonschema
    import openai

    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=180)
    rng = random.Random(cid)
    counter = itertools.count(cid * 100_003)
    base = {"model": "tiny", "messages": MESSAGES, "max_tokens": 300, "logit_bias": bias, "temperature": 1.0}
    async with httpx.AsyncClient(timeout=180) as http:
        while time.monotonic() < deadline:
            kind = rng.choices(KINDS, weights=(5, 3, 1, 1))[0]
            n = next(counter)
            report.sent[kind] += 1
            try:
                if kind == "schema":
                    schema = schemas[n % len(schemas)]
                    r = await client.chat.completions.create(
                        seed=n, response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": schema}},
                        **base)
                    choice = r.choices[0]
                    if choice.finish_reason == "length":
                        report.truncated[kind] += 1
                        continue
                    try:
                        jsonschema.validate(json.loads(choice.message.content), schema)
                    except (ValueError, jsonschema.ValidationError) as e:
                        report.invalid.append(f"schema #{n % len(schemas)}: {str(e)[:160]}")
                    report.completed[kind] += 1
                elif kind == "tools":
                    tools = tool_sets[n % len(tool_sets)]
                    r = await client.chat.completions.create(seed=n, tools=tools, tool_choice="required", **base)
                    choice = r.choices[0]
                    if choice.finish_reason == "length":
                        report.truncated[kind] += 1
                        continue
                    by_name = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
                    calls = choice.message.tool_calls or []
                    if not calls:
                        report.invalid.append(f"tool set #{n % len(tool_sets)}: no tool call")
                    for call in calls:
                        if call.function.name not in by_name:
                            report.invalid.append(f"tool set #{n % len(tool_sets)}: foreign tool {call.function.name}")
                            continue
                        try:
                            jsonschema.validate(json.loads(call.function.arguments), by_name[call.function.name])
                        except (ValueError, jsonschema.ValidationError) as e:
                            report.invalid.append(f"tool {call.function.name}: {str(e)[:160]}")
                    report.completed[kind] += 1
                elif kind == "cancel":
                    schema = schemas[n % len(schemas)]
                    body = {**base, "stream": True, "seed": n,
                            "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}}
                    async with http.stream("POST", url + "/v1/chat/completions", json=body) as resp:
                        if resp.status_code >= 500:
                            report.server_errors += 1
                        seen = 0
                        async for line in resp.aiter_lines():
                            seen += line.startswith("data:")
                            if seen >= 2:
                                break  # closing the stream here cancels the request
                    report.completed[kind] += 1
                else:  # abort: the client gives up before the server answers
                    body = {**base, "seed": n, "max_tokens": 1000, "response_format": {"type": "json_object"}}
                    with contextlib.suppress(httpx.TimeoutException):
                        resp = await http.post(url + "/v1/chat/completions", json=body, timeout=0.05)
                        if resp.status_code >= 500:
                            report.server_errors += 1
                    report.completed[kind] += 1
            except openai.APIStatusError as e:
                if e.status_code >= 500:
                    report.server_errors += 1
                else:
                    report.client_errors[f"{kind} {e.status_code}"] += 1
            except (openai.APIConnectionError, httpx.HTTPError) as e:
                report.client_errors[f"{kind} {type(e).__name__}"] += 1


async def drive(url: str, clients: int, duration: float, report: Report, port: int, warmup: float) -> None:
    from server import closer_bias

    schemas, tool_sets = workload()
    bias = closer_bias()
    start = time.monotonic()
    deadline = start + duration

    async def sample_rss() -> None:
        await asyncio.sleep(warmup)
        report.rss_mb.append((round(time.monotonic() - start, 1), server_rss_mb(port)))
        while time.monotonic() < deadline:
            await asyncio.sleep(min(5.0, max(0.1, deadline - time.monotonic())))
            report.rss_mb.append((round(time.monotonic() - start, 1), server_rss_mb(port)))

    await asyncio.gather(sample_rss(), *(client_loop(i, url, deadline, schemas, tool_sets, bias, report)
                                         for i in range(clients)))
    for _ in range(60):  # cancelled and aborted requests must leave the engine
        report.left_running = engine_gauge(url, "vllm:num_requests_running") + \
            engine_gauge(url, "vllm:num_requests_waiting")
        if report.left_running == 0:
            break
        await asyncio.sleep(1)


def judge(report: Report, rss_growth_mb: float) -> None:
    """Fill report.violations."""
    if report.server_errors:
        report.violations.append(f"{report.server_errors} responses with a 5xx status")
    if report.invalid:
        report.violations.append(f"{len(report.invalid)} completed outputs do not validate: {report.invalid[:3]}")
    if report.left_running:
        report.violations.append(f"{report.left_running:g} requests still running or waiting after the run")
    if len(report.rss_mb) >= 2:
        first, last = report.rss_mb[0][1], report.rss_mb[-1][1]
        growth = sum(last.get(r, 0.0) - first.get(r, 0.0) for r in JUDGED)
        if growth > rss_growth_mb:
            report.violations.append(f"API server + engine core RSS grew by {growth:.0f} MB in the steady phase "
                                     f"(limit {rss_growth_mb:g} MB)")
    if not sum(report.completed.values()):
        report.violations.append("no request completed")


def table(report: Report) -> str:
    """The report as a fixed-width table."""
    lines = [f"{'kind':<8} {'sent':>6} {'completed':>9} {'truncated':>9}", "-" * 35]
    for kind in KINDS:
        lines.append(f"{kind:<8} {report.sent[kind]:>6} {report.completed[kind]:>9} {report.truncated[kind]:>9}")
    lines.append("")
    lines.append(f"5xx responses: {report.server_errors}   4xx/connection: {dict(report.client_errors) or 0}")
    lines.append(f"invalid outputs: {len(report.invalid)}   left running/waiting: {report.left_running:g}")
    if report.rss_mb:
        (t0, first), (t1, last) = report.rss_mb[0], report.rss_mb[-1]
        lines.append(f"server RSS (MB)   at {t0:>5.0f} s   at {t1:>5.0f} s   growth")
        for role in [*first, "total"]:
            a = sum(first.values()) if role == "total" else first[role]
            b = sum(last.values()) if role == "total" else last.get(role, 0.0)
            lines.append(f"  {role:<14} {a:>10.0f} {b:>10.0f} {b - a:>+8.0f}")
    lines.append("violations: " + ("; ".join(report.violations) if report.violations else "none"))
    return "\n".join(lines)


@contextlib.contextmanager
def maybe_server(url: str | None, cache_mb: int, backend: str = "tagjit") -> Iterator[str]:
    if url:
        yield url
        return
    from server import vllm_server

    # A small grammar cache fills early, so RSS growth in the steady phase is not the cache filling up.
    env = {"TAGJIT_CACHE_BYTES": str(cache_mb * 2**20)}
    with vllm_server(backend, "--enable-auto-tool-choice", "--tool-call-parser", "hermes", env=env) as started:
        yield started


def run(duration: float, clients: int, url: str | None = None, rss_growth_mb: float = 32.0,
        cache_mb: int = 16, backend: str = "tagjit", warmup: float | None = None) -> Report:
    """Run the load and judge it."""
    report = Report()
    with maybe_server(url, cache_mb, backend) as base:
        port = int(base.rsplit(":", 1)[1])
        asyncio.run(drive(base, clients, duration, report, port,
                          min(10.0, duration / 4) if warmup is None else min(warmup, duration / 2)))
    judge(report, rss_growth_mb)
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=300.0, help="seconds of load (default 300)")
    p.add_argument("--warmup", type=float, default=150.0, help="seconds before memory is judged (default 150)")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--url", help="an already running server (default: start one)")
    p.add_argument("--rss-growth-mb", type=float, default=32.0,
                   help="most the API server + engine core may grow in the steady phase (default 32)")
    p.add_argument("--cache-mb", type=int, default=16, help="TAGJIT_CACHE_BYTES of the server this starts")
    p.add_argument("--backend", default="tagjit", help="structured-output backend of the server this starts "
                   "(xgrammar for a side-by-side memory baseline)")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    report = run(args.duration, args.clients, args.url, args.rss_growth_mb, args.cache_mb, args.backend,
                 args.warmup)
    print(table(report))
    if args.json:
        Path(args.json).write_text(json.dumps({
            "sent": report.sent, "completed": report.completed, "truncated": report.truncated,
            "server_errors": report.server_errors, "client_errors": report.client_errors,
            "invalid": report.invalid, "rss_mb": report.rss_mb, "left_running": report.left_running,
            "violations": report.violations}, indent=2))
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
