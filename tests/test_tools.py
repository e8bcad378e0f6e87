"""Tool-call policy: which tag a request's tools, tool_choice and parallel_tool_calls produce.

Tags are compiled with the real compile service over the Qwen2 vocabulary (where ``<tool_call>``
is several tokens) and checked by what they accept and reject.
"""

from __future__ import annotations

import json

import pytest

from pools import UNHURRIED
from tagjit import CompileService, Constraint, ConstraintError, Settings, UnsupportedFeatureError
from tagjit.tools import bfcl
from tagjit import tools
from tagjit.tools import build_tool_tag
from tagjit.tools import load_format

from shared_data import DATA

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}


def call(name: str, args: dict) -> str:
    return f'<tool_call>{{"name": "{name}", "arguments": {json.dumps(args)}}}</tool_call>'


@pytest.fixture(scope="module")
def svc(qwen2_info) -> CompileService:
    return CompileService(qwen2_info, UNHURRIED)


def accepts(svc: CompileService, tag: dict, text: str) -> bool:
    g = svc.grammar(Constraint.of("structural_tag", tag))
    return g.accept_string(text) and g.is_completed()


def hermes(tools_, choice="auto", parallel=True, settings=None, **kw):
    return build_tool_tag(load_format("hermes"), tools_, choice, parallel, settings or Settings(), **kw)


# -- registry ---------------------------------------------------------------------------------

def test_every_required_family_has_a_format():
    names = set(tools.format_names())
    assert {"hermes", "qwen25", "qwen3_coder", "nemotron_nano", "deepseek_v3", "deepseek_v31", "deepseek_v3_2",
            "deepseek_v4", "llama3_json", "mistral", "kimi_k2", "gpt_oss", "glm45", "glm47"} <= names


def test_a_format_is_found_by_its_alias():
    assert load_format("harmony").name == "gpt_oss"


def test_unknown_format_names_the_known_ones():
    with pytest.raises(ConstraintError, match="hermes"):
        load_format("no_such_model")


def test_each_vllm_tool_parser_maps_to_one_format():
    seen: dict[str, str] = {}
    for name in tools.format_names():
        for parser in load_format(name).vllm_tool_parsers:
            assert parser not in seen, f"{parser} is claimed by {seen.get(parser)} and {name}"
            seen[parser] = name
    assert tools.format_for_parser("qwen3_coder").name == "qwen3_coder"
    assert tools.format_for_parser("no_such_parser") is None


def test_a_format_without_the_name_placeholder_is_rejected():
    with pytest.raises(ConstraintError, match="placeholder"):
        tools.parse_format({"name": "x", "call": [{"begin": "<c>", "end": "</c>"}], "trigger": "<c>"})


# -- tool_choice ------------------------------------------------------------------------------

def test_required_accepts_a_call_and_rejects_leading_text(svc):
    tag = hermes([WEATHER, TIME], "required")
    assert accepts(svc, tag, call("get_time", {"zone": "UTC"}))
    assert not accepts(svc, tag, "Sure! " + call("get_time", {"zone": "UTC"}))
    assert not accepts(svc, tag, "")


def test_named_tool_allows_only_that_tool(svc):
    tag = hermes([WEATHER, TIME], {"type": "function", "function": {"name": "get_time"}})
    assert accepts(svc, tag, call("get_time", {"zone": "UTC"}))
    assert not accepts(svc, tag, call("get_weather", {"city": "Paris"}))


def test_named_tool_allows_exactly_one_call(svc):
    tag = hermes([WEATHER, TIME], "get_time")
    assert not accepts(svc, tag, call("get_time", {"zone": "UTC"}) + "\n" + call("get_time", {"zone": "CET"}))


def test_unknown_tool_name_is_rejected(svc):
    tag = hermes([WEATHER, TIME], "required")
    assert not accepts(svc, tag, call("get_stock", {"zone": "UTC"}))


def test_named_tool_missing_from_tools_is_an_error():
    with pytest.raises(ConstraintError, match="'get_stock'.*not in tools"):
        hermes([WEATHER], {"type": "function", "function": {"name": "get_stock"}})


def test_required_without_tools_is_an_error():
    with pytest.raises(ConstraintError, match="at least one function tool"):
        hermes([], "required")


def test_auto_allows_text_and_calls_when_active(svc):
    tag = hermes([WEATHER], "auto", settings=Settings(tool_scope="always"))
    assert accepts(svc, tag, "Plain answer.")
    assert accepts(svc, tag, "Let me look. " + call("get_weather", {"city": "Oslo"}))


def test_auto_in_auto_scope_is_unconstrained_without_strict_tools():
    assert hermes([WEATHER], "auto") is None


def test_auto_in_auto_scope_is_constrained_when_a_tool_is_strict():
    strict = {"type": "function", "function": dict(WEATHER["function"], strict=True)}
    assert hermes([strict, TIME], "auto") is not None


def test_auto_in_auto_scope_is_constrained_when_parallel_calls_are_off():
    assert hermes([WEATHER], "auto", parallel=False) is not None


def test_parallel_calls_off_rejects_a_second_call(svc):
    tag = hermes([WEATHER, TIME], "required", parallel=False)
    one = call("get_time", {"zone": "UTC"})
    assert accepts(svc, tag, one)
    assert not accepts(svc, tag, one + "\n" + call("get_weather", {"city": "Rome"}))


def test_parallel_calls_on_accept_several_calls(svc):
    tag = hermes([WEATHER, TIME], "required")
    assert accepts(svc, tag, call("get_time", {"zone": "UTC"}) + "\n" + call("get_weather", {"city": "Rome"}))


def test_none_excludes_a_multi_token_opening(svc, qwen2_info):
    from transformers import AutoTokenizer  # noqa: F401  (Qwen2 vocab: <tool_call> is several tokens)

    tag = hermes([WEATHER], "none")
    assert tag is not None
    assert accepts(svc, tag, "The weather tool is not needed.")
    assert not accepts(svc, tag, "ok " + call("get_weather", {"city": "Oslo"}))
    # Token by token too: after "<tool", the token "_call" is refused.
    g = svc.grammar(Constraint.of("structural_tag", tag))
    assert g.accept_string("text <tool")
    assert not g.accept_string("_call>")


def test_none_without_tools_is_unconstrained():
    assert hermes([], "none") is None


def test_bare_name_means_that_tool():
    assert tools.parse_tool_choice("get_time") == ("named", "get_time")


def test_unsupported_tool_choice_is_an_error():
    with pytest.raises(ConstraintError, match="unsupported tool_choice"):
        hermes([WEATHER], {"type": "allowed_tools"})


# -- arguments: schema modes, strict, checks ----------------------------------------------------

def test_default_mode_enforces_declared_schemas(svc):
    tag = hermes([WEATHER], "required")
    assert not accepts(svc, tag, call("get_weather", {"days": 3}))  # city is required


def test_default_mode_frees_a_tool_that_says_strict_false(svc):
    loose = {"type": "function", "function": dict(WEATHER["function"], strict=False)}
    tag = hermes([loose], "required")
    assert accepts(svc, tag, call("get_weather", {"anything": [1, 2]}))


def test_auto_mode_enforces_only_strict_tools(svc):
    s = Settings(tool_schema_mode="auto")
    strict = {"type": "function", "function": dict(TIME["function"], strict=True)}
    tag = hermes([WEATHER, strict], "required", settings=s)
    assert accepts(svc, tag, call("get_weather", {"days": 3}))
    assert not accepts(svc, tag, call("get_time", {"days": 3}))


def test_strict_mode_enforces_every_schema(svc):
    s = Settings(tool_schema_mode="strict")
    loose = {"type": "function", "function": dict(WEATHER["function"], strict=False)}
    assert not accepts(svc, hermes([loose], "required", settings=s), call("get_weather", {"days": 3}))


def test_arguments_are_an_object_even_when_unconstrained(svc):
    free = {"type": "function", "function": {"name": "ping"}}
    tag = hermes([free], "required")
    assert accepts(svc, tag, call("ping", {}))
    assert not accepts(svc, tag, '<tool_call>{"name": "ping", "arguments": 3}</tool_call>')


@pytest.mark.parametrize("params", [{}, {"required": []}, {"properties": {}, "required": []}, True],
                         ids=["empty", "no-names-required", "no-names", "true"])
def test_arguments_are_an_object_when_the_parameters_say_no_type(svc, params):
    tag = hermes([{"type": "function", "function": {"name": "ping", "parameters": params}}], "required")
    assert accepts(svc, tag, call("ping", {}))
    assert not accepts(svc, tag, '<tool_call>{"name": "ping", "arguments": "now"}</tool_call>')
    assert not accepts(svc, tag, '<tool_call>{"name": "ping", "arguments": 3}</tool_call>')


def test_untyped_parameters_keep_their_properties_in_declared_order(svc):
    params = {"properties": {"zone": {"type": "string"}, "hour": {"type": "integer"}}, "required": ["zone"]}
    tag = hermes([{"type": "function", "function": {"name": "at", "parameters": params}}], "required")
    assert accepts(svc, tag, call("at", {"zone": "UTC", "hour": 3}))
    assert not accepts(svc, tag, call("at", {"hour": 3, "zone": "UTC"}))
    assert not accepts(svc, tag, call("at", {"hour": 3}))


def test_a_server_set_to_refuse_unenforceable_tools_names_the_tool_and_feature():
    bad = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "array", "not": {"items": {"type": "string"}}}}}}}
    with pytest.raises(UnsupportedFeatureError, match="tool 'f'.*'not: {items}'"):
        hermes([bad], "required", settings=Settings(unenforceable_tools="refuse"))


def test_whitespace_in_arguments_is_bounded(svc):
    tag = hermes([TIME], "required", settings=Settings(max_whitespace=2))
    assert accepts(svc, tag, '<tool_call>{"name": "get_time", "arguments": {  "zone": "UTC"}}</tool_call>')
    assert not accepts(svc, tag, '<tool_call>{"name": "get_time", "arguments": {' + " " * 20
                       + '"zone": "UTC"}}</tool_call>')


def test_a_tool_name_that_breaks_the_syntax_is_rejected():
    bad = {"type": "function", "function": {"name": 'a"b'}}
    with pytest.raises(ConstraintError, match="cannot carry"):
        hermes([bad], "required")


# Another definition of get_weather, as sloppy tool lists hold them: the city under another key.
WEATHER_AGAIN = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"],
    "additionalProperties": False}}}


def test_a_tool_defined_twice_the_same_way_is_one_tool():
    assert hermes([WEATHER, TIME, WEATHER], "required") == hermes([WEATHER, TIME], "required")


def test_a_tool_defined_twice_takes_the_arguments_of_either_definition(svc):
    tag = hermes([WEATHER, TIME, WEATHER_AGAIN], "required")
    assert accepts(svc, tag, call("get_weather", {"city": "Oslo", "days": 2}))
    assert accepts(svc, tag, call("get_weather", {"location": "Oslo"}))
    assert accepts(svc, tag, call("get_time", {"zone": "UTC"}))
    assert not accepts(svc, tag, call("get_weather", {"days": 2}))  # neither definition's required key


def test_a_tool_defined_twice_with_refs_keeps_its_first_definition_and_reports_the_other(svc):
    from tagjit import report

    with_ref = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "$defs": {"place": {"type": "string"}}, "type": "object",
        "properties": {"location": {"$ref": "#/$defs/place"}}, "required": ["location"]}}}
    with report.collecting() as seen:
        tag = hermes([WEATHER, with_ref], "required")
    assert accepts(svc, tag, call("get_weather", {"city": "Oslo"}))
    assert not accepts(svc, tag, call("get_weather", {"location": "Oslo"}))
    assert seen == ["tool 'get_weather': duplicate at #"]


def test_merged_tool_is_strict_only_when_both_definitions_are():
    strict = {**WEATHER, "function": {**WEATHER["function"], "strict": True}}
    loose = {**WEATHER_AGAIN, "function": {**WEATHER_AGAIN["function"], "strict": False}}
    merged, = tools.normalize_tools([strict, loose])
    assert merged.strict is False
    merged, = tools.normalize_tools([strict, {**loose, "function": {**loose["function"], "strict": True}}])
    assert merged.strict is True


def test_responses_api_flat_tools_are_understood(svc):
    flat = {"type": "function", "name": "get_time", "parameters": TIME["function"]["parameters"]}
    assert accepts(svc, hermes([flat], "required"), call("get_time", {"zone": "UTC"}))


# -- reasoning --------------------------------------------------------------------------------

def test_reasoning_is_free_until_its_end_then_the_call_is_required(svc):
    tag = build_tool_tag("qwen3_coder", [TIME], "required", reasoning=True, settings=Settings())
    the_call = "<tool_call>\n<function=get_time>\n<parameter=zone>\nUTC\n</parameter>\n</function>\n</tool_call>"
    assert accepts(svc, tag, "<think>Which zone? <tool_call> is fine in here.</think>\n\n" + the_call)
    assert not accepts(svc, tag, "<think>done</think>\n\nNo call.")


def test_reasoning_already_opened_by_the_prompt_expects_only_its_end(svc):
    tag = build_tool_tag("qwen3_coder", [TIME], "required", reasoning_started=True, settings=Settings())
    the_call = "<tool_call>\n<function=get_time>\n<parameter=zone>\nUTC\n</parameter>\n</function>\n</tool_call>"
    assert accepts(svc, tag, "still thinking</think>\n\n" + the_call)
    assert not accepts(svc, tag, "<think>again</think>\n\n" + the_call)


# -- determinism and the per-tool part ----------------------------------------------------------

def test_tags_are_deterministic_and_keep_request_order():
    ts = bfcl.load_tools(str(DATA / "bfcl"), 20)
    a = json.dumps(hermes(ts, "required"))
    assert a == json.dumps(hermes(ts, "required"))
    names = [t["begin"].split('"name": "')[1].split('"')[0] for t in hermes(ts, "required")["format"]["tags"][::2]]
    assert names == [t["function"]["name"] for t in ts]


def part_text(fmt, tool: dict, schema, settings: Settings) -> str:
    """The per-tool part's tags as they stand inside a tag's JSON text."""
    from tagjit.constraint import compact_json

    return compact_json(tools.call_tags(fmt, tool["function"]["name"], schema, settings))[1:-1]


# One format per layout and argument style: JSON in triggered tags, XML arguments, the messages layout.
@pytest.mark.parametrize("name", ["hermes", "qwen3_coder", "gpt_oss"])
def test_the_per_tool_part_is_the_same_whatever_tools_come_with_it(name):
    fmt, settings = load_format(name), Settings(tool_scope="always")
    part = part_text(fmt, TIME, TIME["function"]["parameters"], settings)
    for companions in ([WEATHER], [], [WEATHER, *bfcl.load_tools(DATA / "bfcl", 3)]):
        assert part in tools.build_tool_tag_json(fmt, [*companions, TIME], "required", True, settings)


@pytest.mark.parametrize("name", ["hermes", "qwen3_coder", "gpt_oss"])
def test_the_per_tool_part_follows_the_schema_mode(name):
    fmt, schema = load_format(name), TIME["function"]["parameters"]
    free = Settings(tool_scope="always", tool_schema_mode="auto")  # a tool not marked strict: free arguments
    tag = tools.build_tool_tag_json(fmt, [WEATHER, TIME], "required", True, free)
    assert part_text(fmt, TIME, None, free) in tag
    assert part_text(fmt, TIME, schema, free) not in tag


def test_a_tool_seen_before_reuses_its_part(monkeypatch):
    fmt, settings = load_format("qwen3_coder"), Settings(tool_scope="always")
    built: list[str] = []
    real = tools.tag.arguments_content

    def counted(fmt_, schema, settings_, schema_json=None):
        built.append(json.dumps(schema))
        return real(fmt_, schema, settings_, schema_json)

    monkeypatch.setattr(tools.tag, "arguments_content", counted)
    seen = {"type": "object", "properties": {"seen_once": {"type": "string"}}}
    one = {"type": "function", "function": {"name": "seen_once", "parameters": seen}}
    tools.build_tool_tag_json(fmt, [one, WEATHER], "required", True, settings)
    tools.build_tool_tag_json(fmt, [TIME, one], "required", True, settings)
    assert built.count(json.dumps(seen)) == 1


def test_the_whitespace_bound_is_part_of_the_per_tool_part():
    fmt, schema = load_format("hermes"), TIME["function"]["parameters"]
    assert part_text(fmt, TIME, schema, Settings(max_whitespace=0)) != part_text(fmt, TIME, schema, Settings())


def test_xml_arguments_follow_the_request_settings_not_the_process_settings():
    fmt = load_format("qwen3_coder")
    schema = {"type": "object", "properties": {"filter": {"type": "object", "properties": {"a": {"type": "string"}}}}}
    strict, lenient = Settings(strict_mode=True), Settings(strict_mode=False)
    assert part_text(fmt, TIME, schema, strict) != part_text(fmt, TIME, schema, lenient)


@pytest.mark.parametrize("fmt", tools.format_names())
@pytest.mark.parametrize("choice", ["required", "auto", "none", "get_weather"])
def test_the_tag_text_is_the_canonical_json_of_the_tag(fmt, choice):
    from tagjit.constraint import compact_json

    tool_list = [WEATHER, TIME, *bfcl.load_tools(DATA / "bfcl", strict=True)[:30]]
    for parallel in (True, False):
        text = tools.build_tool_tag_json(fmt, tool_list, choice, parallel, Settings(tool_scope="always"))
        assert text == compact_json(build_tool_tag(fmt, tool_list, choice, parallel, Settings(tool_scope="always")))
        assert json.loads(text)["type"] == "structural_tag"


def test_tool_arguments_are_compact_json_under_compact_settings(qwen2_info):
    """vLLM's disable_any_whitespace: the arguments take no whitespace (xgrammar's tag format has no bound 0)."""
    compact = UNHURRIED.replace(max_whitespace=0, tool_scope="always")
    svc = CompileService(qwen2_info, compact)
    tag = build_tool_tag(load_format("hermes"), [TIME], "required", True, compact)
    assert accepts(svc, tag, call("get_time", {"zone": "UTC"}).replace('{"zone": "UTC"}', '{"zone":"UTC"}'))
    assert not accepts(svc, tag, call("get_time", {"zone": "UTC"}))


def test_a_tag_json_content_keeps_strict_mode_when_compact(qwen2_info):
    compact = UNHURRIED.replace(max_whitespace=0)
    svc = CompileService(qwen2_info, compact)
    tag = {"type": "structural_tag", "format": {"type": "json_schema", "json_schema": TIME["function"]["parameters"]}}
    assert accepts(svc, tag, '{"zone":"UTC"}')
    assert not accepts(svc, tag, '{"zone":"UTC","extra":1}')
