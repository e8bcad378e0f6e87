"""JSON Schema conformance on JSONSchemaBench: tagjit vs xgrammar's plain compile vs llguidance.

Per split: how many schemas each backend compiles, refuses with a reason (tagjit's
UnsupportedFeatureError), or fails on. On the MaskBench files also: of the schemas a backend
compiles, the share of valid instances its grammar accepts (completeness) and of invalid
instances it rejects (soundness). Every backend compiles against the same real tokenizer.

    python benchmarks/conformance.py --limit 50                         # quick look
    python benchmarks/conformance.py --vocab empty --json conformance.json   # every schema

``--vocab empty`` compiles tagjit's and xgrammar's grammars for an empty vocabulary: which text a
grammar accepts does not depend on the vocabulary, only the token-mask tables do, which take most
of a compile with a 151k vocabulary (about 1 s per schema on a loaded 2-core machine).

xgrammar is run the way vLLM's xgrammar backend runs it (``compile_json_schema`` with its
defaults); llguidance the way vLLM's guidance backend does (flexible whitespace).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("TAGJIT_SHARED_DATA", ROOT.parent / "shared" / "data"))
SPLITS = ("Glaiveai2K", "Github_trivial", "Github_easy", "Github_medium", "JsonSchemaStore", "maskbench")
BACKENDS = ("tagjit", "xgrammar", "llguidance")


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
    compile_ms: list[float] = field(default_factory=list)
    reasons: dict[str, int] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        """The numbers of the report (no per-schema lists)."""
        out = {k: v for k, v in self.__dict__.items() if k not in ("compile_ms", "reasons")}
        out["median_compile_ms"] = round(statistics.median(self.compile_ms), 2) if self.compile_ms else None
        out["completeness"] = _share(self.valid_accepted, self.valid)
        out["soundness"] = _share(self.invalid_rejected, self.invalid)
        out["top_reasons"] = dict(sorted(self.reasons.items(), key=lambda kv: -kv[1])[:8])
        return out


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


class Refused(Exception):
    """A backend declined a schema and named the feature it cannot enforce."""


# -- backends: compile(schema) -> check(text) -> bool ------------------------------------------------

def tagjit_backend(info: Any) -> Callable[[dict], Callable[[str], bool]]:
    from tagjit import CompileService, ConstraintError, Matcher, Settings, UnsupportedFeatureError
    from tagjit.constraint import Constraint, Kind

    service = CompileService(info, Settings(cache_bytes=64 * 1024 * 1024))

    def compile_(schema: Any) -> Callable[[str], bool]:
        try:
            compiled = service.compile(Constraint.of(Kind.JSON, schema))
        except UnsupportedFeatureError as e:
            raise Refused(e.feature) from None
        except ConstraintError as e:
            raise RuntimeError(str(e)) from None

        def check(text: str) -> bool:
            g = Matcher(compiled, vocab_size=info.vocab_size)
            return g.accept_string(text) and g.is_completed()

        return check

    return compile_


def xgrammar_backend(info: Any) -> Callable[[dict], Callable[[str], bool]]:
    import xgrammar as xgr

    compiler = xgr.GrammarCompiler(info, cache_enabled=False)

    def compile_(schema: Any) -> Callable[[str], bool]:
        compiled = compiler.compile_json_schema(json.dumps(schema))

        def check(text: str) -> bool:
            m = xgr.GrammarMatcher(compiled)
            return m.accept_string(text) and m.is_completed()

        return check

    return compile_


def llguidance_backend(tokenizer_dir: str) -> Callable[[dict], Callable[[str], bool]]:
    import llguidance
    import llguidance.hf
    from transformers import AutoTokenizer

    tok = llguidance.hf.from_tokenizer(AutoTokenizer.from_pretrained(tokenizer_dir))

    def compile_(schema: Any) -> Callable[[str], bool]:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema),
                                                                defaults={"whitespace_flexible": True})
        first = llguidance.LLMatcher(tok, grammar, log_level=0)
        if first.is_error():
            raise RuntimeError(first.get_error())

        def check(text: str) -> bool:
            m = llguidance.LLMatcher(tok, grammar, log_level=0)
            return m.consume_tokens(tok.tokenize_str(text)) and m.is_accepting() and not m.is_error()

        return check

    return compile_


# -- the run ----------------------------------------------------------------------------------------

def instance_text(data: Any) -> str:
    """Compact JSON; characters kept raw where UTF-8 can hold them (lone surrogates are escaped)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return json.dumps(data, separators=(",", ":"))


def schemas(split: str, limit: int | None) -> Iterator[tuple[str, Any, list]]:
    """(name, schema, tests) of a split's files in name order; tests only for maskbench."""
    folder = DATA / "jsonschemabench" / split
    for name in sorted(os.listdir(folder))[:limit]:
        raw = json.loads((folder / name).read_text())
        if split == "maskbench":
            yield name, raw["schema"], raw["tests"]
        else:
            yield name, raw, []


def run(splits: list[str], backends: list[str], limit: int | None, tokenizer_dir: str,
        progress: Callable[[str], None], vocab: str = "real") -> dict[str, dict[str, Tally]]:
    """Compile every schema with every backend and check maskbench instances."""
    import xgrammar as xgr

    from tagjit import load_tokenizer_info

    info = load_tokenizer_info(tokenizer_dir) if vocab == "real" else xgr.TokenizerInfo([])
    makers = {"tagjit": lambda: tagjit_backend(info), "xgrammar": lambda: xgrammar_backend(info),
              "llguidance": lambda: llguidance_backend(tokenizer_dir)}
    compilers = {b: makers[b]() for b in backends}
    results: dict[str, dict[str, Tally]] = {}
    for split in splits:
        tallies = results[split] = {b: Tally() for b in backends}
        start = time.monotonic()
        for i, (name, schema, tests) in enumerate(schemas(split, limit), 1):
            texts = [(instance_text(t["data"]), bool(t["valid"])) for t in tests]
            for b, compile_ in compilers.items():
                tally = tallies[b]
                tally.schemas += 1
                t0 = time.perf_counter()
                try:
                    check = compile_(schema)
                except Refused as e:
                    tally.refused += 1
                    tally.reasons[str(e)] = tally.reasons.get(str(e), 0) + 1
                    continue
                except Exception as e:  # noqa: BLE001 - every backend error is a failed compile here
                    tally.failed += 1
                    reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:80]
                    tally.reasons[reason] = tally.reasons.get(reason, 0) + 1
                    continue
                tally.compile_ms.append((time.perf_counter() - t0) * 1000)
                tally.compiled += 1
                unsound = False
                for text, valid in texts:
                    accepted = check(text)
                    if valid:
                        tally.valid += 1
                        tally.valid_accepted += accepted
                    else:
                        tally.invalid += 1
                        tally.invalid_rejected += not accepted
                        unsound |= accepted
                tally.unsound_schemas += unsound
            if i % 100 == 0:
                progress(f"{split}: {i} schemas, {time.monotonic() - start:.0f} s")
        progress(f"{split}: done, {tallies[backends[0]].schemas} schemas in {time.monotonic() - start:.0f} s")
    return results


def table(results: dict[str, dict[str, Tally]]) -> str:
    """The report as a fixed-width table."""
    head = (f"{'split':<16} {'backend':<11} {'schemas':>7} {'compiled':>8} {'refused':>7} {'failed':>6} "
            f"{'med ms':>7} {'complete':>9} {'sound':>8} {'unsound schemas':>15}")
    lines = [head, "-" * len(head)]
    for split, tallies in results.items():
        for b, t in tallies.items():
            r = t.row()
            pct = (lambda x: f"{100 * x:.2f}%" if x is not None else "-")
            ms = f"{r['median_compile_ms']:.1f}" if r["median_compile_ms"] is not None else "-"
            lines.append(f"{split:<16} {b:<11} {t.schemas:>7} {t.compiled:>8} {t.refused:>7} {t.failed:>6} {ms:>7} "
                         f"{pct(r['completeness']):>9} {pct(r['soundness']):>8} "
                         f"{t.unsound_schemas if split == 'maskbench' else '-':>15}")
    return "\n".join(lines)


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
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--limit", type=int, default=None, help="schemas per split (default: all)")
    p.add_argument("--splits", default=",".join(SPLITS))
    p.add_argument("--backends", default=",".join(BACKENDS))
    p.add_argument("--tokenizer", default=str(DATA / "tokenizers" / "qwen2"))
    p.add_argument("--vocab", choices=("real", "empty"), default="real",
                   help="vocabulary tagjit and xgrammar compile for (llguidance always uses the tokenizer)")
    p.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    args = p.parse_args(argv)
    splits = [s for s in args.splits.split(",") if s]
    backends = [b for b in args.backends.split(",") if b]
    unknown = set(backends) - set(BACKENDS)
    if unknown:
        p.error(f"unknown backends {sorted(unknown)}")
    with quiet_native_stderr() as progress:
        results = run(splits, backends, args.limit, args.tokenizer, progress, args.vocab)
    print(table(results))
    if args.json:
        payload = {"limit": args.limit, "tokenizer": args.tokenizer, "vocab": args.vocab,
                   "results": {s: {b: t.row() for b, t in ts.items()} for s, ts in results.items()}}
        Path(args.json).write_text(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
