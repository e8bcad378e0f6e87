"""The fast meta-schema check only ever vouches for schemas that jsonschema itself accepts."""

from __future__ import annotations

import copy
import json
import random

import jsonschema
import pytest

from shared_data import DATA
from tagjit import ConstraintError
from tagjit.tools.bfcl import load_tools
from tagjit.schema.metaschema import _KEYWORDS, quick_valid
from tagjit.schema import prepare_schema

BENCH = DATA / "jsonschemabench"
# Values that break some keyword's meta-schema rule: negative, fractional, wrong type, duplicate, bad regex.
BREAKERS = [-1, 1.5, 2.0, 0, "x", "(", "#/$defs/a b", "string", ["string", "string"], [], [1], ["a", "a"], {},
            {"a": 5}, {"(": {}}, True, None, "http://x.org/s.json#frag", "1a:b"]


def jsonschema_accepts(schema: object) -> bool:
    try:
        jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator).check_schema(schema)
    except jsonschema.SchemaError:
        return False
    return True


def real_schemas(limit_per_split: int) -> list[dict]:
    out = []
    for split in ("Github_easy", "Github_medium", "Glaiveai2K", "JsonSchemaStore"):
        for path in sorted((BENCH / split).iterdir())[:limit_per_split]:
            out.append(json.loads(path.read_text()))
    out += [t["function"]["parameters"] for t in load_tools(str(DATA / "bfcl"))[:200]]
    return out


def subschemas(node: object) -> list[dict]:
    """Every dict reachable in a schema (subschemas and keyword values alike: mutations go everywhere)."""
    found, stack = [], [node]
    while stack:
        n = stack.pop()
        if isinstance(n, dict):
            found.append(n)
            stack.extend(n.values())
        elif isinstance(n, list):
            stack.extend(n)
    return found


def mutate(schema: dict, rng: random.Random) -> dict:
    out = copy.deepcopy(schema)
    target = rng.choice(subschemas(out))
    target[rng.choice([*_KEYWORDS, "$schema", "$vocabulary"])] = copy.deepcopy(rng.choice(BREAKERS))
    return out


def test_every_real_schema_it_vouches_for_is_valid_for_jsonschema():
    vouched = [s for s in real_schemas(250) if quick_valid(s)]
    assert len(vouched) > 500
    assert [s for s in vouched if not jsonschema_accepts(s)] == []


def test_no_mutated_schema_it_vouches_for_is_invalid_for_jsonschema():
    rng = random.Random(7)
    bases = [s for s in real_schemas(60) if isinstance(s, dict)]
    unsound = []
    for base in bases:
        for _ in range(4):
            m = mutate(base, rng)
            if quick_valid(m) and not jsonschema_accepts(m):
                unsound.append(m)
    assert unsound == []


def test_it_vouches_for_every_bfcl_tool_schema():
    schemas = [t["function"]["parameters"] for t in load_tools(str(DATA / "bfcl"), strict=True)]
    assert all(quick_valid(s) for s in schemas)


@pytest.mark.parametrize("schema", [
    {"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer", "exclusiveMinimum": 3},
    {"type": "object", "properties": {"a": {"minLength": -1}}},
    {"type": "string", "pattern": "("},
    {"required": ["a", "a"]},
])
def test_it_leaves_other_drafts_and_errors_to_jsonschema(schema):
    assert not quick_valid(schema)


def test_an_invalid_schema_still_gets_jsonschemas_message():
    with pytest.raises(ConstraintError, match=r"invalid JSON schema at '/properties/a/minLength': -1 is less than"):
        prepare_schema({"type": "object", "properties": {"a": {"type": "string", "minLength": -1}}})
