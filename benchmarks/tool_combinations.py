"""Compile time of tool-call tags for combinations of known tools: tagjit's composite vs xgrammar's full compile.

For each size N (BFCL tools, hermes format, ``tool_choice="required"``, Qwen2's ~150k vocabulary) four
requests are compiled in order, each by a fresh tagjit ``CompileService`` (composite tags) and a fresh
``xgr.GrammarCompiler`` (``Grammar.from_structural_tag`` + ``compile_grammar``, its cache on), both
started cold for the size:

- cold: tools 0..N-1, nothing seen before;
- same: the same request again (both hit their whole-tag caches);
- new combination: the same tools reversed with the first one left out (every tool seen, new set);
- half new: tools N/2..3N/2-1 (half seen, half not).

tagjit's time includes building the structural tag from the tools (``build_tool_tag``) and the cache
look-ups; xgrammar's starts from the same tag JSON. Median of ``--repeat`` runs; ratio = tagjit / xgrammar.
A tagjit row also reports the first mask of the new combination (memoised per automaton state after).
``--choice`` (comma-separated, each its own rows, compared with ``required``'s): ``required`` (calls only), ``agent`` (``auto`` with a JSON final answer beside the tools: calls or the
answer) or ``auto-strict`` (``auto`` with every tool strict: free text and calls, which compiles the whole tag).

    python benchmarks/tool_combinations.py [--sizes 10,50,200] [--repeat 3] [--format hermes] [--choice required,agent,auto-strict]
        [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import xgrammar as xgr

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from tagjit.tools import bfcl  # noqa: E402
from tagjit.compile.service import CompileService  # noqa: E402
from tagjit.runtime.matcher import allocate_token_bitmask  # noqa: E402
from tagjit.settings import Settings  # noqa: E402
from tagjit.constraint import Constraint  # noqa: E402
from tagjit.runtime.vocab import load_tokenizer_info  # noqa: E402
from tagjit.tools import build_tool_tag  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
CASES = ("cold", "same", "new_combination", "half_new")
CHOICES = ("required", "agent", "auto-strict")
# The final answer of the agent requests: a small report, as agent frameworks declare an output type.
ANSWER = {"type": "object", "properties": {"verdict": {"type": "string", "enum": ["resolved", "escalate"]},
                                           "summary": {"type": "string"},
                                           "ticket_ids": {"type": "array", "items": {"type": "integer"}}},
          "required": ["verdict", "summary"]}


def tag_for(fmt: str, tools: list[dict], choice: str, settings: Settings) -> dict:
    """The request's tag under one of CHOICES."""
    if choice == "agent":
        return build_tool_tag(fmt, tools, "auto", True, settings, answer=ANSWER)
    if choice == "auto-strict":
        strict = [{**t, "function": {**t["function"], "strict": True}} for t in tools]
        return build_tool_tag(fmt, strict, "auto", True, settings)
    return build_tool_tag(fmt, tools, "required", True, settings)


def requests(tools: list[dict], n: int) -> list[list[dict]]:
    """The four tool lists of one size, in the order they are compiled."""
    first = tools[:n]
    return [first, first, list(reversed(first))[:-1] if n > 1 else first, tools[n // 2:n // 2 + n]]


def ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000


def run_tagjit(info: xgr.TokenizerInfo, lists: list[list[dict]], fmt: str, threads: int,
               choice: str = "required") -> tuple[list[float], float]:
    """Milliseconds per request (tag build + compile) and the first mask of the new combination."""
    settings = Settings(xgrammar_threads=threads)
    svc = CompileService(info, settings)
    out, first_mask = [], 0.0
    try:
        for i, tools in enumerate(lists):
            t = time.perf_counter()
            # Every part compiled (compile alone returns before the parts a first mask does not reach).
            compiled = svc.compile_ready(Constraint.of("structural_tag", tag_for(fmt, tools, choice, settings)))
            out.append(ms(t))
            if i == 2:
                matcher = compiled.new_matcher()
                mask = allocate_token_bitmask(1, info.vocab_size)
                t = time.perf_counter()
                matcher.fill_next_token_bitmask(mask, 0)
                first_mask = ms(t)
    finally:
        svc.close()
    return out, first_mask


def run_xgrammar(info: xgr.TokenizerInfo, lists: list[list[dict]], fmt: str, threads: int,
                 choice: str = "required") -> list[float]:
    """Milliseconds per request for xgrammar's full compile of the same tags."""
    settings = Settings()
    compiler = xgr.GrammarCompiler(info, max_threads=threads, cache_enabled=True, cache_limit_bytes=settings.cache_bytes)
    tags = [json.dumps(tag_for(fmt, tools, choice, settings)) for tools in lists]
    out = []
    for tag in tags:
        t = time.perf_counter()
        compiler.compile_grammar(xgr.Grammar.from_structural_tag(tag))
        out.append(ms(t))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", default=str(DATA / "tokenizers" / "qwen2"))
    ap.add_argument("--sizes", default="10,50,200")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--format", default="hermes")
    ap.add_argument("--choice", default="required", help=f"one or more of {', '.join(CHOICES)}, comma-separated")
    ap.add_argument("--threads", type=int, default=2, help="xgrammar compile threads, both sides")
    ap.add_argument("--json", help="write the rows as JSON here")
    args = ap.parse_args()

    info = load_tokenizer_info(args.tokenizer)
    sizes = [int(s) for s in args.sizes.split(",")]
    choices = args.choice.split(",")
    all_tools = bfcl.load_tools(str(DATA / "bfcl"), max(sizes) * 3 // 2)
    rows = []
    for choice in choices:
        for n in sizes:
            print(f"[{choice}, {n} tools] ...", file=sys.stderr, flush=True)
            lists = requests(all_tools, n)
            tj = [run_tagjit(info, lists, args.format, args.threads, choice) for _ in range(args.repeat)]
            xg = [run_xgrammar(info, lists, args.format, args.threads, choice) for _ in range(args.repeat)]
            for i, case in enumerate(CASES):
                row = {"choice": choice, "tools": n, "case": case,
                       "tagjit_ms": statistics.median(r[0][i] for r in tj),
                       "xgrammar_ms": statistics.median(r[i] for r in xg)}
                row["ratio"] = row["tagjit_ms"] / row["xgrammar_ms"]
                if case == "new_combination":
                    row["tagjit_first_mask_ms"] = statistics.median(r[1] for r in tj)
                rows.append(row)
    base = {(r["tools"], r["case"]): r["tagjit_ms"] for r in rows if r["choice"] == "required"}
    for r in rows:
        if (r["tools"], r["case"]) in base:
            r["vs_required"] = r["tagjit_ms"] / base[(r["tools"], r["case"])]

    print(f"tool-call tag compile ({args.format}), {info.vocab_size}-token vocabulary, median of {args.repeat}; "
          "ratio = tagjit composite / xgrammar full compile; vs required = tagjit / tagjit under required")
    print(f"{'choice':<12} {'tools':>5} {'case':<16} | {'tagjit':>9} {'xgrammar':>9} {'ratio':>6} | "
          f"{'vs required':>11} | first mask")
    for r in rows:
        extra = f"{r['tagjit_first_mask_ms']:.2f}ms" if "tagjit_first_mask_ms" in r else ""
        vs = f"{r['vs_required']:.2f}x" if "vs_required" in r else "-"
        print(f"{r['choice']:<12} {r['tools']:>5} {r['case']:<16} | {r['tagjit_ms']:>7.1f}ms {r['xgrammar_ms']:>7.1f}ms "
              f"{r['ratio']:>6.3f} | {vs:>11} | {extra}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"benchmark": "tool_combinations", "format": args.format,
                                               "choices": choices,
                                               "vocab_size": info.vocab_size, "repeat": args.repeat,
                                               "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
