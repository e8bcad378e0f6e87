"""Tool calls as structural tags in each model family's native syntax, built per request.

A format (``configs/formats/<name>.json``) is data: the call's opening and closing strings (with
``{name}`` and optionally ``{index}`` placeholders), the argument style, the separator between
calls, an optional wrapper around all calls, the trigger that starts tool-call syntax in free
text, reasoning markers, and the engine tool parsers it serves. ``build_tool_tag`` turns a
request's ``tools``, ``tool_choice`` and ``parallel_tool_calls`` into an xgrammar structural tag
(``{"type": "structural_tag", "format": ...}``) in that format, or None when nothing applies.

The per-tool part (``call_tags``) is a pure function of (format, tool name, argument schema or
None, settings), so it can be memoised by an order-preserving key; tags are built in request order.
"""

from __future__ import annotations

import importlib.resources
import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal, Mapping

from tagjit.tools import xml_args
from tagjit.errors import ConstraintError


ArgumentStyle = Literal["json", "qwen_xml", "deepseek_xml", "glm_xml"]
Layout = Literal["triggered", "messages"]
ARGUMENT_STYLES = ("json", *xml_args.STYLES)
NAME_FORBIDDEN = set('"\\<>\n\r\t`') | {chr(c) for c in range(0x20)}


@dataclass(frozen=True)
class CallSyntax:
    """One way to write a call: ``begin`` (with ``{name}``, maybe ``{index}``) arguments ``end``."""

    begin: str
    end: str | tuple[str, ...]


@dataclass(frozen=True)
class ToolFormat:
    """A model family's tool-call syntax, loaded from ``configs/formats/<name>.json``."""

    name: str
    call: tuple[CallSyntax, ...]
    arguments: str
    trigger: str
    argument_syntax: Mapping[str, str] | None = field(default=None, compare=False, hash=False)
    separator: str = ""
    wrapper: tuple[str, str] | None = None
    forced_prefix: str = ""
    layout: str = "triggered"
    messages: tuple[CallSyntax, ...] = ()
    think_start: str | None = None
    think_end: str | tuple[str, ...] | None = None
    think_suffix: str = ""
    text_excludes: tuple[str, ...] = ()
    special_tokens: tuple[str, ...] = ()
    vllm_tool_parsers: tuple[str, ...] = ()
    sglang_tool_parsers: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    description: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def bare_json_calls(self) -> bool:
        """Whether calls are bare JSON values (llama3_json), which a parser cannot tell from a JSON answer."""
        return self.trigger[:1] in ("{", "[")

    @property
    def openings(self) -> tuple[str, ...]:
        """Strings that start tool-call syntax; excluded from text when tool_choice is none."""
        found = [self.trigger]
        if self.wrapper is not None:
            found.append(self.wrapper[0].rstrip("\n") or self.wrapper[0])
        for c in self.call:
            head = _name_prefix(c.begin)
            if head.strip():
                found.append(head)
        return tuple(dict.fromkeys(s for s in found if s))

    def render_begin(self, name: str, variant: int = 0, index: int = 0) -> str:
        """The literal opening of a call to ``name`` (tests and CLI)."""
        return self.call[variant].begin.replace("{name}", name).replace("{index}", str(index))


def _name_prefix(begin: str) -> str:
    return begin.split("{name}", 1)[0]


# -- the registry --------------------------------------------------------------------------------

def format_names() -> list[str]:
    """Names of every shipped format (``configs/formats/*.json``)."""
    root = importlib.resources.files("tagjit.configs") / "formats"
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".json"))


def load_format(name: str) -> ToolFormat:
    """Load a shipped format by name or alias; ConstraintError names the known ones if absent."""
    return _load(name)


@lru_cache(maxsize=None)
def _load(name: str) -> ToolFormat:
    root = importlib.resources.files("tagjit.configs") / "formats"
    path = root / f"{name}.json"
    if not path.is_file():
        for other in format_names():
            fmt = _load(other)
            if name in fmt.aliases:
                return fmt
        raise ConstraintError(f"unknown tool-call format {name!r}; known: {', '.join(format_names())}")
    return parse_format(json.loads(path.read_text(encoding="utf-8")))


def parse_format(data: Mapping[str, Any]) -> ToolFormat:
    """Validate and convert one format entry (a dict as in ``configs/formats/*.json``)."""
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise ConstraintError("tool-call format needs a 'name'")

    def syntax(item: Any, where: str) -> CallSyntax:
        if not isinstance(item, Mapping) or not isinstance(item.get("begin"), str) or "end" not in item:
            raise ConstraintError(f"format {name}: {where} needs 'begin' and 'end' strings")
        end = item["end"]
        return CallSyntax(item["begin"], tuple(end) if isinstance(end, list) else end)

    calls = data.get("call")
    if isinstance(calls, Mapping):
        calls = [calls]
    if not isinstance(calls, list) or not calls:
        raise ConstraintError(f"format {name}: 'call' must be a non-empty list of {{begin, end}}")
    call = tuple(syntax(c, "call") for c in calls)
    for c in call:
        if "{name}" not in c.begin:
            raise ConstraintError(f"format {name}: call begin {c.begin!r} lacks the {{name}} placeholder")
    style = data.get("arguments", "json")
    if style not in ARGUMENT_STYLES:
        raise ConstraintError(f"format {name}: argument style {style!r} is not one of {ARGUMENT_STYLES}")
    syntax_override = data.get("argument_syntax")
    if syntax_override is not None:
        if style == "json" or not isinstance(syntax_override, Mapping) or not all(
                isinstance(syntax_override.get(k, ""), str) for k in ("begin", "end")):
            raise ConstraintError(f"format {name}: argument_syntax needs an XML style and 'begin'/'end' strings")
        if "{key}" not in syntax_override.get("begin", "{key}"):
            raise ConstraintError(f"format {name}: argument_syntax begin lacks the {{key}} placeholder")
    trigger = data.get("trigger")
    if not isinstance(trigger, str) or not trigger:
        raise ConstraintError(f"format {name}: needs a non-empty 'trigger'")
    layout = data.get("layout", "triggered")
    if layout not in ("triggered", "messages"):
        raise ConstraintError(f"format {name}: layout must be 'triggered' or 'messages'")
    wrapper = data.get("wrapper")
    if wrapper is not None:
        wrapper = (wrapper["begin"], wrapper["end"])
        if layout == "triggered" and not wrapper[0].startswith(trigger):
            raise ConstraintError(f"format {name}: the trigger must start the wrapper's begin")
    elif layout == "triggered":
        for c in call:
            if not c.begin.startswith(trigger):
                raise ConstraintError(f"format {name}: the trigger {trigger!r} must start every call begin")
    reasoning = data.get("reasoning") or {}
    think_end = reasoning.get("end")
    known = {f for f in ToolFormat.__dataclass_fields__} | {"reasoning", "wrapper"}
    return ToolFormat(
        name=name,
        call=call,
        arguments=style,
        trigger=trigger,
        argument_syntax=dict(syntax_override) if syntax_override else None,
        separator=data.get("separator", ""),
        wrapper=wrapper,
        forced_prefix=data.get("forced_prefix", ""),
        layout=layout,
        messages=tuple(syntax(m, "messages") for m in data.get("messages", [])),
        think_start=reasoning.get("start"),
        think_end=tuple(think_end) if isinstance(think_end, list) else think_end,
        think_suffix=reasoning.get("suffix", ""),
        text_excludes=tuple(data.get("text_excludes", [])),
        special_tokens=tuple(data.get("special_tokens", [])),
        vllm_tool_parsers=tuple(data.get("vllm_tool_parsers", [])),
        sglang_tool_parsers=tuple(data.get("sglang_tool_parsers", [])),
        aliases=tuple(data.get("aliases", [])),
        description=data.get("description", ""),
        extra={k: v for k, v in data.items() if k not in known},
    )


def format_for_parser(parser_name: str, engine: Literal["vllm", "sglang"] = "vllm",
                      vocab: Mapping[str, int] | None = None) -> ToolFormat | None:
    """The format whose entry lists this engine tool-parser name, or None; with the model's ``vocab``, a
    format that ``replaces`` it ``when_vocab_has`` a token (Mistral v11+ and its [ARGS]) wins."""
    for name in format_names():
        fmt = _load(name)
        parsers = fmt.vllm_tool_parsers if engine == "vllm" else fmt.sglang_tool_parsers
        if parser_name in parsers:
            return variant_for_vocab(fmt, vocab) if vocab is not None else fmt
    return None


def variant_for_vocab(fmt: ToolFormat, vocab: Mapping[str, int]) -> ToolFormat:
    """The format that replaces ``fmt`` for a vocabulary holding its ``when_vocab_has`` token, else ``fmt``."""
    for name in format_names():
        other = _load(name)
        if other.extra.get("replaces") == fmt.name and other.extra.get("when_vocab_has") in vocab:
            return other
    return fmt
