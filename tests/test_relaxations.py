"""Schemas tagjit cannot enforce exactly: a tool takes the nearest relaxation by default (one bad tool must not sink
a request), a response_format only when the server or the schema opts in; every relaxation is named, counted and
collected for the request's response header, and never rejects a value the schema accepts."""

from __future__ import annotations

import json
import os

import jsonschema
import pytest

from pools import UNHURRIED
from shared_data import DATA, SCHEMAS, maskbench
from tagjit import CompileService, ConstraintError, Settings, UnsupportedFeatureError, metrics, report
from tagjit.compile.validation import validate
from tagjit.constraint import Constraint, Kind
from tagjit.build.grammars import json_schema_grammar
from tagjit.schema import prepared
from tagjit.schema.relax import relax
from tagjit.tools import bfcl, build_tool_tag, build_tool_tag_json
from tagjit.constraint import compact_json

OVERLAPPING = {"type": "object", "properties": {
    "id": {"oneOf": [{"type": "array", "items": {"type": "string"}},
                     {"type": "array", "items": {"type": "string", "maxLength": 3}}]}},
    "required": ["id"]}
DISTINCT = {"type": "function", "function": {"name": "tag_photo", "parameters": {
    "type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
                                    "rating": {"type": "integer", "maximum": 5}},
    "required": ["tags"]}}}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def steps_of(schema) -> list[str]:
    return [f"{s.name} at {s.where}" for s in relax(schema, lambda x: prepared(compact_json(x)))[2]]


def loosened(schema):
    return relax(schema, lambda x: prepared(compact_json(x)))[1]


def call(name: str, args: dict) -> str:
    return f'<tool_call>{{"name": "{name}", "arguments": {json.dumps(args)}}}</tool_call>'


def accepts(service: CompileService, constraint: Constraint, text: str) -> bool:
    g = service.grammar(constraint)
    return g.accept_string(text) and g.is_completed()


# -- the steps -------------------------------------------------------------------------------------

def test_an_overlapping_one_of_is_enforced_as_any_of():
    assert loosened(OVERLAPPING)["properties"]["id"] == {"anyOf": OVERLAPPING["properties"]["id"]["oneOf"]}
    assert steps_of(OVERLAPPING) == ["oneOf at #/properties/id"]


def test_a_refusal_inside_a_one_of_branch_loosens_the_one_of_first_so_no_valid_value_is_lost():
    # Dropping the branch's "not" alone would make it take every array, and then the exact oneOf would lose ["a"],
    # which only the second branch takes.
    schema = {"oneOf": [{"type": "array", "not": {"items": {"type": "string"}}}, {"type": "array", "maxItems": 1}]}
    assert steps_of(schema) == ["oneOf at #", "not at #/anyOf/0"]
    assert jsonschema.Draft202012Validator(loosened(schema)).is_valid(["a"])


def test_a_step_removes_only_the_refused_keyword():
    schema = DISTINCT["function"]["parameters"]
    out = loosened(schema)
    assert out["properties"]["tags"] == {"type": "array", "items": {"type": "string"}}
    assert out["properties"]["rating"] == schema["properties"]["rating"] and out["required"] == ["tags"]


def test_each_refused_feature_is_one_named_step_at_its_node():
    schema = {"type": "object", "properties": {
        "a": {"type": "array", "not": {"items": {"type": "string"}}},
        "b": {"type": "object", "if": {"properties": {"c": {"items": {"type": "string"}}}},
              "then": {"required": ["d"]}},
        "c": {"type": "string", "format": "regex"}}}
    assert sorted(steps_of(schema)) == ["format at #/properties/c", "if at #/properties/b", "not at #/properties/a"]


def test_property_order_survives_a_relaxation():
    schema = {"type": "object", "properties": {"z": {"type": "string"}, "a": {"type": "array", "uniqueItems": True},
                                               "m": {"type": "integer"}}}
    assert list(loosened(schema)["properties"]) == ["z", "a", "m"]


def test_a_feature_inside_a_not_drops_the_not_rather_than_tightening_it():
    schema = {"type": "object", "not": {"properties": {"a": {"type": "array", "uniqueItems": True}}}}
    assert steps_of(schema) == ["not at #"]
    assert "not" not in loosened(schema)


def _maybe_refused() -> list[str]:
    """MaskBench files whose text holds a keyword tagjit may refuse (a cheap filter; the test checks)."""
    words = ('"uniqueItems"', '"oneOf"', '"dependencies"', '"if"', '"patternProperties"', '"not"', '"contains"')
    names = []
    for name in sorted(os.listdir(SCHEMAS / "maskbench")):
        text = (SCHEMAS / "maskbench" / name).read_text()
        if any(w in text for w in words):
            names.append(name)
    return names[::12]


@pytest.mark.parametrize("name", _maybe_refused())
def test_a_relaxed_real_schema_accepts_every_valid_instance(name):
    case = maskbench(name)
    try:
        json_schema_grammar(case["schema"], UNHURRIED)
        pytest.skip("enforced exactly")
    except UnsupportedFeatureError:
        pass
    except ConstraintError:
        pytest.skip("refused for another reason")
    _, relaxed, steps = relax(case["schema"], lambda x: json_schema_grammar(x, UNHURRIED))
    assert steps
    check = jsonschema.validators.validator_for(relaxed, default=jsonschema.Draft202012Validator)(relaxed)
    for t in case["tests"]:
        if t["valid"]:
            assert check.is_valid(t["data"]), t["description"]


# -- tools -----------------------------------------------------------------------------------------

def test_a_tool_tagjit_cannot_enforce_is_constrained_by_its_relaxation(svc):
    tag = Constraint.of(Kind.STRUCTURAL_TAG, build_tool_tag("hermes", [WEATHER, DISTINCT], "required"))
    assert accepts(svc, tag, call("tag_photo", {"tags": ["a", "a"], "rating": 3}))  # looser: repeats pass
    assert not accepts(svc, tag, call("tag_photo", {"tags": ["a"], "rating": 9}))  # the rest still holds
    assert not accepts(svc, tag, call("tag_photo", {"rating": 3}))
    assert accepts(svc, tag, call("get_weather", {"city": "Paris"}))


def test_a_relaxed_tool_in_xml_arguments_keeps_its_other_parameters_exact(svc):
    tag = Constraint.of(Kind.STRUCTURAL_TAG, build_tool_tag("qwen3_coder", [DISTINCT], "required"))
    ok = ("<tool_call>\n<function=tag_photo>\n<parameter=tags>\n[\"a\", \"a\"]\n</parameter>\n"
          "<parameter=rating>\n3\n</parameter>\n</function>\n</tool_call>")
    assert accepts(svc, tag, ok)
    assert not accepts(svc, tag, ok.replace("\n3\n", "\n9\n"))


def test_a_relaxed_tool_is_collected_and_counted_on_every_request():
    counter = metrics.RELAXATIONS.labels("uniqueItems", "tool")
    before = counter._value.get()
    for _ in range(2):
        with report.collecting() as box:
            build_tool_tag_json("hermes", [WEATHER, DISTINCT], "required")
        assert box == ["tool 'tag_photo': uniqueItems at #/properties/tags"]
    assert counter._value.get() == before + 2


def test_a_tool_no_value_can_satisfy_is_left_out_and_reported():
    never = {"type": "function", "function": {"name": "never", "parameters": {
        "type": "object", "properties": {"x": {"type": "boolean", "enum": ["yes"]}}, "required": ["x"]}}}
    with report.collecting() as box:
        tag = build_tool_tag("hermes", [WEATHER, never], "required")
    assert '"never"' not in json.dumps(tag)
    assert len(box) == 1 and box[0].startswith("tool 'never': uncallable at #")


def test_the_refuse_setting_turns_a_relaxation_into_a_refusal_naming_the_tool():
    with pytest.raises(UnsupportedFeatureError, match="tool 'tag_photo'.*'uniqueItems' at #/properties/tags"):
        build_tool_tag("hermes", [WEATHER, DISTINCT], "required", settings=Settings(unenforceable_tools="refuse"))


def test_every_bfcl_tool_builds_into_one_request_each_reported_if_relaxed():
    tools, seen = [], set()
    for name in sorted(os.listdir(DATA / "bfcl")):
        if not name.endswith(".json"):
            continue
        with open(DATA / "bfcl" / name, encoding="utf-8") as f:
            first = f.readline()
            if not first.startswith("{") or not first.rstrip().endswith("}"):  # not one question a line
                continue
            for line in [first, *f]:
                for fn in json.loads(line).get("function", []) if line.strip() else []:
                    try:
                        tool = bfcl.to_tool(fn)
                    except bfcl.UnsupportedBFCLType:  # a Java type with no JSON Schema spelling
                        continue
                    fname = tool["function"]["name"]
                    if fname not in seen and not set(fname) & set("<>{}\"' "):
                        seen.add(fname)
                        tools.append(tool)
    assert len(tools) > 1000
    with report.collecting() as box:
        tag = build_tool_tag("hermes", tools, "required")
    text = json.dumps(tag)
    left_out = {item.split("'")[1] for item in box if ": uncallable at" in item}
    assert all(f'"<tool_call>\\n{{\\"name\\": \\"{t["function"]["name"]}\\"' in text
               for t in tools if t["function"]["name"] not in left_out)


# -- response_format -------------------------------------------------------------------------------

def test_a_response_format_tagjit_cannot_enforce_is_refused_naming_the_opt_in():
    with pytest.raises(UnsupportedFeatureError, match=r'oneOf whose branches.*"x-tagjit-relax": \["oneOf"\]'):
        validate(Constraint.of(Kind.JSON, OVERLAPPING), UNHURRIED)


def test_a_schema_that_opts_in_is_served_by_its_relaxation_and_reported(service):
    schema = {**OVERLAPPING, "x-tagjit-relax": ["oneOf"]}
    with report.collecting() as box:
        validate(Constraint.of(Kind.JSON, schema), UNHURRIED)
    assert box == ["schema: oneOf at #/properties/id"]
    assert accepts(service, Constraint.of(Kind.JSON, schema), '{"id": ["abc"]}')  # matches both branches
    assert not accepts(service, Constraint.of(Kind.JSON, schema), '{"id": [1]}')


def test_a_server_that_opts_in_serves_every_such_schema(service):
    relaxing = CompileService(service.tokenizer_info, UNHURRIED.replace(relax="oneOf"))
    assert accepts(relaxing, Constraint.of(Kind.JSON, OVERLAPPING), '{"id": ["abc"]}')


def test_an_opt_in_to_one_relaxation_does_not_allow_another():
    schema = {"type": "array", "items": {"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 2}]},
              "uniqueItems": True, "x-tagjit-relax": ["oneOf"]}
    with pytest.raises(UnsupportedFeatureError, match="uniqueItems"):
        validate(Constraint.of(Kind.JSON, schema), UNHURRIED)


def test_a_schema_enforced_exactly_reports_nothing():
    with report.collecting() as box:
        validate(Constraint.of(Kind.JSON, {"type": "object", "properties": {"a": {"type": "string"}}}), UNHURRIED)
    assert box == []


@pytest.mark.parametrize("value", [3, ["oneOf", "nonsense"], {"oneOf": True}])
def test_an_invalid_opt_in_is_a_clear_error(value):
    with pytest.raises(ConstraintError, match="x-tagjit-relax must be true"):
        validate(Constraint.of(Kind.JSON, {**OVERLAPPING, "x-tagjit-relax": value}), UNHURRIED)


def test_the_settings_know_every_relaxation_the_schema_steps_define():
    from tagjit.schema.relax import NAMES
    from tagjit.settings import RELAXATIONS

    assert RELAXATIONS == NAMES


def test_an_unknown_relaxation_setting_names_the_known_ones():
    with pytest.raises(ValueError, match="TAGJIT_RELAX='oneof'.*known: all, oneOf"):
        Settings.from_env({"TAGJIT_RELAX": "oneof"})


def test_the_header_lists_each_relaxation_once_in_ascii():
    assert report.header_value(["tool 'f': not at #", "tool 'f': not at #", "schema: oneOf at #/properties/é"]) \
        == "tool 'f': not at #; schema: oneOf at #/properties/\\xe9"


def test_the_relaxed_schema_is_still_valid_json_schema():
    out = loosened(DISTINCT["function"]["parameters"])
    jsonschema.Draft202012Validator.check_schema(out)
