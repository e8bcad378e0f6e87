"""The ``tagjit`` command: compile, check and lint constraints without an engine."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Sequence

from tagjit.errors import ConstraintError
from tagjit.build.grammars import build_grammar, rule_count
from tagjit.settings import get_settings
from tagjit.constraint import Constraint, Kind

EXIT_BAD_CONSTRAINT = 2


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8") as f:
        return f.read()


def _constraint(args: argparse.Namespace) -> Constraint:
    if getattr(args, "tools", None):
        from tagjit import tools

        fmt = tools.load_format(args.format)
        tool_list = json.loads(_read(args.tools))
        if isinstance(tool_list, dict) and "tools" in tool_list:
            tool_list = tool_list["tools"]
        choice = args.tool_choice
        tag = tools.build_tool_tag(fmt, tool_list, choice, parallel_tool_calls=not args.no_parallel,
                                   settings=get_settings())
        if tag is None:
            raise ConstraintError(f"tool_choice={choice!r} puts no constraint on the output")
        return Constraint.of(Kind.STRUCTURAL_TAG, tag)
    for kind in ("schema", "regex", "grammar", "structural_tag", "choice"):
        value = getattr(args, kind, None)
        if value:
            text = value if kind == "regex" else _read(value)
            return Constraint.of(Kind.JSON if kind == "schema" else Kind(kind), text)
    raise SystemExit("give one of --schema, --regex, --grammar, --structural-tag, --choice or --tools")


def _add_constraint_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tokenizer", required=True,
                   help="HF tokenizer directory, tokenizer.model (SentencePiece or tiktoken), or vocab.json+merges.txt dir")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--schema", help="JSON Schema file ('-' for stdin)")
    g.add_argument("--regex", help="a regular expression")
    g.add_argument("--grammar", help="EBNF (GBNF) or Lark grammar file")
    g.add_argument("--structural-tag", dest="structural_tag", help="xgrammar structural tag JSON file")
    g.add_argument("--choice", help="JSON file holding a list of strings")
    g.add_argument("--tools", help="JSON file: a list of OpenAI tools (or {'tools': [...]})")
    p.add_argument("--format", default="hermes", help="tool-call format (with --tools), e.g. hermes, qwen3_coder")
    p.add_argument("--tool-choice", default="required", help="required | auto | none | a tool name (with --tools)")
    p.add_argument("--no-parallel", action="store_true", help="at most one tool call (with --tools)")


def cmd_compile(args: argparse.Namespace) -> int:
    """Print the compiled grammar (EBNF), its size and compile time."""
    from tagjit.compile.service import CompileService
    from tagjit.runtime.vocab import load_tokenizer_info

    c = _constraint(args)
    info = load_tokenizer_info(args.tokenizer)
    service = CompileService(info, get_settings())
    start = time.perf_counter()
    try:
        compiled = service.compile(c)
    except ConstraintError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_CONSTRAINT
    ms = (time.perf_counter() - start) * 1000
    grammar, _ = build_grammar(c, service.settings)
    ebnf = str(grammar)
    result = {"kind": c.kind.value, "compile_ms": round(ms, 3), "rules": rule_count(grammar),
              "memory_bytes": compiled.nbytes, "vocab_size": info.vocab_size, "ebnf": ebnf}
    if args.json:
        print(json.dumps(result))
    else:
        print(ebnf)
        print(f"# {result['rules']} rules, {compiled.nbytes} bytes compiled, {ms:.1f} ms "
              f"(vocabulary {info.vocab_size})", file=sys.stderr)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """Print accept/reject for each stdin line (a tool-call text is a JSON string literal per line)."""
    from tagjit.compile.service import CompileService
    from tagjit.runtime.vocab import load_tokenizer_info

    c = _constraint(args)
    info = load_tokenizer_info(args.tokenizer)
    service = CompileService(info, get_settings())
    try:
        compiled = service.compile(c)
    except ConstraintError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_CONSTRAINT
    from tagjit.runtime.matcher import Matcher

    quoted = bool(args.tools) or args.json_lines
    data = sys.stdin.buffer.read()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for raw in lines:
        if quoted:
            try:
                text = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                print("reject")
                continue
            payload: bytes = text.encode("utf-8") if isinstance(text, str) else b"\xff"
        else:
            payload = raw
        g = Matcher(compiled, vocab_size=info.vocab_size)
        ok = g.accept_string(payload) and g.is_completed()
        print("accept" if ok else "reject")
    return 0


def cmd_lint(args: argparse.Namespace) -> int:
    """Print property-order findings for a schema; exit 1 if there are any."""
    from tagjit.schema.lint import lint_schema
    from tagjit.schema.check import parse_schema

    try:
        schema = parse_schema(_read(args.schema))
    except ConstraintError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_CONSTRAINT
    findings = lint_schema(schema) if isinstance(schema, dict) else []
    if args.json:
        print(json.dumps([f.__dict__ for f in findings]))
    else:
        for f in findings:
            print(f"{f.path}: [{f.rule}] {f.message}")
        if not findings:
            print("no findings")
    return 1 if findings else 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``tagjit`` command."""
    p = argparse.ArgumentParser(prog="tagjit", description="Compile, check and lint structured-output constraints.")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compile", help="print the compiled grammar, its size and compile time")
    _add_constraint_args(c)
    c.add_argument("--json", action="store_true", help="one JSON object: compile_ms, rules, ebnf, ...")
    c.set_defaults(func=cmd_compile)
    k = sub.add_parser("check", help="accept/reject each line of stdin")
    _add_constraint_args(k)
    k.add_argument("--json-lines", action="store_true",
                   help="each line is a JSON string literal holding the text (always so with --tools)")
    k.set_defaults(func=cmd_check)
    lint = sub.add_parser("lint", help="flag decision fields before reasoning fields, and sorted properties")
    lint.add_argument("schema", help="JSON Schema file ('-' for stdin)")
    lint.add_argument("--json", action="store_true")
    lint.set_defaults(func=cmd_lint)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ConstraintError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_CONSTRAINT


if __name__ == "__main__":
    sys.exit(main())
