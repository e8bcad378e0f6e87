"""An allOf that merges a $ref is refused by name where the merged definition merges itself again below (each copy
would hold another), and compiles where the same definition is merged at several depths without recursion."""

from __future__ import annotations

import json

import pytest

from shared_data import maskbench
from tagjit import UnsupportedFeatureError
from tagjit.constraint import Constraint, Kind

UNROLLS = "\\$ref to a recursive definition combined with other keywords"
BASE = {"type": "object", "properties": {"x": {"type": "integer"}}}
WITH_X = [{"$ref": "#/$defs/base"}, {"required": ["x"]}]


def accepts(service, schema: dict, value: object) -> bool:
    g = service.grammar(Constraint.of(Kind.JSON, schema))
    return g.accept_string(json.dumps(value)) and g.is_completed()


def test_a_definition_whose_allof_merges_itself_again_is_refused_by_name_at_the_merge(service):
    # Github_easy---o17683: Foo requires childFoos, an allOf of Foo and ChildFoo.
    schema = maskbench("Github_easy---o17683.json")["schema"]
    with pytest.raises(UnsupportedFeatureError, match=UNROLLS) as e:
        service.grammar(Constraint.of(Kind.JSON, schema))
    assert e.value.where == "#/definitions/Foo/properties/childFoos/allOf/1"


@pytest.mark.parametrize("name", ["Github_medium---o11667.json", "Github_medium---o12175.json"])
def test_real_schemas_whose_allof_merges_the_root_again_are_refused_by_name_not_by_depth(service, name):
    # Swagger 1.2 data types: items may be an allOf of the root ("#") and more keywords.
    with pytest.raises(UnsupportedFeatureError, match=UNROLLS):
        service.grammar(Constraint.of(Kind.JSON, maskbench(name)["schema"]))


def test_a_definition_merged_at_several_depths_without_recursion_compiles(service):
    schema = {"$defs": {"base": BASE}, "allOf": WITH_X,
              "properties": {"child": {"allOf": WITH_X, "properties": {"grandchild": {"allOf": WITH_X}}}}}
    # The node's own properties come before those the allOf brings (generation order is the merge's order).
    assert accepts(service, schema, {"child": {"grandchild": {"x": 3}, "x": 2}, "x": 1})
    assert not accepts(service, schema, {"child": {"grandchild": {"x": 3}}, "x": 1})


def test_a_recursive_ref_beside_only_a_description_stays_a_ref(service):
    # pydantic's spelling of a described field: allOf with the $ref alone, the description beside it.
    node = {"type": "object", "properties": {"child": {"allOf": [{"$ref": "#/$defs/node"}], "description": "d"},
                                             "n": {"type": "integer"}}, "required": ["n"]}
    schema = {"$defs": {"node": node}, "$ref": "#/$defs/node"}
    assert accepts(service, schema, {"child": {"child": {"n": 3}, "n": 2}, "n": 1})
    assert not accepts(service, schema, {"child": {"child": {"n": 3}}, "n": 1})
