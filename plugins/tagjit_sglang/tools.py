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

The hook (two AROUND hooks in SGLang's plugin ``HookRegistry``, applied by ``load_plugins()``)
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
    Bad tool input (a tool name the syntax cannot carry, a schema feature tagjit cannot enforce)
    raises tagjit's ``ConstraintError``, a ``ValueError``, which SGLang's ``handle_request`` turns
    into HTTP 400 for that request. ``TAGJIT_SGLANG_TOOLS=0`` turns the replacement off.
"""

from __future__ import annotations

import copy
import logging
from contextvars import ContextVar
from typing import Any, Callable, NamedTuple

log = logging.getLogger("tagjit.sglang")

BACKEND = "tagjit"
PROCESS_MESSAGES = "sglang.srt.entrypoints.openai.serving_chat.OpenAIServingChat._process_messages"
STRUCTURE_CONSTRAINT = "sglang.srt.function_call.function_call_parser.FunctionCallParser.get_structure_constraint"
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
    """Register the two hooks with SGLang's HookRegistry once; ``load_plugins()`` applies them."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    for target, hook in ((PROCESS_MESSAGES, around_process_messages),
                         (STRUCTURE_CONSTRAINT, around_structure_constraint)):
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
        from tagjit.engine import load_format

        if load_format(fmt).bare_json_calls:
            # SGLang's detector would read the JSON answer as a failed call and drop it: its JSON answer stands.
            log.info("tagjit: %s calls are bare JSON, which SGLang's parser cannot tell from the answer: "
                     "tools are not callable beside a JSON response_format under tool_choice=auto", fmt)
            return
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


def tool_tag(fmt_name: str, tools: list[dict], tool_choice: Any, parallel_tool_calls: bool, reasoning: bool,
             settings: Any, answer: dict | bool | None = None) -> ToolTag | None:
    """tagjit's tag for a request SGLang constrains (ConstraintError, a ValueError, on bad tools)."""
    from tagjit.engine import build_tool_tag

    # SGLang has decided to constrain; tagjit's own auto-scope policy must not undo that.
    tag = build_tool_tag(fmt_name, tools, tool_choice, parallel_tool_calls, settings.replace(tool_scope="always"),
                         reasoning=reasoning, answer=answer)
    return None if tag is None else ToolTag(tag)


__all__ = ["ToolTag", "enabled", "install", "server_format", "around_process_messages",
           "around_structure_constraint", "tool_tag"]
