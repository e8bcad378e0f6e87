"""Server-wide settings, read from the environment (``TAGJIT_*``) or a JSON file."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any, Literal

ToolScope = Literal["auto", "always"]
SchemaMode = Literal["default", "auto", "strict"]
JitMode = Literal["auto", "always", "never"]


@dataclass(frozen=True)
class Settings:
    """Every knob tagjit has; the defaults are what a production server wants."""

    max_whitespace: int | None = 8
    """Most whitespace characters in a row between JSON tokens; None lets a model write any."""
    strict_mode: bool = True
    """xgrammar strict mode: objects without ``additionalProperties`` take no extra keys."""
    any_order_default: bool = False
    """Let every object's properties come in any order unless it says ``x-any-order: false``."""
    compile_timeout_s: float = 10.0
    """A constraint whose grammar takes longer than this to compile is refused for that request."""
    compile_threads: int = 2
    """Threads in tagjit's compile pool (per tokenizer)."""
    compile_nice: int = 19
    """CPU niceness of the compile threads (Linux): a JIT compile overlaps the forward pass and must not
    slow it where both share cores; 0 runs them at the serving threads' priority."""
    compile_cpus: str | None = None
    """CPUs the compile threads may run on (Linux CPU list, e.g. ``1`` or ``2-7,10``): keep them off the cores
    that run the forward pass; None leaves them wherever the process may run."""
    xgrammar_threads: int = 0
    """Threads xgrammar's compiler uses for one grammar; 0 means one per CPU, at most 8."""
    cache_bytes: int = 512 * 1024 * 1024
    """Memory bound of the compiled-grammar cache (LRU by bytes)."""
    memo_bytes: int = 64 * 1024 * 1024
    """Memory bound of each memo of checked schemas and built tool tags (LRU by estimated bytes)."""
    disk_cache_dir: str | None = None
    """Directory of an on-disk grammar cache shared by processes and replicas; None disables it."""
    warmup_file: str | None = None
    """JSON file of schemas or tools compiled at start-up."""
    jit: JitMode = "auto"
    """Overlap compilation with prefill: auto (policy decides), always, never (wait like the engines)."""
    stall_budget_ms: float = 5.0
    """Longest a running batch may wait at a JIT request's first token mask."""
    tool_scope: ToolScope = "auto"
    """When tool calls are constrained under tool_choice=auto: auto (strict tools or no parallel calls), always."""
    tool_schema_mode: SchemaMode = "default"
    """Tool argument schemas: default (all unless strict: false), auto (only strict: true), strict (all)."""
    lint: bool = True
    """Warn (and count) when a schema puts decision fields before reasoning fields or looks sorted."""

    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def replace(self, **changes: Any) -> "Settings":
        """Return a copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> "Settings":
        """Build settings from ``TAGJIT_CONFIG`` (a JSON file) and ``TAGJIT_<FIELD>`` variables."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        path = env.get("TAGJIT_CONFIG")
        if path:
            with open(path, encoding="utf-8") as f:
                values.update(json.load(f))
        for f in dataclasses.fields(cls):
            raw = env.get(f"TAGJIT_{f.name.upper()}")
            if raw is not None and f.name != "extra":
                values[f.name] = _parse(f.type, raw)
        unknown = set(values) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"unknown tagjit settings: {sorted(unknown)}")
        return cls(**values)


def _parse(type_name: Any, raw: str) -> Any:
    text = str(type_name)
    if raw.lower() in ("none", "null", "") and "None" in text:
        return None
    if text.startswith("bool"):
        return raw.lower() in ("1", "true", "yes", "on")
    if text.startswith("int"):
        return int(raw)
    if text.startswith("float"):
        return float(raw)
    return raw


_current: Settings | None = None


def get_settings() -> Settings:
    """The process-wide settings (from the environment on first use)."""
    global _current
    if _current is None:
        _current = Settings.from_env()
    return _current


def set_settings(settings: Settings) -> None:
    """Replace the process-wide settings (tests, embedding applications)."""
    global _current
    _current = settings
