"""Scenarios run inside the spawned SGLang scheduler-side process; each returns plain data."""

from __future__ import annotations

import argparse
import json

import torch

import scheduler_side as S

SCHEMAS = S.DATA / "jsonschemabench"


def cli_choices_after_two_registrations() -> dict:
    """Register twice, then build SGLang's own parser and parse ``--grammar-backend tagjit``."""
    import tagjit_sglang
    from sglang.srt.constrained.base_grammar_backend import GRAMMAR_BACKEND_REGISTRY
    from sglang.srt.server_args import GRAMMAR_BACKEND_CHOICES, ServerArgs

    tagjit_sglang.register()
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    action = next(a for a in parser._actions if "--grammar-backend" in a.option_strings)
    parsed = parser.parse_args(["--model-path", str(S.QWEN2), "--grammar-backend", "tagjit"])
    return {"choices": list(action.choices), "count": GRAMMAR_BACKEND_CHOICES.count("tagjit"),
            "parsed": parsed.grammar_backend, "registered": "tagjit" in GRAMMAR_BACKEND_REGISTRY}


def backend_class() -> str:
    """The class SGLang's GrammarManager got from create_grammar_backend."""
    return type(S.manager().grammar_backend).__name__


def prepared_steps() -> list[str]:
    """The start-up steps the backend SGLang built had done before its first request."""
    return sorted(S.manager().grammar_backend.prepared_ms)


def admit_mixed(constraints: list[dict]) -> list[dict]:
    """Admit one request per constraint together; each one's outcome after the queue drains."""
    mgr = S.manager()
    reqs = [S.request(f"r{i}", prompt_tokens=600, **c) for i, c in enumerate(constraints)]
    S.admit(mgr, reqs)
    S.drain(mgr)
    out = []
    for r in reqs:
        finish = r.to_finish or r.finished_reason
        out.append({"grammar": type(r.grammar).__name__ if r.grammar is not None else None,
                    "abort": finish.to_json().get("message") if finish is not None else None})
    return out


def walk(constraint: dict, text: str, prompt_tokens: int = 8) -> dict:
    """Admit a request and feed the tokens of text then EOS as the result processor would."""
    req = S.request("w", prompt_tokens=prompt_tokens, **constraint)
    g = S.ready(S.manager(), req)
    if g is None:
        return {"error": None, "terminated": False, "grammar": None, "abort": req.to_finish.to_json()["message"]}
    error = S.accept_all(g, S.encode(text) + [S.EOS])
    return {"error": error, "terminated": g.is_terminated(), "grammar": type(g).__name__}


def maskbench(files: list[str]) -> list[dict]:
    """For each MaskBench file: compile through the manager, walk each test instance."""
    out = []
    for name in files:
        data = json.loads((SCHEMAS / "maskbench" / name).read_text())
        c = {"json_schema": json.dumps(data["schema"])}
        for t in data["tests"]:
            r = walk(c, json.dumps(t["data"]))
            out.append({"file": name, "valid": t["valid"], "accepted": r["error"] is None and r["terminated"],
                        "grammar": r["grammar"], "abort": r.get("abort")})
    return out


def copy_is_fresh(constraint: dict, prefix: str) -> dict:
    """Advance a grammar, copy it: the copy's mask is the initial mask and it accepts the prefix."""
    mgr = S.manager()
    g = S.ready(mgr, S.request("c", **constraint))
    initial = S.mask_rows([g.copy()])
    assert S.accept_all(g, S.encode(prefix)) is None
    advanced = S.mask_rows([g])
    c = g.copy()
    return {"copy_equals_initial": torch.equal(S.mask_rows([c]), initial),
            "advanced_differs": not torch.equal(advanced, initial),
            "copy_accepts_prefix": S.accept_all(c, S.encode(prefix)) is None,
            "original_tokens": g.grammar.num_processed_tokens}


def rejected_token(constraint: dict, text: str) -> dict:
    """Feed a token the grammar forbids: the exception type and message."""
    g = S.ready(S.manager(), S.request("x", **constraint))
    try:
        for t in S.encode(text):
            g.accept_token(t)
    except Exception as e:  # noqa: BLE001 - the type is the result
        return {"type": type(e).__name__, "message": str(e)}
    return {"type": None, "message": ""}


def masks_vs_xgrammar(constraint: dict, text: str, max_whitespace: int) -> dict:
    """Step through text: tagjit's mask vs SGLang's xgrammar backend's mask at every token, both under SGLang's
    ``--constrained-json-max-whitespace-cnt``; where they differ, whether tagjit's allows less and every token only
    xgrammar's allows holds whitespace (tagjit puts none before "," and ":")."""
    from sglang.srt.constrained.xgrammar_backend import XGrammarGrammarBackend

    mgr = S.manager(constrained_json_max_whitespace_cnt=max_whitespace)
    g = S.ready(mgr, S.request("m", **constraint))
    xb = XGrammarGrammarBackend(S.tokenizer(), vocab_size=S.MODEL_VOCAB, model_eos_token_ids=[S.EOS],
                                max_whitespace_cnt=max_whitespace)
    (key_type, key_string), = [(k.replace("json_schema", "json"), v) for k, v in constraint.items()]
    x = xb._init_value_dispatch((key_type, key_string), False)
    steps, differing, subset, whitespace = 0, [], True, True
    for t in S.encode(text) + [S.EOS]:
        a, b = S.mask_rows([g]), x.allocate_vocab_mask(S.MODEL_VOCAB, 1, "cpu")
        x.fill_vocab_mask(b, 0)
        if not torch.equal(a, b):
            differing.append(steps)
            subset = subset and torch.equal(a & b, a)
            only_x = (b & ~a)[0].numpy().view("uint32")
            ids = [w * 32 + k for w in only_x.nonzero()[0].tolist() for k in range(32) if int(only_x[w]) >> k & 1]
            with_whitespace = all(set(S.tokenizer().decode([i])) & set(" \t\r\n") for i in ids)
            whitespace = whitespace and with_whitespace
        g.accept_token(t)
        x.accept_token(t)
        steps += 1
    return {"steps": steps, "differing": differing, "subset": subset, "whitespace": whitespace,
            "both_terminated": g.is_terminated() and x.is_terminated()}


def apply_matches_xgrammar(constraint: dict) -> bool:
    """SGLang's GrammarMask.apply with tagjit's mask equals xgrammar's CPU apply on the same logits."""
    import xgrammar as xgr
    from sglang.srt.constrained.base_grammar_backend import GrammarMask

    g = S.ready(S.manager(), S.request("a", **constraint))
    mask = S.mask_rows([g, None, g.copy()])
    logits = torch.randn(3, S.MODEL_VOCAB, generator=torch.Generator().manual_seed(0))
    expected = logits.clone()
    xgr.apply_token_bitmask_inplace(expected, mask)
    GrammarMask(g, mask).apply(logits)
    return torch.equal(logits, expected)


def reasoning(constraint: dict, thinking: str, answer: str, require_reasoning: bool) -> dict:
    """A reasoning request (--reasoning-parser qwen3): free text until </think>, then the constraint."""
    mgr = S.manager(reasoning_parser="qwen3")
    g = S.ready(mgr, S.request("t", require_reasoning=require_reasoning, **constraint))
    all_allowed = torch.full_like(S.mask_rows([g]), -1)
    free_before = torch.equal(S.mask_rows([g]), all_allowed)
    think_error = S.accept_all(g, S.encode(thinking))
    end = S.encode("</think>")
    end_error = S.accept_all(g, end) if think_error is None else None
    constrained_after = not torch.equal(S.mask_rows([g]), all_allowed)
    answer_error = S.accept_all(g, S.encode(answer) + [S.EOS]) if end_error is None else None
    return {"think_end_ids": mgr.grammar_backend.think_end_ids, "end_tokens": end, "free_before": free_before,
            "think_error": think_error, "end_error": end_error, "constrained_after": constrained_after, "answer_error": answer_error,
            "terminated": g.is_terminated()}


def jit_and_wait(constraint: dict) -> dict:
    """A long prompt gets a JIT grammar, a short one a compiled grammar, a repeat skips the queue."""
    import tagjit

    mgr = S.manager()
    long_req = S.request("long", prompt_tokens=20000, **constraint)
    queued = S.admit(mgr, [long_req])["long"]
    S.drain(mgr)
    jit = long_req.grammar
    first_mask = S.mask_rows([jit])
    waited = mgr.grammar_backend.service.grammar(mgr.grammar_backend.constraint(("json", constraint["json_schema"])))
    expected = S.mask_rows([jit.copy()])
    waited.fill_bitmask(expected, 0)
    repeat = S.request("repeat", prompt_tokens=1, **constraint)
    repeat_queued = S.admit(mgr, [repeat])["repeat"]
    return {"long_queued_for_validation": queued, "long_jit": jit.jit, "first_mask_exact": torch.equal(first_mask, expected),
            "repeat_queued": repeat_queued, "repeat_jit": repeat.grammar.jit,
            "policy": type(mgr.grammar_backend.policy).__name__, "jit_mode": tagjit.get_settings().jit}


def short_prompt_waits(constraint: dict) -> dict:
    """A short prompt with an expensive uncached constraint waits in SGLang's queue for the compile."""
    mgr = S.manager()
    backend = mgr.grammar_backend
    saved, backend.service._ms_per_kb = backend.service._ms_per_kb, 10_000.0  # estimate: beyond any prefill
    try:
        req = S.request("short", prompt_tokens=4, **constraint)
        queued = S.admit(mgr, [req])["short"]
        S.drain(mgr)
    finally:
        backend.service._ms_per_kb = saved
    return {"queued": queued, "jit": req.grammar.jit, "ready": req.grammar.grammar.ready()}


def sglang_tool_tag(parser_name: str, tools: list[dict], tool_choice: str, call_text: str) -> dict:
    """SGLang's own serving-layer tool tag for a parser, compiled by tagjit, walked with a call."""
    from sglang.srt.entrypoints.openai.protocol import Tool
    from sglang.srt.function_call.function_call_parser import FunctionCallParser

    parser = FunctionCallParser([Tool.model_validate(t) for t in tools], parser_name)
    kind, tag = parser.get_structure_constraint(tool_choice)
    source = json.dumps(tag.model_dump(by_alias=True) if hasattr(tag, "model_dump") else tag)
    return {"kind": kind, **walk({kind if kind != "json_schema" else "json_schema": source}, call_text)}


def tagjit_tool_tag(fmt: str, tools: list[dict], tool_choice: str, call_text: str) -> dict:
    """tagjit's own tool tag for a format (``tagjit.tools.build_tool_tag``) through SGLang's manager."""
    from tagjit.tools import build_tool_tag

    tag = build_tool_tag(fmt, tools, tool_choice)
    return walk({"structural_tag": json.dumps(tag)}, call_text)


def batched_fill(constraints: list[dict], advance: list[str]) -> dict:
    """SGLang's batched mask step over tagjit grammars vs one fill per row, and how many core fill calls it made."""
    import tagjit.engine

    grammars = []
    for i, (constraint, text) in enumerate(zip(constraints, advance)):
        g = S.ready(S.manager(), S.request(f"b{i}", **constraint))
        for t in S.encode(text):
            g.accept_token(t)
        grammars.append(g)
    calls = []
    original = tagjit.engine.fill_bitmasks

    def counting(matchers, bitmask, rows):
        calls.append(len(matchers))
        return original(matchers, bitmask, rows)

    tagjit.engine.fill_bitmasks = counting
    try:
        batched = S.mask_rows(grammars)
    finally:
        tagjit.engine.fill_bitmasks = original
    single = grammars[0].allocate_vocab_mask(vocab_size=S.MODEL_VOCAB, batch_size=len(grammars), device="cpu")
    for i, g in enumerate(grammars):
        g.fill_vocab_mask(single, i)
    return {"equal": bool(torch.equal(batched, single)), "calls": calls,
            "constrained_rows": int((batched != -1).any(dim=1).sum())}
