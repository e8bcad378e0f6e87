"""JSON Schema checks: validity, and the features tagjit cannot enforce (named, never dropped)."""

from __future__ import annotations

import json
from typing import Any, Iterator

import jsonschema
from jsonschema.exceptions import SchemaError

from .errors import ConstraintError, UnsupportedFeatureError

# Formats xgrammar's converter turns into exact grammars.
SUPPORTED_FORMATS = frozenset({
    "email", "date", "time", "date-time", "duration", "ipv4", "ipv6", "hostname", "uuid",
    "uri", "uri-reference", "uri-template", "json-pointer", "relative-json-pointer",
})

# Keywords with no effect on the accepted text.
_ANNOTATIONS = frozenset({
    "title", "description", "default", "examples", "example", "$comment", "deprecated",
    "readOnly", "writeOnly", "$schema", "$id", "id", "$anchor", "contentMediaType",
    "contentEncoding", "contentSchema", "markdownDescription", "errorMessage", "x-any-order",
})

# Keywords whose constraint xgrammar does not enforce (it would accept text the schema forbids).
_UNSUPPORTED = ("not", "if", "then", "else", "dependentRequired", "dependentSchemas", "dependencies",
                "contains", "minContains", "maxContains", "$dynamicRef", "$recursiveRef",
                "unevaluatedItems")

MAX_DEPTH = 128


def parse_schema(source: str | dict | bool) -> dict | bool:
    """Parse a schema from text, rejecting invalid JSON and absurd nesting with a clear reason."""
    if isinstance(source, (dict, bool)):
        return source
    try:
        schema = json.loads(source)
    except RecursionError:
        raise ConstraintError(f"JSON schema nests deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as e:
        raise ConstraintError(f"JSON schema is not valid JSON: {e}") from None
    if not isinstance(schema, (dict, bool)):
        raise ConstraintError(f"JSON schema must be an object or a boolean, not {type(schema).__name__}")
    return schema


def check_schema(schema: dict | bool) -> None:
    """Raise ConstraintError if the schema is invalid, UnsupportedFeatureError if tagjit cannot enforce it."""
    if isinstance(schema, bool):
        return
    _check_depth(schema)
    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
    except SchemaError as e:
        path = "/".join(str(p) for p in e.absolute_path)
        raise ConstraintError(f"invalid JSON schema at '/{path}': {e.message}") from None
    except RecursionError:
        raise ConstraintError(f"JSON schema nests deeper than {MAX_DEPTH} levels") from None
    for where, node in _subschemas(schema, "#"):
        _check_node(node, where)


def _check_depth(node: Any, depth: int = 0) -> None:
    if depth > MAX_DEPTH:
        raise ConstraintError(f"JSON schema nests deeper than {MAX_DEPTH} levels")
    if isinstance(node, dict):
        for v in node.values():
            _check_depth(v, depth + 1)
    elif isinstance(node, list):
        for v in node:
            _check_depth(v, depth + 1)


def _types(node: dict) -> set[str]:
    t = node.get("type")
    if isinstance(t, str):
        return {t}
    if isinstance(t, list):
        return {x for x in t if isinstance(x, str)}
    return set()


def _check_node(node: dict, where: str) -> None:
    for kw in _UNSUPPORTED:
        if kw in node:
            raise UnsupportedFeatureError(kw, where)
    types = _types(node)
    if node.get("uniqueItems") is True:
        raise UnsupportedFeatureError("uniqueItems", where)
    if "multipleOf" in node and node["multipleOf"] != 1:
        raise UnsupportedFeatureError("multipleOf", where)
    fmt = node.get("format")
    if isinstance(fmt, str) and fmt not in SUPPORTED_FORMATS and (not types or "string" in types):
        raise UnsupportedFeatureError(f"format: {fmt}", where)
    if ("pattern" in node or "format" in node) and ("minLength" in node or "maxLength" in node):
        raise UnsupportedFeatureError("minLength/maxLength together with pattern or format", where)
    ref = node.get("$ref")
    if isinstance(ref, str) and not ref.startswith("#"):
        raise UnsupportedFeatureError(f"$ref to an external document ({ref})", where)
    if isinstance(node.get("allOf"), list) and len(node["allOf"]) > 1:
        raise UnsupportedFeatureError("allOf with more than one branch", where)
    pattern_props = node.get("patternProperties")
    if isinstance(pattern_props, dict) and pattern_props:
        if "properties" in node:
            raise UnsupportedFeatureError("patternProperties together with properties", where)
        if len(pattern_props) > 1:
            raise UnsupportedFeatureError("more than one patternProperties entry", where)
    if "propertyNames" in node:
        if "properties" in node or "patternProperties" in node:
            raise UnsupportedFeatureError("propertyNames together with properties", where)
        if node.get("unevaluatedProperties", True) is not True:
            raise UnsupportedFeatureError("propertyNames together with unevaluatedProperties", where)


_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMA_VALUES = ("items", "additionalProperties", "unevaluatedProperties", "propertyNames",
                  "additionalItems", "contains", "not", "if", "then", "else")


def _subschemas(node: Any, where: str) -> Iterator[tuple[str, dict]]:
    if not isinstance(node, dict):
        return
    yield where, node
    for key in _SCHEMA_MAPS:
        sub = node.get(key)
        if isinstance(sub, dict):
            for name, child in sub.items():
                yield from _subschemas(child, f"{where}/{key}/{name}")
    for key in _SCHEMA_LISTS:
        sub = node.get(key)
        if isinstance(sub, list):
            for i, child in enumerate(sub):
                yield from _subschemas(child, f"{where}/{key}/{i}")
    for key in _SCHEMA_VALUES:
        sub = node.get(key)
        if isinstance(sub, dict):
            yield from _subschemas(sub, f"{where}/{key}")
        elif key == "items" and isinstance(sub, list):
            for i, child in enumerate(sub):
                yield from _subschemas(child, f"{where}/items/{i}")
