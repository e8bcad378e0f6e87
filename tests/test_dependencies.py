"""``dependencies`` (drafts 4-7), ``dependentRequired`` and ``dependentSchemas`` (2019-09+), enforced exactly: an object
that has a trigger name has the names its dependency lists and validates against its dependent schema; other values
pass. tagjit writes the node as an anyOf over which trigger names are present (``schema.dependencies``).

Checked on hand-picked strings per behaviour, against the ``jsonschema`` package on generated objects (declared names
in declared order, so that the verdicts compare; ``additionalProperties: false``, so that strict mode and JSON Schema
agree), on mutations that break a dependency, and on the real MaskBench schemas that use these keywords."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

from pools import UNHURRIED
from shared_data import maskbench
from tagjit import CompileService, UnsupportedFeatureError, report
from tagjit.constraint import Constraint, Kind, compact_json
from tagjit.errors import EmptySchemaError
from tagjit.schema import prepare_schema, prepared
from tagjit.schema.dependencies import MAX_BRANCHES
from tagjit.schema.plain import plain
from tagjit.schema.relax import relax
from tagjit.tools import build_tool_tag

UNTIMED = settings(deadline=None, max_examples=100)
DRAFT7 = "http://json-schema.org/draft-07/schema#"

ADDRESS = {"type": "object", "properties": {
    "street": {"type": "string"}, "city": {"type": "string"}, "zip": {"type": "string"}, "note": {"type": "string"}}}


def accepts(service: CompileService, schema: Any, text: str) -> bool:
    g = service.grammar(Constraint.of(Kind.JSON, schema))
    return g.accept_string(text) and g.is_completed()


def refused(service: CompileService, schema: Any) -> str:
    with pytest.raises(UnsupportedFeatureError) as err:
        service.validate(Constraint.of(Kind.JSON, schema))
    return err.value.feature


def branches(schema: Any) -> list[dict]:
    """The object branches tagjit wrote for the schema's root (the root itself if it needed one)."""
    out = prepare_schema(schema)
    return out["anyOf"] if "anyOf" in out else [out]


# -- names required by a trigger -------------------------------------------------------------------

def test_dependent_required_demands_the_listed_names_when_the_trigger_is_present(service):
    schema = {**ADDRESS, "dependentRequired": {"street": ["city", "zip"]}}
    assert accepts(service, schema, '{"street": "Main St", "city": "Oslo", "zip": "0150"}')
    assert not accepts(service, schema, '{"street": "Main St", "city": "Oslo"}')
    assert not accepts(service, schema, '{"street": "Main St"}')


def test_dependent_required_leaves_objects_without_the_trigger_free(service):
    schema = {**ADDRESS, "dependentRequired": {"street": ["city", "zip"]}}
    for text in ["{}", '{"city": "Oslo"}', '{"zip": "0150", "note": "x"}']:
        assert accepts(service, schema, text), text


def test_a_draft7_dependencies_list_is_a_dependent_required(service):
    schema = {"$schema": DRAFT7, **ADDRESS, "dependencies": {"zip": ["city"]}}
    assert accepts(service, schema, '{"city": "Oslo", "zip": "0150"}') and accepts(service, schema, '{"city": "Oslo"}')
    assert not accepts(service, schema, '{"zip": "0150"}')


def test_dependencies_are_transitive(service):
    schema = {**ADDRESS, "dependentRequired": {"street": ["city"], "city": ["zip"]}}
    assert accepts(service, schema, '{"street": "a", "city": "b", "zip": "c"}')
    assert not accepts(service, schema, '{"street": "a", "city": "b"}')


def test_mutual_dependencies_are_two_branches_both_or_neither(service):
    schema = {**ADDRESS, "dependentRequired": {"street": ["city"], "city": ["street"]}}
    assert len(branches(schema)) == 2
    assert accepts(service, schema, '{"street": "a", "city": "b"}') and accepts(service, schema, '{"zip": "c"}')
    assert not accepts(service, schema, '{"street": "a"}') and not accepts(service, schema, '{"city": "b"}')


def test_a_required_trigger_applies_its_dependency_to_every_object(service):
    schema = {**ADDRESS, "required": ["street"], "dependentRequired": {"street": ["zip"]}}
    assert "anyOf" not in prepare_schema(schema)
    assert accepts(service, schema, '{"street": "a", "zip": "c"}')
    assert not accepts(service, schema, '{"street": "a"}')


def test_a_name_required_by_a_dependency_but_not_declared_is_let_in(service):
    schema = {**ADDRESS, "dependentRequired": {"street": ["country"]}}
    assert accepts(service, schema, '{"street": "a", "country": "NO"}')
    assert not accepts(service, schema, '{"street": "a"}')


def test_a_trigger_the_object_cannot_have_constrains_nothing(service):
    schema = {**ADDRESS, "additionalProperties": False, "dependentRequired": {"country": ["zip"]}}
    assert "anyOf" not in prepare_schema(schema)
    assert accepts(service, schema, '{"street": "a"}') and not accepts(service, schema, '{"country": "NO"}')


def test_an_empty_dependencies_constrains_nothing(service):
    schema = {**ADDRESS, "dependencies": {}}
    assert prepare_schema(schema) == prepare_schema(ADDRESS)
    assert accepts(service, schema, '{"street": "a"}')


# -- dependent schemas -----------------------------------------------------------------------------

def test_a_dependent_schema_applies_only_when_its_trigger_is_present(service):
    schema = {"type": "object", "properties": {"card": {"type": "string"}, "amount": {"type": "integer"}},
              "dependentSchemas": {"card": {"properties": {"amount": {"maximum": 100}}, "required": ["amount"]}}}
    assert accepts(service, schema, '{"card": "visa", "amount": 100}') and accepts(service, schema, '{"amount": 500}')
    assert not accepts(service, schema, '{"card": "visa", "amount": 500}')
    assert not accepts(service, schema, '{"card": "visa"}')


def test_a_draft7_dependencies_schema_is_a_dependent_schema(service):
    schema = {"$schema": DRAFT7, **ADDRESS, "dependencies": {"zip": {"properties": {"zip": {"pattern": "^[0-9]+$"}}}}}
    assert accepts(service, schema, '{"zip": "0150"}') and accepts(service, schema, '{"city": "x"}')
    assert not accepts(service, schema, '{"zip": "N-0150"}')


def test_a_trigger_whose_dependent_schema_is_false_is_forbidden(service):
    schema = {**ADDRESS, "dependentSchemas": {"note": False}}
    assert accepts(service, schema, '{"street": "a"}')
    assert not accepts(service, schema, '{"street": "a", "note": "x"}')


def test_a_dependent_schema_no_object_can_satisfy_forbids_its_trigger(service):
    schema = {**ADDRESS, "dependentSchemas": {"note": {"properties": {"city": {"type": "integer"}},
                                                       "required": ["city"]}}}
    assert accepts(service, schema, '{"city": "Oslo"}')
    assert not accepts(service, schema, '{"city": "Oslo", "note": "x"}')
    assert not accepts(service, schema, '{"note": "x"}')


def test_a_dependent_schema_with_one_of_keeps_the_node_property_order():
    schema = {"type": "object", "properties": {"id": {"type": "string"}, "kind": {"enum": ["a", "b"]}},
              "required": ["id", "kind"],
              "dependentSchemas": {"kind": {"oneOf": [
                  {"properties": {"kind": {"const": "a"}, "size": {"type": "integer"}}},
                  {"properties": {"kind": {"const": "b"}, "color": {"type": "string"}}}]}}}
    out = prepare_schema(schema)
    assert [list(b["properties"]) for b in out["oneOf"]] == [["id", "kind", "size"], ["id", "kind", "color"]]


def test_every_branch_keeps_the_node_property_order():
    schema = {"type": "object", "properties": {"z": {}, "a": {}, "m": {}, "b": {}},
              "dependentRequired": {"m": ["z"], "b": ["a"]}}
    for b in branches(schema):
        names = list(b["properties"])
        assert names == [k for k in ["z", "a", "m", "b"] if k in names]


# -- other types, other keywords, where the node sits ----------------------------------------------

def test_values_of_other_types_pass_where_the_node_allows_them(service):
    schema = {**ADDRESS, "type": ["object", "null", "string"], "dependentRequired": {"street": ["city"]}}
    assert accepts(service, schema, "null") and accepts(service, schema, '"Oslo"')
    assert accepts(service, schema, '{"street": "a", "city": "b"}') and not accepts(service, schema, '{"street": "a"}')
    assert not accepts(service, schema, "1")


def test_dependencies_inside_a_property_are_enforced(service):
    schema = {"type": "object", "properties": {"to": {**ADDRESS, "dependentRequired": {"street": ["city"]}}}}
    assert accepts(service, schema, '{"to": {"street": "a", "city": "b"}}')
    assert not accepts(service, schema, '{"to": {"street": "a"}}')


def test_dependencies_beside_any_of_hold_in_every_branch(service):
    schema = {**ADDRESS, "dependentRequired": {"street": ["city"]},
              "anyOf": [{"required": ["zip"]}, {"required": ["note"]}]}
    assert accepts(service, schema, '{"street": "a", "city": "b", "zip": "c"}')
    assert not accepts(service, schema, '{"street": "a", "zip": "c"}')
    assert not accepts(service, schema, '{"street": "a", "note": "c"}')


def test_dependencies_beside_a_ref_apply_to_its_target(service):
    schema = {"$defs": {"address": ADDRESS}, "$ref": "#/$defs/address", "dependentRequired": {"street": ["city"]}}
    assert accepts(service, schema, '{"street": "a", "city": "b"}') and accepts(service, schema, '{"zip": "c"}')
    assert not accepts(service, schema, '{"street": "a"}')


def test_dependencies_from_an_all_of_branch_are_enforced(service):
    schema = {"allOf": [ADDRESS, {"dependentRequired": {"street": ["city"]}}]}
    assert accepts(service, schema, '{"street": "a", "city": "b"}')
    assert not accepts(service, schema, '{"street": "a"}')


def test_dependencies_beside_not_required_are_both_enforced(service):
    schema = {**ADDRESS, "dependentRequired": {"street": ["city"]}, "not": {"required": ["note"]}}
    assert accepts(service, schema, '{"street": "a", "city": "b"}')
    assert not accepts(service, schema, '{"street": "a"}')
    assert not accepts(service, schema, '{"street": "a", "city": "b", "note": "x"}')


def test_any_order_holds_where_the_dependencies_leave_one_object_branch(service):
    schema = {**ADDRESS, "x-any-order": True, "required": ["street"], "dependentRequired": {"street": ["city"]}}
    assert accepts(service, schema, '{"city": "b", "street": "a"}')
    assert not accepts(service, schema, '{"street": "a"}')


def test_several_object_branches_keep_the_declared_order(service):
    schema = {**ADDRESS, "x-any-order": True, "dependentRequired": {"street": ["city"]}}
    assert accepts(service, schema, '{"street": "a", "city": "b"}')
    assert not accepts(service, schema, '{"city": "b", "street": "a"}')


def test_a_schema_with_dependencies_is_not_plain():
    for kw, value in [("dependencies", {"a": ["b"]}), ("dependentRequired", {"a": ["b"]}),
                      ("dependentSchemas", {"a": {"required": ["b"]}}), ("dependencies", {})]:
        assert not plain({"type": "object", "properties": {"a": {}, "b": {}}, kw: value}), kw


# -- what stays refused, by name -------------------------------------------------------------------

def test_more_combinations_than_the_bound_are_refused_by_name(service):
    names = [f"p{i}" for i in range(7)]  # seven independent optional triggers: 128 combinations
    schema = {"type": "object", "properties": {n: {"type": "integer"} for n in [*names, "q"]},
              "dependentRequired": {n: ["q"] for n in names}}
    assert refused(service, schema) == f"dependentRequired with more than {MAX_BRANCHES} combinations of trigger " \
                                       "names present"


# -- objects open to undeclared names ----------------------------------------------------------------

# Triggers of each kind: a declared name, one its pattern takes, one additionalProperties takes.
OPEN = {**ADDRESS, "patternProperties": {"^x-": {"type": "boolean"}}, "additionalProperties": {"type": "integer"},
        "dependentRequired": {"street": ["city"], "x-flag": ["zip"], "extra": ["note"]}}


@pytest.mark.parametrize("text, ok", [
    ('{"street": "a", "city": "b", "other": 1}', True), ('{"street": "a", "other": 1}', False),
    ('{"zip": "1", "x-flag": true}', True), ('{"x-flag": true}', False), ('{"x-other": true}', True),
    ('{"note": "n", "extra": 1}', True), ('{"extra": 1}', False), ('{"other": 1}', True), ('{"other": "s"}', False)])
def test_on_an_open_object_an_absent_trigger_is_forbidden_and_other_undeclared_names_stay_free(service, text, ok):
    assert validator(OPEN).is_valid(json.loads(text)) is ok
    assert accepts(service, OPEN, text) is ok


def test_with_strict_mode_off_an_object_that_says_nothing_of_undeclared_names_takes_any_beside_a_dependency(
        lenient):
    schema = {**ADDRESS, "dependentRequired": {"street": ["city"]}}
    assert accepts(lenient, schema, '{"street": "a", "city": "b", "other": [1]}')
    assert accepts(lenient, schema, '{"other": {"street": 1}}')
    assert not accepts(lenient, schema, '{"street": "a", "other": [1]}')


def test_a_dependent_schema_the_merge_cannot_say_is_refused_naming_it(service):
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^x"}},
              "dependentSchemas": {"a": {"properties": {"a": {"pattern": "y$"}}}}}
    assert refused(service, schema) == ("dependentSchemas of 'a' whose schema tagjit cannot merge (combining two "
                                        "different 'pattern' values (allOf, or anyOf/oneOf siblings))")


def test_a_refused_dependency_is_relaxed_by_dropping_it_at_its_node():
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^x"}},
              "dependentSchemas": {"a": {"properties": {"a": {"pattern": "y$"}}}}}
    _, loosened, steps = relax(schema, lambda x: prepared(compact_json(x)))
    assert [f"{s.name} at {s.where}" for s in steps] == ["dependencies at #"]
    assert "dependentSchemas" not in loosened


def test_a_schema_with_dependencies_no_object_satisfies_accepts_no_value(service):
    schema = {**ADDRESS, "required": ["street"], "dependentSchemas": {"street": False}}
    with pytest.raises(EmptySchemaError):
        service.validate(Constraint.of(Kind.JSON, schema))


# -- tools -----------------------------------------------------------------------------------------

SHIP = {"type": "function", "function": {"name": "ship", "parameters": {
    "type": "object", "properties": {"express": {"type": "boolean"}, "address": {"type": "string"},
                                     "zip": {"type": "string"}},
    "required": ["express"], "dependencies": {"address": ["zip"]}}}}


def hermes_call(args: dict) -> str:
    return '<tool_call>\n{"name": "ship", "arguments": ' + json.dumps(args) + "}\n</tool_call>"


def test_a_tool_with_dependencies_is_enforced_in_its_arguments(svc):
    with report.collecting() as box:
        tag = Constraint.of(Kind.STRUCTURAL_TAG, build_tool_tag("hermes", [SHIP], "required", True, svc.settings))
    assert box == []
    for args, ok in (({"express": True, "address": "a", "zip": "1"}, True), ({"express": True}, True),
                     ({"express": True, "address": "a"}, False)):
        g = svc.grammar(tag)
        assert (g.accept_string(hermes_call(args)) and g.is_completed()) is ok, args


def test_a_tool_with_dependencies_in_xml_arguments_drops_them_and_says_so(svc):
    with report.collecting() as box:
        tag = Constraint.of(Kind.STRUCTURAL_TAG, build_tool_tag("qwen3_coder", [SHIP], "required", True,
                                                                svc.settings))
    assert box == ["tool 'ship': dependencies at #"]
    call = ("<tool_call>\n<function=ship>\n<parameter=express>\ntrue\n</parameter>\n"
            "<parameter=address>\na\n</parameter>\n</function>\n</tool_call>")
    g = svc.grammar(tag)
    assert g.accept_string(call) and g.is_completed()  # looser: the zip it lacks is not enforced
    g = svc.grammar(tag)
    assert not g.accept_string(call.replace("true", "maybe"))  # the rest still holds


# -- generated objects -----------------------------------------------------------------------------

VALUE = st.one_of(st.integers(-3, 3), st.sampled_from(["", "x", "10"]), st.booleans())
# Closed objects (strict mode and JSON Schema agree on them), each with listed and schema dependencies.
GENERATED = [
    {"$schema": DRAFT7, "type": "object", "additionalProperties": False,
     "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"},
                    "d": {"type": ["string", "null"]}},
     "dependencies": {"a": ["b"], "b": ["a"], "c": {"properties": {"a": {"minimum": 0}}, "required": ["d"]}}},
    {"$schema": DRAFT7, "type": "object", "additionalProperties": False, "required": ["a"],
     "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}},
     "dependencies": {"a": ["b"], "b": {"properties": {"c": {"minimum": 0}}}, "c": ["a"]}},
    {"$schema": DRAFT7, "type": ["object", "integer"], "additionalProperties": False,
     "properties": {"a": {"type": "string"}, "b": {"type": "integer"}, "c": {"type": "integer"}},
     "dependencies": {"a": ["b", "c"], "c": {"properties": {"b": {"maximum": 1}}}}},
    {"type": "object", "additionalProperties": False,
     "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
     "dependentRequired": {"a": ["c"], "c": ["b"]}, "dependentSchemas": {"b": {"properties": {"a": {"minimum": 0}}}}},
]


@pytest.fixture(scope="module")
def lenient(llama3_info) -> CompileService:
    return CompileService(llama3_info, replace(UNHURRIED, strict_mode=False))


# Objects open to undeclared names, enforced with strict mode off (as JSON Schema reads them).
GENERATED_OPEN = [
    {"$schema": DRAFT7, "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
     "dependencies": {"a": ["b"], "x-c": ["a"], "d": {"properties": {"b": {"maxLength": 1}}}}},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
     "patternProperties": {"^x-": {"type": "boolean"}}, "additionalProperties": {"type": ["integer", "string"]},
     "dependentRequired": {"x-c": ["b"], "d": ["a"]}, "dependentSchemas": {"b": {"required": ["d"]}}},
]
UNDECLARED = ["x-c", "d", "x-e", "f"]


def validator(schema: dict) -> Any:
    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)(schema)


def objects(schema: dict) -> st.SearchStrategy[dict]:
    """Objects over the schema's declared names, each present or not, in declared order."""
    names = list(schema["properties"])
    return st.fixed_dictionaries({}, optional={n: VALUE for n in names}).map(
        lambda d: {n: d[n] for n in names if n in d})


def instances(schema: dict) -> st.SearchStrategy[dict]:
    """Valid objects of the schema: each declared name present or not, its value generated from its own schema
    (hypothesis-jsonschema), in declared order; those jsonschema rejects (a dependency broken) filtered out."""
    props = schema["properties"]
    return st.fixed_dictionaries({}, optional={n: from_schema(s) for n, s in props.items()}).map(
        lambda d: {n: d[n] for n in props if n in d}).filter(validator(schema).is_valid)


@pytest.mark.parametrize("schema", GENERATED, ids=range(len(GENERATED)))
@UNTIMED
@given(data=st.data())
def test_an_object_is_accepted_iff_jsonschema_validates_it(service, schema, data):
    value = data.draw(st.one_of(objects(schema), VALUE))
    assert accepts(service, schema, json.dumps(value)) == validator(schema).is_valid(value)


@pytest.mark.parametrize("schema", GENERATED, ids=range(len(GENERATED)))
@UNTIMED
@given(data=st.data())
def test_every_valid_instance_generated_from_the_schema_is_accepted(service, schema, data):
    value = data.draw(instances(schema))
    assert accepts(service, schema, json.dumps(value))


@pytest.mark.parametrize("schema", GENERATED, ids=range(len(GENERATED)))
@UNTIMED
@given(data=st.data())
def test_removing_a_name_a_present_trigger_requires_is_rejected(service, schema, data):
    value = data.draw(instances(schema))
    lists = {**schema.get("dependentRequired", {}),
             **{t: dep for t, dep in schema.get("dependencies", {}).items() if isinstance(dep, list)}}
    broken = [n for t, dep in lists.items() if t in value for n in dep if n != t and n in value]
    if not broken:
        return
    name = data.draw(st.sampled_from(broken))
    mutated = {k: v for k, v in value.items() if k != name}
    assert not validator(schema).is_valid(mutated)
    assert not accepts(service, schema, json.dumps(mutated))


@pytest.mark.parametrize("schema", GENERATED_OPEN, ids=range(len(GENERATED_OPEN)))
@UNTIMED
@given(data=st.data())
def test_an_open_object_is_accepted_iff_jsonschema_validates_it(lenient, schema, data):
    """Declared names first, in declared order, then the undeclared ones, triggers first (a branch in which a trigger
    is present declares it after the object's names, as tagjit generates it)."""
    names = [*schema["properties"], *UNDECLARED]
    value = data.draw(st.fixed_dictionaries({}, optional={n: VALUE for n in names}).map(
        lambda d: {n: d[n] for n in names if n in d}))
    assert accepts(lenient, schema, json.dumps(value)) == validator(schema).is_valid(value)


# -- real schemas ----------------------------------------------------------------------------------

def declared_order(value: Any, schema: Any, root: dict) -> Any:
    """A JSON value with each object's declared names first, in the order its schema (and its allOf parts) declares
    them, as tagjit generates them; names a branch or a dependent schema brings follow in the value's own order."""
    schema = _resolved(schema, root)
    if isinstance(value, list):
        items = schema.get("items") if isinstance(schema, dict) else None
        return [declared_order(v, items, root) for v in value]
    if not isinstance(value, dict):
        return value
    declared: dict[str, Any] = {}
    for node in _all_of(schema, root):
        for name, sub in (node.get("properties") or {}).items():
            declared.setdefault(name, sub)
    order = [n for n in declared if n in value] + [n for n in value if n not in declared]
    extra = schema.get("additionalProperties") if isinstance(schema, dict) else None
    return {n: declared_order(value[n], declared.get(n, extra), root) for n in order}


def _resolved(schema: Any, root: dict) -> Any:
    for _ in range(16):
        if not (isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and schema["$ref"].startswith("#")):
            break
        node: Any = root
        for part in filter(None, schema["$ref"][1:].split("/")):
            node = node[part]
        schema = node
    return schema


def _all_of(schema: Any, root: dict) -> list[dict]:
    schema = _resolved(schema, root)
    if not isinstance(schema, dict):
        return []
    return [schema, *(part for b in schema.get("allOf") or [] for part in _all_of(b, root))]


# The MaskBench schemas tagjit refused for their dependencies before it enforced them.
REAL = ["Github_easy---o49986.json", "Github_easy---o62759.json", "Github_easy---o62764.json",
        "Github_easy---o68333.json", "Github_easy---o69159.json", "Github_easy---o7501.json",
        "Github_easy---o81526.json", "Github_easy---o81565.json", "Github_easy---o81583.json",
        "Github_easy---o83698.json", "Github_easy---o85198.json", "Github_easy---o87817.json",
        "Github_easy---o90246.json", "Github_medium---o12279.json", "Github_medium---o27154.json",
        "Github_medium---o32436.json", "Github_medium---o32437.json", "Github_medium---o62761.json",
        "Github_medium---o62779.json", "Github_medium---o64557.json", "Github_medium---o69913.json",
        "Github_medium---o72196.json", "Github_medium---o72203.json", "Github_medium---o72217.json",
        "Github_medium---o82248.json", "Github_medium---o84199.json", "Github_medium---o85195.json",
        "Github_medium---o85196.json", "Github_medium---o90940.json",
        *(f"Glaiveai2K---calculate_area_{h}.json" for h in (
            "00d870b6", "01d19dbe", "08e029cf", "32f30fb2", "343cdca7", "38196395", "38240971", "3c2d01ed",
            "42c63970", "518cb15d", "530837db", "7eea9e32", "ba94e895", "bd151164", "c1398e46", "c40ef391",
            "d1be6fdf", "f5e0f7db"))]


# Its dataElement's oneOf branch {allOf: [{not: {required: [usages]}}, ...]} is normalised apart from the properties
# beside it and loses two of them, so its valid instances are rejected: not a dependency matter.
OTHER_CAUSE = {"Github_medium---o90940.json"}


@pytest.mark.parametrize("name", [n for n in REAL if n not in OTHER_CAUSE])
def test_real_schemas_with_dependencies_accept_their_valid_instances(service, name):
    case = maskbench(name)
    schema = case["schema"]
    service.validate(Constraint.of(Kind.JSON, schema))
    for t in case["tests"]:
        if t["valid"]:
            assert accepts(service, schema, json.dumps(declared_order(t["data"], schema, schema))), t["description"]


@pytest.mark.parametrize("name", REAL)
def test_real_schemas_with_dependencies_reject_their_invalid_instances(service, name):
    case = maskbench(name)
    for t in case["tests"]:
        if not t["valid"]:
            text = json.dumps(declared_order(t["data"], case["schema"], case["schema"]))
            assert not accepts(service, case["schema"], text), t["description"]


@pytest.mark.parametrize("name,feature", [
    ("Github_medium---o62823.json", "dependencies of 'downloadURL' whose schema tagjit cannot merge (combining two "
                                    "different 'pattern' values"),
    ("Github_medium---o39217.json", "dependencies of 'patternProperties' whose schema constrains a $ref back to its "
                                    "own object"),
])
def test_real_schemas_whose_dependencies_tagjit_cannot_write_are_refused_naming_them(service, name, feature):
    assert refused(service, maskbench(name)["schema"]).startswith(feature)
