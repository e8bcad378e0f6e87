"""A schema the one-walk test calls plain is one the full check accepts: the API server may skip that check for it."""

from __future__ import annotations

import copy
import json
import random

import pytest

from shared_data import DATA
from tagjit import ConstraintError
from tagjit.schema import prepare_schema
from tagjit.schema.metaschema import _KEYWORDS
from tagjit.schema.plain import plain
from tagjit.tools.bfcl import load_tools
from tagjit.tools.tag import build_tool_tag
from test_metaschema import subschemas as dicts  # every dict in a schema: mutations go everywhere

BENCH = DATA / "jsonschemabench"
# Values that break a keyword, or a plain schema's premises: wrong types, lone surrogates, empty schemas, huge ones.
BREAKERS = [-1, 1.5, 2.0, 0, "x", "(", "\ud800", "#/$defs/a", "string", "iri", "date", ["string", "string"], [],
            [1], ["a", "a"], ["zz"], ["True", "dontcare"], [{"a": 1}], list(range(5000)), {}, {"a": False},
            {"a": {"type": "string"}}, {"$ref": "#/x"}, {"type": "boolean", "enum": ["True"]}, True, False, None,
            float("nan"), float("inf"), ["string", {}], [["a"]], {"type": ["string", {}]}]
KEYS = [*_KEYWORDS, "$schema", "$vocabulary", "x-any-order", "optional", "nullable", "example", "\ud800"]


def real_schemas() -> list[object]:
    out: list[object] = [t["function"]["parameters"] for t in load_tools(str(DATA / "bfcl"))]
    for split in sorted(p for p in BENCH.iterdir() if p.is_dir()):
        for path in sorted(split.iterdir()):
            doc = json.loads(path.read_text())
            out.append(doc["schema"] if split.name == "maskbench" and isinstance(doc, dict) and "schema" in doc
                       else doc)
    return out


def refusal(schema: object) -> str | None:
    try:
        prepare_schema(schema)
    except (ConstraintError, RecursionError) as e:
        return repr(e)
    return None


@pytest.fixture(scope="module")
def schemas() -> list[object]:
    return real_schemas()


def test_every_real_schema_called_plain_is_accepted_by_the_full_check(schemas):
    vouched = [s for s in schemas if plain(s)]
    assert len(vouched) > 5000
    assert [(s, refusal(s)) for s in vouched if refusal(s) is not None] == []


def test_no_mutation_of_a_plain_schema_that_the_full_check_refuses_is_called_plain(schemas):
    rng = random.Random(11)
    bases = [s for s in schemas if plain(s)][::7]
    unsound, still_plain = [], 0
    for base in bases:
        for _ in range(6):
            m = copy.deepcopy(base)
            target = rng.choice(dicts(m))
            target[rng.choice(KEYS)] = copy.deepcopy(rng.choice(BREAKERS))
            if plain(m):
                still_plain += 1
                if refusal(m) is not None:
                    unsound.append((m, refusal(m)))
    assert unsound == []
    assert still_plain > 100  # the mutations also reach keys that leave a schema plain: the test can fail


def test_nearly_every_bfcl_tool_schema_is_plain():
    schemas = [t["function"]["parameters"] for t in load_tools(str(DATA / "bfcl"), strict=True)]
    assert sum(map(plain, schemas)) >= 0.99 * len(schemas)


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"on": {"type": "boolean", "enum": ["True", "False", "dontcare"]}}},
    {"type": "object", "properties": {"a": False}},
    {"type": "object", "properties": {"a": {}}, "required": ["a", "b"], "additionalProperties": False},
    {"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}}, "$defs": {"a": {"type": "string"}}},
    {"type": "string", "description": "lone \ud800 surrogate"},
    {"type": "string", "format": "iri"},
    {"type": "string", "pattern": "[a-z]+", "maxLength": 8},
    {"enum": [{"a": 1}, {"a": 2}]},
    {"type": "string", "examples": "not a list"},
    {"$schema": "http://json-schema.org/draft-04/schema#", "type": "number", "exclusiveMinimum": True, "minimum": 0},
])
def test_a_schema_whose_check_is_not_local_is_not_plain(schema):
    assert not plain(schema)


def test_a_plain_tool_schema_reaches_the_tag_as_given_in_its_key_order():
    schema = {"type": "object", "properties": {"reasoning": {"type": "string"}, "answer": {"type": "string",
              "enum": ["yes", "no"]}}, "required": ["reasoning", "answer"]}
    assert plain(schema)
    tag = build_tool_tag("hermes", [{"type": "function", "function": {"name": "f", "parameters": schema}}],
                         "required")
    found = [n["json_schema"] for n in dicts(tag) if n.get("type") == "json_schema"]
    assert found and all(json.dumps(f) == json.dumps(schema) for f in found)
