"""Schemas and tools that accept no value: an optional property that can hold nothing is forbidden, a tool that can
never be called is left out of the call syntax, and only what can satisfy nothing at all is refused (HTTP 400)."""

from __future__ import annotations

import json

import pytest

from pools import UNHURRIED
from shared_data import maskbench
from tagjit import CompileService, Constraint, ConstraintError
from tagjit.constraint import Kind
from tagjit.errors import EmptySchemaError
from tagjit.tools import build_tool_tag, load_format

# An optional property whose enum contradicts its type, as real tool lists have it (BFCL "live").
SLOPPY = {"type": "boolean", "enum": ["True", "False", "dontcare"]}
SEARCH = {"type": "object", "properties": {"city": {"type": "string"}, "has_wifi": SLOPPY}, "required": ["city"]}


@pytest.fixture(scope="module")
def svc(qwen2_info) -> CompileService:
    return CompileService(qwen2_info, UNHURRIED)


def accepts(svc: CompileService, c: Constraint, text: str) -> bool:
    g = svc.grammar(c)
    return g.accept_string(text) and g.is_completed()


def test_an_optional_property_that_accepts_no_value_is_forbidden(svc):
    c = Constraint.of(Kind.JSON, SEARCH)
    svc.validate(c)
    assert accepts(svc, c, '{"city": "Oslo"}')
    assert not accepts(svc, c, '{"city": "Oslo", "has_wifi": true}')
    assert not accepts(svc, c, '{"city": "Oslo", "has_wifi": "True"}')


def test_an_optional_false_property_is_forbidden(svc):
    c = Constraint.of(Kind.JSON, {"type": "object", "properties": {"a": {"type": "integer"}, "b": False}})
    svc.validate(c)
    assert accepts(svc, c, '{"a": 1}')
    assert not accepts(svc, c, '{"a": 1, "b": 2}')


def test_a_required_property_that_accepts_no_value_is_refused_naming_it(svc):
    schema = {**SEARCH, "required": ["city", "has_wifi"]}
    with pytest.raises(EmptySchemaError, match="has_wifi.*required"):
        svc.validate(Constraint.of(Kind.JSON, schema))


# A definition no value satisfies, as a real schema (MaskBench Github_medium---o4179) marks the names a sender must
# leave out: {"not": {"type": [every type]}}.
DISALLOWED = {"not": {"type": ["array", "boolean", "integer", "number", "null", "object", "string"]}}


@pytest.mark.parametrize("definition", [DISALLOWED, False, {"$ref": "#/definitions/also"}])
def test_an_optional_property_whose_ref_accepts_no_value_is_forbidden(svc, definition):
    schema = {"definitions": {"no": definition, "also": False}, "type": "object",
              "properties": {"a": {"type": "integer"}, "gone": {"$ref": "#/definitions/no"}}}
    c = Constraint.of(Kind.JSON, schema)
    svc.validate(c)
    assert accepts(svc, c, '{"a": 1}')
    assert not accepts(svc, c, '{"a": 1, "gone": null}')


def test_a_definition_that_accepts_no_value_and_is_never_used_is_no_reason_to_refuse(svc):
    c = Constraint.of(Kind.JSON, {"definitions": {"no": DISALLOWED}, "type": "object",
                                  "properties": {"a": {"type": "integer"}}})
    svc.validate(c)
    assert accepts(svc, c, '{"a": 1}')


def test_a_required_property_whose_ref_accepts_no_value_is_refused_naming_it(svc):
    schema = {"definitions": {"no": DISALLOWED}, "type": "object", "properties": {"gone": {"$ref": "#/definitions/no"}},
              "required": ["gone"]}
    with pytest.raises(EmptySchemaError, match="gone.*#/definitions/no.*required"):
        svc.validate(Constraint.of(Kind.JSON, schema))


def test_names_a_pattern_property_refers_away_to_nothing_are_forbidden(svc):
    schema = {"definitions": {"no": DISALLOWED}, "type": "object", "properties": {"a": {"type": "integer"}},
              "patternProperties": {"_Localised$": {"$ref": "#/definitions/no"}}, "additionalProperties": True}
    c = Constraint.of(Kind.JSON, schema)
    svc.validate(c)
    assert accepts(svc, c, '{"a": 1, "b_x": 2}')
    assert not accepts(svc, c, '{"a": 1, "b_Localised": 2}')


def test_a_real_schema_marking_names_with_a_definition_of_no_value_takes_objects_without_them(svc):
    c = Constraint.of(Kind.JSON, maskbench("Github_medium---o4179.json")["schema"])  # was refused: accepts no value
    header = '"header": {"softwareName": "c", "softwareVersion": "1", "uploaderID": "u"}'
    message = '"StarPos": [0, 0, 0], "StarSystem": "Sol", "SystemAddress": 1, "event": "Docked", "timestamp": "t"'
    assert accepts(svc, c, f'{{"$schemaRef": "s", {header}, "message": {{{message}}}}}')
    assert not accepts(svc, c, f'{{"$schemaRef": "s", {header}, "message": {{"ActiveFine": 1, {message}}}}}')


@pytest.mark.parametrize("extras", [True, {"type": "integer"}], ids=["any value", "a schema"])
def test_beside_open_extras_an_empty_optional_property_is_forbidden_and_other_names_keep_the_extras_schema(svc, extras):
    c = Constraint.of(Kind.JSON, {**SEARCH, "additionalProperties": extras})
    svc.validate(c)
    assert accepts(svc, c, '{"city": "Oslo", "stars": 4}')
    assert accepts(svc, c, '{"city": "Oslo", "has_wifi ": 4}')  # another name
    assert not accepts(svc, c, '{"city": "Oslo", "has_wifi": true}')
    assert accepts(svc, c, '{"city": "Oslo", "stars": "4"}') is (extras is True)


def test_without_strict_mode_an_empty_optional_property_leaves_the_other_undeclared_names_free(qwen2_info):
    lenient = CompileService(qwen2_info, UNHURRIED.replace(strict_mode=False))
    c = Constraint.of(Kind.JSON, SEARCH)
    assert accepts(lenient, c, '{"city": "Oslo", "stars": 4}')
    assert not accepts(lenient, c, '{"city": "Oslo", "has_wifi": true}')


def test_a_real_schema_with_contradicting_enums_takes_its_valid_instances_without_strict_mode(qwen2_info):
    # Github_easy---o30305: "builtin" is an object whose enum holds only strings; the instances spell other names.
    lenient = CompileService(qwen2_info, UNHURRIED.replace(strict_mode=False))
    raw = maskbench("Github_easy---o30305.json")
    c = Constraint.of(Kind.JSON, raw["schema"])
    valid = [json.dumps(t["data"]) for t in raw["tests"] if t["valid"]]
    assert valid and all(accepts(lenient, c, text) for text in valid)
    assert not accepts(lenient, c, '{"builtin": "MODIFIABLE"}')


def test_an_empty_property_inside_an_optional_object_forbids_that_object(svc):
    schema = {"type": "object", "properties": {"name": {"type": "string"},
                                                "prefs": {"type": "object", "properties": {"x": SLOPPY},
                                                          "required": ["x"]}}}
    c = Constraint.of(Kind.JSON, schema)
    assert accepts(svc, c, '{"name": "a"}')
    assert not accepts(svc, c, '{"name": "a", "prefs": {}}')


def tool(name: str, parameters: dict) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


WEATHER = tool("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
BROKEN = tool("book_hotel", {"type": "object", "properties": {"wifi": SLOPPY}, "required": ["wifi"]})


@pytest.mark.parametrize("fmt", ["hermes", "qwen3_coder"])
def test_a_tool_that_can_never_be_called_is_left_out_and_the_others_stay_callable(svc, fmt):
    tag = build_tool_tag(load_format(fmt), [BROKEN, WEATHER, tool("find", SEARCH)], "required", True,
                         UNHURRIED.replace(tool_scope="always"))
    text = str(tag)
    assert "book_hotel" not in text and "get_weather" in text and "find" in text
    svc.validate(Constraint.of(Kind.STRUCTURAL_TAG, tag))


def test_hermes_calls_of_the_left_out_tool_are_rejected(svc):
    tag = build_tool_tag(load_format("hermes"), [BROKEN, WEATHER], "required", True, UNHURRIED)
    c = Constraint.of(Kind.STRUCTURAL_TAG, tag)
    assert accepts(svc, c, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>')
    assert not accepts(svc, c, '<tool_call>\n{"name": "book_hotel", "arguments": {"wifi": true}}\n</tool_call>')


def test_a_request_whose_only_tool_can_never_be_called_is_refused_naming_it():
    with pytest.raises(ConstraintError, match="book_hotel.*no tool can be called"):
        build_tool_tag(load_format("hermes"), [BROKEN], "required", True, UNHURRIED)


# -- recursion ------------------------------------------------------------------------------------

def test_a_ref_cycle_without_a_base_case_is_refused_naming_the_cycle(svc):
    schema = {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}
    with pytest.raises(EmptySchemaError, match=r"\$ref cycle.*#/\$defs/a.*#/\$defs/b"):
        svc.validate(Constraint.of(Kind.JSON, schema))


def test_an_object_that_requires_itself_is_refused(svc):
    schema = {"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]}
    with pytest.raises(EmptySchemaError, match="accepts no value"):
        svc.validate(Constraint.of(Kind.JSON, schema))


@pytest.mark.parametrize("schema,text", [
    ({"$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"}, "children": {
        "type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["value"]}}, "$ref": "#/$defs/node"},
     '{"value": 1, "children": [{"value": 2, "children": []}]}'),
    ({"type": "object", "properties": {"head": {"type": "integer"}, "tail": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
      "required": ["head", "tail"]}, '{"head": 1, "tail": {"head": 2, "tail": null}}'),
], ids=["tree", "linked-list"])
def test_recursive_schemas_with_a_base_case_keep_working(svc, schema, text):
    c = Constraint.of(Kind.JSON, schema)
    svc.validate(c)
    assert accepts(svc, c, text)


# -- structured enum/const values -----------------------------------------------------------------

STRUCTURED = {"bar": 2, "foo": [1, {"a": None}]}


@pytest.mark.parametrize("schema", [{"const": STRUCTURED}, {"enum": ["x", STRUCTURED]}], ids=["const", "enum"])
@pytest.mark.parametrize("style", ["auto", "free"], ids=["default style", "free style"])
def test_object_and_array_values_of_enum_and_const_take_whitespace_as_elsewhere(qwen2_info, schema, style):
    s = CompileService(qwen2_info, UNHURRIED.replace(json_style=style))
    c = Constraint.of(Kind.JSON, schema)
    s.validate(c)
    verdicts = []
    for separators in ((",", ":"), (", ", ": ")):
        text = json.dumps(STRUCTURED, separators=separators)
        elsewhere = accepts(s, Constraint.of(Kind.JSON_OBJECT, ""), text)
        assert accepts(s, c, text) == elsewhere, text
        verdicts.append(elsewhere)
    assert verdicts == [style == "free", True]


@pytest.mark.parametrize("text", ['{"bar": 2, "foo": [1]}', '{"bar": 2, "foo": [1, {"a": null}], "x": 1}',
                                  '{"bar": 3, "foo": [1, {"a": null}]}'])
def test_a_structured_const_still_takes_only_its_value(svc, text):
    c = Constraint.of(Kind.JSON, {"const": {"bar": 2, "foo": [1, {"a": None}]}})
    assert not accepts(svc, c, text)
