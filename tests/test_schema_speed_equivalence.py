"""prepare_schema's cheap paths (lazy validator and anchors, path strings built only for errors) keep its results."""

from __future__ import annotations

import copy

from shared_data import schema_file
from tagjit import ConstraintError
from tagjit.schema import prepare_schema


def test_prepare_schema_leaves_the_callers_schema_unchanged():
    # Renovate's schema has allOf with a single branch: normalising used to rewrite that branch in place.
    schema = schema_file("JsonSchemaStore", "renovate-schema.json")
    before = copy.deepcopy(schema)
    try:
        prepare_schema(schema)
    except ConstraintError:
        pass
    assert schema == before
