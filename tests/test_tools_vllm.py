"""The vLLM hook: requests with tools get tagjit's native-format tag from vLLM's own parser path.

The composed parser is the one vLLM's OpenAI server builds (``ParserManager.get_parser``) and
``adjust_request`` is the call the server makes before handing the request to the engine.
"""

from __future__ import annotations

import json

import pytest

from tagjit import Settings, get_settings
from tagjit.tools import build_tool_tag

from shared_data import TOKENIZERS

pytest.importorskip("vllm")

TOOLS = [{"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}},
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(TOKENIZERS / "qwen2"))


@pytest.fixture()
def tagjit_backend(monkeypatch):
    """Install the hook with tagjit selected as the backend of this process."""
    import tagjit_vllm.patches as patches
    import tagjit_vllm.tools as hook

    monkeypatch.setitem(patches._state, "active", True)
    hook.install()
    return hook


def adjusted(tokenizer, parser_name: str, **fields):
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.parser.parser_manager import ParserManager

    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "time?"}], tools=TOOLS,
                                    **fields)
    cls = ParserManager.get_parser(tool_parser_name=parser_name, enable_auto_tools=True, tokenizer=tokenizer)
    return cls(tokenizer, request.tools).adjust_request(request), cls


def tag_of(request) -> dict | None:
    so = request.structured_outputs
    return json.loads(so.structural_tag) if so is not None and so.structural_tag else None


def test_required_gets_the_native_hermes_tag(tagjit_backend, tokenizer):
    request, _ = adjusted(tokenizer, "hermes", tool_choice="required")
    assert tag_of(request) == build_tool_tag("hermes", TOOLS, "required", True, get_settings())


def test_a_named_tool_in_qwen3_coder_gets_the_xml_tag(tagjit_backend, tokenizer):
    choice = {"type": "function", "function": {"name": "get_weather"}}
    request, _ = adjusted(tokenizer, "qwen3_coder", tool_choice=choice)
    tag = tag_of(request)
    assert tag == build_tool_tag("qwen3_coder", TOOLS, choice, True, get_settings())
    assert "<function=get_weather>" in json.dumps(tag) and "get_time" not in json.dumps(tag)


def test_parallel_calls_off_reaches_the_tag(tagjit_backend, tokenizer):
    request, _ = adjusted(tokenizer, "hermes", tool_choice="required", parallel_tool_calls=False)
    assert tag_of(request)["format"]["stop_after_first"] is True


def test_none_bans_the_opening(tagjit_backend, tokenizer):
    request, cls = adjusted(tokenizer, "hermes", tool_choice="none")
    assert cls.always_adjust_request is True
    assert "<tool_call>" in tag_of(request)["format"]["excludes"]


def test_required_and_named_outputs_are_read_in_native_syntax(tagjit_backend, tokenizer, monkeypatch):
    from vllm.tool_parsers.hermes_tool_parser import Hermes2ProToolParser

    # As with VLLM_ENFORCE_STRICT_TOOL_CALLING=0: vLLM would read required output as a JSON array.
    monkeypatch.setattr(Hermes2ProToolParser, "supports_required_and_named", True)
    _, cls = adjusted(tokenizer, "hermes", tool_choice="required")
    assert cls.tool_parser_cls.supports_required_and_named is False


def test_an_unenforceable_tool_schema_is_a_validation_error_when_the_server_refuses_them(tagjit_backend, tokenizer,
                                                                                          monkeypatch):
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.exceptions import VLLMValidationError
    from vllm.parser.parser_manager import ParserManager

    from tagjit import settings

    monkeypatch.setattr(settings, "_current", settings.Settings(unenforceable_tools="refuse"))

    bad = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "array", "not": {"items": {"type": "string"}}}}}}}]
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "x"}], tools=bad,
                                    tool_choice="required")
    cls = ParserManager.get_parser(tool_parser_name="hermes", enable_auto_tools=True, tokenizer=tokenizer)
    with pytest.raises(VLLMValidationError, match="tool 'f'.*'not: {items}'"):
        cls(tokenizer, request.tools).adjust_request(request)


def test_auto_without_strict_tools_stays_unconstrained(tagjit_backend, tokenizer):
    assert Settings().tool_scope == "auto"
    request, _ = adjusted(tokenizer, "hermes", tool_choice="auto")
    assert tag_of(request) is None


def test_other_backends_keep_vllms_own_tag(tokenizer, monkeypatch):
    import tagjit_vllm.patches as patches
    import tagjit_vllm.tools as hook

    monkeypatch.setitem(patches._state, "active", False)
    hook.install()
    request, _ = adjusted(tokenizer, "hermes", tool_choice="required")
    assert tag_of(request) != build_tool_tag("hermes", TOOLS, "required", True, get_settings())


def adjusted_at_level(tokenizer, level: str | None, tools: list, **fields):
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.parser.parser_manager import ParserManager

    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "time?"}], tools=tools, **fields)
    kwargs = {} if level is None else {"tool_strict_level": level}
    cls = ParserManager.get_parser(tool_parser_name="hermes", enable_auto_tools=True, tokenizer=tokenizer, **kwargs)
    return cls(tokenizer, request.tools).adjust_request(request)


def with_strict(strict: bool) -> list:
    return [{"type": t["type"], "function": {**t["function"], "strict": strict}} for t in TOOLS]


def test_tool_strict_level_function_constrains_the_call_syntax_of_auto_requests(tagjit_backend, tokenizer):
    request = adjusted_at_level(tokenizer, "function", TOOLS, tool_choice="auto")
    expected = build_tool_tag("hermes", TOOLS, "auto", True, get_settings().replace(
        tool_scope="always", tool_schema_mode="auto"))
    assert tag_of(request) == expected
    assert '"city"' not in json.dumps(expected)  # arguments of tools that are not strict stay free


def test_tool_strict_level_parameter_pins_the_arguments_of_non_strict_tools(tagjit_backend, tokenizer):
    tools = with_strict(False)
    request = adjusted_at_level(tokenizer, "parameter", tools, tool_choice="required")
    tag = tag_of(request)
    assert tag == build_tool_tag("hermes", tools, "required", True, get_settings().replace(
        tool_scope="always", tool_schema_mode="strict"))
    assert '"city"' in json.dumps(tag)


def test_an_unset_tool_strict_level_keeps_tagjits_default(tagjit_backend, tokenizer):
    request = adjusted_at_level(tokenizer, None, TOOLS, tool_choice="required")
    tag = tag_of(request)
    assert tag == build_tool_tag("hermes", TOOLS, "required", True, get_settings())
    assert '"city"' in json.dumps(tag)  # tagjit's default: arguments constrained unless a tool says strict: false


@pytest.mark.parametrize("level, scope, mode", [
    ("function", "always", "auto"), ("parameter", "always", "strict")])
def test_each_tool_strict_level_maps_to_tagjits_scope_and_schema_mode(level, scope, mode):
    from vllm.tool_parsers.tool_strict_level import ToolStrictLevel

    from tagjit_vllm.tools import strict_level_settings

    settings = strict_level_settings(Settings(), ToolStrictLevel.from_name(level))
    assert (settings.tool_scope, settings.tool_schema_mode) == (scope, mode)


def test_tool_strict_level_auto_means_vllms_auto_where_vllm_can_tell_it_from_unset():
    from vllm.parser.abstract_parser import DelegatingParser
    from vllm.tool_parsers.tool_strict_level import ToolStrictLevel

    from tagjit_vllm.tools import strict_level_settings

    settings = strict_level_settings(Settings(), ToolStrictLevel.AUTO)
    if DelegatingParser.tool_strict_level is None:  # 0.33: unset is None, so auto was asked for
        assert (settings.tool_scope, settings.tool_schema_mode) == ("auto", "auto")
    else:  # 0.32: auto is the flag's default
        assert settings == Settings()


def test_disable_any_whitespace_reaches_the_tool_tag(tagjit_backend, tokenizer, monkeypatch):
    import tagjit_vllm.patches as patches

    monkeypatch.setitem(patches._state, "compact", True)
    request, _ = adjusted(tokenizer, "hermes", tool_choice="required")
    compact = build_tool_tag("hermes", TOOLS, "required", True, get_settings().replace(max_whitespace=0))
    assert tag_of(request) == compact
    assert compact != build_tool_tag("hermes", TOOLS, "required", True, get_settings())


# -- agent requests: tools and a JSON response_format ----------------------------------------------

ANSWER = {"type": "object", "properties": {"done": {"type": "boolean"}}, "required": ["done"]}
JSON_ANSWER = {"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER}}


def test_auto_with_a_json_schema_answer_gets_the_calls_or_answer_tag(tagjit_backend, tokenizer):
    request, _ = adjusted(tokenizer, "hermes", tool_choice="auto", response_format=JSON_ANSWER)
    assert tag_of(request) == build_tool_tag("hermes", TOOLS, "auto", True, get_settings(), answer=ANSWER)
    assert request.response_format is None


def test_auto_with_a_json_object_answer_takes_any_object(tagjit_backend, tokenizer):
    request, _ = adjusted(tokenizer, "hermes", tool_choice="auto", response_format={"type": "json_object"})
    assert tag_of(request) == build_tool_tag("hermes", TOOLS, "auto", True, get_settings(),
                                             answer={"type": "object"})


def test_required_with_an_answer_gets_the_calls_only_tag(tagjit_backend, tokenizer):
    request, _ = adjusted(tokenizer, "hermes", tool_choice="required", response_format=JSON_ANSWER)
    assert tag_of(request) == build_tool_tag("hermes", TOOLS, "required", True, get_settings())


def test_none_with_an_answer_keeps_vllms_json_answer(tagjit_backend, tokenizer):
    request, _ = adjusted(tokenizer, "hermes", tool_choice="none", response_format=JSON_ANSWER)
    assert tag_of(request) is None
    assert request.response_format is not None


def test_an_answer_schema_tagjit_refuses_is_a_validation_error_on_response_format(tagjit_backend, tokenizer):
    from vllm.exceptions import VLLMValidationError

    overlapping = {"type": "json_schema", "json_schema": {"name": "a", "schema": {
        "oneOf": [{"type": "array", "items": {"type": "string"}},
                  {"type": "array", "items": {"type": "string", "maxLength": 3}}]}}}
    with pytest.raises(VLLMValidationError, match="response_format: .*oneOf") as e:
        adjusted(tokenizer, "hermes", tool_choice="auto", response_format=overlapping)
    assert e.value.parameter == "response_format"


def test_a_regex_output_constraint_beside_tools_keeps_vllms_handling(tagjit_backend, tokenizer):
    request, _ = adjusted(tokenizer, "hermes", tool_choice="auto", structured_outputs={"regex": "[a-z]+"})
    assert tag_of(request) is None and request.structured_outputs.regex == "[a-z]+"
