"""Round trips per format: text walked from the tag parses with vLLM's own parser into the call.

For real BFCL functions, a deterministic walk (tests/walk.py) through the compiled tag produces the
model output; vLLM's composed Parser (the one its OpenAI server uses, with the format's tool
parser) must return the intended function with arguments that validate against the tool's schema.
Texts in another format, with an unknown tool name, or with a second call when parallel calls are
off must be rejected by the grammar. The Qwen2 vocabulary is used for the walk (tool-call markers
are several tokens there); the parser gets the same tokenizer with the format's markers added as
special tokens, as the real models have them.
"""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest

from tagjit.tools import bfcl
from tagjit import Constraint, Settings
from tagjit.tools import ToolFormat, format_names, load_format
from tagjit.tools import build_tool_tag

from shared_data import DATA
from walk import format_closers

vllm = pytest.importorskip("vllm")

VLLM_FORMATS = [n for n in format_names() if load_format(n).vllm_tool_parsers]
# BFCL simple_python functions with strings, integers, numbers, arrays and enums among them.
TOOL_COUNT = 8


@pytest.fixture(scope="module")
def bfcl_tools() -> list[dict]:
    return bfcl.load_tools(str(DATA / "bfcl"), TOOL_COUNT)


def parse(fmt: ToolFormat, hf_tokenizer, tools: list[dict], choice, text: str, parser_name: str | None = None):
    """Tool calls as vLLM's OpenAI server would return them for this output."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.parser.parser_manager import ParserManager

    tok = copy.deepcopy(hf_tokenizer)
    tok.add_special_tokens({"additional_special_tokens": list(fmt.special_tokens)})
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "go"}], tools=tools,
                                    tool_choice=choice)
    name = parser_name or fmt.vllm_tool_parsers[0]
    cls = ParserManager.get_parser(tool_parser_name=name, enable_auto_tools=True, tokenizer=tok,
                                   is_harmony=fmt.layout == "messages")
    parser = cls(tok, request.tools)
    ids = _harmony_ids(text) if fmt.layout == "messages" else ()
    _, content, calls = parser.parse(text, request, enable_auto_tools=True, model_output_token_ids=ids)
    return content, calls or []


def _harmony_ids(text: str) -> list[int]:
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding

    enc = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    return enc.encode(text, allowed_special="all")


def grammar(svc, fmt, tools, choice, parallel=True, **kw):
    tag = build_tool_tag(fmt, tools, choice, parallel, Settings(), **kw)
    return svc.grammar(Constraint.of("structural_tag", tag))


def check_call(call, tool: dict) -> None:
    assert call.name == tool["function"]["name"]
    jsonschema.validate(json.loads(call.arguments), tool["function"]["parameters"])


@pytest.mark.parametrize("name", VLLM_FORMATS)
def test_named_calls_round_trip_through_the_vllm_parser(name, svc, walker, hf_tokenizer, bfcl_tools):
    fmt = load_format(name)
    for tool in bfcl_tools[:4]:
        choice = {"type": "function", "function": {"name": tool["function"]["name"]}}
        text = walker.walk(grammar(svc, fmt, bfcl_tools, choice), closers=format_closers(fmt))
        content, calls = parse(fmt, hf_tokenizer, bfcl_tools, choice, text)
        assert len(calls) == 1, (text, content)
        check_call(calls[0], tool)


@pytest.mark.parametrize("name", VLLM_FORMATS)
def test_required_calls_to_each_tool_round_trip(name, svc, walker, hf_tokenizer, bfcl_tools):
    fmt = load_format(name)
    names = [t["function"]["name"] for t in bfcl_tools]
    # A name that begins another name would be ambiguous where nothing closes the name (GLM).
    distinct = [t for t in bfcl_tools if not any(n != t["function"]["name"] and n.startswith(t["function"]["name"])
                                                   for n in names)]
    for tool in distinct[1::3]:
        head = (fmt.forced_prefix + (fmt.wrapper[0] if fmt.wrapper else "")) if fmt.layout == "triggered" else ""
        prefix = head + fmt.render_begin(tool["function"]["name"]).split("{index}")[0]
        text = walker.walk(grammar(svc, fmt, bfcl_tools, "required"), prefix=prefix, closers=format_closers(fmt))
        _, calls = parse(fmt, hf_tokenizer, bfcl_tools, "required", text)
        assert len(calls) == 1, text
        check_call(calls[0], tool)


@pytest.mark.parametrize("name", [n for n in VLLM_FORMATS if load_format(n).layout == "triggered"])
def test_auto_text_then_a_call_round_trips(name, svc, walker, hf_tokenizer, bfcl_tools):
    fmt = load_format(name)
    tool = bfcl_tools[2]
    head = fmt.wrapper[0] if fmt.wrapper else ""
    prefix = "Let me check. " + head + fmt.render_begin(tool["function"]["name"])
    g = grammar(svc, fmt, bfcl_tools, "auto", parallel=False)
    text = walker.walk(g, prefix=prefix.split("{index}")[0], closers=format_closers(fmt))
    content, calls = parse(fmt, hf_tokenizer, bfcl_tools, "auto", text)
    assert len(calls) == 1, text
    check_call(calls[0], tool)
    assert content is None or content.strip() in ("", "Let me check.")


@pytest.mark.parametrize("name", VLLM_FORMATS)
def test_unknown_tool_name_is_rejected(name, svc, bfcl_tools):
    fmt = load_format(name)
    head = (fmt.forced_prefix + (fmt.wrapper[0] if fmt.wrapper else "")) if fmt.layout == "triggered" else ""
    g = grammar(svc, fmt, bfcl_tools, "required")
    assert not g.accept_string(head + fmt.render_begin("no_such_tool"))


@pytest.mark.parametrize("name", VLLM_FORMATS)
def test_second_call_is_rejected_when_parallel_calls_are_off(name, svc, walker, bfcl_tools):
    fmt = load_format(name)
    tool = bfcl_tools[0]
    choice = {"type": "function", "function": {"name": tool["function"]["name"]}}
    first = walker.walk(grammar(svc, fmt, bfcl_tools, choice), closers=format_closers(fmt))
    g = grammar(svc, fmt, bfcl_tools, "required", parallel=False)
    inner = first
    if fmt.wrapper and fmt.layout == "triggered":  # drop the wrapper end: try a second call inside it
        inner = first[: first.rindex(fmt.wrapper[1])]
    assert g.accept_string(inner)
    assert not g.accept_string(fmt.separator + fmt.render_begin(tool["function"]["name"]))


@pytest.mark.parametrize("name", VLLM_FORMATS)
def test_a_call_in_another_format_is_rejected(name, svc, walker, bfcl_tools):
    fmt = load_format(name)
    other = load_format("qwen3_coder" if fmt.trigger != "<tool_call>" or fmt.arguments == "json" else "hermes")
    choice = {"type": "function", "function": {"name": bfcl_tools[0]["function"]["name"]}}
    foreign = walker.walk(grammar(svc, other, bfcl_tools, choice), closers=format_closers(other))
    g = grammar(svc, fmt, bfcl_tools, "required")
    assert not (g.accept_string(foreign) and g.is_completed())


@pytest.mark.parametrize("name", VLLM_FORMATS)
def test_none_rejects_the_tool_call_opening(name, svc, bfcl_tools):
    fmt = load_format(name)
    lead = "" if fmt.layout == "messages" else "Sure, "
    g = grammar(svc, fmt, bfcl_tools, "none")
    assert g.accept_string(lead)
    assert not g.accept_string(fmt.openings[0])


def test_mistral_v11_calls_round_trip_through_vllms_mistral_parser(svc, walker, hf_tokenizer, bfcl_tools):
    # vLLM's mistral parser reads [TOOL_CALLS]NAME[ARGS]{...} when the vocabulary has [ARGS] (v11+).
    fmt = load_format("mistral_v11")
    texts = []
    for tool in bfcl_tools[:2]:
        prefix = fmt.render_begin(tool["function"]["name"])
        texts.append(walker.walk(grammar(svc, fmt, bfcl_tools, "required"), prefix=prefix, closers=format_closers(fmt)))
    both = "".join(texts)
    g = grammar(svc, fmt, bfcl_tools, "required")
    assert g.accept_string(both) and g.is_completed()
    _, calls = parse(fmt, hf_tokenizer, bfcl_tools, "required", both, parser_name="mistral")
    assert len(calls) == 2, both
    for call, tool in zip(calls, bfcl_tools[:2]):
        check_call(call, tool)


def test_mistral_v11_is_chosen_for_the_mistral_parser_when_the_vocabulary_has_args(hf_tokenizer):
    from tagjit.tools import format_for_parser

    vocab = dict(hf_tokenizer.get_vocab())
    assert format_for_parser("mistral", vocab=vocab).name == "mistral"
    assert format_for_parser("mistral", vocab={**vocab, "[ARGS]": len(vocab)}).name == "mistral_v11"
