"""A request's tools, tool_choice and parallel_tool_calls as one structural tag in a format."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Sequence

from tagjit import schema as schema_mod
from tagjit.tools import xml_args
from tagjit.compile.cache import bounded_memo
from tagjit.errors import ConstraintError, EmptySchemaError, UnsupportedFeatureError
from tagjit import report
from tagjit.schema.plain import plain
from tagjit.schema.relax import Relaxation, relax
from tagjit.build.ebnf import TAG_WHITESPACE_BOUND
from tagjit.build.grammars import enforced_schema
from tagjit.settings import Settings, get_settings
from tagjit.constraint import compact_json
from tagjit.tools.formats import NAME_FORBIDDEN, ToolFormat, load_format

log = logging.getLogger("tagjit")
# Tools whose arguments accept no value, with the reason: (format, name, schema text, settings) -> why. Seen once,
# logged once; bounded so that a stream of distinct bad tools cannot grow it.
_UNCALLABLE: dict[tuple[str, str, str, Settings], str] = {}
_UNCALLABLE_MAX = 4096
# Tools served by a relaxation: the same key -> (their call tags' JSON text, the steps). Bounded the same way.
_RELAXED: dict[tuple[str, str, str, Settings], tuple[str, tuple[Relaxation, ...]]] = {}
# Final-answer schemas: (schema text, settings) -> (the answer content's JSON text, the relaxations it took).
_ANSWERS: dict[tuple[str, Settings], tuple[str, tuple[Relaxation, ...]]] = {}


# -- the request's tools -------------------------------------------------------------------------

@dataclass(frozen=True)
class Tool:
    """A function tool as the request gave it: name, parameter schema (None if absent), strict flag."""

    name: str
    parameters: dict | bool | None
    strict: bool | None


def normalize_tools(tools: Sequence[Mapping[str, Any]] | None) -> list[Tool]:
    """Function tools of a request, in order (Chat Completions or Responses shape); others skipped. Tools that share a
    name are one tool whose call may take either's arguments (``merge_duplicate``)."""
    out: list[Tool] = []
    seen: dict[str, int] = {}
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
        bad = sorted(set(name) & NAME_FORBIDDEN)
        if bad:
            raise ConstraintError(f"tool name {name!r} contains {''.join(bad)!r}, which tool-call syntax cannot carry")
        params = fn.get("parameters")
        if params is not None and not isinstance(params, (dict, bool)):
            raise ConstraintError(f"tool {name!r}: parameters must be a JSON Schema object")
        strict = fn.get("strict")
        tool = Tool(name, object_parameters(params), strict if isinstance(strict, bool) else None)
        if name in seen:
            out[seen[name]] = merge_duplicate(out[seen[name]], tool)
            continue
        seen[name] = len(out)
        out.append(tool)
    return out


# Keywords beside which a root "type" would change how tagjit reads the schema (or that say its type themselves).
_TYPED_ELSEWHERE = ("type", "$ref", "anyOf", "oneOf", "allOf", "not", "enum", "const")


def object_parameters(params: dict | bool | None) -> dict | bool | None:
    """A parameter schema that says ``type: object`` where it says no type: a call's arguments are a JSON object
    (what the engines' tool parsers read), so ``{}`` or ``{"required": []}`` does not let them be a string."""
    if params is True:
        return {"type": "object"}
    if isinstance(params, dict) and not any(k in params for k in _TYPED_ELSEWHERE):
        return {"type": "object", **params}
    return params


def merge_duplicate(first: Tool, again: Tool) -> Tool:
    """One tool for two definitions of the same name: the engine's parser reads a call by its name alone, so a call
    may take either definition's arguments (``anyOf`` of the two schemas, exact). Where a schema holds a ``$ref``,
    which would not resolve under the ``anyOf``, the first definition is kept and the other left out, with a report."""
    if first.parameters == again.parameters:
        log.info("tagjit: tool %r is defined twice, the same way; it is one tool", first.name)
        return Tool(first.name, first.parameters, _both_strict(first.strict, again.strict))
    if first.parameters is None or again.parameters is None:  # one takes any arguments: so does the name
        union = None
    elif "$ref" in compact_json(first.parameters) or "$ref" in compact_json(again.parameters):
        why = f"tool {first.name!r} is defined twice with different schemas that hold $ref; the first is kept"
        log.warning("tagjit: %s", why)
        report.record(f"tool {first.name!r}", "tool", [Relaxation("duplicate", "#", why)])
        return first
    else:
        union = {"anyOf": [first.parameters, again.parameters]}
    log.info("tagjit: tool %r is defined twice; its calls take the arguments of either definition", first.name)
    return Tool(first.name, union, _both_strict(first.strict, again.strict))


def _both_strict(a: bool | None, b: bool | None) -> bool | None:
    """The strict flag of a merged tool: strict only if both are, not strict if either is not."""
    if a is False or b is False:
        return False
    return True if a is True and b is True else None


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

def arguments_content(fmt: ToolFormat, schema: dict | bool | None, settings: Settings,
                      schema_json: str | None = None) -> dict:
    """The argument part of one call: the schema (or any object, if None) in the format's style
    (``schema_json``: the schema's ``spec.compact_json``, if the caller has it)."""
    if fmt.arguments in xml_args.STYLES:  # tagjit's own grammar: exactly what the engine's parser returns
        st = xml_args.style(fmt.arguments, fmt.argument_syntax)
        # The normalised schema: what it forbids (a property that accepts no value) XML arguments forbid too.
        prepared = None if schema is None else schema_mod.prepared(schema_json or compact_json(schema),
                                                                   settings.strict_mode)
        return xml_args.arguments_node(st, prepared if prepared is not None else schema, settings)
    # The check (400, relaxation or a tool left out) the engine repeats before it compiles; a plain schema passes it.
    if schema is not None and not plain(schema):
        schema_mod.prepared(schema_json or compact_json(schema), settings.strict_mode)
    if schema is None:
        schema = {"type": "object"}
    node: dict[str, Any] = {"type": "json_schema", "json_schema": schema}
    if fmt.arguments != "json":
        node["style"] = fmt.arguments
    if TAG_WHITESPACE_BOUND and settings.max_whitespace is not None and not settings.dumps_spacing:
        node["max_whitespace_cnt"] = settings.max_whitespace
    return node


def call_tags(fmt: ToolFormat, name: str, schema: dict | bool | None, settings: Settings) -> list[dict]:
    """The tags of one tool (one per call syntax); pure in its arguments, memoised by their JSON text."""
    key = compact_json(schema)  # key order kept: it is generation order
    return json.loads(_call_tags_json(fmt, name, key, settings, schema))


# Keyed by the schema's text; the schema itself rides along so that a miss need not parse the text again.
@bounded_memo(lambda: get_settings().memo_bytes, lambda key, value: len(key[2]) + len(value), keyed_by=4)
def _call_tags_json(fmt: ToolFormat, name: str, schema_json: str, settings: Settings,
                    schema: dict | bool | None) -> str:
    args = arguments_content(fmt, schema, settings, schema_json)
    spliced = args.get("type") == "json_schema" and schema is not None
    if spliced:  # the schema's text is at hand: written into the tags' text, not serialised again
        args = {**args, "json_schema": _SCHEMA}
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
    text = compact_json(tags)
    return text.replace(_SCHEMA_JSON, schema_json) if spliced else text


# Stands for a tool's schema in its tags' text (no name or format string can hold a NUL).
_SCHEMA = "\x00tagjit:schema\x00"
_SCHEMA_JSON = compact_json(_SCHEMA)


def _tool_tags_json(fmt: ToolFormat, name: str, schema_json: str, settings: Settings,
                    schema: dict | bool | None) -> str:
    """One tool's call tags; a schema tagjit cannot enforce exactly takes the nearest relaxation (reported) unless
    the settings refuse it."""
    key = (fmt.name, name, schema_json, settings)
    hit = _RELAXED.get(key)
    if hit is None:
        try:
            return _call_tags_json(fmt, name, schema_json, settings, schema)
        except UnsupportedFeatureError:
            if settings.unenforceable_tools == "refuse" or schema is None:
                raise

        def attempt(s: Any) -> str:
            loose = None if s == {} else s  # a schema loosened to nothing: any arguments object
            return _call_tags_json(fmt, name, compact_json(loose), settings, loose)

        text, _, steps = relax(schema, attempt)
        hit = (text, steps)
        if len(_RELAXED) < _UNCALLABLE_MAX:
            _RELAXED[key] = hit
        log.warning("tagjit: tool %r: %s; its arguments follow the nearest looser schema tagjit can enforce "
                    "(TAGJIT_UNENFORCEABLE_TOOLS=refuse refuses such a tool)", name, "; ".join(map(str, steps)))
    report.record(f"tool {name!r}", "tool", hit[1])
    return hit[0]


def answer_content(schema: dict | bool, settings: Settings) -> dict:
    """The final answer of an agent request: exactly one JSON value under its ``response_format`` schema, which is
    refused by feature (or relaxed where the server or the schema opted in, reported) as a plain response_format is."""
    return json.loads(_answer_json(schema, settings))


def _answer_json(schema: dict | bool, settings: Settings) -> str:
    key = (compact_json(schema), settings)
    hit = _ANSWERS.get(key)
    if hit is None:
        try:
            loose, steps = enforced_schema(schema, settings)
        except ConstraintError as e:
            e.args = (f"response_format: {e}",)
            raise
        node: dict[str, Any] = {"type": "json_schema", "json_schema": loose}
        if TAG_WHITESPACE_BOUND and settings.max_whitespace is not None and not settings.dumps_spacing:
            node["max_whitespace_cnt"] = settings.max_whitespace
        hit = (compact_json(node), steps)
        if len(_ANSWERS) < _UNCALLABLE_MAX:
            _ANSWERS[key] = hit
        if steps:
            log.warning("tagjit: response_format schema enforced loosely, as the server or the schema allowed: %s",
                        "; ".join(map(str, steps)))
    report.record("response_format", "schema", hit[1])
    return hit[0]


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


def _messages_layout(fmt: ToolFormat, kind: ToolChoice, tags: list[dict], single: bool, reasoning: bool,
                     answer: Any = None) -> dict:
    """Harmony-style output: a series of messages joined by the separator; calls are messages. With an ``answer``
    (content of the final message), reasoning messages may lead, then calls or that one final message."""
    msgs = _message_tags(fmt, reasoning)
    sep = fmt.separator
    if answer is not None:
        if not fmt.messages:
            raise ConstraintError(f"format {fmt.name!r} has no final message to carry a response_format answer")
        last = [{"type": "tag", "begin": m.begin, "content": answer, "end": _end(m.end)} for m in fmt.messages]
        if tags:
            last.insert(0, _calls_block(fmt, tags, True, single))
        return _after_thinking(fmt, msgs, last[0] if len(last) == 1 else {"type": "or", "elements": last})
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
    return _after_thinking(fmt, msgs, calls)


def _after_thinking(fmt: ToolFormat, msgs: list[dict], body: dict) -> dict:
    """``body``, optionally after reasoning messages (those among ``msgs``) and a separator."""
    thinking = [m for m in msgs if fmt.think_start is not None and m["begin"] == fmt.think_start]
    if not thinking:
        return body
    sep = fmt.separator
    lead = {"type": "tags_with_separator", "tags": thinking, "separator": sep, "at_least_one": True}
    return {"type": "or", "elements": [
        body, {"type": "sequence", "elements": [lead, {"type": "const_string", "value": sep}, body]}]}


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
                   reasoning: bool = False, reasoning_started: bool = False,
                   answer: dict | bool | None = None) -> dict | None:
    """The structural tag for a request's tool calls in ``fmt``, or None when no constraint applies.

    ``reasoning``: the output begins with a reasoning block (free text up to the format's think end);
    ``reasoning_started``: the prompt already opened that block, so only its end is expected. An
    engine that gates reasoning itself (vLLM with a reasoning parser) passes neither.
    ``answer``: the schema of the final answer a request asks for beside its tools (``response_format``): under
    ``auto`` the output is tool calls or exactly one JSON value under it, under ``none`` that value only;
    ``required`` and named choices ignore it (the answer belongs to the turn after the tool results).
    """
    text = build_tool_tag_json(fmt, tools, tool_choice, parallel_tool_calls, settings, reasoning=reasoning,
                               reasoning_started=reasoning_started, answer=answer)
    return None if text is None else json.loads(text)


# Stands for all call tags in a tag's skeleton; the serialised skeleton gets their memoised texts in its place.
_CALLS = "\x00tagjit:calls\x00"
_CALLS_JSON = compact_json(_CALLS)
_ANSWER = "\x00tagjit:answer\x00"
_ANSWER_JSON = compact_json(_ANSWER)


def build_tool_tag_json(fmt: ToolFormat | str, tools: Sequence[Mapping[str, Any]] | None, tool_choice: Any = "auto",
                        parallel_tool_calls: bool = True, settings: Settings | None = None, *,
                        reasoning: bool = False, reasoning_started: bool = False,
                        answer: dict | bool | None = None) -> str | None:
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
    if kind in ("required", "named"):
        answer = None
    if answer is None and (not function_tools
                           or not applies(kind, function_tools, parallel_tool_calls, settings.tool_scope)):
        return None
    answer_text = None if answer is None else _answer_json(answer, settings)

    parts: list[str] = []  # per tool, its call tags' JSON text, memoised across requests
    uncallable: list[str] = []
    for t in function_tools if kind != "none" else ():
        schema = t.parameters if constrains_arguments(t, settings.tool_schema_mode) else None
        schema_json = compact_json(schema)
        why = _UNCALLABLE.get((fmt.name, t.name, schema_json, settings))
        if why is None:
            try:
                parts.append(_tool_tags_json(fmt, t.name, schema_json, settings, schema)[1:-1])  # its items
                continue
            except EmptySchemaError as e:  # no call of it can be valid: the other tools still can be called
                why = f"tool {t.name!r}: {e}"
                if len(_UNCALLABLE) < _UNCALLABLE_MAX:
                    _UNCALLABLE[(fmt.name, t.name, schema_json, settings)] = why
                log.warning("tagjit: %s; the tool is left out of the call syntax", why)
            except ConstraintError as e:  # keep the subclass (UnsupportedFeatureError), name the tool
                e.args = (f"tool {t.name!r}: {e}",)
                raise
        uncallable.append(why)
        report.record(f"tool {t.name!r}", "tool", [Relaxation("uncallable", "#", why)])
    if uncallable and not parts and answer is None:
        raise EmptySchemaError("; ".join(uncallable) + " (no tool can be called)")
    tags = [_CALLS] if parts else []
    single = kind == "named" or not parallel_tool_calls
    final = None if answer is None else _ANSWER
    if fmt.layout == "messages":
        body = _messages_layout(fmt, kind, tags, single, reasoning, final)
    elif final is not None:  # calls only (no text around them), or the answer
        body = final if not tags else {"type": "or", "elements": [_forced(fmt, tags, single), final]}
    elif kind == "none":
        body = _text(list(fmt.text_excludes) + list(fmt.openings))
    elif kind == "auto":
        body = _auto(fmt, tags, single)
    else:
        body = _forced(fmt, tags, single)
    body = _with_reasoning(fmt, body, reasoning, reasoning_started)
    skeleton = compact_json({"type": "structural_tag", "format": body})
    if parts:
        skeleton = skeleton.replace(_CALLS_JSON, ",".join(parts))
    return skeleton if answer_text is None else skeleton.replace(_ANSWER_JSON, answer_text)
