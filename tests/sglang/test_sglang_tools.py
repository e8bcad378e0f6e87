"""Tool calls in SGLang 0.5.23 with ``--grammar-backend tagjit``: tags from tagjit's format registry.

The serving tests run in a spawned process started like SGLang's API server (``load_plugins()``
first, so tagjit's hooks are applied by SGLang's HookRegistry) and call SGLang's own
``OpenAIServingChat`` (api_side.py): its request conversion, its ``handle_request`` and its
tool-call response parsing. The round-trip tests walk tagjit's tag for each format that an SGLang
tool parser maps to (tests/walk.py, Qwen2 vocabulary) and read the output with SGLang's own
``FunctionCallParser`` for that parser. Tools are real BFCL functions. Needs ``.venv-sglang``.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("sglang.srt.function_call.function_call_parser",
                    reason="SGLang is not installed here (run in .venv-sglang: scripts/setup_sglang.sh)")
import jsonschema  # noqa: E402

from tagjit.tools import bfcl
from tagjit import Constraint, Settings, get_settings  # noqa: E402
from tagjit.tools import build_tool_tag
from tagjit.tools import format_for_parser, format_names, load_format  # noqa: E402
from walk import format_closers  # noqa: E402

pytestmark = pytest.mark.sglang
HERE = Path(__file__).resolve().parent
DATA = Path(os.environ.get("TAGJIT_SHARED_DATA", HERE.parents[2] / "shared" / "data"))


@pytest.fixture(scope="module")
def api():
    """One spawned API-server-side process for the module, tagjit loaded by SGLang's plugin loader."""
    sys.path.insert(0, str(HERE))
    ctx = multiprocessing.get_context("spawn")
    import scheduler_side

    with ProcessPoolExecutor(1, mp_context=ctx, initializer=scheduler_side.init) as pool:
        import api_side

        yield lambda fn, *a, **kw: pool.submit(getattr(api_side, fn), *a, **kw).result(timeout=300)


@pytest.fixture(scope="module")
def tools() -> list[dict]:
    """BFCL functions as OpenAI tools; names without dots (SGLang's gpt-oss parser drops the namespace)."""
    return [t for t in bfcl.load_tools(str(DATA / "bfcl"), 40) if "." not in t["function"]["name"]][:4]


def named(tool: dict) -> dict:
    return {"type": "function", "function": {"name": tool["function"]["name"]}}


def strict(tool: dict) -> dict:
    return {"type": "function", "function": {**tool["function"], "strict": True}}


# -- the serving layer -----------------------------------------------------------------------------

def test_hooks_are_registered_once_and_applied_by_load_plugins(api):
    for target, state in api("hooks_applied").items():
        assert state == {"hooks": 1, "applied": True}, target


def test_required_uses_tagjits_tag_for_the_parsers_format(api, tools):
    got = api("sampling_constraint", "qwen25", tools, "required")
    assert got == {"structural_tag": build_tool_tag("qwen25", tools, "required", True, get_settings())}


def test_a_named_tool_gets_tagjits_tag_for_that_tool_only(api, tools):
    got = api("sampling_constraint", "hermes", tools, named(tools[2]))
    assert got == {"structural_tag": build_tool_tag("hermes", tools, named(tools[2]), True, get_settings())}


def test_auto_with_a_strict_tool_gets_tagjits_tag(api, tools):
    with_strict = [*tools[:2], strict(tools[2])]
    got = api("sampling_constraint", "qwen3_coder", with_strict, "auto")
    expected = build_tool_tag(load_format("qwen3_coder"), with_strict, "auto", True, get_settings())
    assert got == {"structural_tag": expected} and expected["format"]["type"] == "triggered_tags"


def test_auto_without_strict_tools_stays_unconstrained_as_in_sglang(api, tools):
    assert api("sampling_constraint", "qwen25", tools, "auto", parallel_tool_calls=False) == {}


def test_with_a_reasoning_parser_the_tag_leaves_think_tokens_to_it(api, tools):
    # The engine gates reasoning (tagjit's backend waits for </think>), so the tag has no reasoning
    # block, and SGLang strips the think tokens from its free-text excludes as it does for its own.
    with_strict = [*tools[:2], strict(tools[2])]
    got = api("sampling_constraint", "qwen25", with_strict, "auto", server={"reasoning_parser": "qwen3"})
    expected = build_tool_tag("qwen25", with_strict, "auto", True, get_settings())
    assert expected["format"]["excludes"] == ["<think>", "</think>"]
    expected["format"]["excludes"] = []
    assert got == {"structural_tag": expected}


def test_parallel_tool_calls_false_allows_one_call(api, tools):
    got = api("sampling_constraint", "qwen25", tools, "required", parallel_tool_calls=False)
    assert got["structural_tag"] == build_tool_tag("qwen25", tools, "required", False, get_settings())
    assert got["structural_tag"]["format"]["stop_after_first"] is True


def test_a_parser_without_a_tagjit_format_keeps_sglangs_tag(api, tools):
    got = api("sampling_constraint", "interns1", tools, "required")
    assert got == {"structural_tag": api("sglang_own_constraint", "interns1", tools, "required")[1]}


def test_a_json_schema_fallback_stays_sglangs(api, tools):
    # GLM-4.5's detector has no native tag; SGLang reads required output as a JSON array.
    own = api("sglang_own_constraint", "glm45", tools, "required")
    assert own[0] == "json_schema"
    assert api("sampling_constraint", "glm45", tools, "required") == {"json_schema": own[1]}


def test_another_grammar_backend_keeps_sglangs_tag(api, tools):
    got = api("sampling_constraint", "qwen25", tools, "required", grammar_backend="xgrammar")
    own = api("sglang_own_constraint", "qwen25", tools, "required")[1]
    assert got == {"structural_tag": own} and "structures" in own  # SGLang's legacy form, not tagjit's


def test_tagjit_sglang_tools_0_keeps_sglangs_tag(api, tools):
    got = api("sampling_constraint", "qwen25", tools, "required", env={"TAGJIT_SGLANG_TOOLS": "0"})
    assert got == {"structural_tag": api("sglang_own_constraint", "qwen25", tools, "required")[1]}


DEDUPE = {"type": "function", "function": {"name": "dedupe", "parameters": {
    "type": "object", "properties": {"ids": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}}}}}


def test_a_tool_tagjit_cannot_enforce_exactly_is_served_by_its_relaxation(api, tools):
    got = api("sampling_constraint", "qwen25", [*tools[:1], DEDUPE], "required")
    tag = json.dumps(got["structural_tag"])
    assert "dedupe" in tag and "uniqueItems" not in tag


def test_a_server_that_refuses_unenforceable_tools_answers_http_400_naming_it(api, tools):
    got = api("http_error", "qwen25", [*tools[:1], DEDUPE], "required", env={"TAGJIT_UNENFORCEABLE_TOOLS": "refuse"})
    assert got["status"] == 400 and got["type"] == "BadRequest"
    assert "dedupe" in got["message"] and "uniqueItems" in got["message"]


def test_a_tool_name_the_syntax_cannot_carry_is_http_400(api, tools):
    bad = {"type": "function", "function": {"name": "get<weather>", "parameters": {"type": "object"}}}
    got = api("http_error", "qwen25", [bad], "required")
    assert got["status"] == 400 and "get<weather>" in got["message"]


def test_the_tag_compiles_in_tagjits_backend_and_sglang_reads_the_call(api, tools):
    tool = tools[0]  # calculate_triangle_area(base: int, height: int, unit: str)
    args = {"base": 10, "height": 5}
    output = f'<tool_call>\n{{"name": "{tool["function"]["name"]}", "arguments": {json.dumps(args)}}}\n</tool_call>'
    got = api("generate_and_parse", "qwen25", tools, "required", output)
    assert got["grammar"] == "TagjitGrammar" and got["error"] is None and got["terminated"]
    assert got["calls"] == [{"name": tool["function"]["name"], "arguments": args}]
    assert got["finish"] == "tool_calls"


def test_the_tag_refuses_a_call_outside_tools_before_sglang_sees_it(api, tools):
    output = '<tool_call>\n{"name": "launch_rocket", "arguments": {}}\n</tool_call>'
    got = api("generate_and_parse", "qwen25", tools, "required", output)
    assert got["error"] is not None and not got["terminated"]


# -- agent requests: tools and a JSON response_format ----------------------------------------------

ANSWER = {"type": "object", "properties": {"done": {"type": "boolean"}}, "required": ["done"]}
JSON_ANSWER = {"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER}}


def test_auto_with_a_json_answer_gets_tagjits_calls_or_answer_tag(api, tools):
    got = api("sampling_constraint", "qwen25", tools, "auto", response_format=JSON_ANSWER)
    assert got == {"structural_tag": build_tool_tag("qwen25", tools, "auto", True, get_settings(), answer=ANSWER)}


def test_auto_with_a_json_object_answer_takes_any_object(api, tools):
    got = api("sampling_constraint", "hermes", tools, "auto", response_format={"type": "json_object"})
    assert got == {"structural_tag": build_tool_tag("hermes", tools, "auto", True, get_settings(),
                                                    answer={"type": "object"})}


def test_required_with_a_json_answer_gets_the_calls_tag_where_sglang_alone_refuses(api, tools):
    got = api("sampling_constraint", "qwen25", tools, "required", response_format=JSON_ANSWER)
    assert got == {"structural_tag": build_tool_tag("qwen25", tools, "required", True, get_settings())}


def test_none_with_a_json_answer_keeps_sglangs_json_answer(api, tools):
    got = api("sampling_constraint", "qwen25", tools, "none", response_format=JSON_ANSWER)
    assert got == {"json_schema": ANSWER}


def test_an_agent_answer_is_read_as_content_and_a_call_as_a_call(api, tools):
    tool = tools[0]  # calculate_triangle_area(base: int, height: int, unit: str)
    call = f'<tool_call>\n{{"name": "{tool["function"]["name"]}", "arguments": {{"base": 3, "height": 4}}}}\n</tool_call>'
    got = api("generate_and_parse", "qwen25", tools, "auto", call, response_format=JSON_ANSWER)
    assert got["error"] is None and got["terminated"] and got["parses"]
    assert got["calls"] == [{"name": tool["function"]["name"], "arguments": {"base": 3, "height": 4}}]
    got = api("generate_and_parse", "qwen25", tools, "auto", '{"done": true}', response_format=JSON_ANSWER)
    assert got["error"] is None and got["terminated"] and got["parses"]
    assert got["calls"] == [] and json.loads(got["content"]) == {"done": True}


def llama3_call(tool: dict, args: dict) -> str:
    return f'{{"name": "{tool["function"]["name"]}", "parameters": {json.dumps(args)}}}'


def test_bare_json_calls_beside_an_answer_get_tagjits_calls_or_answer_tag(api, tools):
    assert load_format("llama3_json").bare_json_calls
    got = api("sampling_constraint", "llama3", tools, "auto", response_format=JSON_ANSWER)
    assert got == {"structural_tag": build_tool_tag("llama3_json", tools, "auto", True, get_settings(),
                                                    answer=ANSWER)}


def test_where_calls_are_bare_json_an_agent_answer_is_content_and_a_call_a_call(api, tools):
    # SGLang's llama3 detector alone reads every JSON output as a call attempt and drops the answer.
    call = llama3_call(tools[0], {"base": 3, "height": 4})
    got = api("generate_and_parse", "llama3", tools, "auto", call, response_format=JSON_ANSWER)
    assert got["error"] is None and got["terminated"] and got["parses"]
    assert got["calls"] == [{"name": tools[0]["function"]["name"], "arguments": {"base": 3, "height": 4}}]
    got = api("generate_and_parse", "llama3", tools, "auto", '{"done": true}', response_format=JSON_ANSWER)
    assert got["error"] is None and got["terminated"] and got["parses"]
    assert got["calls"] == [] and json.loads(got["content"]) == {"done": True}


def test_a_streamed_bare_json_answer_arrives_as_content_at_the_end(api, tools):
    got = api("stream_and_parse", "llama3", tools, "auto", '{"done": true}', response_format=JSON_ANSWER)
    assert got["calls"] == [] and len(got["content"]) == 1 and json.loads(got["content"][0]) == {"done": True}


def test_a_streamed_answer_whose_first_key_is_name_is_not_mangled_into_content_pieces(api, tools):
    answer = {"type": "json_schema", "json_schema": {"name": "who", "schema": {
        "type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}}}
    got = api("stream_and_parse", "llama3", tools, "auto", '{"name": "Maria Lopez", "age": 34}', response_format=answer)
    assert got["calls"] == [] and [json.loads(c) for c in got["content"]] == [{"name": "Maria Lopez", "age": 34}]


def test_a_streamed_bare_json_call_streams_as_sglang_reads_it(api, tools):
    call = llama3_call(tools[0], {"base": 3, "height": 4})
    got = api("stream_and_parse", "llama3", tools, "auto", call, response_format=JSON_ANSWER)
    assert got == {"content": [], "calls": [{"name": tools[0]["function"]["name"], "arguments": {"base": 3, "height": 4}}]}
    plain = api("stream_and_parse", "llama3", tools, "auto", call)
    assert plain == got


def test_sglangs_reading_of_outputs_without_json_is_unchanged(api, tools):
    got = api("stream_and_parse", "llama3", tools, "auto", "It is sunny.")
    assert got == {"content": ["It", " is", " sunny", "."], "calls": []}


def test_an_agent_answer_outside_the_schema_is_refused_by_the_grammar(api, tools):
    got = api("generate_and_parse", "qwen25", tools, "auto", 'Done: {"done": true}', response_format=JSON_ANSWER)
    assert got["error"] is not None


# -- round trips through SGLang's own tool parsers --------------------------------------------------

SGLANG_PARSERS = list(dict.fromkeys(p for n in format_names() for p in load_format(n).sglang_tool_parsers))


@pytest.mark.parametrize("parser", SGLANG_PARSERS)
def test_walked_named_calls_parse_with_sglangs_parser(parser, svc, walker, tools):
    from sglang.srt.entrypoints.openai.protocol import Tool
    from sglang.srt.function_call.function_call_parser import FunctionCallParser

    fmt = format_for_parser(parser, "sglang")  # the format the hook uses for this parser
    # gpt-oss: SGLang's detector reads calls only after a message separator, which in a whole
    # output follows the analysis message, so the output starts with one (SGLang's thinking_mode)
    # and the walk is started into the call (free-text messages give it no end).
    messages = fmt.layout == "messages"
    for tool in tools:
        prefix = (f"{fmt.think_start}Checking.{fmt.think_end[0]}{fmt.separator}"
                  f"{fmt.render_begin(tool['function']['name'])}") if messages else ""
        tag = build_tool_tag(fmt, tools, named(tool), True, Settings(), reasoning=messages)
        text = walker.walk(svc.grammar(Constraint.of("structural_tag", tag)), prefix=prefix, closers=format_closers(fmt))
        parser_ = FunctionCallParser([Tool.model_validate(t) for t in tools], parser)
        _, calls = parser_.parse_non_stream(text)
        assert [c.name for c in calls] == [tool["function"]["name"]], text
        jsonschema.validate(json.loads(calls[0].parameters), tool["function"]["parameters"])


@pytest.mark.parametrize("parser", [p for p in SGLANG_PARSERS if format_for_parser(p, "sglang").layout == "triggered"
                                    and not format_for_parser(p, "sglang").bare_json_calls])
def test_walked_agent_outputs_parse_with_sglangs_parser_as_calls_or_content(parser, svc, walker, tools):
    """Under auto with an answer: a walk into a call is read as that call, a walk into the answer as content."""
    from sglang.srt.entrypoints.openai.protocol import Tool
    from sglang.srt.function_call.function_call_parser import FunctionCallParser

    fmt = format_for_parser(parser, "sglang")
    tag = build_tool_tag(fmt, tools, "auto", True, Settings(), answer=ANSWER)
    head = fmt.forced_prefix + (fmt.wrapper[0] if fmt.wrapper else "")
    name = tools[1]["function"]["name"]
    call = walker.walk(svc.grammar(Constraint.of("structural_tag", tag)),
                       prefix=head + fmt.render_begin(name).split("{index}")[0], closers=format_closers(fmt))
    answer = walker.walk(svc.grammar(Constraint.of("structural_tag", tag)), prefix='{"done": ',
                         closers=format_closers(fmt))
    parse = FunctionCallParser([Tool.model_validate(t) for t in tools], parser)
    _, calls = parse.parse_non_stream(call)
    assert [c.name for c in calls] == [name], call
    jsonschema.validate(json.loads(calls[0].parameters), tools[1]["function"]["parameters"])
    assert not parse.has_tool_call(answer)
    jsonschema.validate(json.loads(answer), ANSWER)
