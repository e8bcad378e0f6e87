"""Any-order objects: every order of the keys, each required key once, nothing else; masks exact."""

from __future__ import annotations

import itertools
import json
import random

import jsonschema
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from pools import UNHURRIED
from tagjit import anyorder as any_order
from tagjit.compile.service import CompileService
from tagjit.errors import UnsupportedFeatureError
from tagjit.runtime.matcher import allocate_token_bitmask
from tagjit.build.grammars import json_schema_grammar
from tagjit.anyorder.plan import scalar_values
from tagjit.build.keys import key_text, negate
from tagjit.settings import Settings
from tagjit.constraint import Constraint

from shared_data import maskbench, schema_file

PERSON = {
    "type": "object", "x-any-order": True,
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "nick": {"type": "string"}},
    "required": ["name", "age"],
}


def accepts(service: CompileService, schema: dict | bool, text: str) -> bool:
    g = service.grammar(Constraint.of("json", schema))
    return g.accept_string(text) and g.is_completed()


@pytest.fixture(scope="module")
def qwen_service(qwen2_info) -> CompileService:
    return CompileService(qwen2_info, UNHURRIED)


@pytest.fixture(scope="module")
def bound1(llama3_info) -> CompileService:
    """The free JSON style at bound 1 (compact JSON, json.dumps spacing, one whitespace character between tokens)."""
    return CompileService(llama3_info, UNHURRIED.replace(json_style="free"))


# -- what the keyword means ----------------------------------------------------------------------

def test_declared_order_stays_the_default(service):
    plain = {k: v for k, v in PERSON.items() if k != "x-any-order"}
    assert accepts(service, plain, '{"name": "a", "age": 1}')
    assert not accepts(service, plain, '{"age": 1, "name": "a"}')


def test_opted_in_object_takes_its_keys_in_any_order(service):
    assert accepts(service, PERSON, '{"age": 1, "name": "a"}')
    assert accepts(service, PERSON, '{"nick": "b", "age": 1, "name": "a"}')


def test_missing_required_key_is_rejected(service):
    assert not accepts(service, PERSON, '{"nick": "b", "name": "a"}')


def test_whitespace_after_a_value_is_refused_while_the_object_cannot_close(bound1):
    g = bound1.grammar(Constraint.of("json", PERSON))
    assert g.accept_string('{"age": 1') and not g.accept_string(" ")  # only "," can follow: "name" is missing
    assert g.accept_string(', "name": "a"') and g.accept_string(" ") and g.accept_string("}") and g.is_completed()


def test_whitespace_before_a_colon_or_comma_is_refused_under_bounded_whitespace(service, llama3_info):
    assert not accepts(service, PERSON, '{"age" : 1, "name": "a"}')
    assert not accepts(service, PERSON, '{"age": 1 , "name": "a"}')
    free = CompileService(llama3_info, UNHURRIED.replace(max_whitespace=None))
    assert accepts(free, PERSON, '{"age" : 1 , "name": "a"}')


def test_compact_json_settings_take_any_order_objects_compact(llama3_info):
    compact = CompileService(llama3_info, UNHURRIED.replace(max_whitespace=0))
    assert accepts(compact, PERSON, '{"age":1,"name":"a"}')
    assert not accepts(compact, PERSON, '{"age": 1, "name": "a"}')


def test_repeated_key_is_rejected(service):
    assert not accepts(service, PERSON, '{"age": 1, "name": "a", "age": 2}')


def test_unknown_key_is_rejected_without_additional_properties(service):
    assert not accepts(service, PERSON, '{"age": 1, "name": "a", "zip": 2}')


def test_additional_properties_schema_still_applies(service):
    schema = {**PERSON, "additionalProperties": {"type": "integer"}}
    assert accepts(service, schema, '{"zip": 2, "age": 1, "name": "a"}')
    assert not accepts(service, schema, '{"zip": "x", "age": 1, "name": "a"}')
    assert not accepts(service, schema, '{"zip": 2, "age": 1, "zip": 3, "name": "a"}')


def test_declared_name_cannot_come_back_as_an_additional_property(service):
    schema = {**PERSON, "additionalProperties": True}
    assert not accepts(service, schema, '{"age": 1, "name": "a", "age": "x"}')
    assert not accepts(service, schema, '{"age": 1, "name": "a", "\\u0061ge": 3}')


def test_nested_objects_opt_in_independently(service):
    inner_declared = {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                      "required": ["x", "y"]}
    schema = {**PERSON, "properties": {**PERSON["properties"], "pos": inner_declared}}
    assert accepts(service, schema, '{"pos": {"x": 1, "y": 2}, "age": 1, "name": "a"}')
    assert not accepts(service, schema, '{"pos": {"y": 2, "x": 1}, "age": 1, "name": "a"}')
    outer_declared = {"type": "object", "properties": {"a": {"type": "integer"}, "p": PERSON}, "required": ["a", "p"]}
    assert accepts(service, outer_declared, '{"a": 1, "p": {"age": 1, "name": "x"}}')
    assert not accepts(service, outer_declared, '{"p": {"age": 1, "name": "x"}, "a": 1}')
    assert not accepts(service, outer_declared, '{"a": 1, "p": {"age": 1}}')


def test_server_default_opts_every_object_in_and_false_opts_out(llama3_info):
    svc = CompileService(llama3_info, UNHURRIED.replace(any_order_default=True))
    inner = {"type": "object", "x-any-order": False, "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}}}
    schema = {"type": "object", "properties": {"b": {"type": "integer"}, "a": inner}, "required": ["a", "b"]}
    assert accepts(svc, schema, '{"a": {"x": 1, "y": 2}, "b": 1}')
    assert not accepts(svc, schema, '{"a": {"y": 2, "x": 1}, "b": 1}')


def test_per_request_option_sets_the_default_for_one_schema(service):
    plain = {k: v for k, v in PERSON.items() if k != "x-any-order"}
    assert accepts(service, any_order.with_any_order(plain, True), '{"age": 1, "name": "a"}')
    assert not accepts(service, any_order.with_any_order(PERSON, False) | {"x-any-order": False},
                       '{"age": 1, "name": "a"}')


def test_refs_and_recursion_reach_any_order_objects(service):
    schema = {"$defs": {"node": {"type": "object", "x-any-order": True,
                                 "properties": {"v": {"type": "integer"},
                                                "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                                 "required": ["v"]}},
              "$ref": "#/$defs/node"}
    assert accepts(service, schema, '{"kids": [{"v": 2}, {"kids": [], "v": 3}], "v": 1}')
    assert not accepts(service, schema, '{"kids": [{"kids": []}], "v": 1}')


def test_min_and_max_properties_are_enforced(service):
    schema = {**PERSON, "required": [], "minProperties": 2, "maxProperties": 2}
    assert accepts(service, schema, '{"nick": "n", "age": 1}')
    assert not accepts(service, schema, '{"nick": "n"}')
    assert not accepts(service, schema, '{"nick": "n", "age": 1, "name": "a"}')


def test_whitespace_bound_still_applies(bound1):
    limit = bound1.settings.max_whitespace
    assert accepts(bound1, PERSON, '{"age":1,' + " " * limit + '"name":"a"}')
    assert not accepts(bound1, PERSON, '{"age":1,' + " " * (limit + 1) + '"name":"a"}')


def test_explicit_keyword_in_an_ambiguous_union_is_a_clear_error():
    schema = {"anyOf": [PERSON, {"type": "object", "properties": {"q": {"type": "integer"}}}]}
    with pytest.raises(UnsupportedFeatureError, match="anyOf"):
        json_schema_grammar(schema, Settings())


def test_server_default_keeps_declared_order_where_it_cannot_track(llama3_info):
    svc = CompileService(llama3_info, UNHURRIED.replace(any_order_default=True))
    a = {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}}, "required": ["x", "y"]}
    b = {"type": "object", "properties": {"x": {"type": "string"}, "q": {"type": "integer"}}, "required": ["q"]}
    schema = {"anyOf": [a, b]}  # an "x" one branch writes is not the other's, and no check tells them apart
    assert accepts(svc, schema, '{"x": 1, "y": 2}')
    assert not accepts(svc, schema, '{"y": 2, "x": 1}')


@pytest.mark.parametrize("name", ["Github_easy---o58621.json", "Github_easy---o91096.json"])
def test_server_default_serves_real_schemas_it_cannot_reorder_everywhere(llama3_info, name):
    # o58621: a $ref passes through an object to a definition nested in it; o91096: the root has properties beside
    # an allOf. Those objects keep their declared order; the schema is served, each instance judged as labelled.
    svc = CompileService(llama3_info, UNHURRIED.replace(any_order_default=True, strict_mode=False))
    raw = maskbench(name)
    for test in raw["tests"]:
        assert accepts(svc, raw["schema"], json.dumps(test["data"])) == test["valid"]


def test_a_ref_through_an_explicit_any_order_object_is_refused_by_name():
    schema = {"type": "object", "properties": {"leaf": {"$ref": "#/definitions/obj/definitions/leaf"}},
              "definitions": {"obj": {"type": "object", "x-any-order": True, "properties": {"p": {"type": "integer"}},
                                      "definitions": {"leaf": {"type": "string"}}}}}
    with pytest.raises(UnsupportedFeatureError, match=r"\$ref into an x-any-order object"):
        json_schema_grammar(schema, Settings())


# -- unions of objects: the filter follows every branch at once --------------------------------

# Two objects the filter follows at once: a text of either branch's grammar passes the other's keys only where its
# "kind" says otherwise, which the filter checks.
UNION = {"anyOf": [
    {"type": "object", "x-any-order": True, "required": ["kind", "n"], "additionalProperties": False,
     "properties": {"kind": {"const": "a"}, "n": {"type": "integer", "minimum": 0, "maximum": 9},
                    "s": {"type": "string", "maxLength": 2}}},
    {"type": "object", "x-any-order": True, "required": ["kind"], "additionalProperties": False,
     "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}, "kind": {"enum": ["b", "c"]},
                    "t": {"type": "boolean"}}},
]}


def union_service(info) -> CompileService:
    return CompileService(info, UNHURRIED.replace(any_order_default=True))


@pytest.fixture(scope="module")
def union_svc(llama3_info) -> CompileService:
    return union_service(llama3_info)


def test_each_branch_of_a_union_of_objects_takes_its_keys_in_any_order(llama3_info):
    svc = union_service(llama3_info)
    a = {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}}, "required": ["x", "y"]}
    b = {"type": "object", "properties": {"q": {"type": "integer"}}, "required": ["q"]}
    schema = {"anyOf": [a, b]}
    assert accepts(svc, schema, '{"y": 2, "x": 1}')
    assert accepts(svc, schema, '{"q": 3}')
    assert not accepts(svc, schema, '{"y": 2}')
    assert not accepts(svc, schema, '{"y": 2, "q": 3}')


def two_branches(name: str, value_a: dict, value_b: dict) -> dict:
    """Objects that differ by one name's value: branch a also requires "x", branch b only that name."""
    def branch(value: dict, required: list[str]) -> dict:
        return {"type": "object", "properties": {name: value, "x": {"type": "integer"}}, "required": required}
    return {"anyOf": [branch(value_a, [name, "x"]), branch(value_b, [name])]}


def test_a_discriminating_value_is_checked_where_another_branch_wrote_the_object(union_svc):
    schema = two_branches("kind", {"const": "a"}, {"const": "b"})
    assert accepts(union_svc, schema, '{"x": 1, "kind": "a"}')
    assert accepts(union_svc, schema, '{"kind": "b"}')
    # Branch a's grammar writes this and branch b's keys pass, but kind "a" is not b's: invalid for both.
    assert not accepts(union_svc, schema, '{"kind": "a"}')


def test_a_checked_literal_is_read_as_json(union_svc):
    schema = two_branches("on", {"const": None}, {"const": False})
    assert accepts(union_svc, schema, '{"x": 1, "on": null}')
    assert accepts(union_svc, schema, '{"on": false}')
    assert not accepts(union_svc, schema, '{"on": null}')


def test_number_values_tagjit_spells_keep_declared_order_in_a_union(union_svc):
    # The values are tagjit's own rule (1.0, 1e0 ...), which the filter does not read.
    schema = two_branches("on", {"enum": [1]}, {"enum": [2]})
    assert accepts(union_svc, schema, '{"on": 1, "x": 1}')
    assert not accepts(union_svc, schema, '{"x": 1, "on": 1}')
    assert not accepts(union_svc, schema, '{"on": 1}')


def test_branches_that_share_a_value_tagjit_writes_itself_take_any_order(union_svc):
    # Each branch's number range becomes its own rule of tagjit's: the same rules under other names are one schema.
    a = {"type": "object", "properties": {"kind": {"const": "a"}, "n": {"type": "number", "minimum": 0.5}},
         "required": ["kind", "n"]}
    b = {"type": "object", "properties": {"kind": {"const": "b"}, "n": {"type": "number", "minimum": 0.5}},
         "required": ["kind"]}
    schema = {"anyOf": [a, b]}
    assert accepts(union_svc, schema, '{"n": 1.5, "kind": "a"}')
    assert accepts(union_svc, schema, '{"n": 0.5, "kind": "b"}')
    assert not accepts(union_svc, schema, '{"n": 0.25, "kind": "b"}')
    assert not accepts(union_svc, schema, '{"kind": "a"}')


# A tagged union, as GeoJSON writes one: the branches' values under "coordinates" differ, and a text one branch's
# grammar writes never passes the other's checks, because each requires its own "type".
TAGGED = {"oneOf": [
    {"type": "object", "required": ["type", "coordinates"],
     "properties": {"type": {"const": "Point"}, "coordinates": {"type": "array", "items": {"type": "number"}}}},
    {"type": "object", "required": ["type", "coordinates"],
     "properties": {"type": {"const": "Line"},
                    "coordinates": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}}}},
]}
MEMBER_VALUES = {"kind": st.sampled_from(["a", "b", "c", "d"]), "n": st.integers(0, 9), "s": st.sampled_from(["", "xy", "xyz"]),
          "t": st.booleans(), "type": st.sampled_from(["Point", "Line", "x"]),
          "coordinates": st.sampled_from([[1, 2], [[1, 2]], []]), "other": st.just(1)}


@pytest.fixture(scope="module")
def lenient_union_svc(llama3_info) -> CompileService:
    return CompileService(llama3_info, UNHURRIED.replace(any_order_default=True, strict_mode=False))


@hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_union_accepts_exactly_what_json_schema_validates(union_svc, data):
    names = data.draw(st.lists(st.sampled_from(["kind", "n", "s", "t"]), unique=True))
    instance = {n: data.draw(MEMBER_VALUES[n]) for n in names}
    valid = jsonschema.Draft202012Validator(UNION).is_valid(instance)
    assert accepts(union_svc, UNION, json.dumps(instance)) == valid, instance


@hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_tagged_union_open_to_other_names_accepts_exactly_what_json_schema_validates(lenient_union_svc, data):
    names = data.draw(st.lists(st.sampled_from(["type", "coordinates", "other"]), unique=True))
    instance = {n: data.draw(MEMBER_VALUES[n]) for n in names}
    valid = jsonschema.Draft202012Validator(TAGGED).is_valid(instance)
    assert accepts(lenient_union_svc, TAGGED, json.dumps(instance)) == valid, instance


def test_a_tag_one_branch_does_not_require_tells_nothing_apart(lenient_union_svc):
    untagged = {"anyOf": json.loads(json.dumps(TAGGED["oneOf"]))}
    untagged["anyOf"][1]["required"] = ["coordinates"]
    # Branch 0's grammar writes these coordinates; branch 1's checks would pass them without a "type".
    assert not accepts(lenient_union_svc, untagged, '{"coordinates": [1, 2]}')
    assert accepts(lenient_union_svc, untagged, '{"type": "Point", "coordinates": [1, 2]}')


def test_a_tagged_union_takes_its_members_in_any_order(lenient_union_svc):
    assert accepts(lenient_union_svc, TAGGED, '{"coordinates": [1, 2], "type": "Point"}')
    assert accepts(lenient_union_svc, TAGGED, '{"coordinates": [[1, 2]], "other": 1, "type": "Line"}')
    assert not accepts(lenient_union_svc, TAGGED, '{"coordinates": [[1, 2]], "type": "Point"}')


def test_real_oneof_of_objects_takes_its_members_in_any_order(llama3_info):
    svc = union_service(llama3_info)
    raw = maskbench("Glaiveai2K---calculate_area_d26e2d5f.json")
    assert accepts(svc, raw["schema"], '{"radius": 5, "shape": "circle"}')
    assert accepts(svc, raw["schema"], '{"width": 2, "shape": "rectangle", "length": 3}')
    assert not accepts(svc, raw["schema"], '{"radius": 5, "shape": "rectangle"}')
    for test in raw["tests"]:
        assert accepts(svc, raw["schema"], json.dumps(test["data"])) == test["valid"]


def test_a_name_one_branch_leaves_out_is_refused_where_another_branch_wrote_it(union_svc):
    a = {"type": "object", "properties": {"r": {}, "n": {}, "s": {}}, "required": ["n", "s"],
         "additionalProperties": False}
    every_name_but_n = key_text(negate({"names": ["n"]}))  # the languages tagjit writes for an exact oneOf
    b = {"type": "object", "properties": {"r": {}}, "required": ["r"], "patternProperties": {every_name_but_n: {}},
         "additionalProperties": False}
    schema = {"anyOf": [a, b]}
    assert accepts(union_svc, schema, '{"s": 1, "r": 1, "n": 1}')
    assert accepts(union_svc, schema, '{"q": 1, "r": 1}')
    # Branch a's grammar writes this and lacks its "s"; branch b requires only "r" but does not take "n".
    assert not jsonschema.Draft202012Validator(schema).is_valid({"r": 1, "n": 1})
    assert not accepts(union_svc, schema, '{"r": 1, "n": 1}')


STATUS = two_branches("status", {"type": "string", "pattern": "^success$"},
                      {"type": "string", "pattern": "^(fail|error)$"})


def test_a_pattern_that_spells_out_its_strings_tells_branches_apart(union_svc):
    assert accepts(union_svc, STATUS, '{"x": 1, "status": "success"}')
    assert accepts(union_svc, STATUS, '{"status": "error"}')
    assert not accepts(union_svc, STATUS, '{"status": "success"}')  # branch a's, without its "x"


@hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_union_told_apart_by_patterns_accepts_exactly_what_json_schema_validates(union_svc, data):
    names = data.draw(st.lists(st.sampled_from(["status", "x"]), unique=True))
    values = {"status": st.sampled_from(["success", "fail", "error", "succes", "failure", ""]), "x": st.integers(0, 9)}
    instance = {n: data.draw(values[n]) for n in names}
    valid = jsonschema.Draft202012Validator(STATUS).is_valid(instance)
    assert accepts(union_svc, STATUS, json.dumps(instance)) == valid, instance


def test_only_an_anchored_literal_or_group_of_them_reads_as_a_list_of_strings():
    def read(pattern: str):
        return scalar_values({"type": "string", "pattern": pattern})
    assert read("^(fail|error)$") == {("string", "fail"), ("string", "error")}
    assert read("^success$") == {("string", "success")}
    # "^ok|no$" is every string that starts with "ok" or ends with "no"; the others are not anchored, or not literal.
    assert [read(p) for p in ("^ok|no$", "^(a)|(b)$", "ok", "^a.b$", "^(ab$")] == [None] * 5


def test_a_real_union_told_apart_by_status_patterns_takes_its_members_in_any_order(lenient_union_svc):
    raw = maskbench("Github_medium---o71265.json")  # JSend: "status" is "^success$", "^fail$" or "^error$"
    for test in raw["tests"]:
        assert accepts(lenient_union_svc, raw["schema"], json.dumps(test["data"])) == test["valid"]
    assert accepts(lenient_union_svc, raw["schema"], '{"data": [{"code": 1, "message": "m"}], "status": "fail"}')
    assert not accepts(lenient_union_svc, raw["schema"], '{"data": [{"code": 1}], "status": "fail"}')


AREA = "Glaiveai2K---calculate_area_4bbe47e7.json"  # a oneOf of required sets beside the properties
AREA_VALUES = {"shape": st.sampled_from(["circle", "square"]), "radius": st.integers(0, 9),
               "length": st.integers(0, 9), "width": st.integers(0, 9), "base": st.integers(0, 9),
               "height": st.integers(0, 9), "other": st.just("x")}


def test_a_oneof_of_required_sets_takes_its_members_in_any_order(lenient_union_svc):
    # tagjit makes the oneOf exact by splitting it into objects that each leave out some names; the names they do
    # not declare are a patternProperties language, "every name but these", which the filter checks too.
    raw = maskbench(AREA)
    assert accepts(lenient_union_svc, raw["schema"], '{"shape": "circle", "radius": 10}')
    assert accepts(lenient_union_svc, raw["schema"], '{"width": 2, "other": 1, "shape": "circle", "length": 3}')
    assert not accepts(lenient_union_svc, raw["schema"], '{"width": 2, "radius": 1, "shape": "circle", "length": 3}')
    for test in raw["tests"]:
        assert accepts(lenient_union_svc, raw["schema"], json.dumps(test["data"])) == test["valid"]


@hsettings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_oneof_of_required_sets_accepts_exactly_what_json_schema_validates(lenient_union_svc, data):
    schema = maskbench(AREA)["schema"]
    names = data.draw(st.lists(st.sampled_from(list(AREA_VALUES)), unique=True))
    instance = {n: data.draw(AREA_VALUES[n]) for n in names}
    valid = jsonschema.Draft202012Validator(schema).is_valid(instance)
    assert accepts(lenient_union_svc, schema, json.dumps(instance)) == valid, instance


def test_real_schema_with_64_properties_takes_any_order(service):
    schema = big_object(64)
    names = list(schema["properties"])
    random.Random(7).shuffle(names)
    text = json.dumps({n: i for i, n in enumerate(names)})
    assert accepts(service, schema, text)
    assert not accepts(service, schema, text[:-1] + ', "' + names[0] + '": 1}')


def big_object(n: int) -> dict:
    """An any-order object with n integer properties (the first half required)."""
    names = [f"field_{i:03d}" for i in range(n)]
    return {"type": "object", "x-any-order": True, "properties": {k: {"type": "integer"} for k in names},
            "required": names[: n // 2]}


# -- property-based: permutations accepted, broken objects rejected -----------------------------

NAMES = st.sampled_from(["a", "ab", "abc", "b", "name", "nam", "x_y", "é", "q\"t", "back\\s", "ünï", "id", "Id"])
VALUES = st.sampled_from([{"type": "integer"}, {"type": "boolean"}, {"type": "string", "maxLength": 4},
                          {"type": "string"},
                          {"enum": ["p", "q"]}, {"type": "array", "items": {"type": "integer"}}])


@st.composite
def object_schemas(draw):
    names = draw(st.lists(NAMES, min_size=1, max_size=6, unique=True))
    props = {n: draw(VALUES) for n in names}
    required = [n for n in names if draw(st.booleans())]
    extra = draw(st.sampled_from([False, True, {"type": "integer"}]))
    return {"type": "object", "x-any-order": True, "properties": props, "required": required,
            "additionalProperties": extra}


def sample_value(schema: dict):
    if schema.get("type") == "string":
        return "sé" if "maxLength" in schema else 'q"}, \\'  # xgrammar's bounded strings take no escapes
    return {"integer": 7, "boolean": True, "array": [1, 2]}.get(schema.get("type"), "p")


def dump(obj_pairs: list[tuple[str, object]], compact: bool) -> str:
    sep = "," if compact else ", "
    colon = ":" if compact else ": "
    return "{" + sep.join(json.dumps(k, ensure_ascii=False) + colon + json.dumps(v, ensure_ascii=False) for k, v in obj_pairs) + "}"


PBT = hsettings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@PBT
@given(schema=object_schemas(), data=st.data())
def test_every_order_of_a_valid_key_set_is_accepted(service, schema, data):
    names = list(schema["properties"])
    optional = [n for n in names if n not in schema["required"]]
    keys = schema["required"] + data.draw(st.lists(st.sampled_from(optional), unique=True)) if optional \
        else list(schema["required"])
    orders = list(itertools.permutations(keys)) if len(keys) <= 4 else [
        tuple(data.draw(st.permutations(keys))) for _ in range(6)]
    g = service.grammar(Constraint.of("json", schema))
    for order in orders:
        fresh = g.copy()
        text = dump([(k, sample_value(schema["properties"][k])) for k in order], compact=False)  # the default's
        assert fresh.accept_string(text) and fresh.is_completed(), text


@PBT
@given(schema=object_schemas(), data=st.data())
def test_missing_required_key_is_rejected_for_any_schema(service, schema, data):
    if not schema["required"]:
        return
    names = list(schema["properties"])
    dropped = data.draw(st.sampled_from(schema["required"]))
    keys = data.draw(st.permutations([n for n in names if n != dropped]))
    text = dump([(k, sample_value(schema["properties"][k])) for k in keys], data.draw(st.booleans()))
    assert not accepts(service, schema, text)


@PBT
@given(schema=object_schemas(), data=st.data())
def test_duplicate_key_is_rejected_for_any_schema(service, schema, data):
    names = list(schema["properties"])
    keys = list(data.draw(st.permutations(names)))
    twice = data.draw(st.sampled_from(names))
    keys.insert(data.draw(st.integers(0, len(keys))), twice)
    text = dump([(k, sample_value(schema["properties"][k])) for k in keys], data.draw(st.booleans()))
    assert not accepts(service, schema, text)


@PBT
@given(schema=object_schemas(), data=st.data())
def test_unknown_key_is_rejected_when_additional_properties_is_false(service, schema, data):
    schema = {**schema, "additionalProperties": False}
    names = list(schema["properties"])
    pairs = [(k, sample_value(schema["properties"][k])) for k in data.draw(st.permutations(names))]
    pairs.insert(data.draw(st.integers(0, len(pairs))), ("zz_unknown", 1))
    assert not accepts(service, schema, dump(pairs, data.draw(st.booleans())))


# -- exact masks: the filtered mask equals the mask of an exact (exponential) grammar ------------

def exact_schema(schema):
    """The same language without any-order objects: anyOf over every order of every valid key set."""
    if isinstance(schema, list):
        return [exact_schema(x) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: exact_schema(v) if k in ("properties", "items", "anyOf", "additionalProperties") else v
           for k, v in schema.items() if k != "x-any-order"}
    if isinstance(out.get("properties"), dict) and schema.get("x-any-order") is True:
        props = {k: exact_schema(v) for k, v in schema["properties"].items()}
        required = schema.get("required", [])
        optional = [k for k in props if k not in required]
        branches = []
        for r in range(len(optional) + 1):
            for extra in itertools.combinations(optional, r):
                for order in itertools.permutations(list(required) + list(extra)):
                    branches.append({"type": "object", "properties": {k: props[k] for k in order},
                                     "required": list(order), "additionalProperties": False})
        return {"anyOf": branches}
    if "properties" in out:
        out["properties"] = {k: exact_schema(v) for k, v in schema["properties"].items()}
    return out


def allowed_ids(grammar, bitmask, vocab_size) -> np.ndarray:
    grammar.fill_bitmask(bitmask, 0)
    bits = np.unpackbits(bitmask[0].numpy().view(np.uint8), bitorder="little")[:vocab_size]
    return np.flatnonzero(bits)


SMALL = {
    "type": "object", "x-any-order": True,
    "properties": {
        "ok": {"type": "boolean"},
        "tag": {"type": "string", "maxLength": 2},
        "in": {"type": "object", "x-any-order": True,
               "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}, "ab": {"enum": ["x", "y"]}},
               "required": ["ab"]},
    },
    "required": ["ok", "in"],
}


@pytest.mark.parametrize("tokenizer", ["qwen2_info", "llama3_info"])
@pytest.mark.parametrize("schema", [SMALL, UNION], ids=["object", "union"])
def test_mask_equals_the_exact_grammar_mask_along_random_walks(request, tokenizer, schema):
    info = request.getfixturevalue(tokenizer)
    svc = CompileService(info, UNHURRIED.replace(max_whitespace=1))
    ours = svc.grammar(Constraint.of("json", schema))
    exact = svc.grammar(Constraint.of("json", exact_schema(schema)))
    vocab = [bytes(t) for t in info.decoded_vocab]
    bitmask = allocate_token_bitmask(1, info.vocab_size)
    stops = set(info.stop_token_ids)
    rng = random.Random(0)
    steps = 0
    for _ in range(12):
        ours.reset()
        exact.reset()
        text = b""
        for _ in range(60):
            a = allowed_ids(ours, bitmask, info.vocab_size)
            b = allowed_ids(exact, bitmask, info.vocab_size)
            assert np.array_equal(a, b), (text, set(a.tolist()) ^ set(b.tolist()))
            steps += 1
            choices = [t for t in a.tolist() if t not in stops]
            if not choices:
                break
            # Prefer tokens with structure in them so walks cover keys, commas and closings.
            structural = [t for t in choices if any(c in vocab[t] for c in b'",}:{')]
            t = rng.choice(structural if structural and rng.random() < 0.8 else choices)
            assert ours.accept_token(t) and exact.accept_token(t)
            text += vocab[t]
    assert steps > 200


def test_rollback_restores_the_exact_state(qwen2_info, qwen_service):
    g = qwen_service.grammar(Constraint.of("json", PERSON))
    vocab = [bytes(t) for t in qwen2_info.decoded_vocab]
    ids = {b: i for i, b in enumerate(vocab)}
    tokens = [ids[b'{"'], ids[b"age"], ids[b'":'], ids[b" "], ids[b"1"], ids[b","], ids[b' "'], ids[b"name"]]
    bitmask = allocate_token_bitmask(1, qwen2_info.vocab_size)
    masks = []
    for t in tokens:
        masks.append(allowed_ids(g, bitmask, qwen2_info.vocab_size))
        assert g.accept_token(t)
    for k in range(len(tokens), 0, -1):
        g.rollback(1)
        assert np.array_equal(allowed_ids(g, bitmask, qwen2_info.vocab_size), masks[k - 1])
    assert g.accept_tokens(tokens)


def test_key_already_used_is_masked_out(qwen2_info, qwen_service):
    g = qwen_service.grammar(Constraint.of("json", PERSON))
    before = g.copy()
    assert before.accept_string('{"age": 1, ')
    assert g.accept_string('{"name": "x", ')
    vocab = [bytes(t) for t in qwen2_info.decoded_vocab]
    bitmask = allocate_token_bitmask(1, qwen2_info.vocab_size)
    assert b'"name' in {vocab[t] for t in allowed_ids(before, bitmask, qwen2_info.vocab_size)}
    allowed = {vocab[t] for t in allowed_ids(g, bitmask, qwen2_info.vocab_size)}
    assert b'"' in allowed and b'"name' not in allowed


def test_object_cannot_close_while_a_required_key_is_missing(qwen2_info, qwen_service):
    g = qwen_service.grammar(Constraint.of("json", PERSON))
    assert g.accept_string('{"nick": "b"')
    vocab = [bytes(t) for t in qwen2_info.decoded_vocab]
    bitmask = allocate_token_bitmask(1, qwen2_info.vocab_size)
    allowed = {vocab[t] for t in allowed_ids(g, bitmask, qwen2_info.vocab_size)}
    assert b"," in allowed and b"}" not in allowed


def test_comma_is_masked_when_no_key_is_left(qwen2_info, qwen_service):
    g = qwen_service.grammar(Constraint.of("json", PERSON))
    assert g.accept_string('{"nick": "b", "age": 1, "name": "a"')
    vocab = [bytes(t) for t in qwen2_info.decoded_vocab]
    bitmask = allocate_token_bitmask(1, qwen2_info.vocab_size)
    allowed = {vocab[t] for t in allowed_ids(g, bitmask, qwen2_info.vocab_size)}
    assert b"}" in allowed and b'",' not in allowed and b"," not in allowed


# -- real schemas -----------------------------------------------------------------------------

def test_real_jsonschemabench_schema_accepts_reordered_instance(service):
    schema = schema_file("Github_easy", "o10008.json")
    opted = any_order.with_any_order(schema, True)
    compiled = service.compile(Constraint.of("json", opted))
    assert compiled.filter_spec is not None


# -- the filter's mask shortcuts (which tokens it looks at, its caches) never change its verdict ------------------

def unpacked(bitmask, vocab_size: int) -> np.ndarray:
    return np.unpackbits(bitmask[0].numpy().view(np.uint8), bitorder="little")[:vocab_size].astype(bool)


PATTERN_UNION = {"anyOf": [
    {"type": "object", "properties": {"r": {"type": "integer"}, "n": {"type": "boolean"}, "s": {"type": "string"}},
     "required": ["n", "s"], "additionalProperties": False},
    {"type": "object", "properties": {"r": {"type": "integer"}}, "required": ["r"],
     "patternProperties": {key_text(negate({"names": ["n"]})): {"type": "string"}}, "additionalProperties": False},
]}
PATTERN_OBJECT = {"type": "object", "required": ["v"], "properties": {"v": {"type": "string"}},
                  "patternProperties": {"^svc_": {"type": "object", "properties": {
                      "image": {"type": "string"}, "port": {"type": "integer"}}, "required": ["port"]}}}


@pytest.mark.parametrize("schema", [TAGGED, PATTERN_UNION, PATTERN_OBJECT], ids=["tagged", "pattern-union", "patterns"])
def test_the_mask_keeps_exactly_the_tokens_the_filter_accepts(llama3_info, schema):
    svc = CompileService(llama3_info, UNHURRIED.replace(any_order_default=True, strict_mode=False, max_whitespace=1))
    m = svc.grammar(Constraint.of("json", schema))
    vocab = [bytes(t) for t in llama3_info.decoded_vocab]
    n = llama3_info.vocab_size
    bitmask = allocate_token_bitmask(1, n)
    rng = random.Random(1)
    stops = set(llama3_info.stop_token_ids)
    structural = {t for t, b in enumerate(vocab) if any(c in b for c in b'",}]:{[\\')}
    cleared = 0
    for _ in range(6):
        m.reset()
        for _ in range(40):
            m._ensure().fill_next_token_bitmask(bitmask, 0)  # the grammar alone
            grammar_only = unpacked(bitmask, n)
            m.fill_bitmask(bitmask, 0)
            kept = unpacked(bitmask, n)
            assert not (kept & ~grammar_only).any()
            state = m._filter.state
            looked = [t for t in np.flatnonzero(grammar_only).tolist() if t in structural or rng.random() < 0.005]
            for t in looked:
                assert kept[t] == (t >= len(vocab) or any_order.step_state(state, vocab[t]) is not None), vocab[t]
            cleared += int((grammar_only & ~kept).sum())
            choices = [t for t in np.flatnonzero(kept).tolist() if t not in stops]
            if not choices:
                break
            shaped = [t for t in choices if t in structural]
            t = rng.choice(shaped if shaped and rng.random() < 0.8 else choices)
            assert m.accept_token(t)
    assert cleared > 0


# What a token does inside a string or number, or at a value nothing checks, is decided by what follows its end: the
# filter judges such tokens by that rest (VocabTables.rests); in a key that can only become free names, only tokens
# that end it are looked at. Every token of the vocabulary, in each such state.
PLAIN = {"type": "object", "x-any-order": True, "maxProperties": 3, "required": ["a", "n"],
         "properties": {"a": {"type": "string"}, "n": {"type": "number"}, "x": {},
                        "arr": {"type": "array", "items": {"type": "string"}}}}


@pytest.mark.parametrize("prefix", [
    '{"a": ',  # a value (then "}" breaks: n is missing)
    '{"a": "he',  # inside a string
    '{"a": "he\\',  # just after a backslash in one
    '{"n": 12',  # inside a number (then "}" breaks: a is missing)
    '{"a": "x", "n": 1, "x": ',  # a value after which "," breaks (maxProperties)
    '{"arr": ["a", ',  # an array item
    '{"x": {"k": [1, "',  # a string inside a value no rule reaches
    '{"x": {"k": 1, ',  # inside such a value, one bracket deep (then "}" breaks: a and n are missing)
    '{"x": {"k": [1, ',  # two brackets deep
    '{"x": {"k": [[1, ',  # three
    '{"a": "x", "ar',  # a key every name it can become is still free for
    '{"a": "x", "a',  # a key that could still become a used name
    '{"a": "x", "n": 1, "',  # a key, one name left (maxProperties)
], ids=["value", "string", "escape", "number", "last-value", "item", "opaque-string", "opaque-1", "opaque-2",
        "opaque-3", "key-free", "key-used", "key-last"])
def test_every_token_is_judged_as_the_filter_steps_it(llama3_info, prefix):
    svc = CompileService(llama3_info, UNHURRIED.replace(max_whitespace=1))
    m = svc.grammar(Constraint.of("json", PLAIN))
    assert m.accept_string(prefix)
    vocab = [bytes(t) for t in llama3_info.decoded_vocab]
    bitmask = allocate_token_bitmask(1, llama3_info.vocab_size)
    if m._filter.state[0][0] == any_order.filter._K:
        m._ensure().fill_next_token_bitmask(bitmask, 0)  # in a key the filter leans on the grammar's names
    else:
        bitmask.fill_(-1)  # every token a candidate, not only those the grammar allows
    candidates = unpacked(bitmask, len(vocab))
    m._filter.restrict(bitmask, 0)
    kept = unpacked(bitmask, len(vocab))
    state = m._filter.state
    expected = np.array([bool(c) and any_order.step_state(state, tok) is not None for c, tok in zip(candidates, vocab)])
    wrong = np.flatnonzero(kept != expected)
    assert wrong.size == 0, [vocab[t] for t in wrong[:10]]
    # The state has tokens to refuse, but for a key every name it can become is free (what lets the filter skip it).
    assert (candidates & ~expected).any() != prefix.endswith('"ar')


def count_verdicts(monkeypatch) -> list[int]:
    """Count the filter's verdict computations (one per token or rest it has to step through)."""
    calls = [0]
    passes = any_order.filter._passes

    def counted(state, data):
        calls[0] += 1
        return passes(state, data)

    monkeypatch.setattr(any_order.filter, "_passes", counted)
    return calls


def walk_masks(m, tokens: list[int], bitmask) -> list[np.ndarray]:
    masks = []
    for t in tokens:
        m.fill_bitmask(bitmask, 0)
        masks.append(bitmask[0].numpy().copy())
        assert m.accept_token(t)
    return masks


def test_a_second_request_on_a_schema_reuses_the_first_ones_verdicts(llama3_info, monkeypatch):
    svc = CompileService(llama3_info, UNHURRIED.replace(max_whitespace=1))
    schema = fresh_copy(PERSON)
    text = '{"nick": "b", "age": 12, "name": "Ann"}'
    tokens = llama3_tokens(llama3_info, text)
    bitmask = allocate_token_bitmask(1, llama3_info.vocab_size)
    calls = count_verdicts(monkeypatch)
    first = walk_masks(svc.grammar(Constraint.of("json", schema)), tokens, bitmask)
    assert calls[0] > 0
    calls[0] = 0
    second = walk_masks(svc.grammar(Constraint.of("json", schema)), tokens, bitmask)
    assert calls[0] == 0
    assert all(np.array_equal(a, b) for a, b in zip(first, second))


def test_the_first_mask_is_learned_when_the_grammar_compiles(llama3_info, monkeypatch):
    svc = CompileService(llama3_info, UNHURRIED.replace(max_whitespace=1))
    schema = fresh_copy(PERSON) | {"title": "first mask"}
    svc.compile(Constraint.of("json", schema))
    calls = count_verdicts(monkeypatch)
    bitmask = allocate_token_bitmask(1, llama3_info.vocab_size)
    svc.grammar(Constraint.of("json", schema)).fill_bitmask(bitmask, 0)
    assert calls[0] == 0


def test_verdicts_stay_exact_when_the_shared_memo_is_emptied_at_every_step(llama3_info, monkeypatch):
    svc = CompileService(llama3_info, UNHURRIED.replace(max_whitespace=1))
    schema = fresh_copy(PERSON)
    tokens = llama3_tokens(llama3_info, '{"age": 12, "nick": "b", "name": "Ann"}')
    bitmask = allocate_token_bitmask(1, llama3_info.vocab_size)
    roomy = walk_masks(svc.grammar(Constraint.of("json", schema)), tokens, bitmask)
    monkeypatch.setattr(any_order.filter._Memo, "LIMIT", 1)
    monkeypatch.setattr(any_order.filter._Memo, "VERDICTS", 1)
    tight = walk_masks(svc.grammar(Constraint.of("json", schema | {"title": "tight"})), tokens, bitmask)
    memo = any_order.filter._memo(llama3_info)
    assert max(len(memo.verdicts), len(memo.rest_verdicts), len(memo.clears), len(memo.relevant)) <= 1
    assert all(np.array_equal(a, b) for a, b in zip(roomy, tight))


def fresh_copy(schema: dict) -> dict:
    """A copy that no other test compiles (the memo is shared per tokenizer)."""
    return json.loads(json.dumps(schema)) | {"description": "memo test"}


def llama3_tokens(info, text: str) -> list[int]:
    """The text as the longest vocabulary tokens, left to right."""
    ids = {bytes(t): i for i, t in enumerate(info.decoded_vocab) if t}
    data, out = text.encode(), []
    while data:
        n = max(k for k in range(1, min(len(data), 16) + 1) if data[:k] in ids)
        out.append(ids[data[:n]])
        data = data[n:]
    return out


def test_a_space_that_leads_only_to_a_used_name_is_masked(llama3_info):
    svc = CompileService(llama3_info, UNHURRIED.replace(max_whitespace=1))
    schema = {"type": "object", "x-any-order": True, "additionalProperties": False,
              "properties": {"a b": {"type": "integer"}, "a": {"type": "integer"}}}
    m = svc.grammar(Constraint.of("json", schema))
    assert m.accept_string('{"a b": 1, "a')
    space = [bytes(t) for t in llama3_info.decoded_vocab].index(b" ")
    bitmask = allocate_token_bitmask(1, llama3_info.vocab_size)
    m.fill_bitmask(bitmask, 0)
    assert not unpacked(bitmask, llama3_info.vocab_size)[space]
    assert not m.accept_token(space)


def test_a_key_past_the_last_free_slot_takes_only_the_missing_name(llama3_info):
    # Undeclared names are allowed, but maxProperties leaves room only for the required "ab": the grammar takes any
    # name there, so the filter must refuse every other one, byte by byte.
    schema = {"type": "object", "x-any-order": True, "maxProperties": 2, "required": ["ab"],
              "properties": {"ab": {"type": "integer"}}, "additionalProperties": True}
    svc = CompileService(llama3_info, UNHURRIED.replace(max_whitespace=1, strict_mode=False))
    m = svc.grammar(Constraint.of("json", schema))
    assert m.accept_string('{"zz": 1, "a')
    vocab = [bytes(t) for t in llama3_info.decoded_vocab]
    bitmask = allocate_token_bitmask(1, llama3_info.vocab_size)
    m.fill_bitmask(bitmask, 0)
    kept = unpacked(bitmask, len(vocab))
    assert kept[vocab.index(b"b")] and not kept[vocab.index(b"x")]
