"""JSON Schema conformance and speed on JSONSchemaBench: tagjit vs xgrammar vs llguidance vs outlines-core.

Per split: how many schemas each backend compiles, refuses with a reason (tagjit's
UnsupportedFeatureError, outlines-core's schema-to-regex errors), or fails on, and each compile's
time (median, p99). On the MaskBench files also: of the schemas a backend compiles, the share of
valid instances its grammar accepts (completeness) and of invalid instances it rejects (soundness);
and, with ``--vocab real``, the time of each token-mask fill along the valid instances of the
first ``--mask-schemas`` schemas (median, p99 over all steps). Every backend compiles against the
same real tokenizer.

    python benchmarks/conformance.py --limit 50                         # quick look
    python benchmarks/conformance.py --vocab empty --json conformance.json   # every schema
    python benchmarks/conformance.py --splits maskbench --limit 150 --mask-schemas 40 --plot conf.png

``--vocab empty`` compiles tagjit's and xgrammar's grammars for an empty vocabulary and outlines-core's
index for the 256 single bytes: which text a grammar accepts does not depend on the vocabulary, only
the token-mask tables do, which take most of a compile with a 151k vocabulary (about 1 s per schema
on a loaded 2-core machine; outlines-core's index, about 10 s). Masks then mean nothing: no mask fill.

xgrammar is run the way vLLM's xgrammar backend runs it (``compile_json_schema`` with its
defaults), tagjit with its defaults; both close an object that declares names and says nothing of others (strict
mode, vLLM's choice), which JSON Schema leaves open, so ``tagjit-lenient`` and ``xgrammar-lenient`` run them with
strict mode off, and ``tagjit-any-order`` also lets every object's members come in any order (the server's
``TAGJIT_ANY_ORDER_DEFAULT``): JSON Schema's semantics, the ones llguidance and the instances' labels follow. llguidance is run
the way vLLM's guidance backend does (flexible whitespace); outlines-core the
way vLLM's outlines backend does (``build_regex_from_schema`` with its defaults, ``Index`` over the
tokenizer's byte strings, a ``Guide`` per request writing its mask with ``write_mask_into``), with a
compile time limit of ``--outlines-timeout`` seconds (vLLM's own limit,
VLLM_REGEX_COMPILATION_TIMEOUT_S, is 5 s) and of ``--outlines-memory`` GiB: the index is built
in a forked child, killed past either (some automata grow without bound), and its build is timed
there. Mask fill is timed the way benchmarks/mask_fill.py fills
one request's mask (tagjit: ``fill_bitmasks``; xgrammar: ``GrammarMatcher.fill_next_token_bitmask``;
llguidance: ``llguidance.torch.fill_next_token_bitmask``).

outlines-core is optional (vLLM depends on it, so the vLLM install has it; else
``pip install outlines-core``, or ``pip install -e '.[bench]'``); without it the backend is skipped.
"""

from __future__ import annotations

import argparse
import gc
import contextlib
import json
import os
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("TAGJIT_SHARED_DATA", ROOT.parent / "shared" / "data"))
SPLITS = ("Glaiveai2K", "Github_trivial", "Github_easy", "Github_medium", "JsonSchemaStore", "maskbench")
BACKENDS = ("tagjit", "tagjit-lenient", "tagjit-any-order", "xgrammar", "xgrammar-lenient", "llguidance", "outlines-core")


@dataclass
class Tally:
    """Counts for one backend on one split."""

    schemas: int = 0
    compiled: int = 0
    refused: int = 0
    failed: int = 0
    valid: int = 0
    valid_accepted: int = 0
    invalid: int = 0
    invalid_rejected: int = 0
    unsound_schemas: int = 0
    mask_schemas: int = 0
    mask_walks_rejected: int = 0
    compile_ms: list[float] = field(default_factory=list)
    fill_us: list[float] = field(default_factory=list)
    reasons: dict[str, int] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        """The numbers of the report (no per-schema lists)."""
        out = {k: v for k, v in self.__dict__.items() if k not in ("compile_ms", "fill_us", "reasons")}
        out["median_compile_ms"], out["p99_compile_ms"] = summary(self.compile_ms)
        out["fill_steps"] = len(self.fill_us)
        out["median_fill_us"], out["p99_fill_us"] = summary(self.fill_us)
        out["completeness"] = _share(self.valid_accepted, self.valid)
        out["soundness"] = _share(self.invalid_rejected, self.invalid)
        out["top_reasons"] = dict(sorted(self.reasons.items(), key=lambda kv: -kv[1])[:8])
        return out


def summary(xs: list[float]) -> tuple[float | None, float | None]:
    """Median and p99 (nearest rank, as benchmarks/mask_fill.py), rounded; (None, None) when empty."""
    if not xs:
        return None, None
    ordered = sorted(xs)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return round(statistics.median(ordered), 2), round(p99, 2)


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


class Refused(Exception):
    """A backend declined a schema and named the feature it cannot enforce."""


@dataclass
class Grammar:
    """A compiled schema: a text check, and a fresh request's matcher with its one-row mask fill."""

    check: Callable[[str], bool]
    matcher: Callable[[], Any]
    fill: Callable[[Any], None]
    accept: Callable[[Any, int], bool]
    compile_ms: float | None = None  # the compile's own time, where it ran elsewhere (outlines-core's child)


# Instances are printed in the spacing each backend generates: compact for the engines' defaults, json.dumps's for
# tagjit's default JSON style (which takes no other).
COMPACT = (",", ":")
DUMPS = (", ", ": ")


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:80]


# -- backends: compile(schema) -> Grammar -----------------------------------------------------------

def tagjit_backend(info: Any, strict: bool = True, any_order: bool = False) -> Callable[[dict], Grammar]:
    """tagjit's CompileService (``strict``: its default strict mode; ``any_order``: every object's members in any
    order); masks by ``fill_bitmasks``."""
    from tagjit import CompileService, ConstraintError, Matcher, Settings, UnsupportedFeatureError
    from tagjit.constraint import Constraint, Kind
    from tagjit.engine import allocate_token_bitmask, fill_bitmasks

    service = CompileService(info, Settings(cache_bytes=64 * 1024 * 1024, strict_mode=strict,
                                               any_order_default=any_order))
    if info.vocab_size:  # what the engines run before they report ready: no mask below waits for per-tokenizer tables
        service.prepare()
    bitmask = allocate_token_bitmask(1, max(1, info.vocab_size))
    separators = DUMPS if service.settings.dumps_spacing else COMPACT

    def compile_(schema: Any) -> Grammar:
        try:
            compiled = service.compile(Constraint.of(Kind.JSON, schema))
        except UnsupportedFeatureError as e:
            raise Refused(e.feature) from None
        except ConstraintError as e:
            raise RuntimeError(str(e)) from None

        def check(text: str) -> bool:
            g = Matcher(compiled, vocab_size=info.vocab_size)
            return g.accept_string(text) and g.is_completed()

        return Grammar(check, lambda: Matcher(compiled, vocab_size=info.vocab_size),
                       lambda m: fill_bitmasks([m], bitmask, range(1)), lambda m, t: m.accept_token(t))

    compile_.separators = separators  # type: ignore[attr-defined]
    return compile_


def xgrammar_backend(info: Any, strict: bool = True) -> Callable[[dict], Grammar]:
    """xgrammar's plain ``compile_json_schema`` (``strict``: its default strict mode); masks by
    ``GrammarMatcher.fill_next_token_bitmask``."""
    import xgrammar as xgr

    compiler = xgr.GrammarCompiler(info, cache_enabled=False)
    bitmask = xgr.allocate_token_bitmask(1, max(1, info.vocab_size))

    def compile_(schema: Any) -> Grammar:
        compiled = compiler.compile_json_schema(json.dumps(schema), strict_mode=strict)

        def check(text: str) -> bool:
            m = xgr.GrammarMatcher(compiled)
            return m.accept_string(text) and m.is_completed()

        return Grammar(check, lambda: xgr.GrammarMatcher(compiled),
                       lambda m: m.fill_next_token_bitmask(bitmask, 0), lambda m, t: m.accept_token(t))

    return compile_


def llguidance_backend(tokenizer_dir: str) -> Callable[[dict], Grammar]:
    """llguidance's LLMatcher with flexible whitespace; masks by ``llguidance.torch.fill_next_token_bitmask``."""
    import llguidance
    import llguidance.hf
    import llguidance.torch
    from transformers import AutoTokenizer

    tok = llguidance.hf.from_tokenizer(AutoTokenizer.from_pretrained(tokenizer_dir))
    bitmask = llguidance.torch.allocate_token_bitmask(1, tok.vocab_size)

    def compile_(schema: Any) -> Grammar:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema),
                                                                defaults={"whitespace_flexible": True})
        first = llguidance.LLMatcher(tok, grammar, log_level=0)
        if first.is_error():
            raise RuntimeError(first.get_error())

        def check(text: str) -> bool:
            m = llguidance.LLMatcher(tok, grammar, log_level=0)
            return m.consume_tokens(tok.tokenize_str(text)) and m.is_accepting() and not m.is_error()

        return Grammar(check, lambda: llguidance.LLMatcher(tok, grammar, log_level=0),
                       lambda m: llguidance.torch.fill_next_token_bitmask(m, bitmask, 0),
                       lambda m, t: m.consume_token(t))

    return compile_


def outlines_vocabulary(tokenizer_dir: str) -> tuple[Any, int, Callable[[str], list[int]]]:
    """outlines-core's Vocabulary of a HF tokenizer (token byte strings, as vLLM builds it), its size, its encoder."""
    import outlines_core
    from transformers import AutoTokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    unicode_to_bytes = {v: k for k, v in bytes_to_unicode().items()}
    special = set(tok.all_special_tokens)
    tokens: dict[bytes, list[int]] = {}
    for token, token_id in tok.get_vocab().items():
        if token in special:
            continue
        if all(c in unicode_to_bytes for c in token):  # byte-level BPE: one character per byte (GPT-2)
            raw = bytes(unicode_to_bytes[c] for c in token)
        else:
            raw = tok.convert_tokens_to_string([token]).encode("utf-8")
        if raw:
            tokens.setdefault(raw, []).append(token_id)
    size = 1 + max(tok.eos_token_id, *(i for ids in tokens.values() for i in ids))
    vocabulary = outlines_core.Vocabulary(tok.eos_token_id, tokens)
    return vocabulary, size, lambda text: tok.encode(text, add_special_tokens=False)


def byte_vocabulary() -> tuple[Any, int, Callable[[str], list[int]]]:
    """A 256-token vocabulary, one token per byte (token id = byte), EOS 256, and its encoder."""
    import outlines_core

    return outlines_core.Vocabulary(256, {bytes([b]): [b] for b in range(256)}), 257, lambda text: list(text.encode())


def _index_child(source: str, vocabulary: Any, out: Any, memory_bytes: int, schema: bool) -> None:
    """In a forked child: build the Index (of a regex, or of a schema's regex) under an address-space limit; send
    ("ok", index, regex ms, index ms), ("refused", outlines' reason, 0, 0) or ("error", its first line, 0, 0)."""
    import faulthandler
    import pickle
    import resource

    import outlines_core
    from outlines_core.json_schema import build_regex_from_schema

    # Past its limit the Rust allocator aborts this child, which the parent reports as MemoryError; a faulthandler
    # inherited from the parent (pytest's) would print the child's stack as if the parent had crashed.
    faulthandler.disable()

    with open("/proc/self/statm") as f:
        in_use = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (in_use + memory_bytes, in_use + memory_bytes))
    regex, regex_ms = source, 0.0
    if schema:  # outlines-core's regex of some schemas alone takes gigabytes (Github_medium---o33692: 3.9 GB)
        t0 = time.perf_counter()
        try:
            regex = build_regex_from_schema(source)
        except Exception as e:  # noqa: BLE001 - outlines-core raises ValueError/TypeError/...: its refusals
            out.send_bytes(pickle.dumps(("refused", outlines_reason(e), 0.0, 0.0)))
            return
        regex_ms = (time.perf_counter() - t0) * 1000
    try:
        t0 = time.perf_counter()
        index = outlines_core.Index(regex, vocabulary)
        ms = (time.perf_counter() - t0) * 1000
        out.send_bytes(pickle.dumps(("ok", index, regex_ms, ms)))
    except Exception as e:  # noqa: BLE001 - handed to the parent
        out.send_bytes(pickle.dumps(("error", _first_line(e), 0.0, 0.0)))


def build_index(regex: str, vocabulary: Any, timeout_s: float, memory_bytes: int) -> tuple[Any, float]:
    """outlines-core's Index and its build ms, built in a forked child killed past ``timeout_s`` or its memory."""
    index, _, ms = _in_child(regex, vocabulary, timeout_s, memory_bytes, schema=False)
    return index, ms


def build_schema_index(schema_text: str, vocabulary: Any, timeout_s: float, memory_bytes: int
                       ) -> tuple[Any, float, float]:
    """outlines-core's Index of a JSON schema, its regex ms and index ms, all built in a child as ``build_index``."""
    return _in_child(schema_text, vocabulary, timeout_s, memory_bytes, schema=True)


def _in_child(source: str, vocabulary: Any, timeout_s: float, memory_bytes: int, schema: bool
              ) -> tuple[Any, float, float]:
    import multiprocessing
    import pickle

    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_index_child, args=(source, vocabulary, send, memory_bytes, schema), daemon=True)
    child.start()
    send.close()
    try:
        if not receive.poll(timeout_s):
            raise TimeoutError(f"index did not compile within {timeout_s:g} s")
        try:
            status, value, regex_ms, ms = pickle.loads(receive.recv_bytes())
        except EOFError:
            raise MemoryError(f"index build died (over {memory_bytes >> 30} GiB?)") from None
    finally:
        child.kill()
        child.join()
        receive.close()
    if status == "refused":
        raise Refused(value)
    if status != "ok":
        raise RuntimeError(value)
    return value, regex_ms, ms


def outlines_reason(e: BaseException) -> str:
    """The feature named by an outlines-core schema error: its first words, before any quoted schema or value."""
    head = re.split(r"[:{\[]|\b(?:true|false|null)\b", _first_line(e), maxsplit=1)[0].strip()
    return " ".join(head.split()[:8]) or type(e).__name__


def outlines_backend(tokenizer_dir: str, vocab: str, timeout_s: float, memory_gib: float = 4.0
                     ) -> Callable[[dict], Grammar]:
    """outlines-core: JSON Schema -> regex -> token Index; a Guide per request, masks by ``write_mask_into``."""
    import outlines_core
    import torch
    vocabulary, size, encode = outlines_vocabulary(tokenizer_dir) if vocab == "real" else byte_vocabulary()
    bitmask = torch.zeros((size + 31) // 32, dtype=torch.int32)  # the row length outlines-core checks

    def compile_(schema: Any) -> Grammar:
        index, regex_ms, index_ms = build_schema_index(json.dumps(schema), vocabulary, timeout_s,
                                                       int(memory_gib * (1 << 30)))

        def check(text: str) -> bool:
            state = index.get_initial_state()
            for t in encode(text):
                state = index.get_next_state(state, t)
                if state is None:
                    return False
            return index.is_final_state(state)

        def fill(guide: Any) -> None:
            guide.write_mask_into(bitmask.data_ptr(), bitmask.numel(), bitmask.element_size())

        def accept(guide: Any, t: int) -> bool:
            try:
                guide.advance(t, return_tokens=False)
            except ValueError:
                return False
            return True

        return Grammar(check, lambda: outlines_core.Guide(index), fill, accept, regex_ms + index_ms)

    return compile_


# -- the run ----------------------------------------------------------------------------------------

def instance_text(data: Any, separators: tuple[str, str] = COMPACT) -> str:
    """JSON with these separators (compact by default); characters kept raw where UTF-8 can hold them (lone
    surrogates are escaped)."""
    text = json.dumps(data, ensure_ascii=False, separators=separators)
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return json.dumps(data, separators=separators)


def schemas(split: str, limit: int | None, every: int = 1) -> Iterator[tuple[str, Any, list]]:
    """(name, schema, tests) of every ``every``-th of a split's files in name order; tests only for maskbench."""
    folder = DATA / "jsonschemabench" / split
    for name in sorted(os.listdir(folder))[::every][:limit]:
        raw = json.loads((folder / name).read_text())
        if split == "maskbench":
            yield name, raw["schema"], raw["tests"]
        else:
            yield name, raw, []


def available(backends: list[str], progress: Callable[[str], None]) -> list[str]:
    """The backends whose package imports (outlines-core is optional); a line for each one skipped."""
    modules = {"llguidance": "llguidance", "outlines-core": "outlines_core"}
    kept = []
    for b in backends:
        try:
            if b in modules:
                __import__(modules[b])
        except ImportError:
            progress(f"{b}: {modules[b]} is not installed, skipping it (pip install {b})")
            continue
        kept.append(b)
    return kept


def makers(info: Any, tokenizer_dir: str, vocab: str, outlines_timeout_s: float, outlines_memory_gib: float
           ) -> dict[str, Callable[[], Callable[[dict], Grammar]]]:
    """Each backend's constructor."""
    return {"tagjit": lambda: tagjit_backend(info), "tagjit-lenient": lambda: tagjit_backend(info, strict=False),
            "tagjit-any-order": lambda: tagjit_backend(info, strict=False, any_order=True),
            "xgrammar": lambda: xgrammar_backend(info), "xgrammar-lenient": lambda: xgrammar_backend(info, strict=False),
            "llguidance": lambda: llguidance_backend(tokenizer_dir),
            "outlines-core": lambda: outlines_backend(tokenizer_dir, vocab, outlines_timeout_s, outlines_memory_gib)}


def check_instances(tally: Tally, grammar: Grammar, texts: list[tuple[str, bool]]) -> None:
    """Count the valid instances the grammar accepts and the invalid ones it rejects."""
    unsound = False
    for text, valid in texts:
        accepted = grammar.check(text)
        if valid:
            tally.valid += 1
            tally.valid_accepted += accepted
        else:
            tally.invalid += 1
            tally.invalid_rejected += not accepted
            unsound |= accepted
    tally.unsound_schemas += unsound


def time_fills(tally: Tally, grammar: Grammar, walks: list[list[int]]) -> None:
    """Time each mask fill along each token walk (a fresh matcher per walk; a rejected token ends it)."""
    tally.mask_schemas += 1
    for tokens in walks:
        m = grammar.matcher()
        for t in tokens:
            t0 = time.perf_counter()
            grammar.fill(m)
            tally.fill_us.append((time.perf_counter() - t0) * 1e6)
            if not grammar.accept(m, t):
                tally.mask_walks_rejected += 1
                break


def run(splits: list[str], backends: list[str], limit: int | None, tokenizer_dir: str,
        progress: Callable[[str], None], vocab: str = "real", mask_schemas: int = 0,
        outlines_timeout_s: float = 30.0, every: int = 1, outlines_memory_gib: float = 4.0
        ) -> dict[str, dict[str, Tally]]:
    """Compile every schema with every backend, check maskbench instances, time mask fills on the first ones."""
    import xgrammar as xgr

    from tagjit import load_tokenizer_info

    info = load_tokenizer_info(tokenizer_dir) if vocab == "real" else xgr.TokenizerInfo([])
    make = makers(info, tokenizer_dir, vocab, outlines_timeout_s, outlines_memory_gib)
    compilers = {b: make[b]() for b in backends}
    # The start-up heap (vocabularies, per-tokenizer tables) is frozen, as vLLM's engine core does once started
    # (freeze_gc_heap): otherwise a collection after a compile walks it during the next mask fill.
    gc.collect()
    gc.freeze()
    encode = None
    if vocab == "real" and mask_schemas and "maskbench" in splits:
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(tokenizer_dir)
        encode = lambda text: hf.encode(text, add_special_tokens=False)  # noqa: E731
    report_each = 10 if vocab == "real" else 100
    results: dict[str, dict[str, Tally]] = {}
    for split in splits:
        tallies = results[split] = {b: Tally() for b in backends}
        start = time.monotonic()
        for i, (name, schema, tests) in enumerate(schemas(split, limit, every), 1):
            for b, compile_ in compilers.items():
                separators = getattr(compile_, "separators", COMPACT)
                texts = [(instance_text(t["data"], separators), bool(t["valid"])) for t in tests]
                walks = [encode(text) for text, valid in texts if valid] if encode and i <= mask_schemas else []
                compile_one(tallies[b], compile_, schema, texts, walks)
            if i % report_each == 0:
                progress(f"{split}: {i} schemas, {time.monotonic() - start:.0f} s  " + ", ".join(
                    f"{b} {sum(t.compile_ms) / 1000:.0f} s" for b, t in tallies.items()))
        progress(f"{split}: done, {tallies[backends[0]].schemas} schemas in {time.monotonic() - start:.0f} s")
    return results


def compile_one(tally: Tally, compile_: Callable[[dict], Grammar], schema: Any, texts: list[tuple[str, bool]],
                walks: list[list[int]]) -> None:
    """One backend on one schema: the compile (timed), its verdicts on the instances, its timed mask walks."""
    tally.schemas += 1
    t0 = time.perf_counter()
    try:
        grammar = compile_(schema)
    except Refused as e:
        tally.refused += 1
        tally.reasons[str(e)] = tally.reasons.get(str(e), 0) + 1
        return
    except Exception as e:  # noqa: BLE001 - every backend error is a failed compile here
        tally.failed += 1
        reason = _first_line(e)
        tally.reasons[reason] = tally.reasons.get(reason, 0) + 1
        return
    ms = (time.perf_counter() - t0) * 1000
    tally.compile_ms.append(grammar.compile_ms if grammar.compile_ms is not None else ms)
    tally.compiled += 1
    check_instances(tally, grammar, texts)
    if walks:
        time_fills(tally, grammar, walks)


def table(results: dict[str, dict[str, Tally]]) -> str:
    """The report as a fixed-width table, then each backend's most frequent refusal and failure reasons."""
    head = (f"{'split':<16} {'backend':<13} {'schemas':>7} {'compiled':>8} {'refused':>7} {'failed':>6} "
            f"{'med ms':>7} {'p99 ms':>8} {'complete':>9} {'sound':>8} {'unsound':>7} "
            f"{'mask n':>6} {'steps':>7} {'med us':>7} {'p99 us':>8}")
    lines = ["compile: med / p99 ms; mask n: schemas whose valid instances were walked token by token, "
             "steps: mask fills timed, med / p99 us per fill", head, "-" * len(head)]
    pct = (lambda x: f"{100 * x:.2f}%" if x is not None else "-")
    num = (lambda x, f="{:.1f}": f.format(x) if x is not None else "-")
    for split, tallies in results.items():
        for b, t in tallies.items():
            r = t.row()
            lines.append(
                f"{split:<16} {b:<13} {t.schemas:>7} {t.compiled:>8} {t.refused:>7} {t.failed:>6} "
                f"{num(r['median_compile_ms']):>7} {num(r['p99_compile_ms']):>8} "
                f"{pct(r['completeness']):>9} {pct(r['soundness']):>8} "
                f"{t.unsound_schemas if split == 'maskbench' else '-':>7} "
                f"{t.mask_schemas or '-':>6} {r['fill_steps'] or '-':>7} "
                f"{num(r['median_fill_us']):>7} {num(r['p99_fill_us']):>8}")
    lines += ["", "refused / failed, by reason (top 5 per backend):"]
    for split, tallies in results.items():
        for b, t in tallies.items():
            for reason, n in sorted(t.reasons.items(), key=lambda kv: -kv[1])[:5]:
                lines.append(f"  {split:<16} {b:<13} {n:>5}  {reason}")
    return "\n".join(lines)


def plot(results: dict[str, dict[str, Tally]], path: str) -> None:
    """Bars per backend: completeness and soundness (maskbench), compile ms and mask-fill us (median, p99)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    split = "maskbench" if "maskbench" in results else next(iter(results))
    rows = {b: t.row() for b, t in results[split].items()}
    backends = list(rows)
    panels = [("share of instances (%)", "complete / sound", ("completeness", "soundness"), 100, False),
              ("compile time (ms)", "compile", ("median_compile_ms", "p99_compile_ms"), 1, True),
              ("mask fill per step (us)", "mask fill", ("median_fill_us", "p99_fill_us"), 1, True)]
    fig, axes = plt.subplots(1, len(panels), figsize=(15, 4))
    for ax, (ylabel, title, keys, scale, log) in zip(axes, panels):
        width = 0.8 / len(keys)
        for k, key in enumerate(keys):
            ys = [(rows[b][key] or 0) * scale for b in backends]
            ax.bar([x + k * width for x in range(len(backends))], ys, width,
                   label=key.replace("_", " ").replace(" fill us", "").replace(" compile ms", ""))
        ax.set_xticks([x + width * (len(keys) - 1) / 2 for x in range(len(backends))], backends, fontsize=8)
        if not any(rows[b][key] for b in backends for key in keys):
            ax.text(0.5, 0.5, "not measured", ha="center", transform=ax.transAxes)
        elif log:
            ax.set_yscale("log")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{title}, {split}")
        ax.legend(fontsize=7)
    n = rows[backends[0]]["schemas"] if backends else 0
    fig.suptitle(f"JSON Schema conformance and speed, {n} {split} schemas")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)


@contextlib.contextmanager
def quiet_native_stderr() -> Iterator[Callable[[str], None]]:
    """Silence xgrammar's C++ warnings on fd 2; yields a progress printer to the real stderr."""
    saved = os.dup(2)
    real = os.fdopen(os.dup(saved), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield lambda msg: print(msg, file=real, flush=True)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
        real.close()


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, run, print the table, write the JSON and the plot."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--limit", type=int, default=None, help="schemas per split (default: all)")
    p.add_argument("--every", type=int, default=1, help="take every N-th schema of a split, in name order")
    p.add_argument("--splits", default=",".join(SPLITS))
    p.add_argument("--backends", default=",".join(BACKENDS))
    p.add_argument("--tokenizer", default=str(DATA / "tokenizers" / "qwen2"))
    p.add_argument("--vocab", choices=("real", "empty"), default="real",
                   help="vocabulary tagjit and xgrammar compile for, outlines-core's index is built for "
                        "(empty: the 256 bytes); llguidance always uses the tokenizer")
    p.add_argument("--mask-schemas", type=int, default=100,
                   help="time mask fills on the first N maskbench schemas (--vocab real only; 0: none)")
    p.add_argument("--outlines-timeout", type=float, default=30.0,
                   help="seconds an outlines-core index may take to compile (vLLM's default limit: 5)")
    p.add_argument("--outlines-memory", type=float, default=4.0,
                   help="GiB of address space an outlines-core index build may add")
    p.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    p.add_argument("--plot", metavar="PATH", help="also draw the maskbench numbers per backend (PNG)")
    args = p.parse_args(argv)
    splits = [s for s in args.splits.split(",") if s]
    backends = [b for b in args.backends.split(",") if b]
    unknown = set(backends) - set(BACKENDS)
    if unknown:
        p.error(f"unknown backends {sorted(unknown)}")
    with quiet_native_stderr() as progress:
        backends = available(backends, progress)
        if args.vocab == "empty" and args.mask_schemas:
            progress("--vocab empty: masks mean nothing for an empty vocabulary, no mask-fill timing")
        results = run(splits, backends, args.limit, args.tokenizer, progress, args.vocab,
                      args.mask_schemas if args.vocab == "real" else 0, args.outlines_timeout, args.every,
                      args.outlines_memory)
    print(table(results))
    if args.json:
        payload = {"limit": args.limit, "every": args.every, "tokenizer": args.tokenizer, "vocab": args.vocab,
                   "mask_schemas": args.mask_schemas if args.vocab == "real" else 0,
                   "outlines_timeout_s": args.outlines_timeout, "outlines_memory_gib": args.outlines_memory,
                   "results": {s: {b: t.row() for b, t in ts.items()} for s, ts in results.items()}}
        Path(args.json).write_text(json.dumps(payload, indent=2))
    if args.plot:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
