"""Tool-call tag compile time: tagjit vs xgrammar's builtin model tag, for 1/10/50/200 BFCL tools.

Both build the same Qwen-style JSON tool-call syntax (tagjit format ``qwen25``, xgrammar model
``qwen_3``), ``tool_choice="required"``, over a ~150k-token vocabulary (Qwen2), and compile it:
- tagjit: ``tools.build_tool_tag`` + ``CompileService.compile`` (a fresh service per cold run);
- xgrammar: ``get_model_structural_tag`` + ``GrammarCompiler.compile_structural_tag`` (a fresh
  compiler per cold run).
Every run takes tools new to every cache (renamed copies). Cold = their first compile in a started server: tagjit's
service after ``CompileService.prepare`` (what it does before the engine reports ready), xgrammar's compiler after
one other tool tag (a server that has served a request); tagjit until every per-tool part is compiled, "first
mask": until a request's first mask is filled, in another such service, which waits only for the parts that mask
reaches. Fresh = the same in a fresh compiler (tagjit: only the per-tokenizer tables). Warm = the same request
again (tagjit: tag rebuilt and looked up in its cache; xgrammar: its compiler cache). Median of ``--repeat`` runs,
tagjit and xgrammar interleaved.

    python benchmarks/tools.py [--tokenizer PATH] [--sizes 1,10,50,200] [--repeat 3] [--json-style free]
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
from tagjit.settings import Settings  # noqa: E402
from tagjit.constraint import Constraint  # noqa: E402
from tagjit.runtime.vocab import load_tokenizer_info  # noqa: E402
from tagjit.tools import build_tool_tag  # noqa: E402
from tagjit.tools import load_format  # noqa: E402
from tagjit.runtime.matcher import allocate_token_bitmask  # noqa: E402

DATA = ROOT.parent / "shared" / "data"


def ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000


def renamed(tools: list[dict], k: int) -> list[dict]:
    """Copies no compiler or memo has seen: each name and parameters description carries k (grammars unchanged)."""
    out = []
    for t in tools:
        fn = t["function"]
        params = {**fn.get("parameters", {"type": "object"}), "description": f"copy {k}"}
        out.append({**t, "function": {**fn, "name": f"{fn['name']}_{k}", "parameters": params}})
    return out


def run_tagjit(info: xgr.TokenizerInfo, tools: list[dict], settings: Settings, threads: int,
               started: bool = True) -> tuple[float, float, float, float]:
    """(cold ms, warm ms, tag-build ms, first-mask ms) for tagjit: cold until every part is compiled; first mask
    (another fresh service) until a request's first mask is filled, which waits only for the parts it reaches.
    ``started``: the service did what a server does before it reports ready (``CompileService.prepare``); else only
    the per-tokenizer tables."""
    fmt = load_format("qwen25")
    settings = settings.replace(xgrammar_threads=threads)

    def service() -> CompileService:
        svc = CompileService(info, settings)
        svc.prepare() if started else svc.wait_tables()
        return svc

    svc = service()
    try:
        t = time.perf_counter()
        tag = build_tool_tag(fmt, tools, "required", True, settings)
        build = ms(t)
        svc.compile_ready(Constraint.of("structural_tag", tag))
        cold = ms(t)
        t = time.perf_counter()
        svc.compile(Constraint.of("structural_tag", build_tool_tag(fmt, tools, "required", True, settings)))
        warm = ms(t)
    finally:
        svc.close()
    svc = service()
    try:
        mask = allocate_token_bitmask(1, info.vocab_size)
        t = time.perf_counter()
        svc.grammar(Constraint.of("structural_tag", build_tool_tag(fmt, tools, "required", True, settings))) \
            .fill_bitmask(mask, 0)
        first = ms(t)
    finally:
        svc.close()
    return cold, warm, build, first


def run_xgrammar(info: xgr.TokenizerInfo, tools: list[dict], max_ws: int | None, threads: int,
                 started: list[dict] | None = None) -> tuple[float, float]:
    """(cold ms, warm ms) for xgrammar's builtin model tag; ``started``: tools of one tag the compiler compiled
    before (a server that has served a request: the basic JSON rules in its cross-grammar cache)."""
    compiler = xgr.GrammarCompiler(info, max_threads=threads, cache_enabled=True)

    def once(request_tools: list[dict]) -> None:
        tag = xgr.get_model_structural_tag("qwen_3", tools=request_tools, tool_choice="required",
                                           reasoning="disabled", max_whitespace_cnt=max_ws)
        compiler.compile_structural_tag(tag)

    if started:
        once(started)
    t = time.perf_counter()
    once(tools)
    cold = ms(t)
    t = time.perf_counter()
    once(tools)
    return cold, ms(t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", default=str(DATA / "tokenizers" / "qwen2"))
    ap.add_argument("--sizes", default="1,10,50,200")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="xgrammar compile threads, both sides")
    ap.add_argument("--json-style", default="auto", choices=("auto", "free", "dumps"),
                    help="tagjit's json_style (auto, the default: json.dumps spacing; free: bound 1 as before)")
    ap.add_argument("--json", help="write the rows as JSON here")
    args = ap.parse_args()

    info = load_tokenizer_info(args.tokenizer)
    settings = Settings(json_style=args.json_style)
    all_tools = bfcl.load_tools(str(DATA / "bfcl"), max(int(s) for s in args.sizes.split(",")) + 1)
    first_tag = all_tools[-1:]  # xgrammar's start: one tool tag compiled before (not among the measured tools)
    rows = []
    copies = iter(range(1_000_000))
    for n in (int(s) for s in args.sizes.split(",")):
        tj, xg, tj_fresh, xg_fresh = [], [], [], []
        for _ in range(args.repeat):  # interleaved, each with tools new to every cache, so drift hits both alike
            tools = renamed(all_tools[:n], next(copies))
            tj.append(run_tagjit(info, tools, settings, args.threads))
            xg.append(run_xgrammar(info, tools, settings.max_whitespace, args.threads, started=first_tag))
            tools = renamed(all_tools[:n], next(copies))
            tj_fresh.append(run_tagjit(info, tools, settings, args.threads, started=False)[0])
            xg_fresh.append(run_xgrammar(info, tools, settings.max_whitespace, args.threads)[0])
            print(f"  {n:>4} tools: tagjit {tj[-1][0]:7.1f} ms, xgrammar {xg[-1][0]:7.1f} ms cold", flush=True)
        row = {
            "tools": n,
            "tagjit_cold_ms": statistics.median(r[0] for r in tj),
            "tagjit_warm_ms": statistics.median(r[1] for r in tj),
            "tagjit_tag_build_ms": statistics.median(r[2] for r in tj),
            "tagjit_first_mask_ms": statistics.median(r[3] for r in tj),
            "xgrammar_cold_ms": statistics.median(r[0] for r in xg),
            "xgrammar_warm_ms": statistics.median(r[1] for r in xg),
            "tagjit_fresh_ms": statistics.median(tj_fresh),
            "xgrammar_fresh_ms": statistics.median(xg_fresh),
        }
        row["cold_ratio"] = row["tagjit_cold_ms"] / row["xgrammar_cold_ms"]
        row["warm_ratio"] = row["tagjit_warm_ms"] / row["xgrammar_warm_ms"]
        row["first_mask_ratio"] = row["tagjit_first_mask_ms"] / row["xgrammar_cold_ms"]
        row["fresh_ratio"] = row["tagjit_fresh_ms"] / row["xgrammar_fresh_ms"]
        rows.append(row)

    print(f"tool-call tag compile, {info.vocab_size}-token vocabulary, tool_choice=required, new tools each run, "
          f"median of {args.repeat} (ratio = tagjit / xgrammar); cold = in a started server (tagjit prepared, "
          "xgrammar after one other tool tag), fresh = in a fresh compiler")
    print(f"{'tools':>5} | {'tagjit cold':>11} {'xgr cold':>9} {'ratio':>6} | {'tagjit warm':>11} "
          f"{'xgr warm':>9} {'ratio':>6} | {'tag build':>9} | {'tagjit 1st mask':>15} {'vs xgr cold':>11} | "
          f"{'fresh: tagjit':>13} {'xgr':>8} {'ratio':>6}")
    for r in rows:
        print(f"{r['tools']:>5} | {r['tagjit_cold_ms']:>9.1f}ms {r['xgrammar_cold_ms']:>7.1f}ms {r['cold_ratio']:>6.2f} | "
              f"{r['tagjit_warm_ms']:>9.2f}ms {r['xgrammar_warm_ms']:>7.2f}ms {r['warm_ratio']:>6.2f} | "
              f"{r['tagjit_tag_build_ms']:>7.2f}ms | {r['tagjit_first_mask_ms']:>13.1f}ms {r['first_mask_ratio']:>11.2f} | "
              f"{r['tagjit_fresh_ms']:>11.1f}ms {r['xgrammar_fresh_ms']:>6.1f}ms {r['fresh_ratio']:>6.2f}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"benchmark": "tools", "vocab_size": info.vocab_size,
                                               "repeat": args.repeat, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
