"""Token-mask fill time per request: tagjit (each whitespace setting and json_style) vs xgrammar's matcher and
batch matcher vs llguidance, at batch 1, 16 and 256.

Every request walks a real text its grammar must accept: a MaskBench valid instance of a JSONSchemaBench schema
(``json``; ``long``: schemas that bound a string above 256 characters, which tagjit's token filter counts) or a
hermes tool call with a BFCL function's ground-truth arguments, among four BFCL tools (``tools``), written the way models write JSON (``json.dumps``: ``", "`` and ``": "``; compact for bound 0)
and tokenized by a real tokenizer. A batch advances B requests in lock step; each step fills all their masks the
way the engine would (tagjit: ``tagjit.engine.fill_bitmasks``, one call per step; xgrammar matcher: one call
per request; xgrammar batch: ``BatchGrammarMatcher``; llguidance: vLLM's per-request
``fill_next_token_bitmask``), and the step's time divided by B is one sample of the per-request cost.
A request that reaches the end of its text starts again, so a batch stays full.

    python benchmarks/mask_fill.py                       # qwen2's 151k vocabulary, the whole grid
    python benchmarks/mask_fill.py --quick --json out/mask_fill.json --plot out/mask_fill.png

xgrammar and llguidance run with vLLM's defaults (any whitespace); llguidance has no tool-tag row (vLLM's
guidance backend does not take tagjit's structural tags). The first step of every walk is reported apart
(``first``), since it includes matcher set-up work the steady steps do not. A last table gives tagjit's own
wrapper: what ``fill_bitmasks`` adds per request to the xgrammar calls it makes (``wrapper_cost``, paired per step).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import xgrammar as xgr

from tagjit.engine import (CompileService, Constraint, ConstraintError, Kind, allocate_token_bitmask,
                           build_tool_tag_json, fill_bitmasks, get_settings, load_format, load_tokenizer_info)
from tagjit.build.bounded_strings import MAX_COUNTED
from tagjit.runtime import matcher as matcher_module

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "..", "shared", "data")
MASKBENCH = os.path.join(DATA, "jsonschemabench", "maskbench")
SPACED = (", ", ": ")
COMPACT = (",", ":")
TOOLS_PER_REQUEST = 4
# The default JSON style: exactly json.dumps's spacing, the walks' own.
DEFAULT = "tagjit default (dumps)"
# The free style at each bound (label: Settings.max_whitespace); bound 1 was the default before dumps, 8 before 1.
WHITESPACE = {"tagjit free ws=1": 1, "tagjit free ws=8": 8, "tagjit free ws=2": 2, "tagjit ws=0": 0,
              "tagjit free ws=any": None}
# Tool tags compile per tool; by default the whole tag also compiles in the background and each request switches to
# it. The default rows measure after the switch (the walk waits for that compile); this row never switches.
PARTS_ONLY = "tagjit default, per-tool parts only"
PARTS_ONLY_FREE = "tagjit free ws=1, per-tool parts only"


@dataclass
class Case:
    """One request: its constraint's source, the text it generates, the tokens of that text."""

    name: str
    workload: str
    schema: dict
    data: Any
    tools: list[dict] = field(default_factory=list)

    def text(self, separators: tuple[str, str]) -> str:
        body = json.dumps(self.data, separators=separators, ensure_ascii=False)
        if self.workload != "tools":
            return body
        return f'<tool_call>\n{{"name": "{self.name}", "arguments": {body}}}\n</tool_call>'


@dataclass
class Row:
    impl: str
    workload: str
    batch: int
    requests: int
    rejected: int
    samples: int
    median_us: float
    p99_us: float
    first_us: float


# -- workloads ---------------------------------------------------------------------------------------------
def _valid_object(path: str) -> tuple[dict, Any] | None:
    with open(path) as f:
        d = json.load(f)
    for t in d.get("tests", []):
        if t.get("valid") and isinstance(t.get("data"), dict):
            return d["schema"], t["data"]
    return None


def json_cases(n: int) -> list[Case]:
    """``n`` JSONSchemaBench schemas with a valid object instance, spread over MaskBench's non-BFCL files."""
    files = sorted(f for f in glob.glob(os.path.join(MASKBENCH, "*.json")) if not os.path.basename(f).startswith("BFCL"))
    out: list[Case] = []
    if n <= 0:
        return out
    stride = max(1, len(files) // (3 * n))
    for path in files[::stride]:
        found = _valid_object(path)
        if found and isinstance(found[0], dict):
            out.append(Case(os.path.basename(path)[:-5], "json", found[0], found[1]))
        if len(out) == n:
            break
    return out


def _long_bound(node: Any) -> bool:
    """Whether a schema bounds some string above the grammar's count rules (tagjit's token filter counts it)."""
    if isinstance(node, dict):
        if any(isinstance(node.get(k), int) and node[k] > MAX_COUNTED for k in ("minLength", "maxLength")):
            return True
        return any(_long_bound(v) for v in node.values())
    return isinstance(node, list) and any(_long_bound(v) for v in node)


def long_cases(n: int) -> list[Case]:
    """``n`` JSONSchemaBench schemas that bound a string above ``MAX_COUNTED`` characters, with a valid instance."""
    out: list[Case] = []
    for path in sorted(glob.glob(os.path.join(MASKBENCH, "*.json"))):
        found = _valid_object(path)
        if found and isinstance(found[0], dict) and _long_bound(found[0]):
            out.append(Case(os.path.basename(path)[:-5], "long", found[0], found[1]))
        if len(out) == n:
            break
    return out


def tool_cases(n: int) -> list[Case]:
    """``n`` BFCL functions with ground-truth arguments, each offered among ``TOOLS_PER_REQUEST`` BFCL tools."""
    found: list[tuple[str, dict, dict]] = []
    for path in sorted(glob.glob(os.path.join(MASKBENCH, "BFCL_*.json"))):
        got = _valid_object(path)
        if not got:
            continue
        schema, data = got
        (name, params), = schema["properties"].items() if len(schema.get("properties", {})) == 1 else [(None, None)]
        if name and isinstance(params, dict) and isinstance(data.get(name), dict) and "." not in name:
            found.append((name, params, data[name]))
    stride = max(1, len(found) // max(n, 1))
    picked = found[::stride][:n]
    out = []
    for i, (name, params, args) in enumerate(picked):
        others = [found[(i * stride + k * 7 + 1) % len(found)] for k in range(TOOLS_PER_REQUEST - 1)]
        tools = [{"type": "function", "function": {"name": nm, "parameters": p}}
                 for nm, p, _ in [(name, params, args), *others]]
        tools = list({t["function"]["name"]: t for t in tools}.values())
        out.append(Case(name, "tools", params, args, tools))
    return out


# -- implementations ---------------------------------------------------------------------------------------
class Impl:
    """Makes a request's matcher and fills a step's masks."""

    name: str
    separators = SPACED

    def matcher(self, case: Case) -> Any: ...
    def fill(self, matchers: Sequence[Any], bitmask: torch.Tensor) -> None: ...
    def accept(self, m: Any, token: int) -> bool: ...
    def reset(self, m: Any) -> None: ...


class Tagjit(Impl):
    def __init__(self, name: str, info: xgr.TokenizerInfo, ws: int | None, swap: bool = True,
                 json_style: str = "auto") -> None:
        self.name = name
        # Tool rows with the switch measure a combination that recurs or a long output (the whole tag compiled,
        # composite_swap_after_tokens=0), the parts-only row a new combination's first tokens.
        self.settings = get_settings().replace(max_whitespace=ws, lint=False, composite_swap=swap,
                                               composite_swap_after_tokens=0, json_style=json_style)
        self.service = CompileService(info, self.settings)
        self.separators = COMPACT if ws == 0 else SPACED

    def matcher(self, case: Case) -> Any:
        if case.workload != "tools":
            c = Constraint.of(Kind.JSON, json.dumps(case.schema))
        else:
            tag = build_tool_tag_json(load_format("hermes"), case.tools, "required", False, self.settings)
            c = Constraint.of(Kind.STRUCTURAL_TAG, tag)
        self.service.validate(c)
        compiled = self.service.compile_ready(c)  # steady masks: no part left to compile mid-walk
        if compiled.composite is not None and compiled.composite.full_future is not None:
            compiled.composite.full_future.result()  # the switch to the whole tag happens at the first mask
        return self.service.grammar(c)

    def fill(self, matchers: Sequence[Any], bitmask: torch.Tensor) -> None:
        fill_bitmasks(matchers, bitmask, range(len(matchers)))

    def accept(self, m: Any, token: int) -> bool:
        return m.accept_token(token)

    def reset(self, m: Any) -> None:
        m.reset()


class Xgrammar(Impl):
    """xgrammar as vLLM's backend drives it: any whitespace; tool rows compile tagjit's tag unbounded."""

    def __init__(self, name: str, info: xgr.TokenizerInfo, batch: bool) -> None:
        self.name = name
        self.compiler = xgr.GrammarCompiler(info, max_threads=8)
        self.batch = xgr.BatchGrammarMatcher() if batch else None
        self.tag_settings = get_settings().replace(max_whitespace=None)

    def matcher(self, case: Case) -> Any:
        if case.workload != "tools":
            compiled = self.compiler.compile_json_schema(json.dumps(case.schema), any_whitespace=True)
        else:
            tag = build_tool_tag_json(load_format("hermes"), case.tools, "required", False, self.tag_settings)
            compiled = self.compiler.compile_structural_tag(tag)
        return xgr.GrammarMatcher(compiled)

    def fill(self, matchers: Sequence[Any], bitmask: torch.Tensor) -> None:
        if self.batch is not None and len(matchers) > 1:
            self.batch.batch_fill_next_token_bitmask(list(matchers), bitmask)
        else:
            for i, m in enumerate(matchers):
                m.fill_next_token_bitmask(bitmask, i)

    def accept(self, m: Any, token: int) -> bool:
        return m.accept_token(token)

    def reset(self, m: Any) -> None:
        m.reset()


class Llguidance(Impl):
    """llguidance as vLLM's guidance backend drives it (its grammar serialisation, per-request fills)."""

    def __init__(self, name: str, tokenizer: Any, vocab_size: int) -> None:
        import llguidance
        import llguidance.hf
        import llguidance.torch

        self.name = name
        self.ll = llguidance
        self.fill_one = llguidance.torch.fill_next_token_bitmask
        self.tokenizer = llguidance.hf.from_tokenizer(tokenizer, vocab_size)

    def matcher(self, case: Case) -> Any:
        if case.workload == "tools":
            return None
        grammar = self.ll.LLMatcher.grammar_from_json_schema(json.dumps(case.schema),
                                                              defaults={"whitespace_flexible": True})
        m = self.ll.LLMatcher(self.tokenizer, grammar)
        return None if m.is_error() else m

    def fill(self, matchers: Sequence[Any], bitmask: torch.Tensor) -> None:
        for i, m in enumerate(matchers):
            self.fill_one(m, bitmask, i)

    def accept(self, m: Any, token: int) -> bool:
        return m.consume_token(token)

    def reset(self, m: Any) -> None:
        m.reset()


# -- measuring ---------------------------------------------------------------------------------------------
def prepare(impl: Impl, cases: list[Case], encode: Callable[[str], list[int]], bitmask: torch.Tensor
            ) -> tuple[list[tuple[Case, list[int]]], int]:
    """The cases whose whole text this implementation accepts (checked once, untimed); how many it refused."""
    ready, rejected = [], 0
    for case in cases:
        tokens = encode(case.text(impl.separators))
        try:
            m = impl.matcher(case)
        except (ConstraintError, RuntimeError, ValueError):
            m = None
        ok = m is not None
        for t in tokens if ok else ():
            impl.fill([m], bitmask)
            if not bool((bitmask[0, t // 32] >> (t % 32)) & 1) or not impl.accept(m, t):
                ok = False
                break
        if ok:
            ready.append((case, tokens))
        else:
            rejected += 1
    return ready, rejected


def measure(impl: Impl, ready: list[tuple[Case, list[int]]], batch: int, steps: int, bitmask: torch.Tensor
            ) -> tuple[list[float], list[float]]:
    """Per-request microseconds of each lock-step fill (steady steps, and the first step of each walk)."""
    picked = [ready[i % len(ready)] for i in range(batch)]
    matchers = [impl.matcher(c) for c, _ in picked]
    pos = [0] * batch
    steady: list[float] = []
    first: list[float] = []
    total = steps if batch > 1 else sum(len(t) for _, t in ready)
    if batch == 1:  # one request at a time: every case once, from its first token to its last
        seq = [(impl.matcher(c), toks) for c, toks in ready]
        for m, toks in seq:
            for j, t in enumerate(toks):
                t0 = time.perf_counter()
                impl.fill([m], bitmask)
                (first if j == 0 else steady).append((time.perf_counter() - t0) * 1e6)
                impl.accept(m, t)
        return steady, first
    for _ in range(total):
        at_start = all(p == 0 for p in pos)
        t0 = time.perf_counter()
        impl.fill(matchers, bitmask)
        (first if at_start else steady).append((time.perf_counter() - t0) * 1e6 / batch)
        advance(impl, matchers, picked, pos)
    return steady, first


def wrapper_cost(impl: Tagjit, ready: list[tuple[Case, list[int]]], batch: int, steps: int, bitmask: torch.Tensor
                 ) -> list[float]:
    """Per-request microseconds tagjit's ``fill_bitmasks`` adds to the xgrammar calls it makes, paired step by step:
    each step fills the same masks through tagjit and through bare xgrammar calls on the matchers tagjit holds
    (order alternating), so grammar cost and machine drift cancel. Empty where a row has no plain matcher."""
    picked = [ready[i % len(ready)] for i in range(batch)]
    matchers = [impl.matcher(c) for c, _ in picked]
    rows = list(range(batch))
    fill_bitmasks(matchers, bitmask, rows)  # the first fill: a tool tag's switch to its whole grammar
    inner = [m._fast for m in matchers]
    if not all(inner):
        return []
    bare = matcher_module._batch_matcher()  # the same pool (its threads) as tagjit's fill

    def bare_fill() -> None:
        if batch == 1:
            inner[0].fill_next_token_bitmask(bitmask, 0)
        else:
            bare.batch_fill_next_token_bitmask(inner, bitmask, rows)

    pos = [0] * batch
    out: list[float] = []
    for step in range(steps):
        t0 = time.perf_counter()
        (fill_bitmasks(matchers, bitmask, rows) if step % 2 else bare_fill())
        t1 = time.perf_counter()
        (bare_fill() if step % 2 else fill_bitmasks(matchers, bitmask, rows))
        t2 = time.perf_counter()
        tagjit_s, bare_s = (t1 - t0, t2 - t1) if step % 2 else (t2 - t1, t1 - t0)
        out.append((tagjit_s - bare_s) * 1e6 / batch)
        advance(impl, matchers, picked, pos)
    return out


def advance(impl: Impl, matchers: list[Any], picked: list[tuple[Case, list[int]]], pos: list[int]) -> None:
    """One lock step: each request accepts its next token; one at the end of its text starts again."""
    for i, (m, (_, toks)) in enumerate(zip(matchers, picked)):
        impl.accept(m, toks[pos[i]])
        pos[i] += 1
        if pos[i] == len(toks):
            impl.reset(m)
            pos[i] = 0


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokenizer", default=os.path.join(DATA, "tokenizers", "qwen2"))
    p.add_argument("--schemas", type=int, default=48, help="JSONSchemaBench requests")
    p.add_argument("--tools", type=int, default=24, help="BFCL tool-call requests")
    p.add_argument("--long", type=int, default=16,
                   help="JSONSchemaBench requests with a string bounded above 256 characters (tagjit counts it in its "
                        "token filter)")
    p.add_argument("--batches", default="1,16,256")
    p.add_argument("--steps", type=int, default=150, help="lock steps per batch above 1")
    p.add_argument("--impls", default="all", help="semicolon-separated labels (default: all; labels hold commas)")
    p.add_argument("--quick", action="store_true", help="16 schemas, 8 tool calls, 60 steps")
    p.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    p.add_argument("--plot", metavar="PATH", help="also draw median per-request time by batch (PNG)")
    a = p.parse_args(argv)
    if a.quick:
        a.schemas, a.tools, a.long, a.steps = 16, 8, 8, 60
    batches = [int(b) for b in a.batches.split(",")]

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(a.tokenizer)
    info = load_tokenizer_info(a.tokenizer)
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    impls: list[Impl] = [Tagjit(DEFAULT, info, 1), Tagjit(PARTS_ONLY, info, 1, swap=False)]
    impls += [Tagjit(label, info, ws, json_style="free") for label, ws in WHITESPACE.items()]
    impls.insert(3, Tagjit(PARTS_ONLY_FREE, info, 1, swap=False, json_style="free"))
    impls += [Xgrammar("xgrammar matcher", info, batch=False), Xgrammar("xgrammar batch", info, batch=True)]
    try:
        impls.append(Llguidance("llguidance", tokenizer, info.vocab_size))
    except ImportError:
        print("llguidance is not installed: no llguidance rows", file=sys.stderr)
    if a.impls != "all":
        wanted = {w.strip() for w in a.impls.split(";")}
        impls = [i for i in impls if i.name in wanted]

    workloads = {"json": json_cases(a.schemas), "tools": tool_cases(a.tools), "long": long_cases(a.long)}
    bitmask = allocate_token_bitmask(max(batches), info.vocab_size)
    rows: list[Row] = []
    print(f"tokenizer {os.path.basename(a.tokenizer.rstrip('/'))} ({info.vocab_size} tokens), "
          f"{len(workloads['json'])} schemas, {len(workloads['tools'])} tool calls, torch threads {torch.get_num_threads()}",
          file=sys.stderr)
    for impl in impls:
        for workload, cases in workloads.items():
            ready, rejected = prepare(impl, cases, encode, bitmask)
            if not ready:
                continue
            for b in batches:
                steady, first = measure(impl, ready, b, a.steps, bitmask)
                rows.append(Row(impl.name, workload, b, len(ready), rejected, len(steady), statistics.median(steady),
                                pct(steady, 0.99), statistics.median(first) if first else float("nan")))
                r = rows[-1]
                print(f"  {impl.name:22s} {workload:5s} batch {b:3d}: median {r.median_us:7.2f} us, p99 {r.p99_us:8.2f} us"
                      f"  ({r.requests} requests, {rejected} refused)", file=sys.stderr, flush=True)
    print_table(rows, batches)
    wrapper = measure_wrapper([i for i in impls if i.name == DEFAULT], workloads, encode, batches, a.steps, bitmask)
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump({"tokenizer": a.tokenizer, "vocab_size": info.vocab_size, "rows": [asdict(r) for r in rows],
                       "wrapper": wrapper}, f, indent=1)
    if a.plot:
        plot(rows, batches, a.plot)
    return 0


def measure_wrapper(impls: list[Impl], workloads: dict[str, list[Case]], encode: Callable[[str], list[int]],
                    batches: list[int], steps: int, bitmask: torch.Tensor) -> list[dict]:
    """``wrapper_cost`` of tagjit's default at each workload and batch, printed as a table; its rows."""
    out: list[dict] = []
    for impl in impls:
        assert isinstance(impl, Tagjit)
        for workload, cases in workloads.items():
            ready, _ = prepare(impl, cases, encode, bitmask)
            for b in batches:
                xs = wrapper_cost(impl, ready, b, 4 * steps, bitmask) if ready else []
                if xs:
                    out.append({"workload": workload, "batch": b, "samples": len(xs),
                                "median_us": statistics.median(xs), "p99_us": pct(xs, 0.99)})
    if out:
        print("\ntagjit's wrapper: microseconds per request that fill_bitmasks adds to the xgrammar calls it makes "
              "(paired per step), median / p99")
        print("| workload | " + " | ".join(f"batch {b}" for b in batches) + " |")
        print("|" + "---|" * (len(batches) + 1))
        for workload in dict.fromkeys(r["workload"] for r in out):
            cells = [next((f"{r['median_us']:.2f} / {r['p99_us']:.1f}" for r in out
                           if (r["workload"], r["batch"]) == (workload, b)), "-") for b in batches]
            print(f"| {workload} | " + " | ".join(cells) + " |")
    return out


def print_table(rows: list[Row], batches: list[int]) -> None:
    """Median / p99 per request and the median's ratio to xgrammar's batch matcher, per workload and batch."""
    base = {(r.workload, r.batch): r.median_us for r in rows if r.impl == "xgrammar batch"}
    for workload in dict.fromkeys(r.workload for r in rows):
        print(f"\n{workload}: microseconds per request per decode step, median / p99 (x = median / xgrammar batch)")
        head = "| impl | " + " | ".join(f"batch {b}" for b in batches) + " | refused |"
        print(head)
        print("|" + "---|" * (len(batches) + 2))
        for impl in dict.fromkeys(r.impl for r in rows if r.workload == workload):
            cells, refused = [], 0
            for b in batches:
                r = next((r for r in rows if (r.impl, r.workload, r.batch) == (impl, workload, b)), None)
                if r is None:
                    cells.append("-")
                    continue
                refused = r.rejected
                x = r.median_us / base[(workload, b)] if (workload, b) in base else float("nan")
                cells.append(f"{r.median_us:.2f} / {r.p99_us:.1f} ({x:.1f}x)")
            print(f"| {impl} | " + " | ".join(cells) + f" | {refused} |")


def plot(rows: list[Row], batches: list[int], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(dict.fromkeys(r.workload for r in rows))
    fig, axes = plt.subplots(1, len(workloads), figsize=(6 * len(workloads), 4), squeeze=False)
    for ax, workload in zip(axes[0], workloads):
        for impl in dict.fromkeys(r.impl for r in rows if r.workload == workload):
            pts = sorted((r.batch, r.median_us) for r in rows if (r.impl, r.workload) == (impl, workload))
            ax.plot([b for b, _ in pts], [u for _, u in pts], marker="o", label=impl)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(batches, [str(b) for b in batches])
        ax.set_xlabel("batch (requests per decode step)")
        ax.set_ylabel("median us per request")
        ax.set_title(f"token-mask fill, {workload}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    raise SystemExit(main())
