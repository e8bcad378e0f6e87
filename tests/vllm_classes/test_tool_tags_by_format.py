"""Every vLLM tool parser a tagjit format claims gets tagjit's tag through vLLM's composed parser.

The composed parser class is the one vLLM's OpenAI server builds (``ParserManager.get_parser``), and
``adjust_request`` is the call the server makes on a chat request before it reaches the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from shared_data import TOKENIZERS
from tagjit.tools import build_tool_tag_json
from tagjit.tools import format_for_parser, format_names, load_format

pytest.importorskip("vllm")

TOOLS = [{"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}},
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"]}}}]

PARSERS = [(name, parser) for name in format_names() for parser in load_format(name).vllm_tool_parsers]


@pytest.fixture(scope="module")
def tokenizer_for() -> Callable[[str], Any]:
    """Per format, the Qwen2 tokenizer with that format's special tokens added (tool parsers look them up)."""
    built: dict[str, Any] = {}

    def get(format_name: str) -> Any:
        if format_name not in built:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(TOKENIZERS / "qwen2"))
            tokenizer.add_tokens(list(load_format(format_name).special_tokens), special_tokens=True)
            built[format_name] = tokenizer
        return built[format_name]

    return get


def composed_parser(parser_name: str, tokenizer: Any) -> Any:
    """vLLM's composed parser class for a tool parser (skips where this vLLM does not have that parser)."""
    from vllm.parser.parser_manager import ParserManager
    from vllm.tool_parsers import ToolParserManager

    if parser_name not in ToolParserManager.list_registered():
        pytest.skip(f"this vLLM has no tool parser {parser_name!r}")
    return ParserManager.get_parser(tool_parser_name=parser_name, enable_auto_tools=True, tokenizer=tokenizer)


@pytest.fixture
def tagjit_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    """tagjit as this process's structured-outputs backend, as a config selecting it makes it."""
    from tagjit_vllm import patches

    monkeypatch.setitem(patches._state, "active", True)


def test_tagjit_formats_claim_vllms_main_tool_parsers_and_step5():
    assert {name for name, _ in PARSERS} >= {"hermes", "qwen3_coder", "mistral", "gpt_oss", "kimi_k2"}
    assert ("qwen3_coder", "step5") in PARSERS


@pytest.mark.parametrize("format_name, parser_name", PARSERS, ids=[p for _, p in PARSERS])
def test_required_tool_choice_gets_tagjits_tag_in_the_parsers_format(tagjit_serving, tokenizer_for, format_name,
                                                                     parser_name):
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    from tagjit import get_settings

    tokenizer = tokenizer_for(format_name)
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "Weather in Oslo?"}],
                                    tools=TOOLS, tool_choice="required")
    cls = composed_parser(parser_name, tokenizer)
    adjusted = cls(tokenizer, request.tools).adjust_request(request)
    fmt = format_for_parser(parser_name, "vllm", vocab=tokenizer.get_vocab())
    assert fmt is not None and fmt.name == format_name
    expected = build_tool_tag_json(fmt, TOOLS, "required", True, get_settings())
    assert expected is not None and "get_weather" in expected
    assert adjusted.structured_outputs is not None
    assert adjusted.structured_outputs.structural_tag == expected
