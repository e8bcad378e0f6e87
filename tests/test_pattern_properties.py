"""``patternProperties`` is enforced exactly: each member name takes the schemas JSON Schema gives it.

A declared name takes its own schema and that of every pattern it matches; an undeclared name takes every pattern it
matches (searched for, not anchored), or ``additionalProperties`` if none (absent: no such member under strict mode,
any value without it). Each behaviour is checked on hand-picked texts, then against ``jsonschema`` on generated
objects (keys in declared order, the names no property declares after them), on the real MaskBench schemas tagjit
used to refuse for patternProperties, and in tool calls."""

from __future__ import annotations

import json

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pools import UNHURRIED
from shared_data import maskbench
from tagjit import CompileService, ConstraintError, Settings, UnsupportedFeatureError
from tagjit.constraint import Constraint, Kind
from tagjit.errors import EmptySchemaError
from tagjit.schema.check import prepare_schema
from tagjit.tools import build_tool_tag, load_format

UNTIMED = settings(deadline=None, max_examples=120)


def accepts(service: CompileService, schema, text: str) -> bool:
    g = service.grammar(Constraint.of(Kind.JSON, schema))
    return g.accept_string(text) and g.is_completed()


def in_declared_order(schema: dict, value: dict) -> dict:
    """``value`` with the names ``schema`` declares first, in its order, and the others after, as they came."""
    declared = [k for k in schema.get("properties", {}) if k in value]
    return {**{k: value[k] for k in declared}, **{k: v for k, v in value.items() if k not in declared}}


def agrees(service: CompileService, schema: dict, value: dict, judge: dict | None = None) -> None:
    """tagjit accepts the object's text iff jsonschema validates it against ``judge`` (default: the schema)."""
    text = json.dumps(in_declared_order(schema, value))
    assert accepts(service, schema, text) == jsonschema.Draft202012Validator(judge or schema).is_valid(value), text


@pytest.fixture(scope="module")
def lenient(llama3_info) -> CompileService:
    """A compile service without xgrammar's strict mode: an object takes undeclared names unless it says otherwise."""
    return CompileService(llama3_info, UNHURRIED.replace(strict_mode=False))


# -- which schema a name takes ----------------------------------------------------------------------

HEADERS = {"type": "object", "properties": {"id": {"type": "integer"}, "x-trace": {"type": "string"}},
           "required": ["id"], "patternProperties": {"^x-": {"type": "string", "maxLength": 3}}}


def test_a_declared_name_takes_its_own_schema_and_the_schema_of_a_pattern_it_matches(service):
    assert accepts(service, HEADERS, '{"id": 1, "x-trace": "abc"}')
    assert not accepts(service, HEADERS, '{"id": 1, "x-trace": "abcd"}')  # the pattern's maxLength
    assert not accepts(service, HEADERS, '{"id": 1, "x-trace": 7}')


def test_an_undeclared_name_a_pattern_matches_takes_the_patterns_schema(service):
    assert accepts(service, HEADERS, '{"id": 1, "x-user": "bob"}')
    assert not accepts(service, HEADERS, '{"id": 1, "x-user": "alice"}')
    assert not accepts(service, HEADERS, '{"id": 1, "x-user": 5}')


def test_an_anchored_pattern_matches_every_name_that_starts_with_it_not_only_itself(service):
    assert accepts(service, HEADERS, '{"id": 1, "x-": "a", "x-a-b": "b"}')
    assert not accepts(service, HEADERS, '{"id": 1, "ax-": "a"}')


def test_an_unanchored_pattern_is_searched_for_anywhere_in_the_name(service):
    schema = {"type": "object", "patternProperties": {"id": {"type": "integer"}}}
    assert accepts(service, schema, '{"id": 1, "user_id": 2, "identity": 3}')
    assert not accepts(service, schema, '{"user": 1}')


def test_a_name_two_patterns_match_takes_both_schemas(service):
    schema = {"type": "object", "patternProperties": {"^n": {"type": "integer"}, "_max$": {"maximum": 9}}}
    assert accepts(service, schema, '{"n_max": 9, "n": 100, "count_max": 7.5}')
    assert not accepts(service, schema, '{"n_max": 10}') and not accepts(service, schema, '{"n_max": 1.5}')


def test_a_name_no_pattern_matches_takes_additional_properties(service):
    schema = {**HEADERS, "additionalProperties": {"type": "boolean"}}
    assert accepts(service, schema, '{"id": 1, "debug": true, "x-a": "s"}')
    assert not accepts(service, schema, '{"id": 1, "debug": "yes"}')
    assert not accepts(service, schema, '{"id": 1, "x-a": true}')  # a pattern's name never takes the extra schema


def test_under_strict_mode_a_name_no_pattern_matches_is_not_taken_without_additional_properties(service):
    assert not accepts(service, HEADERS, '{"id": 1, "debug": true}')


def test_without_strict_mode_a_name_no_pattern_matches_takes_any_value(lenient):
    assert accepts(lenient, HEADERS, '{"id": 1, "debug": [true]}')
    assert not accepts(lenient, HEADERS, '{"id": 1, "x-a": [true]}')


def test_a_name_is_judged_by_its_decoded_text_whatever_its_spelling(service):
    assert accepts(service, HEADERS, '{"id": 1, "\\u0078-a": "s"}')  # x-a
    assert not accepts(service, HEADERS, '{"id": 1, "\\u0078-a": "long"}')
    assert not accepts(service, HEADERS, '{"id": 1, "x\\u002dtrace": "s"}')  # x-trace: only its declared spelling


def test_a_declared_name_is_not_taken_again_as_a_pattern_member(service):
    assert not accepts(service, HEADERS, '{"id": 1, "x-trace": "a", "x-trace": "b"}')


def test_members_a_pattern_admits_follow_the_declared_names(service):
    assert accepts(service, HEADERS, '{"id": 1, "x-trace": "a", "x-b": "b"}')
    assert not accepts(service, HEADERS, '{"x-b": "b", "id": 1}')  # property order is generation order


def test_a_required_name_only_a_pattern_admits_takes_the_patterns_schema(service):
    schema = {"type": "object", "patternProperties": {"^x-": {"type": "string"}}, "required": ["x-id"]}
    assert accepts(service, schema, '{"x-id": "a", "x-b": "b"}')
    assert not accepts(service, schema, '{"x-b": "b"}') and not accepts(service, schema, '{"x-id": 1}')


def test_a_required_name_nothing_admits_accepts_no_object(service):
    schema = {"type": "object", "patternProperties": {"^x-": {}}, "additionalProperties": False, "required": ["id"]}
    with pytest.raises(EmptySchemaError, match="id"):
        service.validate(Constraint.of(Kind.JSON, schema))


def test_an_optional_name_whose_schema_and_pattern_conflict_is_forbidden(service):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "s_a": {"type": "integer"}},
              "patternProperties": {"^s_": {"type": "string"}}}
    assert accepts(service, schema, '{"a": 1, "s_b": "x"}')
    assert not accepts(service, schema, '{"a": 1, "s_a": 2}') and not accepts(service, schema, '{"s_a": "x"}')


def test_a_pattern_whose_schema_is_false_forbids_the_names_it_matches(service):
    schema = {"type": "object", "patternProperties": {"^_": False}, "additionalProperties": {"type": "integer"}}
    assert accepts(service, schema, '{"a": 1}')
    assert not accepts(service, schema, '{"_a": 1}')


def test_the_normalised_schema_is_a_json_schema_with_the_same_verdicts():
    normalised = prepare_schema({**HEADERS, "additionalProperties": {"type": "boolean"}})
    check = jsonschema.Draft202012Validator(normalised)
    assert check.is_valid({"id": 1, "x-a": "s", "b": True}) and not check.is_valid({"id": 1, "x-a": True})
    assert normalised["additionalProperties"] is False


def test_not_required_forbids_a_name_a_pattern_would_admit(service):
    schema = {"type": "object", "patternProperties": {"^[a-z]+$": {"type": "string"}}, "not": {"required": ["ios"]}}
    assert accepts(service, schema, '{"android": "a", "web": "b"}')
    assert not accepts(service, schema, '{"ios": "a"}') and not accepts(service, schema, '{"web": "b", "ios": "a"}')


# -- patternProperties beside allOf, anyOf and oneOf ------------------------------------------------

def test_patterns_of_two_all_of_branches_both_apply_and_each_sides_additional_properties_too(service):
    schema = {"allOf": [
        {"type": "object", "patternProperties": {"^a": {"type": "string"}}, "additionalProperties": {"type": "string"}},
        {"type": "object", "patternProperties": {"b$": {"maxLength": 2}}, "additionalProperties": True}]}
    assert accepts(service, schema, '{"ab": "xy", "c": "long"}')
    assert not accepts(service, schema, '{"ab": "xyz"}')  # both patterns
    assert not accepts(service, schema, '{"cb": 5}')  # b$ of one side, additionalProperties of the other
    assert accepts(service, schema, '{"cb": "s"}') and not accepts(service, schema, '{"cb": "sss"}')


def test_patterns_beside_any_of_apply_in_each_branch(service):
    schema = {"type": "object", "patternProperties": {"^x-": {"type": "integer"}},
              "anyOf": [{"properties": {"a": {"type": "string"}}, "required": ["a"]},
                        {"properties": {"b": {"type": "string"}}, "required": ["b"]}]}
    assert accepts(service, schema, '{"a": "s", "x-n": 1}') and accepts(service, schema, '{"b": "s", "x-n": 2}')
    assert not accepts(service, schema, '{"a": "s", "x-n": "s"}') and not accepts(service, schema, '{"x-n": 1}')


def test_one_of_objects_told_apart_by_a_name_a_pattern_admits_stays_refused_naming_why(service):
    schema = {"oneOf": [{"type": "object", "patternProperties": {"^a": {"type": "string"}}},
                        {"type": "object", "properties": {"b": {"type": "string"}}}]}
    with pytest.raises(UnsupportedFeatureError, match="undeclared names whose values one branch restricts"):
        service.validate(Constraint.of(Kind.JSON, schema))


def test_one_of_objects_with_patterns_told_apart_by_a_required_name_takes_the_objects_one_branch_holds(service):
    schema = {"oneOf": [{"type": "object", "patternProperties": {"^a": {"type": "string"}}, "required": ["a1"]},
                        {"type": "object", "patternProperties": {"^a": {"type": "string"}}, "required": ["a2"]}]}
    check = jsonschema.Draft202012Validator({**schema, "oneOf": [{**b, "additionalProperties": False}
                                                                 for b in schema["oneOf"]]})
    for value in [{}, {"a1": "x"}, {"a2": "x"}, {"a1": "x", "a2": "y"}, {"a1": 1}, {"a1": "x", "a3": "y"}]:
        assert accepts(service, schema, json.dumps(value)) is check.is_valid(value), value


def test_one_of_open_objects_whose_pattern_one_branch_restricts_stays_refused_naming_why(lenient):
    schema = {"oneOf": [{"type": "object", "patternProperties": {"^a": {"type": "string"}}},
                        {"type": "object", "properties": {"b": {"type": "string"}}}]}
    with pytest.raises(UnsupportedFeatureError, match="undeclared names whose values one branch restricts"):
        lenient.validate(Constraint.of(Kind.JSON, schema))


# -- what stays refused -----------------------------------------------------------------------------

def test_a_pattern_tagjit_cannot_read_is_refused_naming_the_construct(service):
    schema = {"type": "object", "properties": {"a": {}}, "patternProperties": {"^(?!_)": {"type": "string"}}}
    with pytest.raises(UnsupportedFeatureError, match="patternProperties pattern with a lookahead"):
        service.validate(Constraint.of(Kind.JSON, schema))


def test_patterns_whose_names_automaton_is_too_large_are_refused_naming_the_limit(service):
    # Names whose lengths are multiples of 7, 11, 13 and 17: the product of the counters has 17017 states.
    schema = {"type": "object", "patternProperties": {f"^(?:.{{{n}}})*$": {} for n in (7, 11, 13, 17)}}
    with pytest.raises(UnsupportedFeatureError, match="more than 4096 states"):
        service.validate(Constraint.of(Kind.JSON, schema))


def test_patterns_that_overlap_in_too_many_ways_are_refused_naming_the_limit(service):
    schema = {"type": "object", "patternProperties": {c: {"type": "integer"} for c in "abcdefg"}}
    with pytest.raises(UnsupportedFeatureError, match="more than 64 languages"):
        service.validate(Constraint.of(Kind.JSON, schema))


def test_patterns_with_unevaluated_properties_stay_refused_naming_both(service):
    schema = {"type": "object", "patternProperties": {"^a": {}}, "unevaluatedProperties": False}
    with pytest.raises(UnsupportedFeatureError, match="patternProperties together with unevaluatedProperties"):
        service.validate(Constraint.of(Kind.JSON, schema))


# -- against jsonschema -----------------------------------------------------------------------------

NAMES = st.text(alphabet="xa-1_", max_size=4)
VALUES = st.sampled_from([0, 5, 12, -3, 2.5, "s", "long", None])
OBJECTS = st.dictionaries(NAMES, VALUES, max_size=5)

# Typed schemas only: tagjit reads a bound on an untyped schema as a number's (stricter: jsonschema passes "s").
OVERLAPPING = {"type": "object", "properties": {"id": {"type": "integer"}, "x-1": {"type": "number", "maximum": 10}},
               "patternProperties": {"^x-": {"type": "integer", "minimum": 0}, "1": {"type": "number", "maximum": 9},
                                     "^_": {"type": "string"}},
               "additionalProperties": {"type": ["string", "null"]}}


@UNTIMED
@given(value=OBJECTS)
def test_overlapping_patterns_with_additional_properties_agree_with_jsonschema(service, value):
    agrees(service, OVERLAPPING, value)


@UNTIMED
@given(value=OBJECTS)
def test_under_strict_mode_patterns_without_additional_properties_agree_with_jsonschema_closing_the_object(
        service, value):
    schema = {k: v for k, v in OVERLAPPING.items() if k != "additionalProperties"}
    agrees(service, schema, value, judge={**schema, "additionalProperties": False})


@UNTIMED
@given(value=OBJECTS)
def test_without_strict_mode_patterns_without_additional_properties_agree_with_jsonschema(lenient, value):
    schema = {k: v for k, v in OVERLAPPING.items() if k != "additionalProperties"}
    agrees(lenient, schema, value)


ALL_OF = {"allOf": [
    {"type": "object", "properties": {"x-1": {"type": "integer"}},
     "patternProperties": {"^x": {"type": "number", "minimum": 1}}, "additionalProperties": {"type": "string"}},
    {"type": "object", "properties": {"a": {"type": "string"}},
     "patternProperties": {"1$": {"type": "number", "maximum": 10}}}]}


@UNTIMED
@given(value=OBJECTS)
def test_patterns_merged_from_all_of_branches_agree_with_jsonschema(service, value):
    declared = {"properties": {"x-1": {}, "a": {}}}  # the merged object declares the branches' names in order
    text = json.dumps(in_declared_order(declared, value))
    assert accepts(service, ALL_OF, text) == jsonschema.Draft202012Validator(ALL_OF).is_valid(value), text


@UNTIMED
@given(name=st.text(alphabet='x-a"\\é\n\U0001f600', max_size=4), ascii_only=st.booleans())
def test_every_spelling_of_a_name_is_judged_by_the_name_it_decodes_to(service, name, ascii_only):
    # No "$": Python's (jsonschema's) matches before a final newline, ECMA-262's only at the end.
    schema = {"type": "object", "patternProperties": {"^x-.": {"type": "integer"}, "é": {"type": "string"}}}
    value = {name: 1}
    text = json.dumps(value, ensure_ascii=ascii_only)
    judge = {**schema, "additionalProperties": False}
    assert accepts(service, schema, text) == jsonschema.Draft202012Validator(judge).is_valid(value), text


# -- real schemas -----------------------------------------------------------------------------------

# MaskBench schemas tagjit refused for patternProperties (beside properties, several entries, beside anyOf), whose
# instances it now judges as the file does (of the others, four list members out of declared order and four stay
# refused for another feature: oneOf branches that overlap as objects, dependencies on a recursive $ref).
REAL = ["Github_easy---o21848.json", "Github_easy---o67010.json", "Github_easy---o69635.json",
        "Github_easy---o81581.json", "Github_easy---o83697.json", "Github_easy---o85467.json",
        "Github_easy---o87825.json", "Github_easy---o9814.json", "Github_medium---o10566.json",
        "Github_medium---o12562.json", "Github_medium---o14405.json", "Github_medium---o16744.json",
        "Github_medium---o21849.json", "Github_medium---o21850.json", "Github_medium---o21851.json",
        "Github_medium---o21852.json", "Github_medium---o39749.json", "Github_medium---o4832.json",
        "Github_medium---o4833.json", "Github_medium---o4836.json", "Github_medium---o4837.json",
        "Github_medium---o4838.json", "Github_medium---o4841.json", "Github_medium---o4842.json",
        "Github_medium---o51177.json", "Github_medium---o56232.json", "Github_medium---o58622.json",
        "Github_medium---o5988.json", "Github_medium---o61532.json", "Github_medium---o68630.json",
        "Github_medium---o70611.json", "Github_medium---o73913.json", "Github_medium---o77340.json",
        "Github_medium---o83286.json", "Github_medium---o90425.json", "Github_medium---o9819.json",
        "Github_medium---o9902.json"]


@pytest.mark.parametrize("name", REAL)
def test_real_schemas_with_pattern_properties_judge_their_instances_as_the_file_does(service, name):
    case = maskbench(name)
    for t in case["tests"]:
        assert accepts(service, case["schema"], json.dumps(t["data"])) is t["valid"], t["description"]


# -- tool calls -------------------------------------------------------------------------------------

LABELS = {"type": "object", "properties": {"name": {"type": "string"}},
          "patternProperties": {"^label_": {"type": "string", "maxLength": 5}}, "required": ["name"]}


def test_patterns_are_enforced_in_tool_arguments(svc):
    tool = {"type": "function", "function": {"name": "tag", "parameters": LABELS}}
    c = Constraint.of(Kind.STRUCTURAL_TAG, build_tool_tag(load_format("hermes"), [tool], "required", True,
                                                          svc.settings))
    for args, ok in (({"name": "a", "label_env": "prod"}, True), ({"name": "a", "label_env": "production"}, False),
                     ({"name": "a", "env": "prod"}, False)):
        g = svc.grammar(c)
        text = '<tool_call>\n{"name": "tag", "arguments": ' + json.dumps(args) + "}\n</tool_call>"
        assert (g.accept_string(text) and g.is_completed()) is ok, args


def test_xml_arguments_with_patterns_are_refused_naming_them():
    tool = {"type": "function", "function": {"name": "tag", "parameters": LABELS}}
    with pytest.raises(ConstraintError, match="patternProperties"):
        build_tool_tag("qwen3_coder", [tool], "required", settings=Settings(unenforceable_tools="refuse"))


def test_a_nested_xml_argument_with_patterns_is_enforced(svc):
    tool = {"type": "function", "function": {"name": "tag", "parameters": {
        "type": "object", "properties": {"labels": LABELS}, "required": ["labels"]}}}
    c = Constraint.of(Kind.STRUCTURAL_TAG, build_tool_tag("qwen3_coder", [tool], "required", True, svc.settings))
    for labels, ok in (({"name": "a", "label_x": "b"}, True), ({"name": "a", "label_x": "bbbbbb"}, False)):
        g = svc.grammar(c)
        text = f"<tool_call>\n<function=tag>\n<parameter=labels>\n{json.dumps(labels)}\n</parameter>\n</function>\n" \
               "</tool_call>"
        assert (g.accept_string(text) and g.is_completed()) is ok, labels


# -- any-order objects ------------------------------------------------------------------------------

SERVICES = {"type": "object", "properties": {"version": {"type": "string"}},
            "patternProperties": {"^svc_": {"type": "object", "properties": {"image": {"type": "string"},
                                                                             "port": {"type": "integer"}}}}}


# Two patterns whose values differ: the filter cannot tell which one a name takes.
SERVICES_AND_JOBS = {**SERVICES, "patternProperties": {**SERVICES["patternProperties"],
                                                       "^job_": {"type": "object", "properties": {
                                                           "cron": {"type": "string"}, "image": {"type": "string"}}}}}


def test_under_the_any_order_default_an_object_below_one_pattern_takes_any_order(llama3_info):
    any_order = CompileService(llama3_info, UNHURRIED.replace(any_order_default=True))
    assert accepts(any_order, SERVICES, '{"version": "1", "svc_web": {"port": 80, "image": "nginx"}}')
    assert not accepts(any_order, SERVICES, '{"version": "1", "svc_web": {"port": 80, "port": 81}}')


def test_under_the_any_order_default_objects_below_several_patterns_keep_their_declared_order(llama3_info):
    any_order = CompileService(llama3_info, UNHURRIED.replace(any_order_default=True))
    assert accepts(any_order, SERVICES_AND_JOBS, '{"svc_web": {"image": "nginx", "port": 80}, "version": "1"}')
    assert not accepts(any_order, SERVICES_AND_JOBS, '{"version": "1", "svc_web": {"port": 80, "image": "nginx"}}')


def test_x_any_order_below_several_patterns_stays_refused_naming_it(service):
    schema = {**SERVICES_AND_JOBS, "patternProperties": {
        **SERVICES_AND_JOBS["patternProperties"],
        "^svc_": {**SERVICES["patternProperties"]["^svc_"], "x-any-order": True}}}
    with pytest.raises(UnsupportedFeatureError, match="x-any-order below patternProperties"):
        service.validate(Constraint.of(Kind.JSON, schema))


def test_x_any_order_on_an_object_with_patterns_takes_declared_and_pattern_names_in_any_order(service):
    schema = {**SERVICES, "x-any-order": True}
    assert accepts(service, schema, '{"svc_web": {"image": "nginx"}, "version": "1", "svc_db": {}}')
    assert not accepts(service, schema, '{"svc_web": {"image": 1}, "version": "1"}')
    assert not accepts(service, schema, '{"svc_web": {}, "web": {}, "version": "1"}')  # strict: no other name
    assert not accepts(service, schema, '{"svc_web": {}, "version": "1", "svc_web": {}}')


def test_an_any_order_object_and_a_declared_order_one_share_their_key_rules(service):
    def obj(any_order: bool) -> dict:
        return {"type": "object", "x-any-order": any_order, "properties": {"a": {"type": "integer"}},
                "required": ["a"], "patternProperties": {"^x_[a-z]+$": {"type": "integer"}}}
    schema = {"type": "object", "properties": {"p": obj(True), "q": obj(False)}, "required": ["p", "q"]}
    assert accepts(service, schema, '{"p": {"x_b": 1, "a": 2}, "q": {"a": 1, "x_c": 3}}')
    assert not accepts(service, schema, '{"p": {"a": 2}, "q": {"x_c": 3, "a": 1}}')


# Declared names, one of which a pattern also matches (both schemas apply), names only a pattern matches, names no
# pattern matches: the any-order object takes exactly the members JSON Schema does.
TAGGED_SERVICES = {"type": "object", "x-any-order": True, "required": ["version"],
                   "properties": {"version": {"type": "string"}, "svc_main": {"type": "object", "required": ["port"]}},
                   "patternProperties": {"^svc_": {"type": "object", "properties": {"port": {"type": "integer"}}}},
                   "additionalProperties": {"type": "boolean"}}
SERVICE_VALUES = st.sampled_from(["1", True, {}, {"port": 80}, {"port": "80"}])


@settings(max_examples=150, deadline=None)
@given(members=st.dictionaries(st.sampled_from(["version", "svc_main", "svc_web", "svc_db", "debug", "x"]),
                               SERVICE_VALUES))
def test_an_any_order_object_with_patterns_accepts_exactly_what_json_schema_validates(service, members):
    valid = jsonschema.Draft202012Validator(TAGGED_SERVICES).is_valid(members)
    assert accepts(service, TAGGED_SERVICES, json.dumps(members)) is valid, members


# -- value patterns of the real schemas -------------------------------------------------------------

def test_a_value_patterns_top_level_alternatives_each_keep_their_own_anchors(service):
    # Github_medium---o21850's "^(integration\.response\.header\..)|(integration\.response\.body\..)|('.*')+$".
    schema = {"type": "string", "pattern": "^a.|b.|'c'$"}
    assert [t for t in ('"ax-y"', '"x-by"', "\"x'c'\"", '"xa-"', "\"'c'x\"") if accepts(service, schema, t)] == \
        ['"ax-y"', '"x-by"', "\"x'c'\""]


def test_under_the_any_order_default_a_root_whose_members_a_ref_points_into_keeps_its_declared_order(llama3_info):
    # Github_medium---o53033 keeps its definitions beside the root's properties: {"bolts": {...}, "properties": ...}.
    schema = {"bolts": {"type": "object", "patternProperties": {"^[a-z]+$": {"type": "integer"}}},
              "type": "object", "properties": {"bolts": {"$ref": "#/bolts"}, "name": {"type": "string"}}}
    any_order = CompileService(llama3_info, UNHURRIED.replace(any_order_default=True))
    assert accepts(any_order, schema, '{"bolts": {"m": 3}, "name": "x"}')
    assert not accepts(any_order, schema, '{"name": "x", "bolts": {"m": 3}}')
    assert not accepts(any_order, schema, '{"bolts": {"M": 3}}')


def test_x_any_order_on_a_root_whose_members_a_ref_points_into_is_refused_naming_the_ref(service):
    schema = {"bolts": {"type": "integer"}, "type": "object", "x-any-order": True,
              "properties": {"a": {"$ref": "#/bolts"}, "b": {"type": "string"}}}
    with pytest.raises(UnsupportedFeatureError, match="ref into a member of an x-any-order root"):
        service.validate(Constraint.of(Kind.JSON, schema))
