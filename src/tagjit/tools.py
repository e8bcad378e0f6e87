"""Tool calls as structural tags in each model family's native syntax, built per request.

A format (``configs/formats/<name>.json``) is data: the call's opening and closing strings (with
``{name}`` and optionally ``{index}`` placeholders), the argument style, the separator between
calls, an optional wrapper around all calls, the trigger that starts tool-call syntax in free
text, reasoning markers, and the engine tool parsers it serves. ``build_tool_tag`` turns a
request's ``tools``, ``tool_choice`` and ``parallel_tool_calls`` into an xgrammar structural tag
(``{"type": "structural_tag", "format": ...}``) in that format, or None when nothing applies.

The per-tool part (``call_tags``) is a pure function of (format, tool name, argument schema or
None), so it can be memoised by an order-preserving key; tags are built in request order.
"""

from __future__ import annotations

import importlib.resources
import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal, Mapping, Sequence

from . import schema as schema_mod
from . import xml_args
from .cache import bounded_memo
from .errors import ConstraintError
from .ebnf import TAG_WHITESPACE_BOUND
from .settings import Settings, get_settings
from .spec import compact_json

ArgumentStyle = Literal["json", "qwen_xml", "deepseek_xml", "glm_xml"]
Layout = Literal["triggered", "messages"]
ARGUMENT_STYLES = ("json", *xml_args.STYLES)
_NAME_FORBIDDEN = set('"\\<>\n\r\t`') | {chr(c) for c in range(0x20)}


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


# -- the request's tools -------------------------------------------------------------------------

@dataclass(frozen=True)
class Tool:
    """A function tool as the request gave it: name, parameter schema (None if absent), strict flag."""

    name: str
    parameters: dict | bool | None
    strict: bool | None


def normalize_tools(tools: Sequence[Mapping[str, Any]] | None) -> list[Tool]:
    """Function tools of a request, in order (Chat Completions or Responses shape); others skipped."""
    out: list[Tool] = []
    seen: set[str] = set()
    for i, raw in enumerate(tools or []):
        if not isinstance(raw, Mapping):
            raise ConstraintError(f"tools[{i}] must be an object")
        if raw.get("type", "function") != "function":
            continue
        fn = raw.get("function", raw)
        if not isinstance(fn, Mapping):
            raise ConstraintError(f"tools[{i}].function must be an object")
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise ConstraintError(f"tools[{i}] needs a non-empty function name")
        bad = sorted(set(name) & _NAME_FORBIDDEN)
        if bad:
            raise ConstraintError(f"tool name {name!r} contains {''.join(bad)!r}, which tool-call syntax cannot carry")
        if name in seen:
            raise ConstraintError(f"tool name {name!r} appears twice in tools")
        seen.add(name)
        params = fn.get("parameters")
        if params is not None and not isinstance(params, (dict, bool)):
            raise ConstraintError(f"tool {name!r}: parameters must be a JSON Schema object")
        strict = fn.get("strict")
        out.append(Tool(name, params, strict if isinstance(strict, bool) else None))
    return out


ToolChoice = Literal["auto", "required", "none", "named"]


def parse_tool_choice(tool_choice: Any) -> tuple[ToolChoice, str | None]:
    """(kind, name) for 'auto', 'required', 'none', a named function (dict or bare name) or None."""
    if tool_choice is None or tool_choice == "auto":
        return "auto", None
    if tool_choice in ("required", "none"):
        return tool_choice, None
    if isinstance(tool_choice, str) and tool_choice:
        return "named", tool_choice
    if isinstance(tool_choice, Mapping) and tool_choice.get("type", "function") == "function":
        fn = tool_choice.get("function", tool_choice)
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if isinstance(name, str) and name:
            return "named", name
    raise ConstraintError(f"unsupported tool_choice {tool_choice!r}: use auto, required, none or a function name")


def constrains_arguments(tool: Tool, mode: str) -> bool:
    """Whether a tool's arguments follow its schema under a schema mode (default, auto, strict)."""
    if tool.parameters is None:
        return False
    if mode == "strict":
        return True
    if mode == "auto":
        return tool.strict is True
    if mode == "default":
        return tool.strict is not False
    raise ConstraintError(f"unknown tool schema mode {mode!r}")


# -- tags ----------------------------------------------------------------------------------------

def arguments_content(fmt: ToolFormat, schema: dict | bool | None, max_whitespace: int | None,
                      schema_json: str | None = None) -> dict:
    """The argument part of one call: the schema (or any object, if None) in the format's style
    (``schema_json``: the schema's ``spec.compact_json``, if the caller has it)."""
    if schema is not None:  # the check the tag's validation reuses, by the same text
        schema_mod.prepared(schema_json or compact_json(schema))
    if fmt.arguments in xml_args.STYLES:  # tagjit's own grammar: exactly what the engine's parser returns
        st = xml_args.style(fmt.arguments, fmt.argument_syntax)
        return xml_args.arguments_node(st, schema, get_settings().replace(max_whitespace=max_whitespace))
    if schema is None:
        schema = {"type": "object"}
    node: dict[str, Any] = {"type": "json_schema", "json_schema": schema}
    if fmt.arguments != "json":
        node["style"] = fmt.arguments
    if TAG_WHITESPACE_BOUND and max_whitespace is not None:
        node["max_whitespace_cnt"] = max_whitespace
    return node


def call_tags(fmt: ToolFormat, name: str, schema: dict | bool | None, max_whitespace: int | None) -> list[dict]:
    """The tags of one tool (one per call syntax); pure in its arguments, memoised by their JSON text."""
    key = compact_json(schema)  # key order kept: it is generation order
    return json.loads(_call_tags_json(fmt, name, key, max_whitespace, schema))


# Keyed by the schema's text; the schema itself rides along so that a miss need not parse the text again.
@bounded_memo(lambda: get_settings().memo_bytes, lambda key, value: len(key[2]) + len(value), keyed_by=4)
def _call_tags_json(fmt: ToolFormat, name: str, schema_json: str, max_whitespace: int | None,
                    schema: dict | bool | None) -> str:
    args = arguments_content(fmt, schema, max_whitespace, schema_json)
    tags = []
    for c in fmt.call:
        begin = c.begin.replace("{name}", name)
        content: dict = args
        if "{index}" in begin:
            head, tail = begin.split("{index}", 1)
            begin = head
            content = {"type": "sequence", "elements": [
                {"type": "regex", "pattern": r"\d+"}, *([{"type": "const_string", "value": tail}] if tail else []), args]}
        tags.append({"type": "tag", "begin": begin, "content": content, "end": _end(c.end)})
    return compact_json(tags)


def _end(end: str | tuple[str, ...]) -> str | list[str]:
    return list(end) if isinstance(end, tuple) else end


def _text(excludes: Sequence[str]) -> dict:
    return {"type": "any_text", "excludes": list(dict.fromkeys(excludes))} if excludes else {"type": "any_text"}


def _calls_block(fmt: ToolFormat, tags: list[dict], at_least_one: bool, single: bool) -> dict:
    return {"type": "tags_with_separator", "tags": tags, "separator": fmt.separator,
            "at_least_one": at_least_one, "stop_after_first": single}


def _forced(fmt: ToolFormat, tags: list[dict], single: bool) -> dict:
    """Calls only, at least one, no free text: [prefix][wrapper begin] calls [wrapper end]."""
    block = _calls_block(fmt, tags, True, single)
    head = fmt.forced_prefix + (fmt.wrapper[0] if fmt.wrapper else "")
    elements = ([{"type": "const_string", "value": head}] if head else []) + [block]
    if fmt.wrapper:
        elements.append({"type": "const_string", "value": fmt.wrapper[1]})
    return elements[0] if len(elements) == 1 else {"type": "sequence", "elements": elements}


def _auto(fmt: ToolFormat, tags: list[dict], single: bool) -> dict:
    """Free text with calls wherever the trigger appears."""
    if fmt.wrapper:
        tags = [{"type": "tag", "begin": fmt.wrapper[0], "content": _calls_block(fmt, tags, True, single),
                 "end": fmt.wrapper[1]}]
    return {"type": "triggered_tags", "triggers": [fmt.trigger], "tags": tags,
            "excludes": list(fmt.text_excludes), "at_least_one": False, "stop_after_first": single}


def _message_tags(fmt: ToolFormat, reasoning: bool) -> list[dict]:
    msgs = [{"type": "tag", "begin": m.begin, "content": {"type": "any_text"}, "end": _end(m.end)}
            for m in fmt.messages]
    if reasoning and fmt.think_start is not None and fmt.think_end is not None:
        msgs.append({"type": "tag", "begin": fmt.think_start, "content": {"type": "any_text"},
                     "end": _end(fmt.think_end)})
    return msgs


def _messages_layout(fmt: ToolFormat, kind: ToolChoice, tags: list[dict], single: bool, reasoning: bool) -> dict:
    """Harmony-style output: a series of messages joined by the separator; calls are messages."""
    msgs = _message_tags(fmt, reasoning)
    sep = fmt.separator
    if kind == "none":
        return {"type": "tags_with_separator", "tags": msgs, "separator": sep}
    if kind == "auto" and not single:
        return {"type": "tags_with_separator", "tags": tags + msgs, "separator": sep}
    calls = _calls_block(fmt, tags, True, single)
    if kind == "auto":  # any messages, then at most one call, which ends the turn
        lead = {"type": "tags_with_separator", "tags": msgs, "separator": sep, "at_least_one": True}
        return {"type": "or", "elements": [
            {"type": "tags_with_separator", "tags": msgs, "separator": sep}, calls,
            {"type": "sequence", "elements": [lead, {"type": "const_string", "value": sep}, calls]}]}
    # required / named: reasoning messages may come first, text messages may not.
    thinking = [m for m in msgs if fmt.think_start is not None and m["begin"] == fmt.think_start]
    if not thinking:
        return calls
    lead = {"type": "tags_with_separator", "tags": thinking, "separator": sep, "at_least_one": True}
    return {"type": "or", "elements": [
        calls, {"type": "sequence", "elements": [lead, {"type": "const_string", "value": sep}, calls]}]}


def _with_reasoning(fmt: ToolFormat, body: dict, reasoning: bool, reasoning_started: bool) -> dict:
    """Free text up to the think end marker, then body; the prompt may have opened the block."""
    if not reasoning or fmt.layout == "messages" or fmt.think_end is None:
        return body
    begin = "" if reasoning_started or fmt.think_start is None else fmt.think_start
    marks = [m for m in (fmt.think_start, *(_as_tuple(fmt.think_end))) if m]
    think = {"type": "tag", "begin": begin, "content": _text(marks), "end": _end(fmt.think_end)}
    elements = [think]
    if fmt.think_suffix:
        elements.append({"type": "const_string", "value": fmt.think_suffix})
    return {"type": "sequence", "elements": elements + [body]}


def _as_tuple(x: str | tuple[str, ...]) -> tuple[str, ...]:
    return x if isinstance(x, tuple) else (x,)


def applies(kind: ToolChoice, tools: Sequence[Tool], parallel_tool_calls: bool, scope: str) -> bool:
    """The activation policy: required/named/none always; auto if scope is always, a tool is strict, or calls are single."""
    if kind != "auto":
        return True
    if scope == "always":
        return True
    if scope != "auto":
        raise ConstraintError(f"unknown tool scope {scope!r}")
    return (not parallel_tool_calls) or any(t.strict is True for t in tools)


def build_tool_tag(fmt: ToolFormat | str, tools: Sequence[Mapping[str, Any]] | None, tool_choice: Any = "auto",
                   parallel_tool_calls: bool = True, settings: Settings | None = None, *,
                   reasoning: bool = False, reasoning_started: bool = False) -> dict | None:
    """The structural tag for a request's tool calls in ``fmt``, or None when no constraint applies.

    ``reasoning``: the output begins with a reasoning block (free text up to the format's think end);
    ``reasoning_started``: the prompt already opened that block, so only its end is expected. An
    engine that gates reasoning itself (vLLM with a reasoning parser) passes neither.
    """
    text = build_tool_tag_json(fmt, tools, tool_choice, parallel_tool_calls, settings, reasoning=reasoning,
                               reasoning_started=reasoning_started)
    return None if text is None else json.loads(text)


# Stands for all call tags in a tag's skeleton; the serialised skeleton gets their memoised texts in its place.
_CALLS = "\x00tagjit:calls\x00"
_CALLS_JSON = compact_json(_CALLS)


def build_tool_tag_json(fmt: ToolFormat | str, tools: Sequence[Mapping[str, Any]] | None, tool_choice: Any = "auto",
                        parallel_tool_calls: bool = True, settings: Settings | None = None, *,
                        reasoning: bool = False, reasoning_started: bool = False) -> str | None:
    """``build_tool_tag`` as canonical JSON text (``spec.compact_json``), assembled from per-tool texts memoised
    across requests: no per-request parse or dump of the tools' schemas."""
    if isinstance(fmt, str):
        fmt = load_format(fmt)
    settings = settings or get_settings()
    kind, wanted = parse_tool_choice(tool_choice)
    function_tools = normalize_tools(tools)
    reasoning = reasoning or reasoning_started
    if kind in ("required", "named") and not function_tools:
        raise ConstraintError(f"tool_choice={'required' if kind == 'required' else repr(wanted)} needs at least one function tool")
    if kind == "named":
        chosen = [t for t in function_tools if t.name == wanted]
        if not chosen:
            names = ", ".join(t.name for t in function_tools[:20])
            raise ConstraintError(f"tool_choice names function {wanted!r}, which is not in tools ({names})")
        function_tools = chosen
    if not function_tools or not applies(kind, function_tools, parallel_tool_calls, settings.tool_scope):
        return None

    parts: list[str] = []  # per tool, its call tags' JSON text, memoised across requests
    if kind == "none":
        if fmt.layout == "messages":
            body = _messages_layout(fmt, kind, [], True, reasoning)
        else:
            body = _text(list(fmt.text_excludes) + list(fmt.openings))
    else:
        for t in function_tools:
            schema = t.parameters if constrains_arguments(t, settings.tool_schema_mode) else None
            try:
                text = _call_tags_json(fmt, t.name, compact_json(schema), settings.max_whitespace, schema)
            except ConstraintError as e:  # keep the subclass (UnsupportedFeatureError), name the tool
                e.args = (f"tool {t.name!r}: {e}",)
                raise
            parts.append(text[1:-1])  # the list's items
        tags = [_CALLS]
        single = kind == "named" or not parallel_tool_calls
        if fmt.layout == "messages":
            body = _messages_layout(fmt, kind, tags, single, reasoning)
        elif kind == "auto":
            body = _auto(fmt, tags, single)
        else:
            body = _forced(fmt, tags, single)
    body = _with_reasoning(fmt, body, reasoning, reasoning_started)
    skeleton = compact_json({"type": "structural_tag", "format": body})
    return skeleton.replace(_CALLS_JSON, ",".join(parts)) if parts else skeleton


__all__ = [
    "ToolFormat", "CallSyntax", "Tool", "load_format", "format_names", "parse_format", "format_for_parser",
    "variant_for_vocab", "normalize_tools", "parse_tool_choice", "constrains_arguments", "call_tags", "arguments_content",
    "applies", "build_tool_tag", "build_tool_tag_json",
]
