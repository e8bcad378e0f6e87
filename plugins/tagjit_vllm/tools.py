"""Tool calls in the served model's native syntax, constrained per request by tagjit (vLLM 0.32 and 0.33).

Where vLLM builds the tool-call constraint
    Every chat (and Responses) request with tools passes through the composed parser's
    ``Parser.adjust_request`` in the API server (``OnlineRenderer.preprocess_chat``). For
    ``DelegatingParser`` (the class ``ParserManager.get_parser`` composes for every tool parser,
    and the base of ``HarmonyParser``) that method calls ``_apply_structural_tag(request)`` and then
    the tool parser's own ``adjust_request``. ``_apply_structural_tag`` is where vLLM puts its own
    structural tag into ``request.structured_outputs`` (only for parsers with a
    ``structural_tag_model`` and under ``VLLM_ENFORCE_STRICT_TOOL_CALLING``); the tool parser's
    ``adjust_request`` otherwise falls back to a JSON-array schema that bypasses the native syntax.
    Once ``structured_outputs.structural_tag`` is set, ``ToolParser.adjust_request`` leaves it alone.

The hook (two wraps, idempotent)
    1. ``ParserManager.get_parser``: when the tool-call parser name maps to a tagjit format
       (``vllm_tool_parsers`` in ``configs/formats/*.json``), the composed parser class records the
       format (``_tagjit_format``) and gets ``always_adjust_request = True`` so that
       ``tool_choice="none"`` reaches the hook too; when tagjit is the backend, the tool parser class
       gets ``supports_required_and_named = False`` so required/named outputs are read by the tool
       parser in their native syntax, not as vLLM's JSON array.
    2. ``DelegatingParser._apply_structural_tag``: when tagjit is the structured-outputs backend and
       the class has a format, it sets ``request.structured_outputs`` to
       ``tagjit.tools.build_tool_tag(format, tools, tool_choice, parallel_tool_calls)`` (or leaves the
       request unconstrained when the policy says so) instead of vLLM's tag; anything else goes to
       vLLM's original method. Bad tool input (a named tool missing from ``tools``, ``required``
       without tools, an unsupported schema feature) raises ``VLLMValidationError``: HTTP 400.
    ``--tool-strict-level`` (the composed parser's ``tool_strict_level``) maps onto tagjit's tool scope and
    argument-schema mode (``strict_level_settings``); unset keeps tagjit's own settings.
    Reasoning is gated by the engine (tagjit's grammar starts after the reasoning end token), so
    the tag is built without the think prefix.
    An agent request (tools and a JSON ``response_format``): under ``auto`` the tag is calls or exactly one JSON
    answer under the schema; under ``required`` or a named tool, calls only (the answer belongs to the turn after the
    tool results); under ``none`` vLLM's own JSON handling. Other output constraints keep vLLM's handling.
"""

from __future__ import annotations

import functools
import json
import logging
from typing import Any

log = logging.getLogger("tagjit")
_FORMAT_ATTR = "_tagjit_format"


def active() -> bool:
    """Whether tagjit is this process's structured-outputs backend (``TAGJIT_VLLM_TOOLS=0`` turns the hook off)."""
    from tagjit.engine import get_settings

    if not get_settings().vllm_tools:
        return False
    try:
        from . import patches
    except ImportError:
        return False
    return patches.active()


def install() -> None:
    """Wrap vLLM's parser composition and its tool structural-tag step, both or neither (idempotent)."""
    from .patches import transaction

    with transaction():
        _patch_get_parser()
        _patch_apply_structural_tag()


def _patch_get_parser() -> None:
    from vllm.parser.parser_manager import ParserManager

    original = ParserManager.__dict__["get_parser"].__func__
    if getattr(original, "_tagjit", False):
        return

    @functools.wraps(original)
    def get_parser(cls: Any, tool_parser_name: str | None = None, *args: Any, **kwargs: Any) -> Any:
        parser_cls = original(cls, tool_parser_name, *args, **kwargs)
        if parser_cls is not None and tool_parser_name:
            mark_parser(parser_cls, tool_parser_name)
        return parser_cls

    from .patches import replace_attr

    get_parser._tagjit = True  # type: ignore[attr-defined]
    replace_attr(ParserManager, "get_parser", classmethod(get_parser))


def mark_parser(parser_cls: Any, tool_parser_name: str) -> str | None:
    """Record on a composed parser class the tagjit format of its tool parser; returns its name."""
    from tagjit.engine import format_for_parser

    fmt = format_for_parser(tool_parser_name, "vllm")
    if fmt is None or getattr(parser_cls, "tool_parser_cls", None) is None:
        return None
    setattr(parser_cls, _FORMAT_ATTR, fmt.name)
    parser_cls.always_adjust_request = True
    if active():
        parser_cls.tool_parser_cls.supports_required_and_named = False
    return fmt.name


def _patch_apply_structural_tag() -> None:
    from vllm.parser.abstract_parser import DelegatingParser

    original = DelegatingParser._apply_structural_tag
    if getattr(original, "_tagjit", False):
        return

    @functools.wraps(original)
    def _apply_structural_tag(self: Any, request: Any) -> Any:
        fmt_name = getattr(type(self), _FORMAT_ATTR, None)
        if fmt_name is None or self._tool_parser is None or not request.tools or not active():
            return original(self, request)
        return apply_tool_tag(_variant(fmt_name, self._tool_parser), request, lambda: original(self, request),
                              getattr(self, "tool_strict_level", None))

    from .patches import replace_attr

    _apply_structural_tag._tagjit = True  # type: ignore[attr-defined]
    replace_attr(DelegatingParser, "_apply_structural_tag", _apply_structural_tag)


def _variant(fmt_name: str, tool_parser: Any) -> str:
    """The format for this model's vocabulary (e.g. Mistral v11+ when it has [ARGS])."""
    from tagjit.engine import load_format, variant_for_vocab

    try:
        vocab = tool_parser.vocab
    except Exception:  # a tokenizer without a vocabulary keeps the parser's format
        return fmt_name
    return variant_for_vocab(load_format(fmt_name), vocab).name


def strict_level_settings(settings: Any, level: Any) -> Any:
    """tagjit settings for vLLM's ``--tool-strict-level``, in the meaning vLLM gives each level.

    ``auto``: under ``tool_choice=auto`` constrain only when a tool is strict or calls are single, and pin only
    the arguments of ``strict: true`` tools; ``function``: constrain every tool request's call syntax, arguments
    as under ``auto``; ``parameter``: also pin every tool's arguments. Unset (vLLM 0.33's default, and 0.32's
    default ``auto``, which 0.32 cannot tell from unset) keeps tagjit's own ``tool_scope``/``tool_schema_mode``.
    """
    if level is None:
        return settings
    name = str(getattr(level, "name", level)).lower()
    if name == "auto" and _auto_is_default():
        return settings
    if name not in ("auto", "function", "parameter"):
        raise ValueError(f"unknown tool strict level {level!r}")
    return settings.replace(tool_scope="auto" if name == "auto" else "always",
                            tool_schema_mode="strict" if name == "parameter" else "auto")


def _auto_is_default() -> bool:
    """vLLM 0.32 defaults ``--tool-strict-level`` to ``auto``; 0.33 leaves it unset (None)."""
    from vllm.parser.abstract_parser import DelegatingParser

    return DelegatingParser.tool_strict_level is not None


def apply_tool_tag(fmt_name: str, request: Any, fallback: Any, strict_level: Any = None) -> Any:
    """Put tagjit's tool-call tag for ``request`` into its structured outputs (400 on bad tools)."""
    from vllm.entrypoints.openai.responses.protocol import ResponsesRequest
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import StructuredOutputsParams
    from vllm.tool_parsers.structural_tag_registry import (
        _dump_tool_choice_for_xgrammar,
        _dump_tool_for_xgrammar,
    )

    from tagjit.engine import ConstraintError
    from tagjit.engine import trust
    from tagjit.engine import Constraint, Kind
    from tagjit.engine import build_tool_tag_json
    from tagjit.engine import load_format

    choice = _dump_tool_choice_for_xgrammar(request.tool_choice)
    if isinstance(choice, dict) and choice.get("type") not in (None, "function"):
        return fallback()  # allowed_tools and builtin tool choices: vLLM's own handling
    user_format = request.extract_structured_outputs()
    answer = None
    if user_format is not None and choice in (None, "auto", "none"):
        answer = answer_schema(user_format)
        if answer is None or choice == "none":  # other constraints, and a JSON answer alone: vLLM's own handling
            return fallback()
    from .patches import server_settings

    settings = strict_level_settings(server_settings(), strict_level)
    tools = [_tool_dict(t, _dump_tool_for_xgrammar) for t in request.tools]
    try:
        text = build_tool_tag_json(load_format(fmt_name), tools, choice, request.parallel_tool_calls is not False,
                                   settings, answer=answer)
    except ConstraintError as e:
        raise VLLMValidationError(str(e), parameter="response_format" if str(e).startswith("response_format")
                                  else "tools") from None
    if text is None:
        return request
    # Every schema in it was just checked; building the whole tag again to validate it costs ~60 ms at 200 tools.
    trust(Constraint.of_canonical(Kind.STRUCTURAL_TAG, text), server_settings())
    request.structured_outputs = StructuredOutputsParams(structural_tag=text)
    if isinstance(request, ResponsesRequest):
        request.text = None
    else:
        request.response_format = None
    return request


def answer_schema(params: Any) -> dict | bool | None:
    """The JSON schema of a request's own structured output when it is a JSON answer (``response_format``
    json_schema or json_object), else None (regex, choice, grammar and tags keep vLLM's handling)."""
    if params.json_object:
        return {"type": "object"}
    if params.json is None or any(v is not None for v in (params.regex, params.choice, params.grammar,
                                                          params.structural_tag)):
        return None
    if not isinstance(params.json, str):
        return params.json
    try:
        return json.loads(params.json)
    except ValueError:  # vLLM's own handling reports it
        return None


def _tool_dict(tool: Any, dump: Any) -> dict:
    """The fields of a Chat Completions function tool that the tag reads (``model_dump`` of the whole tool,
    schema included, costs ~30 us a tool); other tools as vLLM dumps them for xgrammar."""
    fn = getattr(tool, "function", None)
    if getattr(tool, "type", None) == "function" and fn is not None and isinstance(getattr(fn, "name", None), str):
        return {"type": "function", "function": {"name": fn.name, "parameters": fn.parameters, "strict": fn.strict}}
    return dump(tool)
