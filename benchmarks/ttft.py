"""Time to first token under structured outputs, against real ``vllm serve`` processes on this machine.

For each backend (tagjit, vLLM's built-in xgrammar and guidance) a server is started with a random
Llama big enough that a long prompt's prefill takes about as long as a large grammar's compile.
Requests go one at a time (streamed) so TTFT is not confounded by batching:

  schemas        JSONSchemaBench schemas, each new to the server, long prompt
  tools-N        tool_choice=required with N BFCL tools (``--tool-pool jsonschemabench``: JSONSchemaBench object
                 schemas from GitHub and SchemaStore as strict tools), a new tool set per request, long prompt
  tools-combo    tool_choice=required, short prompt, a new combination of 200 tools all seen before
  auto-combo     the same under tool_choice=auto with every tool strict (free text or calls)
  agent-combo    the same under tool_choice=auto with a JSON response_format beside the tools (calls or the answer)
  first-N        the first constrained request after start (N new tools), before any other
  plain          the same prompts without constraints (the baseline of every overhead)
  free           tools-N only: the same prompt and number of new tools, tool_choice=auto and not strict,
                 which no backend constrains: what the server spends on carrying the tools, any backend

TTFT is the latency of the request cut to one token (streamed tool calls show no delta until the
parser has read the call's name); total latency is that of a second, full request with another
constraint new to the server. Before each tools sample the run waits until tagjit's background compiles of per-tool
parts are done (``tagjit_composite_parts_total``), so that no sample's rows carry the last one's.

vLLM's CPU backend binds the model worker to core 0, but the API server and the engine core (with every backend's
grammar compiles) may run on either core. ``--model-cpus 0 --serving-cpus 1`` keeps every serving thread off the
model's core for each backend alike, as on a host where an accelerator runs the forward pass. Prints a table
(medians, overheads over plain and over free, TTFT ratio to xgrammar), writes JSON and a plot.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "integration"))
sys.path.insert(0, str(ROOT / "src"))

from server import add_cpu_options, closer_bias, vllm_server  # noqa: E402
from tiny_model import PLAIN_TEMPLATE, build  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
EOS = "2"
# The final answer of the agent-combo requests.
REPORT = {"type": "object", "properties": {"verdict": {"type": "string", "enum": ["resolved", "escalate"]},
                                           "summary": {"type": "string", "maxLength": 60}},
          "required": ["verdict", "summary"]}


def long_prompt(tokens: int, seed: int) -> str:
    """A user message of roughly `tokens` tokens (common words; distinct per seed so no prefix caching)."""
    rng = random.Random(seed)
    words = ["system", "request", "weather", "account", "record", "value", "during", "between", "number", "market",
             "answer", "report", "people", "change", "process", "result", "history", "service", "member", "energy"]
    return f"[{seed}] " + " ".join(rng.choice(words) for _ in range(tokens))


def load_schemas(n: int) -> list[dict]:
    """JSONSchemaBench schemas that tagjit and xgrammar both accept (so every backend gets the same set)."""
    from tagjit import ConstraintError, Settings
    from tagjit.compile.service import validate
    from tagjit.constraint import Constraint, Kind

    import xgrammar as xgr
    from vllm.v1.structured_output.backend_xgrammar import has_xgrammar_unsupported_json_features

    out = []
    for split in ("Github_easy", "Glaiveai2K", "Github_medium"):
        for name in sorted(os.listdir(DATA / "jsonschemabench" / split)):
            schema = json.loads((DATA / "jsonschemabench" / split / name).read_text())
            try:
                validate(Constraint.of(Kind.JSON, schema), Settings())
                xgr.Grammar.from_json_schema(json.dumps(schema))
            except (ConstraintError, RuntimeError, ValueError):
                continue
            if has_xgrammar_unsupported_json_features(schema):  # vLLM's xgrammar backend answers 400
                continue
            out.append(schema)
            if len(out) >= n:
                return out
    return out


def schema_tools(n: int) -> list[dict]:
    """Tools no one wrote as tools: JSONSchemaBench object schemas (nested objects, enums, arrays, anyOf) from GitHub
    and SchemaStore as the
    parameters of strict functions, each accepted by tagjit and xgrammar alike, named after its file."""
    import xgrammar as xgr

    from tagjit import ConstraintError, Settings
    from tagjit.compile.service import validate
    from tagjit.constraint import Constraint, Kind

    import logging

    logging.getLogger("tagjit").setLevel(logging.ERROR)  # the sloppy schemas' notes are not this benchmark's
    by_split: list[list[dict]] = []
    for split in ("Github_trivial", "Github_easy", "Github_medium", "JsonSchemaStore"):  # Glaiveai2K is tool-shaped
        folder = DATA / "jsonschemabench" / split
        if not folder.is_dir():
            continue
        tools: list[dict] = []
        for name in sorted(os.listdir(folder)):
            schema = json.loads((folder / name).read_text())
            if not isinstance(schema, dict) or schema.get("type") != "object" or not schema.get("properties"):
                continue
            if len(json.dumps(schema)) > 6000:  # a tool's parameters, not a whole API description
                continue
            try:
                validate(Constraint.of(Kind.JSON, schema), Settings())
                xgr.Grammar.from_json_schema(json.dumps(schema))
            except (ConstraintError, RuntimeError, ValueError):
                continue
            params = {k: v for k, v in schema.items() if k not in ("$schema", "$id", "id", "title")}
            tools.append({"type": "function", "function": {
                "name": f"{split.lower()}_{name.removesuffix('.json')}",
                "description": str(schema.get("title") or schema.get("description") or split)[:200],
                "parameters": params, "strict": True}})
            if len(tools) >= n:
                break
        by_split.append(tools)
    # Round robin over the splits, so any slice of the pool mixes their styles.
    mixed = [t for group in zip(*by_split) for t in group] if by_split else []
    rest = [t for group in by_split for t in group[len(mixed) // max(1, len(by_split)):]]
    return (mixed + rest)[:n]


def first_token_ms(client, **kwargs) -> float:
    """TTFT in ms: the latency of the request cut to one generated token.

    Streaming cannot show it for tool calls: the engine's tool parser holds tool-call deltas back
    until it has read the call's name, several tokens in, while plain text streams at once.
    """
    start = time.perf_counter()
    client.chat.completions.create(**{**kwargs, "max_tokens": 1})
    return (time.perf_counter() - start) * 1000


def wait_idle(url: str, log: Callable[[str], None], limit_s: float = 900.0) -> None:
    """Wait until the server has no background compile left (tagjit: every queued per-tool part finished, as
    ``tagjit_composite_parts_total`` shows; engines' processes publish it about once a second), so that one sample's
    background work does not land in the next sample's rows. Returns at once where the metric is absent."""
    import urllib.request

    def parts() -> tuple[float, float] | None:
        text = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
        seen = {"queued": 0.0, "finished": 0.0}
        found = False
        for line in text.splitlines():
            if line.startswith("tagjit_composite_parts_total{"):
                found = True
                state = line.split('state="', 1)[1].split('"', 1)[0]
                seen[state] = seen.get(state, 0.0) + float(line.rsplit(" ", 1)[1])
        return (seen["queued"], seen["finished"]) if found else None

    time.sleep(1.5)  # the engine core's last snapshot is at most a second old
    start = time.perf_counter()
    while (p := parts()) is not None and p[1] < p[0]:
        if time.perf_counter() - start > limit_s:
            log(f"  background compiles still running after {limit_s:.0f} s ({p[0] - p[1]:.0f} parts): going on")
            return
        time.sleep(0.5)
    if p is not None and time.perf_counter() - start > 2:
        log(f"  waited {time.perf_counter() - start:.0f} s for {p[0]:.0f} queued parts to compile")


def total_ms(client, **kwargs) -> float:
    """Total latency in ms of the whole request."""
    start = time.perf_counter()
    client.chat.completions.create(**kwargs)
    return (time.perf_counter() - start) * 1000


def renamed(tool: dict, k: int) -> dict:
    """A tool no server has seen: its name and its parameters' description carry k."""
    fn = tool["function"]
    params = {**fn.get("parameters", {"type": "object"}), "description": f"variant {k}"}
    return {**tool, "function": {**fn, "name": f"{fn['name']}_{k}", "parameters": params}}


def run_backend(backend: str, model: str, args, schemas, tools, log) -> list[dict]:
    """All scenarios against one freshly started server."""
    from openai import OpenAI

    rows: list[dict] = []
    bias = {**closer_bias(model), EOS: 4.0}
    extra = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--max-num-seqs", "4",
             "--max-num-batched-tokens", "8192", "--no-enable-prefix-caching"]
    with vllm_server(backend, *extra, model_dir=model, log_path=str(Path(args.out) / f"vllm-{backend}.log"),
                     model_cpus=args.model_cpus, serving_cpus=args.serving_cpus) as url:
        client = OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=600)
        common = dict(model="tiny", max_tokens=args.max_tokens, logit_bias=bias, temperature=1.0)

        def measure(scenario: str, variant: str, prompt: str, make: Callable[[], dict] = dict) -> None:
            # TTFT and total latency come from two requests, each with a constraint new to the server:
            # make() returns a fresh one per call (another tool subset, another copy of the schema).
            try:
                ttft = first_token_ms(client, messages=[{"role": "user", "content": prompt}], **common, **make())
                total = total_ms(client, messages=[{"role": "user", "content": prompt + " ."}], **common, **make())
            except Exception as e:  # a backend that cannot serve this request is reported, not fatal
                rows.append({"backend": backend, "scenario": scenario, "variant": variant, "error": str(e)[:200]})
                log(f"  {backend:<9} {scenario:<12} ERROR {str(e)[:100]}")
                return
            rows.append({"backend": backend, "scenario": scenario, "variant": variant, "ttft_ms": ttft,
                         "total_ms": total})
            log(f"  {backend:<9} {scenario:<12} {variant:<11} "
                f"TTFT {ttft:7.0f} ms  total {total:7.0f} ms")

        copies = iter(range(1_000_000))

        def schema_request(schema: dict) -> Callable[[], dict]:
            # A top-level description changes the constraint's text (so no cache hit) but not its grammar.
            return lambda: {"response_format": {"type": "json_schema", "json_schema": {
                "name": "s", "schema": {**schema, "description": f"copy {next(copies)}"}}}}

        def tools_request(pool: list[dict], n: int, new: bool = False, free: bool = False) -> Callable[[], dict]:
            def make() -> dict:
                picked = rng.sample(pool, n)
                if new:  # a copy no request has sent: another name, another schema text
                    picked = [renamed(t, next(copies)) for t in picked]
                if free:  # parallel calls allowed and no strict tool: no backend constrains tool_choice=auto
                    picked = [{**t, "function": {**t["function"], "strict": False}} for t in picked]
                    return {"tools": picked, "tool_choice": "auto"}
                return {"tools": picked, "tool_choice": "required"}
            return make

        rng = random.Random(0)
        # The first forward passes are paid before measuring (the same for every backend); the first constrained
        # request after start is a row of its own: N new tools (N the largest of --tool-counts), over the same
        # prompt unconstrained.
        measure("warmup", "plain", long_prompt(args.prompt_tokens, 0))
        n_first = max(args.tool_counts)
        measure(f"first-{n_first}", "plain", long_prompt(args.prompt_tokens, 10_000))
        measure(f"first-{n_first}", "constrained", long_prompt(args.prompt_tokens, 10_000),
                tools_request(tools, n_first, new=True))
        # Then what remains one-off for a backend that builds its state lazily, before the steady rows.
        measure("warmup", "constrained", long_prompt(args.prompt_tokens, 1),
                lambda: {"extra_body": {"structured_outputs": {"regex": f"[a-z]+{next(copies)}"}}})
        measure("warmup", "constrained", "x", tools_request(tools[-20:], 1))
        measure("warmup", "free", "x", tools_request(tools[-20:], 1, free=True))
        seed = 1
        for schema in schemas:
            seed += 1
            prompt = long_prompt(args.prompt_tokens, seed)
            measure("schemas", "plain", prompt)
            measure("schemas", "constrained", prompt, schema_request(schema))
        pool = tools[:args.pool]
        for n in args.tool_counts:
            for _ in range(args.repeats):
                wait_idle(url, log)
                seed += 1
                prompt = long_prompt(args.prompt_tokens, seed)
                measure(f"tools-{n}", "plain", prompt)
                measure(f"tools-{n}", "free", prompt, tools_request(tools, n, new=True, free=True))
                measure(f"tools-{n}", "constrained", prompt, tools_request(tools, n, new=True))
        for start in range(0, len(pool), 100):  # every tool of the pool seen once, in groups
            try:
                client.chat.completions.create(messages=[{"role": "user", "content": "x"}],
                                               tools=pool[start:start + 100], tool_choice="required",
                                               **{**common, "max_tokens": 1})
            except Exception as e:
                log(f"  {backend:<9} pool warm-up ERROR {str(e)[:100]}")
        def auto_request(n: int, answer: bool) -> Callable[[], dict]:
            def make() -> dict:
                picked = rng.sample(pool, n)
                if answer:
                    return {"tools": picked, "tool_choice": "auto", "response_format": {
                        "type": "json_schema", "json_schema": {"name": "report", "schema": REPORT}}}
                return {"tools": [{**t, "function": {**t["function"], "strict": True}} for t in picked],
                        "tool_choice": "auto"}
            return make

        for _ in range(args.repeats):
            wait_idle(url, log)  # the pool's parts compiled (the first time) and each sample's background work done
            seed += 1
            prompt = long_prompt(args.short_tokens, seed)
            measure("tools-combo", "plain", prompt)
            measure("tools-combo", "constrained", prompt, tools_request(pool, min(200, len(pool))))
            measure("auto-combo", "plain", prompt)
            measure("auto-combo", "constrained", prompt, auto_request(min(200, len(pool)), answer=False))
            measure("agent-combo", "plain", prompt)
            measure("agent-combo", "constrained", prompt, auto_request(min(200, len(pool)), answer=True))
    return rows


def summarize(rows: list[dict]) -> list[dict]:
    """Median TTFT and total latency per backend and scenario, overheads over plain and over free, TTFT ratio
    to xgrammar."""
    for r in rows:  # runs written before the free variant had a constrained flag instead
        r.setdefault("variant", "constrained" if r.get("constrained") else "plain")
    out = []
    scenarios = [s for s in dict.fromkeys(r["scenario"] for r in rows) if s != "warmup"]
    backends = list(dict.fromkeys(r["backend"] for r in rows))

    def median(b: str, s: str, v: str, field: str) -> float | None:
        vals = [r[field] for r in rows if r["backend"] == b and r["scenario"] == s and r["variant"] == v
                and field in r]
        return statistics.median(vals) if vals else None

    def series(b: str, s: str, v: str) -> list[float | None]:
        return [r.get("ttft_ms") for r in rows if r["backend"] == b and r["scenario"] == s and r["variant"] == v]

    def pct(x: float | None, base: float | None) -> float | None:
        return 100 * (x - base) / base if x is not None and base else None

    for s in scenarios:
        for b in backends:
            plain, cons = median(b, s, "plain", "ttft_ms"), median(b, s, "constrained", "ttft_ms")
            if plain is None or cons is None:
                continue
            free = median(b, s, "free", "ttft_ms")
            plain_total, total = median(b, s, "plain", "total_ms"), median(b, s, "constrained", "total_ms")
            free_total = median(b, s, "free", "total_ms")
            xg = median("xgrammar", s, "constrained", "ttft_ms")
            samples = [r["ttft_ms"] for r in rows if r["backend"] == b and r["scenario"] == s
                       and r["variant"] == "constrained" and "ttft_ms" in r]
            # Paired: the k-th sample of each variant shares its prompt and its moment, so the median of the per-sample
            # ratios is steadier than the ratio of the medians when the machine drifts.
            def paired(base: str) -> float | None:
                pairs = [(c, p) for c, p in zip(series(b, s, "constrained"), series(b, s, base)) if c and p]
                return 100 * (statistics.median(c / p for c, p in pairs) - 1) if pairs else None
            out.append({"scenario": s, "backend": b, "plain_ttft_ms": plain, "free_ttft_ms": free, "ttft_ms": cons,
                        "overhead_pct": pct(cons, plain), "overhead_free_pct": pct(cons, free),
                        "plain_total_ms": plain_total, "total_ms": total,
                        "total_overhead_pct": pct(total, plain_total),
                        "total_overhead_free_pct": pct(total, free_total),
                        "paired_pct": paired("plain"), "paired_free_pct": paired("free"),
                        "vs_xgrammar": cons / xg if xg else None, "samples": len(samples),
                        "ttft_range_ms": [min(samples), max(samples)]})
    return out


def print_table(summary: list[dict]) -> None:
    """The comparison table (over free: over the same tools sent unconstrained; paired: the median of the per-sample
    overheads, each over the same prompt sent just before)."""
    def ms(x: float | None) -> str:
        return f"{x:.0f}" if x is not None else "-"

    def pc(x: float | None) -> str:
        return f"{x:+.1f}%" if x is not None else "-"

    print(f"\n{'scenario':<12} {'backend':<9} {'n':>2} {'plain ms':>9} {'free ms':>8} {'TTFT ms':>8} {'range':>11} "
          f"{'/plain':>8} {'/free':>8} {'paired':>8} {'/free':>8} {'total ms':>9} {'/plain':>8} {'/free':>8} "
          f"{'TTFT vs xgrammar':>17}")
    print("-" * 146)
    for r in summary:
        vs = f"{r['vs_xgrammar']:.2f}x" if r["vs_xgrammar"] else "-"
        spread = r.get("ttft_range_ms")
        spread = f"{spread[0]:.0f}-{spread[1]:.0f}" if spread else "-"
        print(f"{r['scenario']:<12} {r['backend']:<9} {r.get('samples', 0):>2} {ms(r['plain_ttft_ms']):>9} "
              f"{ms(r.get('free_ttft_ms')):>8} {ms(r['ttft_ms']):>8} {spread:>11} "
              f"{pc(r['overhead_pct']):>8} {pc(r.get('overhead_free_pct')):>8} "
              f"{pc(r.get('paired_pct')):>8} {pc(r.get('paired_free_pct')):>8} "
              f"{ms(r['total_ms']):>9} {pc(r['total_overhead_pct']):>8} {pc(r.get('total_overhead_free_pct')):>8} "
              f"{vs:>17}")


def plot(summary: list[dict], path: str) -> None:
    """Left: TTFT overhead over unconstrained per long-prompt scenario; right: short-prompt TTFT in ms."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    backends = list(dict.fromkeys(r["backend"] for r in summary))
    scenarios = [s for s in dict.fromkeys(r["scenario"] for r in summary) if not s.endswith("-combo")]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4), gridspec_kw={"width_ratios": [3, 2]})
    width = 0.8 / max(1, len(backends))
    for i, b in enumerate(backends):
        ys = [next((r["overhead_pct"] for r in summary if r["scenario"] == s and r["backend"] == b), 0)
              for s in scenarios]
        left.bar([x + i * width for x in range(len(scenarios))], ys, width, label=b)
    left.set_xticks([x + width * (len(backends) - 1) / 2 for x in range(len(scenarios))], scenarios)
    left.set_ylabel("TTFT overhead over plain (%)")
    left.axhline(0, color="black", linewidth=0.5)
    left.axhline(5, color="grey", linewidth=0.8, linestyle="--", label="goal (200 tools): 5%")
    left.legend()
    left.set_title("Long prompt, constraint new to the server")
    combos = [s for s in dict.fromkeys(r["scenario"] for r in summary) if s.endswith("-combo")]
    if combos:
        for i, b in enumerate(["plain", *backends]):
            ys = [next((r["plain_ttft_ms"] if b == "plain" else r["ttft_ms"] for r in summary
                        if r["scenario"] == s and (b == "plain" or r["backend"] == b)), 0) for s in combos]
            w = 0.8 / (len(backends) + 1)
            right.bar([x + i * w for x in range(len(combos))], ys, w, label=b,
                      color="grey" if b == "plain" else f"C{backends.index(b)}")
        right.set_xticks([x + 0.4 - 0.4 / (len(backends) + 1) for x in range(len(combos))],
                         [s.removesuffix("-combo") for s in combos])
        right.set_ylabel("TTFT (ms)")
        right.legend(fontsize=7)
        right.set_title("Short prompt, 200 known tools\nin a new combination")
    fig.suptitle("Structured-output TTFT, vLLM on CPU")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    """Run the benchmark."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backends", default="tagjit,xgrammar,guidance")
    p.add_argument("--schemas", type=int, default=6)
    p.add_argument("--tool-counts", type=lambda s: [int(x) for x in s.split(",")], default=[10, 50, 200])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--pool", type=int, default=300, help="tools seen before the tools-combo requests")
    p.add_argument("--tool-pool", choices=("bfcl", "jsonschemabench"), default="bfcl",
                   help="where tools come from: BFCL functions, or JSONSchemaBench object schemas as parameters")
    p.add_argument("--prompt-tokens", type=int, default=2400)
    p.add_argument("--short-tokens", type=int, default=40)
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=8)
    add_cpu_options(p)
    p.add_argument("--out", default="out/ttft")
    p.add_argument("--json", help="write rows and summary to this file")
    p.add_argument("--from-json", help="print the table and plot of an earlier run's JSON instead of running")
    args = p.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            summary = summarize(json.load(f)["rows"])
        print_table(summary)
        os.makedirs(args.out, exist_ok=True)
        plot(summary, os.path.join(args.out, "ttft.png"))
        return 0
    os.makedirs(args.out, exist_ok=True)
    from tagjit.tools.bfcl import load_tools

    model = build(os.path.join(os.environ.get("TMPDIR", "/tmp"), f"tagjit-bench-llama-{args.hidden}x{args.layers}"),
                  hidden=args.hidden, layers=args.layers, chat_template=PLAIN_TEMPLATE)
    schemas = load_schemas(args.schemas)
    # strict: every backend constrains the arguments by their schema (vLLM leaves non-strict ones free).
    tools = load_tools(str(DATA / "bfcl"), strict=True) if args.tool_pool == "bfcl" else schema_tools(2 * args.pool)
    print(f"tool pool {args.tool_pool}: {len(tools)} tools", flush=True)
    rows: list[dict] = []
    for backend in args.backends.split(","):
        print(f"[{backend}] starting vllm serve ...", flush=True)
        rows += run_backend(backend, model, args, schemas, tools, lambda m: print(m, flush=True))
    summary = summarize(rows)
    print_table(summary)
    plot(summary, os.path.join(args.out, "ttft.png"))
    print(f"\nplot: {os.path.join(args.out, 'ttft.png')}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "summary": summary, "args": vars(args)}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
