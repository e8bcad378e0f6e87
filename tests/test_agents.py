"""Agent requests: tools and a JSON final answer (``response_format``) in one request, in every format.

Under ``auto`` the output is tool calls or exactly one JSON value under the answer's schema, nothing around it
(every format's grammar; the round trips for the formats vLLM's parsers read);
under ``none`` the value only; ``required`` and named choices ignore the answer (it belongs to the turn after the
tool results). Tags are compiled by the real compile service over the Qwen2 vocabulary, outputs are walked from
them and read back by vLLM's own composed parser, as in ``test_tool_formats``.
"""

from __future__ import annotations

import json
import random

import jsonschema
import numpy as np
import pytest

from tagjit import Constraint, ConstraintError, Settings, UnsupportedFeatureError
from tagjit import report
from tagjit.runtime.matcher import Matcher, allocate_token_bitmask
from tagjit.tools import bfcl, build_tool_tag, format_names, load_format

from shared_data import DATA
from walk import format_closers

pytest.importorskip("vllm")
from test_tool_formats import check_call, parse  # noqa: E402  (needs vLLM)

ALL = format_names()
FORMATS = [n for n in ALL if load_format(n).vllm_tool_parsers]  # those vLLM's own parser reads back
TRIGGERED = [n for n in ALL if load_format(n).layout == "triggered"]
# The final answer of a support agent: an enum first, so a walk's first choice is forced by the schema.
VERDICT = {"type": "object", "properties": {
    "verdict": {"type": "string", "enum": ["resolved", "escalate"]},
    "summary": {"type": "string", "maxLength": 40},
    "ticket_ids": {"type": "array", "items": {"type": "integer"}, "maxItems": 3}},
    "required": ["verdict", "summary"], "additionalProperties": False}
ANSWER_START = '{"verdict": "'


@pytest.fixture(scope="module")
def bfcl_tools() -> list[dict]:
    return bfcl.load_tools(str(DATA / "bfcl"), 6)


def grammar(svc, fmt, tools, choice="auto", parallel=True, answer=VERDICT, **kw):
    tag = build_tool_tag(fmt, tools, choice, parallel, Settings(), answer=answer, **kw)
    return svc.grammar(Constraint.of("structural_tag", tag))


def answer_head(fmt) -> str:
    """What precedes the answer's JSON: the final message's opening in a messages layout, else nothing."""
    return fmt.messages[0].begin if fmt.layout == "messages" else ""


def call_head(fmt, name: str) -> str:
    head = (fmt.forced_prefix + (fmt.wrapper[0] if fmt.wrapper else "")) if fmt.layout == "triggered" else ""
    return head + fmt.render_begin(name).split("{index}")[0]


def json_part(fmt, text: str) -> dict:
    body = text[len(answer_head(fmt)):]
    if fmt.layout == "messages":
        for end in fmt.messages[0].end if isinstance(fmt.messages[0].end, tuple) else (fmt.messages[0].end,):
            body = body.removesuffix(end)
    return json.loads(body)


# -- auto: calls or the answer -------------------------------------------------------------------

@pytest.mark.parametrize("name", FORMATS)
def test_auto_with_an_answer_gives_calls_the_parser_returns(name, svc, walker, hf_tokenizer, bfcl_tools):
    fmt = load_format(name)
    tool = bfcl_tools[3]
    text = walker.walk(grammar(svc, fmt, bfcl_tools), prefix=call_head(fmt, tool["function"]["name"]),
                       closers=format_closers(fmt))
    _, calls = parse(fmt, hf_tokenizer, bfcl_tools, "auto", text)
    assert len(calls) == 1, text
    check_call(calls[0], tool)


@pytest.mark.parametrize("name", FORMATS)
def test_auto_with_an_answer_gives_one_json_value_under_the_schema(name, svc, walker, hf_tokenizer, bfcl_tools):
    fmt = load_format(name)
    text = walker.walk(grammar(svc, fmt, bfcl_tools), prefix=answer_head(fmt) + ANSWER_START,
                       closers=format_closers(fmt))
    jsonschema.validate(json_part(fmt, text), VERDICT)
    content, calls = parse(fmt, hf_tokenizer, bfcl_tools, "auto", text)
    assert calls == []
    jsonschema.validate(json.loads(content), VERDICT)


@pytest.mark.parametrize("name", ALL)
def test_auto_with_an_answer_rejects_text_around_it(name, svc, bfcl_tools):
    fmt = load_format(name)
    g = grammar(svc, fmt, bfcl_tools)
    assert not g.accept_string(answer_head(fmt) + "Sure, ")
    g = grammar(svc, fmt, bfcl_tools)
    answer = answer_head(fmt) + '{"verdict": "resolved", "summary": "done"}'
    assert g.accept_string(answer)
    assert not g.accept_string(" and more")


@pytest.mark.parametrize("name", ALL)
def test_auto_with_an_answer_rejects_an_answer_outside_the_schema(name, svc, bfcl_tools):
    fmt = load_format(name)
    assert not grammar(svc, fmt, bfcl_tools).accept_string(answer_head(fmt) + '{"verdict": "maybe"')
    assert not grammar(svc, fmt, bfcl_tools).accept_string(answer_head(fmt) + '{"summary": "x", "verdict"')


@pytest.mark.parametrize("name", TRIGGERED)
def test_auto_with_an_answer_and_parallel_calls_off_allows_one_call(name, svc, walker, bfcl_tools):
    fmt = load_format(name)
    tool = bfcl_tools[0]
    one = walker.walk(grammar(svc, fmt, bfcl_tools, parallel=False), prefix=call_head(fmt, tool["function"]["name"]),
                      closers=format_closers(fmt))
    g = grammar(svc, fmt, bfcl_tools, parallel=False)
    inner = one[: one.rindex(fmt.wrapper[1])] if fmt.wrapper else one
    assert g.accept_string(inner)
    assert not g.accept_string(fmt.separator + fmt.render_begin(tool["function"]["name"]))


def test_auto_with_an_answer_and_parallel_calls_on_allows_several_calls(svc, bfcl_tools):
    fmt = load_format("hermes")
    g = grammar(svc, fmt, bfcl_tools)
    assert g.accept_string(fmt.render_begin(bfcl_tools[0]["function"]["name"]))
    g = grammar(svc, "hermes", [{"type": "function", "function": {"name": "ping", "parameters": {
        "type": "object", "properties": {}}}}])
    assert g.accept_string('<tool_call>{"name": "ping", "arguments": {}}</tool_call>\n'
                           '<tool_call>{"name": "ping", "arguments": {}}</tool_call>')
    assert g.is_completed()


def test_a_reasoning_block_may_precede_the_answer_or_the_calls(svc, bfcl_tools):
    tools = [{"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}]
    call = "<tool_call>\n<function=get_time>\n<parameter=zone>\nUTC\n</parameter>\n</function>\n</tool_call>"
    answer = '{"verdict": "resolved", "summary": "ok"}'
    for text in ("<think>Is a call needed? No.</think>\n\n" + answer, "<think>Need the time.</think>\n\n" + call):
        g = grammar(svc, "qwen3_coder", tools, reasoning=True)
        assert g.accept_string(text) and g.is_completed(), text
    assert not grammar(svc, "qwen3_coder", tools, reasoning=True).accept_string(
        "<think>x</think>\n\nThe answer is " + answer)


def test_harmony_answers_in_the_final_channel_after_analysis(svc, bfcl_tools):
    fmt = load_format("gpt_oss")
    text = ("<|channel|>analysis<|message|>No tool needed.<|end|><|start|>assistant"
            '<|channel|>final<|message|>{"verdict": "escalate", "summary": "billing"}<|return|>')
    g = grammar(svc, fmt, bfcl_tools, reasoning=True)
    assert g.accept_string(text) and g.is_completed()
    assert not grammar(svc, fmt, bfcl_tools, reasoning=True).accept_string("<|channel|>final<|message|>Sure")


# -- none and required ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ALL)
def test_none_with_an_answer_gives_the_answer_only(name, svc, walker, bfcl_tools):
    fmt = load_format(name)
    assert not grammar(svc, fmt, bfcl_tools, "none").accept_string(call_head(fmt, bfcl_tools[0]["function"]["name"]))
    text = walker.walk(grammar(svc, fmt, bfcl_tools, "none"), prefix=answer_head(fmt), closers=format_closers(fmt))
    jsonschema.validate(json_part(fmt, text), VERDICT)


@pytest.mark.parametrize("name", ALL)
def test_required_with_an_answer_gives_calls_only(name, svc, bfcl_tools):
    fmt = load_format(name)
    g = grammar(svc, fmt, bfcl_tools, "required")
    assert not g.accept_string(answer_head(fmt) + ANSWER_START)
    assert grammar(svc, fmt, bfcl_tools, "required").accept_string(call_head(fmt, bfcl_tools[1]["function"]["name"]))


def test_a_named_tool_ignores_the_answer():
    named = {"type": "function", "function": {"name": "get_time"}}
    tools = [{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]
    assert (build_tool_tag("hermes", tools, named, answer=VERDICT, settings=Settings())
            == build_tool_tag("hermes", tools, named, settings=Settings()))


def test_auto_without_tools_the_tag_constrains_the_answer_alone(svc):
    tag = build_tool_tag("hermes", [], "auto", answer=VERDICT, settings=Settings())
    assert tag["format"]["type"] == "json_schema"


# -- the answer's schema: refused, relaxed and reported like a plain response_format ---------------

def test_an_answer_schema_tagjit_cannot_enforce_is_refused_with_the_feature_and_the_opt_in():
    overlapping = {"oneOf": [{"type": "array", "items": {"type": "string"}},
                             {"type": "array", "items": {"type": "string", "maxLength": 3}}]}
    with pytest.raises(UnsupportedFeatureError, match=r"^response_format: .*oneOf.*TAGJIT_RELAX=oneOf"):
        build_tool_tag("hermes", [], "auto", answer=overlapping, settings=Settings())


def test_an_answer_schema_that_opts_into_a_relaxation_is_served_and_reported(svc):
    schema = {"x-tagjit-relax": ["oneOf"], "oneOf": [{"type": "array", "items": {"type": "string"}},
                                                     {"type": "array", "items": {"type": "string", "maxLength": 3}}]}
    with report.collecting() as seen:
        tag = build_tool_tag("hermes", [], "auto", answer=schema, settings=Settings())
    assert seen and seen[0].startswith("response_format: oneOf")
    g = svc.grammar(Constraint.of("structural_tag", tag))
    assert g.accept_string('["abcdef"]') and g.is_completed()


def test_when_no_tool_can_be_called_the_answer_still_can_be_given(svc):
    broken = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "boolean", "enum": ["yes"]}}, "required": ["x"]}}}]
    with pytest.raises(ConstraintError, match="no tool can be called"):
        build_tool_tag("hermes", broken, "required", settings=Settings())
    tag = build_tool_tag("hermes", broken, "auto", answer=VERDICT, settings=Settings())
    g = svc.grammar(Constraint.of("structural_tag", tag))
    assert not g.accept_string("<tool_call>")


def test_property_order_of_the_answer_is_kept():
    schema = {"type": "object", "properties": {"z": {"type": "string"}, "a": {"type": "integer"}}}
    tag = build_tool_tag("hermes", [], "auto", answer=schema, settings=Settings())
    assert list(tag["format"]["json_schema"]["properties"]) == ["z", "a"]


# -- masks: exactly the union of the calls' and the answer's ------------------------------------------

def allowed(matcher, info) -> set[int]:
    mask = allocate_token_bitmask(1, info.vocab_size)
    matcher.fill_bitmask(mask, 0)
    return set(np.nonzero(np.unpackbits(mask[0].numpy().view(np.uint8), bitorder="little")[: info.vocab_size])[0]
               .tolist())


@pytest.mark.parametrize("name,seed", [("hermes", 0), ("hermes", 1), ("llama3_json", 2), ("deepseek_v31", 3),
                                       ("qwen3_coder", 4), ("gpt_oss", 5)])
def test_masks_are_the_union_of_the_calls_and_the_answer_on_random_walks(name, seed, svc, bfcl_tools):
    """At every step the agent tag allows exactly what the calls-only tag or the answer-only tag still allows."""
    info = svc.tokenizer_info
    agent, calls, answer = (Matcher(svc.compile(Constraint.of("structural_tag", build_tool_tag(
        name, bfcl_tools, choice, answer=VERDICT, settings=Settings()))), vocab_size=info.vocab_size)
        for choice in ("auto", "required", "none"))
    live = [calls, answer]
    rng, stops, vocab = random.Random(seed), set(info.stop_token_ids), [bytes(t) for t in info.decoded_vocab]
    for step in range(120):
        ours = allowed(agent, info)
        assert ours == set().union(*(allowed(m, info) for m in live)), f"masks differ at step {step}"
        assert agent.is_completed() == any(m.is_completed() for m in live)
        choices = [t for t in ours if t not in stops]
        if not choices:
            break
        closing = [t for t in choices if vocab[t][-1:] in (b'"', b"}", b"]", b">")]
        token = rng.choice(closing if closing and rng.random() < 0.4 else sorted(choices))
        assert agent.accept_token(token)
        live = [m for m in live if m.accept_token(token)]
    assert step > 10
