"""Start-up work: what ``CompileService.prepare`` compiles once per process, and warm-up files of constraints.

A warm-up file is JSON, either a list of JSON schemas or an object with any of::

    {"schemas": [SCHEMA, ...],
     "regexes": ["...", ...],
     "tools": [{"format": "hermes", "tools": [TOOL, ...], "tool_choice": "required",
                "parallel_tool_calls": true}, ...]}
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Callable, Sequence

from tagjit.errors import ConstraintError
from tagjit.settings import Settings, get_settings
from tagjit.constraint import Constraint, Kind

log = logging.getLogger("tagjit")

# What the first request of each kind would otherwise pay for: every JSON type and keyword family xgrammar builds
# rules for, and a tool call through the composite path (its per-tool units and the format's tag skeleton).
PREPARE_SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "minLength": 1}, "count": {"type": "integer", "minimum": 0},
    "score": {"type": "number"}, "ok": {"type": "boolean"}, "tags": {"type": "array", "items": {"type": "string"}},
    "kind": {"enum": ["a", "b"]}, "extra": {"anyOf": [{"type": "null"}, {"type": "object"}]}},
    "required": ["name", "count"]}
PREPARE_TOOL = {"type": "function", "function": {"name": "tagjit_prepare", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
    "required": ["query"]}}}
PREPARE_FORMAT = "hermes"


def warm_up(compile_one: Callable[[Constraint], object], constraints: Sequence[Constraint]) -> int:
    """Compile constraints ahead of traffic; returns how many compiled (bad ones are logged and skipped)."""
    ok = 0
    for c in constraints:
        try:
            compile_one(c)
            ok += 1
        except ConstraintError as e:
            log.warning("tagjit: warm-up constraint skipped: %s", e)
    return ok


def prepare_validation(settings: Settings | None = None, fmt: Any = PREPARE_FORMAT) -> dict[str, float]:
    """Do the once-per-process work of a request's check now (ms per step): for an engine whose API server checks
    requests in a process without a compile service, so its first schema and tool request cost what later ones do;
    ``fmt`` is the served tool-call format (a ``ToolFormat`` or its name)."""
    from tagjit import metrics, tools
    from tagjit.compile.validation import validate

    settings = settings or get_settings()
    steps: dict[str, float] = {}
    for name, work in (
            ("check_json", lambda: validate(Constraint.of(Kind.JSON, PREPARE_SCHEMA), settings)),
            ("check_tool_tag", lambda: tools.build_tool_tag_json(fmt, [PREPARE_TOOL], "required", True,
                                                                  settings))):
        start = time.perf_counter()
        work()
        steps[name] = (time.perf_counter() - start) * 1000
        metrics.WARMUP_MS.labels(name).observe(steps[name])
    return steps


def load_warmup(path: str, settings: Settings | None = None) -> list[Constraint]:
    """The constraints named by a warm-up file (raises ConstraintError on a malformed file)."""
    with open(path, encoding="utf-8") as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as e:
            raise ConstraintError(f"warm-up file {path} is not valid JSON: {e}") from None
    return warmup_constraints(data, settings or get_settings())


def warmup_constraints(data: Any, settings: Settings) -> list[Constraint]:
    """Constraints from a parsed warm-up document."""
    if isinstance(data, list):
        data = {"schemas": data}
    if not isinstance(data, dict):
        raise ConstraintError("a warm-up file holds a list of schemas or an object")
    out = [Constraint.of(Kind.JSON, s) for s in data.get("schemas", [])]
    out += [Constraint.of(Kind.REGEX, r) for r in data.get("regexes", [])]
    for entry in data.get("tools", []):
        from tagjit import tools

        tag = tools.build_tool_tag(tools.load_format(entry.get("format", "hermes")), entry["tools"],
                                   entry.get("tool_choice", "required"),
                                   entry.get("parallel_tool_calls", True), settings)
        if tag is not None:
            out.append(Constraint.of(Kind.STRUCTURAL_TAG, tag))
    return out
