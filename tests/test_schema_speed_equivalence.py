"""prepare_schema's cheap paths (lazy validator and anchors, path strings built only for errors) keep its results."""

from __future__ import annotations

import copy

import pytest

from shared_data import DATA, schema_file
from tagjit import ConstraintError
from tagjit.tools.bfcl import load_tools
from tagjit.errors import CompileLimitError, UnsupportedFeatureError
from tagjit.schema import MAX_DEPTH, MAX_ENUM_VALUES, prepare_schema


def test_prepare_schema_leaves_the_callers_schema_unchanged():
    # Renovate's schema has allOf with a single branch: normalising used to rewrite that branch in place.
    schema = schema_file("JsonSchemaStore", "renovate-schema.json")
    before = copy.deepcopy(schema)
    try:
        prepare_schema(schema)
    except ConstraintError:
        pass
    assert schema == before


def _problem_where(schema: dict) -> tuple[str, str]:
    with pytest.raises(UnsupportedFeatureError) as info:
        prepare_schema(schema)
    return info.value.feature, info.value.where


def test_the_first_unsupported_node_in_document_order_is_reported():
    params = copy.deepcopy(load_tools(str(DATA / "bfcl"), strict=True)[0]["function"]["parameters"])
    first, *_, last = params["properties"]
    params["properties"][last]["not"] = {"type": "null"}
    params["properties"][first]["uniqueItems"] = True
    assert first != last
    assert _problem_where(params) == ("uniqueItems", f"#/properties/{first}")


def test_an_unsupported_node_is_named_by_its_full_path():
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {
        "anyOf": [{"type": "string"}, {"type": "string", "format": "regex"}]}}}}
    assert _problem_where(schema) == ("format: regex", "#/properties/a/items/anyOf/1")


def test_a_plain_name_ref_points_at_its_anchor():
    schema = {"$defs": {"s": {"$anchor": "name", "type": "string"}},
              "type": "object", "properties": {"a": {"$ref": "#name"}}}
    assert prepare_schema(schema)["properties"]["a"]["$ref"] == "#/$defs/s"


def test_a_draft4_id_fragment_is_an_anchor():
    schema = {"definitions": {"s": {"id": "#str", "type": "string"}},
              "type": "object", "properties": {"a": {"$ref": "#str"}}}
    assert prepare_schema(schema)["properties"]["a"]["$ref"] == "#/definitions/s"


def test_a_plain_name_ref_without_its_anchor_is_refused():
    with pytest.raises(ConstraintError, match="'#missing' names no anchor"):
        prepare_schema({"type": "object", "properties": {"a": {"$ref": "#missing"}}})


def test_enum_values_a_sibling_ref_rejects_are_removed():
    schema = {"$defs": {"s": {"type": "string"}}, "$ref": "#/$defs/s", "enum": ["x", 1, "y"]}
    assert prepare_schema(schema)["enum"] == ["x", "y"]


def test_too_deep_nesting_is_reported_before_a_lone_surrogate():
    deep: dict = {}
    for _ in range(MAX_DEPTH):
        deep = {"items": deep}
    with pytest.raises(ConstraintError, match="nests deeper"):
        prepare_schema({"description": "\ud800", "properties": {"a": deep}})


def test_a_lone_surrogate_in_a_property_name_is_located_at_its_object():
    with pytest.raises(ConstraintError, match="at '#/properties' contains a lone UTF-16 surrogate"):
        prepare_schema({"type": "object", "properties": {"ok": {"description": "é"}, "a\ud800": {}}})


def test_an_oversized_enum_is_located_at_its_node():
    schema = {"type": "object", "properties": {"a": {"enum": list(range(MAX_ENUM_VALUES + 1))}}}
    with pytest.raises(CompileLimitError, match="at '#/properties/a' has an enum of"):
        prepare_schema(schema)


def _nested(levels: int) -> dict:
    schema: dict = {}
    for _ in range(levels):
        schema = {"items": schema}
    return schema


def test_a_value_exactly_max_depth_deep_is_accepted():
    assert isinstance(prepare_schema(_nested(MAX_DEPTH)), dict)


def test_a_value_one_level_deeper_than_max_depth_is_refused():
    with pytest.raises(ConstraintError, match="nests deeper"):
        prepare_schema(_nested(MAX_DEPTH + 1))
