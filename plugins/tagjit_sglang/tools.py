"""Tool calls in the served model's native syntax, from tagjit's format registry (SGLang 0.5.23).

Where SGLang builds the tool-call constraint
    ``OpenAIServingChat._process_messages`` (chat completions, and the Responses API through its
    subclass) builds a ``FunctionCallParser`` for ``--tool-call-parser`` and calls its
    ``get_structure_constraint(tool_choice, parallel_tool_calls=, thinking_mode=)``. That call
    decides *whether* output is constrained (a required or named tool choice; ``auto`` only when a
    tool is ``strict`` or ``SGLANG_TOOL_STRICT_LEVEL`` >= FUNCTION; never ``none``) and *with
    what*: the detector's xgrammar builtin tag, SGLang's legacy ``structures``/``triggers`` tag, a
    full-assistant EBNF (GLM-4.7 without strict tools) or, for a detector without native tags, a
    JSON-array schema. ``thinking_mode`` is true when the tag must also cover the reasoning block
    (a thinking request and no ``--reasoning-parser``). The same detector later reads the output;
    after a structural tag it reads it in the model's native syntax.

The hooks (AROUND hooks in SGLang's plugin ``HookRegistry``, applied by ``load_plugins()``)
    1. ``OpenAIServingChat._process_messages``: when tagjit is this server's grammar backend and
       the tool-call parser maps to a tagjit format (``sglang_tool_parsers`` in
       ``configs/formats/*.json``, with the variant for the model's vocabulary), SGLang's method
       runs with that format in a context variable; otherwise it runs untouched.
    2. ``FunctionCallParser.get_structure_constraint``: SGLang's method decides as always; when it
       returns a structural tag and a format is in context (for this parser's detector), the tag
       becomes ``tagjit.tools.build_tool_tag(format, tools, tool_choice, parallel_tool_calls,
       reasoning=thinking_mode)``. JSON-schema and full-assistant-EBNF constraints stay SGLang's:
       its response side reads those as a JSON array or a whole-turn grammar, not as native calls.
    3. An agent request (tools and a JSON ``response_format``), after ``_process_messages``: under ``auto`` the
       constraint becomes tagjit's tag of calls or exactly one JSON answer under the schema; under ``required`` or a
       named tool, tagjit's calls tag stands (SGLang alone refuses the pair); ``none`` keeps SGLang's JSON answer.
       The response format is then taken off the request, so SGLang parses the tool calls of the output.
    4. ``FunctionCallParser.has_tool_call``, ``parse_non_stream``, ``parse_stream_chunk`` and ``parse_stream_end`` on a
       tagjit server: an output that is one JSON value and no call of the request's tools is content. Where calls are
       bare JSON (llama3), SGLang's detector reads every JSON output as a call and drops an agent's answer; a call it
       finds, and text it returns, are never changed. Streamed, such an output is held back until the stream shows a
       call (then released as SGLang parsed it) or ends (then the answer is one content delta).
    Bad tool input (a tool name the syntax cannot carry, a schema feature tagjit cannot enforce)
    raises tagjit's ``ConstraintError``, a ``ValueError``, which SGLang's ``handle_request`` turns
    into HTTP 400 for that request. ``TAGJIT_SGLANG_TOOLS=0`` turns the replacement off.
"""

from __future__ import annotations

import copy
import json
import logging
from contextvars import ContextVar
from typing import Any, Callable, NamedTuple

log = logging.getLogger("tagjit.sglang")

BACKEND = "tagjit"
PROCESS_MESSAGES = "sglang.srt.entrypoints.openai.serving_chat.OpenAIServingChat._process_messages"
_PARSER = "sglang.srt.function_call.function_call_parser.FunctionCallParser."
STRUCTURE_CONSTRAINT = _PARSER + "get_structure_constraint"
HAS_TOOL_CALL, PARSE_NON_STREAM = _PARSER + "has_tool_call", _PARSER + "parse_non_stream"
PARSE_STREAM_CHUNK, PARSE_STREAM_END = _PARSER + "parse_stream_chunk", _PARSER + "parse_stream_end"
_CACHE_ATTR = "_tagjit_tool_format"


class _Active(NamedTuple):
    format: str
    detector: type
    settings: Any


_ACTIVE: ContextVar[_Active | None] = ContextVar("tagjit_sglang_tool_format", default=None)


class ToolTag(dict):
    """tagjit's structural tag where SGLang expects one: a dict it serialises with ``model_dump``.

    xgrammar's ``StructuralTag`` model is not used: its round trip adds xgrammar's defaults
    (``style``, ``any_order``), so SGLang would send a tag that differs from ``build_tool_tag``'s
    (and from the key tagjit caches and warms it up under); the tag travels as the dict it is.
    """

    def model_dump(self, **_: Any) -> dict:
        """The tag as JSON data (SGLang calls ``model_dump(by_alias=True)``)."""
        return copy.deepcopy(dict(self))


def enabled() -> bool:
    """Whether the replacement is on (``TAGJIT_SGLANG_TOOLS=0`` turns it off)."""
    from tagjit.engine import get_settings

    return get_settings().sglang_tools


def install() -> None:
    """Register the hooks with SGLang's HookRegistry once; ``load_plugins()`` applies them."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    for target, hook in HOOKS.items():
        if not any(h is hook for _, h, _ in HookRegistry._hooks.get(target, ())):
            HookRegistry.register(target, hook, HookType.AROUND)


def server_format(serving: Any) -> str | None:
    """The tagjit format for a serving handler's tool-call parser when tagjit is its backend, else None."""
    parser = getattr(serving, "tool_call_parser", None)
    if not parser or not enabled():
        return None
    if serving.tokenizer_manager.config_value("grammar_backend") != BACKEND:
        return None
    cached = serving.__dict__.get(_CACHE_ATTR)
    if cached is None or cached[0] != parser:
        cached = (parser, _resolve_format(parser, serving.tokenizer_manager.tokenizer))
        serving.__dict__[_CACHE_ATTR] = cached
    return cached[1]


def _resolve_format(parser: str, tokenizer: Any) -> str | None:
    from tagjit.engine import format_for_parser, variant_for_vocab

    fmt = format_for_parser(parser, "sglang")
    if fmt is None:
        return None
    try:
        vocab = tokenizer.get_vocab()
    except Exception:  # a tokenizer without a vocabulary keeps the parser's format
        return fmt.name
    name = variant_for_vocab(fmt, vocab).name
    log.info("tagjit: tool calls of --tool-call-parser %s use tagjit's %s format", parser, name)
    return name


def around_process_messages(original: Callable, serving: Any, *args: Any, **kwargs: Any) -> Any:
    """SGLang's ``_process_messages`` with this server's tagjit format in context (when it has one)."""
    fmt = server_format(serving)
    if fmt is None:
        return original(serving, *args, **kwargs)
    from sglang.srt.function_call.function_call_parser import FunctionCallParser

    from .backend import settings_for

    settings = settings_for(serving.tokenizer_manager.server_args)
    token = _ACTIVE.set(_Active(fmt, FunctionCallParser.ToolCallParserEnum[serving.tool_call_parser], settings))
    try:
        processed = original(serving, *args, **kwargs)
    finally:
        _ACTIVE.reset(token)
    request = args[0] if args else kwargs.get("request")
    answer = _answer_schema(request)
    if answer is not None and request.tool_choice != "none" and hasattr(processed, "tool_call_constraint"):
        _serve_agent_request(serving, request, processed, fmt, answer, settings)
    return processed


def _answer_schema(request: Any) -> dict | bool | None:
    """The schema of a chat request's JSON answer beside its tools (``response_format`` json_schema or json_object)."""
    rf = getattr(request, "response_format", None)
    if rf is None or not getattr(request, "tools", None):
        return None
    if rf.type == "json_object":
        return {"type": "object"}
    if rf.type == "json_schema" and rf.json_schema is not None and rf.json_schema.schema_ is not None:
        return rf.json_schema.schema_
    return None


def _serve_agent_request(serving: Any, request: Any, processed: Any, fmt: str, answer: dict | bool,
                         settings: Any) -> None:
    """Tools and a JSON answer in one request: under ``auto`` tagjit's tag of calls or the answer replaces SGLang's
    JSON-only constraint; under ``required`` or a named tool the calls' tag stands (SGLang would refuse the pair).
    The response format is taken off the request so that SGLang neither constrains to it nor skips tool parsing."""
    if request.tool_choice == "auto":
        tools = [t.model_dump() for t in serving._effective_tools(request)]
        reasoning = bool(serving._get_reasoning_from_request(request)) and serving.reasoning_parser is None
        tag = tool_tag(fmt, tools, "auto", request.parallel_tool_calls is not False, reasoning, settings,
                       answer=answer)
        processed.tool_call_constraint = None if tag is None else ("structural_tag", tag)
    elif processed.tool_call_constraint is None or processed.tool_call_constraint[0] != "structural_tag":
        return  # SGLang's own constraint for this detector: its own rules
    request.response_format = None


def around_structure_constraint(original: Callable, parser: Any, tool_choice: Any, parallel_tool_calls: bool = True,
                                thinking_mode: bool = False) -> Any:
    """SGLang decides whether to constrain; where it uses a structural tag, tagjit's tag replaces it."""
    constraint = original(parser, tool_choice, parallel_tool_calls=parallel_tool_calls, thinking_mode=thinking_mode)
    active = _ACTIVE.get()
    if (active is None or constraint is None or constraint[0] != "structural_tag"
            or type(parser.detector) is not active.detector):
        return constraint
    tools = [t.model_dump() for t in parser.structural_tag_tools()]
    choice = tool_choice.model_dump() if hasattr(tool_choice, "model_dump") else tool_choice
    tag = tool_tag(active.format, tools, choice, parallel_tool_calls is not False, thinking_mode, active.settings)
    return constraint if tag is None else ("structural_tag", tag)


# -- reading an agent's JSON answer where calls are bare JSON too (hook 4) ----------------------------------------

def _tagjit_server() -> bool:
    try:
        from sglang.srt.runtime_context import get_context

        return enabled() and get_context().config_leaf("grammar_backend") == BACKEND
    except Exception:  # no published server arguments (SGLang's parser used on its own): SGLang's rules
        return False


def json_answer(parser: Any, text: str) -> bool:
    """Whether text is one JSON value that calls none of the parser's tools (an answer), on a tagjit server."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "{[\"-0123456789tfn":
        return False
    try:
        value = json.loads(stripped)
    except ValueError:
        return False
    names = {t.function.name for t in parser.tools or ()}
    calls = value if isinstance(value, list) else [value]
    return not any(isinstance(c, dict) and c.get("name") in names for c in calls) and _tagjit_server()


def around_has_tool_call(original: Callable, parser: Any, text: str) -> bool:
    """SGLang's test, except that a JSON answer has no call."""
    return original(parser, text) and not json_answer(parser, text)


def around_parse_non_stream(original: Callable, parser: Any, full_text: str, **kwargs: Any) -> tuple:
    """SGLang's parse; an output it reads no call and no text from, and that is a JSON answer, is content."""
    normal, calls = original(parser, full_text, **kwargs)
    if not calls and not normal.strip() and json_answer(parser, full_text):
        return full_text, []
    return normal, calls


class _Held:
    """A stream that opened with JSON: its text so far, and what SGLang returned while no call had come."""

    __slots__ = ("raw", "normal", "released")

    def __init__(self) -> None:
        self.raw, self.normal, self.released = "", "", False


def around_parse_stream_chunk(original: Callable, parser: Any, chunk_text: str) -> tuple:
    """SGLang's incremental parse, held back while a stream that opened with JSON has shown no call."""
    held: _Held | None = parser.__dict__.get("_tagjit_held")
    if held is None:
        if parser.__dict__.get("_tagjit_passed") or not chunk_text.strip():
            return original(parser, chunk_text)
        if chunk_text.lstrip()[0] not in "{[" or not _tagjit_server():
            parser.__dict__["_tagjit_passed"] = True
            return original(parser, chunk_text)
        held = parser.__dict__["_tagjit_held"] = _Held()
    normal, calls = original(parser, chunk_text)
    if held.released:
        return normal, calls
    held.raw += chunk_text
    if calls:  # a call after all: what SGLang read so far, as it read it
        held.released = True
        return held.normal + normal, calls
    held.normal += normal
    return "", []


def around_parse_stream_end(original: Callable, parser: Any) -> tuple:
    """SGLang's end of stream; a held-back stream is its JSON answer as content, else what SGLang returned."""
    normal, calls = original(parser)
    held: _Held | None = parser.__dict__.get("_tagjit_held")
    if held is None or held.released:
        return normal, calls
    held.released = True
    if not calls and json_answer(parser, held.raw):
        return held.raw, []
    return held.normal + normal, calls


def tool_tag(fmt_name: str, tools: list[dict], tool_choice: Any, parallel_tool_calls: bool, reasoning: bool,
             settings: Any, answer: dict | bool | None = None) -> ToolTag | None:
    """tagjit's tag for a request SGLang constrains (ConstraintError, a ValueError, on bad tools)."""
    from tagjit.engine import build_tool_tag

    # SGLang has decided to constrain; tagjit's own auto-scope policy must not undo that.
    tag = build_tool_tag(fmt_name, tools, tool_choice, parallel_tool_calls, settings.replace(tool_scope="always"),
                         reasoning=reasoning, answer=answer)
    return None if tag is None else ToolTag(tag)


HOOKS: dict[str, Callable] = {PROCESS_MESSAGES: around_process_messages, STRUCTURE_CONSTRAINT: around_structure_constraint,
                              HAS_TOOL_CALL: around_has_tool_call, PARSE_NON_STREAM: around_parse_non_stream,
                              PARSE_STREAM_CHUNK: around_parse_stream_chunk, PARSE_STREAM_END: around_parse_stream_end}

__all__ = ["ToolTag", "enabled", "install", "server_format", "json_answer", "around_process_messages",
           "around_structure_constraint", "around_has_tool_call", "around_parse_non_stream", "around_parse_stream_chunk",
           "around_parse_stream_end", "tool_tag", "HOOKS"]
