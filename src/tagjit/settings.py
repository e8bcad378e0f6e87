"""Server-wide settings, read from the environment (``TAGJIT_*``) or a JSON file."""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
from dataclasses import dataclass
from typing import Any, Literal, Mapping

ToolScope = Literal["auto", "always"]
SchemaMode = Literal["default", "auto", "strict"]
JitMode = Literal["auto", "always", "never"]
ToolRelax = Literal["relax", "refuse"]
JsonStyle = Literal["auto", "free", "dumps"]


@dataclass(frozen=True)
class Settings:
    """Every knob tagjit has; the defaults are what a production server wants."""

    max_whitespace: int | None = 1
    """Most whitespace characters in a row between JSON tokens under the free JSON style; None lets a model write any.

    0 is compact JSON and wins over every style. 1 (compact JSON, ``json.dumps`` spacing, one newline between items)
    is the largest bound whose masks xgrammar precomputes: 2 and more make the states around every separator
    context-dependent (benchmarks/mask_fill.py)."""
    json_style: JsonStyle = "auto"
    """dumps: exactly the spacing Python's ``json.dumps`` and chat templates' ``tojson`` write (``", "`` and
    ``": "``, no other whitespace), which xgrammar precomputes best: its masks cost ~0.4-0.7x bound 1's along real
    JSON walks (benchmarks/mask_fill.py); free: JSON whitespace as ``max_whitespace`` allows; auto: dumps at the
    default ``max_whitespace`` (1), free at any bound set through ``TAGJIT_MAX_WHITESPACE`` or an engine's option
    and at any other value. ``max_whitespace`` 0 (compact JSON) wins over every style."""
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
    unenforceable_tools: ToolRelax = "relax"
    """A tool whose schema tagjit cannot enforce exactly: relax (its arguments follow the nearest looser schema
    tagjit can enforce, reported in the log, on /metrics and in an ``x-tagjit-relaxed`` response header) or refuse
    (HTTP 400 naming the tool and the feature)."""
    relax: str = ""
    """Relaxations a ``response_format`` (or any non-tool) schema may take where tagjit cannot enforce it exactly:
    a comma list of names (``oneOf``: overlapping oneOf as anyOf, ``uniqueItems``, ``not``, ...; ``all``), reported
    like a tool's. Empty refuses such a schema by name; a request opts in with ``"x-tagjit-relax": [names]``."""
    composite_swap: bool = True
    """A tool-call tag compiled per tool also compiles whole on a background thread; each request switches to
    the whole grammar's matcher once it is ready, so the rest of its output gets xgrammar's mask speed."""
    composite_swap_after_tokens: int = 32
    """With ``composite_swap``: a new combination compiles whole once a request of it has taken this many tokens,
    or when a second request brings it again (agents resend their tools every turn); a short call of a combination
    seen once never pays the whole compile. 0: every new combination compiles whole at once."""
    lint: bool = True
    """Warn (and count) when a schema puts decision fields before reasoning fields or looks sorted."""
    vllm_tools: bool = True
    """vLLM: tagjit builds the tool-call tag of requests with tools; off leaves vLLM's own."""
    vllm_apply: bool = True
    """vLLM: tagjit's kernel applies the token bitmasks; off leaves vLLM's own."""
    sglang_tools: bool = True
    """SGLang: tagjit builds the tool-call tag of requests with tools; off leaves SGLang's own."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _check(f.name, f.type, getattr(self, f.name))

    def for_engine(self, *, compact_json: bool = False, max_whitespace: int | None = None) -> "Settings":
        """These settings under an engine's JSON whitespace options (compact JSON wins over a bound)."""
        if compact_json:
            return self.replace(max_whitespace=0)
        if max_whitespace is not None:
            return self.with_bound(int(max_whitespace))
        return self

    def with_bound(self, max_whitespace: int | None) -> "Settings":
        """These settings with a whitespace bound someone set: under ``auto`` it is the free style's, 1 included."""
        return self.replace(max_whitespace=max_whitespace,
                            json_style="free" if self.json_style == "auto" else self.json_style)

    @property
    def style(self) -> Literal["compact", "free", "dumps"]:
        """The JSON spacing these settings give: compact (bound 0), dumps, or free up to ``max_whitespace``."""
        if self.max_whitespace == 0:
            return "compact"
        if self.json_style == "auto":
            return "dumps" if self.max_whitespace == 1 else "free"
        return self.json_style

    @property
    def bounded_whitespace(self) -> bool:
        """Whitespace slots up to ``max_whitespace`` characters (the free style with a positive bound)."""
        return self.style == "free" and self.max_whitespace is not None

    @property
    def dumps_spacing(self) -> bool:
        """JSON is spaced exactly as ``json.dumps`` writes it (``json_style`` dumps, unless compact JSON wins)."""
        return self.style == "dumps"

    def replace(self, **changes: Any) -> "Settings":
        """Return a copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "Settings":
        """Build settings from ``TAGJIT_CONFIG`` (a JSON file) and ``TAGJIT_<FIELD>`` variables; a bad value is a
        ``ValueError`` naming the variable and what it accepts."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        path = env.get("TAGJIT_CONFIG")
        if path:
            with open(path, encoding="utf-8") as f:
                values.update(json.load(f))
            unknown = set(values) - {f.name for f in dataclasses.fields(cls)}
            if unknown:
                raise ValueError(f"TAGJIT_CONFIG={path}: unknown tagjit settings {sorted(unknown)}; "
                                 f"known: {', '.join(f.name for f in dataclasses.fields(cls))}")
        known = {env_name(f.name) for f in dataclasses.fields(cls)} | set(NOT_SETTINGS)
        for name in sorted(k for k in env if k.startswith("TAGJIT_") and k not in known):
            close = difflib.get_close_matches(name, sorted(known), n=1)
            raise ValueError(f"{name}: not a tagjit setting" + (f"; did you mean {close[0]}?" if close else "")
                             + f" (settings: {', '.join(env_name(f.name) for f in dataclasses.fields(cls))})")
        for f in dataclasses.fields(cls):
            name = env_name(f.name)
            raw = env.get(name)
            if raw is not None:
                values[f.name] = _parse(name, f.type, raw)
        for f in dataclasses.fields(cls):
            if f.name in values:
                _check(env_name(f.name), f.type, values[f.name])
        settings = cls(**values)
        return settings.with_bound(settings.max_whitespace) if "max_whitespace" in values else settings


# TAGJIT_* variables that are not settings: the settings file, and what tagjit's vLLM plugin hands the processes
# vLLM starts (the backend selection and its whitespace choice, the metrics snapshot folder); tests' data folders.
NOT_SETTINGS = ("TAGJIT_CONFIG", "TAGJIT_VLLM_SELECTED", "TAGJIT_VLLM_COMPACT", "TAGJIT_METRICS_DIR",
                "TAGJIT_SHARED_DATA", "TAGJIT_TINY_MODEL")


def env_name(field_name: str) -> str:
    """The environment variable of a setting: ``max_whitespace`` -> ``TAGJIT_MAX_WHITESPACE``."""
    return f"TAGJIT_{field_name.upper()}"


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
_NON_NEGATIVE = {"max_whitespace", "composite_swap_after_tokens", "compile_timeout_s", "compile_threads", "compile_nice", "xgrammar_threads",
                 "cache_bytes", "memo_bytes", "stall_budget_ms"}


def _parse(name: str, type_name: Any, raw: str) -> Any:
    """The typed value of an environment variable's text (a ``ValueError`` names the variable)."""
    text = str(type_name)
    value = raw.strip()
    if value.lower() in ("none", "null", "") and "None" in text:
        return None
    try:
        if text.startswith("bool"):
            if value.lower() in _TRUE:
                return True
            if value.lower() in _FALSE:
                return False
            raise ValueError
        if text.startswith("int"):
            return int(value)
        if text.startswith("float"):
            return float(value)
    except ValueError:
        raise ValueError(f"{name}={raw!r}: expected {_expected(type_name)}") from None
    return value


def _check(name: str, type_name: Any, value: Any) -> None:
    """Raise ``ValueError`` naming the setting if value is not of its type and range."""
    text = str(type_name)
    label = name if name.startswith("TAGJIT_") else env_name(name)
    field = label[len("TAGJIT_"):].lower()
    if value is None:
        if "None" not in text:
            raise ValueError(f"{label}=None: expected {_expected(type_name)}")
        return
    allowed = _CHOICES.get(text)
    ok = (value in allowed if allowed is not None
          else isinstance(value, bool) if text.startswith("bool")
          else isinstance(value, int) and not isinstance(value, bool) if text.startswith("int")
          else isinstance(value, (int, float)) and not isinstance(value, bool) if text.startswith("float")
          else isinstance(value, str))
    if ok and field in _NON_NEGATIVE and value < 0:
        ok = False
    if ok and field == "compile_cpus" and not _CPU_LIST.fullmatch(value):
        raise ValueError(f"{label}={value!r}: expected a Linux CPU list such as 2-7,10")
    if ok and field == "relax":
        unknown = [n for n in relax_names(value) if n not in RELAXATIONS and n != "all"]
        if unknown:
            raise ValueError(f"{label}={value!r}: unknown relaxation {unknown[0]!r}; known: all, "
                             + ", ".join(RELAXATIONS))
    if not ok:
        raise ValueError(f"{label}={value!r}: expected {_expected(type_name)}"
                         + (", at least 0" if field in _NON_NEGATIVE else ""))


# The relaxations a server may allow (``schema.relax`` defines each step; a test keeps the two lists equal).
RELAXATIONS = ("oneOf", "not", "multipleOf", "uniqueItems", "if", "dependencies", "contains", "unevaluatedItems",
               "length", "format", "allOf", "patternProperties", "propertyNames", "$ref", "type-only")


def relax_names(text: str) -> list[str]:
    """The relaxation names of a comma list."""
    return [n.strip() for n in text.split(",") if n.strip()]


_CPU_LIST = re.compile(r"\s*\d+(-\d+)?(\s*,\s*\d+(-\d+)?)*\s*")


_CHOICES: dict[str, tuple[str, ...]] = {"ToolScope": ("auto", "always"), "SchemaMode": ("default", "auto", "strict"),
                                        "JitMode": ("auto", "always", "never"),
                                        "ToolRelax": ("relax", "refuse"), "JsonStyle": ("auto", "free", "dumps")}


def _expected(type_name: Any) -> str:
    text = str(type_name)
    if text in _CHOICES:
        return "one of " + ", ".join(_CHOICES[text])
    kind = ("a boolean (" + "/".join(_TRUE) + " or " + "/".join(_FALSE) + ")" if text.startswith("bool")
            else "an integer" if text.startswith("int") else "a number" if text.startswith("float") else "a string")
    return kind + (" or none" if "None" in text else "")


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
