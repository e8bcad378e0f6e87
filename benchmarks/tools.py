"""Tool-call tag compile time: tagjit vs xgrammar's builtin model tag, for 1/10/50/200 BFCL tools.

Both build the same Qwen-style JSON tool-call syntax (tagjit format ``qwen25``, xgrammar model
``qwen_3``), ``tool_choice="required"``, over a ~150k-token vocabulary (Qwen2), and compile it:
- tagjit: ``tools.build_tool_tag`` + ``CompileService.compile`` (a fresh service per cold run);
- xgrammar: ``get_model_structural_tag`` + ``GrammarCompiler.compile_structural_tag`` (a fresh
  compiler per cold run).
Cold = first compile of that tool set in a fresh compiler (tagjit: until every per-tool part is compiled; "first
mask": until a request's first mask is filled, in another fresh service, which waits only for the parts that mask
reaches; both after the per-tokenizer tables a server builds at start); warm = the same request again (tagjit:
tag rebuilt and looked up in its cache; xgrammar: its compiler cache). Median of ``--repeat`` runs.

    python benchmarks/tools.py [--tokenizer PATH] [--sizes 1,10,50,200] [--repeat 3] [--json out.json]
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


def run_tagjit(info: xgr.TokenizerInfo, tools: list[dict], settings: Settings,
               threads: int) -> tuple[float, float, float, float]:
    """(cold ms, warm ms, tag-build ms, first-mask ms) for tagjit: cold until every part is compiled; first mask
    (another fresh service) until a request's first mask is filled, which waits only for the parts it reaches."""
    fmt = load_format("qwen25")
    settings = settings.replace(xgrammar_threads=threads)
    svc = CompileService(info, settings)
    try:
        svc.wait_tables()  # per-tokenizer tables: once per process, before traffic (CompileService.prepare)
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
    svc = CompileService(info, settings)
    try:
        svc.wait_tables()
        mask = allocate_token_bitmask(1, info.vocab_size)
        t = time.perf_counter()
        svc.grammar(Constraint.of("structural_tag", build_tool_tag(fmt, tools, "required", True, settings))) \
            .fill_bitmask(mask, 0)
        first = ms(t)
    finally:
        svc.close()
    return cold, warm, build, first


def run_xgrammar(info: xgr.TokenizerInfo, tools: list[dict], max_ws: int | None, threads: int) -> tuple[float, float]:
    """(cold ms, warm ms) for xgrammar's builtin model tag."""
    compiler = xgr.GrammarCompiler(info, max_threads=threads, cache_enabled=True)

    def once() -> None:
        tag = xgr.get_model_structural_tag("qwen_3", tools=tools, tool_choice="required", reasoning="disabled",
                                           max_whitespace_cnt=max_ws)
        compiler.compile_structural_tag(tag)

    t = time.perf_counter()
    once()
    cold = ms(t)
    t = time.perf_counter()
    once()
    return cold, ms(t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", default=str(DATA / "tokenizers" / "qwen2"))
    ap.add_argument("--sizes", default="1,10,50,200")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="xgrammar compile threads, both sides")
    ap.add_argument("--json", help="write the rows as JSON here")
    args = ap.parse_args()

    info = load_tokenizer_info(args.tokenizer)
    settings = Settings()
    all_tools = bfcl.load_tools(str(DATA / "bfcl"), max(int(s) for s in args.sizes.split(",")))
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        tools = all_tools[:n]
        tj = [run_tagjit(info, tools, settings, args.threads) for _ in range(args.repeat)]
        xg = [run_xgrammar(info, tools, settings.max_whitespace, args.threads) for _ in range(args.repeat)]
        row = {
            "tools": n,
            "tagjit_cold_ms": statistics.median(r[0] for r in tj),
            "tagjit_warm_ms": statistics.median(r[1] for r in tj),
            "tagjit_tag_build_ms": statistics.median(r[2] for r in tj),
            "tagjit_first_mask_ms": statistics.median(r[3] for r in tj),
            "xgrammar_cold_ms": statistics.median(r[0] for r in xg),
            "xgrammar_warm_ms": statistics.median(r[1] for r in xg),
        }
        row["cold_ratio"] = row["tagjit_cold_ms"] / row["xgrammar_cold_ms"]
        row["warm_ratio"] = row["tagjit_warm_ms"] / row["xgrammar_warm_ms"]
        row["first_mask_ratio"] = row["tagjit_first_mask_ms"] / row["xgrammar_cold_ms"]
        rows.append(row)

    print(f"tool-call tag compile, {info.vocab_size}-token vocabulary, tool_choice=required, "
          f"median of {args.repeat} (ratio = tagjit / xgrammar)")
    print(f"{'tools':>5} | {'tagjit cold':>11} {'xgr cold':>9} {'ratio':>6} | {'tagjit warm':>11} "
          f"{'xgr warm':>9} {'ratio':>6} | {'tag build':>9} | {'tagjit 1st mask':>15} {'vs xgr cold':>11}")
    for r in rows:
        print(f"{r['tools']:>5} | {r['tagjit_cold_ms']:>9.1f}ms {r['xgrammar_cold_ms']:>7.1f}ms {r['cold_ratio']:>6.2f} | "
              f"{r['tagjit_warm_ms']:>9.2f}ms {r['xgrammar_warm_ms']:>7.2f}ms {r['warm_ratio']:>6.2f} | "
              f"{r['tagjit_tag_build_ms']:>7.2f}ms | {r['tagjit_first_mask_ms']:>13.1f}ms {r['first_mask_ratio']:>11.2f}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"benchmark": "tools", "vocab_size": info.vocab_size,
                                               "repeat": args.repeat, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
