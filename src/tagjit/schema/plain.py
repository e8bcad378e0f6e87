"""Plain schemas: the shape most tool parameters have, which ``prepare_schema`` is known to accept, told in one walk.

A tool request carries up to hundreds of schemas the API server has not seen, and each full check (validity,
normalisation, the refusal walk) costs about 30 us even for ``{"type": "object", "properties": {...}}``. A schema
made only of keywords whose check is local (types, properties whose required names it lists, enums of scalars that
fit the type, bounds, a lone pattern or format, annotations) cannot be refused, relaxed or found empty, so the API server may
skip the full check for it; the engine prepares every schema again before it builds a grammar. ``plain(s)`` implies
``prepare_schema(s)`` returns without raising; the tests check that on every schema in ``../shared/data``.
"""

from __future__ import annotations

import math
import re
from typing import Any

from tagjit.schema.check import MAX_DEPTH, MAX_ENUM_VALUES
from tagjit.schema.formats import OPENAPI_FORMATS, SUPPORTED_FORMATS
from tagjit.schema.keywords import ANNOTATIONS, KEYS
from tagjit.schema.metaschema import _KEYWORDS
from tagjit.schema.normalize import _json_type as json_type

_DEPTH = MAX_DEPTH // 2  # deeper than this, the full check decides
_TYPES = frozenset(("array", "boolean", "integer", "null", "number", "object", "string"))
_NUMERIC = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_COUNTS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties")
# Annotations whose presence changes what tagjit builds or how it resolves references: never plain.
_NOT_PLAIN = frozenset(("$schema", "$vocabulary", "$id", "id", "$anchor", "$dynamicAnchor", "$recursiveAnchor",
                        "x-any-order", "contentSchema", "additionalItems", "const", "multipleOf", "not",
                        "uniqueItems", "dependencies", "dependentRequired", "nullable"))
# Keywords the walk reads itself; every other keyword tagjit knows (combinators, $ref, ...) makes a schema not plain.
_STRUCTURAL = frozenset(("properties", "required", "additionalProperties", "items", "enum", "pattern", "format"))
_KNOWN = frozenset(_KEYWORDS) | KEYS | _NOT_PLAIN | ANNOTATIONS


def plain(schema: Any) -> bool:
    """True only if ``schema`` is plain: ``prepare_schema`` accepts it, with nothing to refuse, relax or forbid."""
    try:
        return isinstance(schema, dict) and _node(schema, 0)
    except RecursionError:
        return False


def _node(n: dict, depth: int) -> bool:
    if depth > _DEPTH:
        return False
    structural = False
    for k, v in n.items():
        if not k.isascii() and not _text(k):
            return False
        check = _LOCAL.get(k)
        if check is not None:
            if not check(v):
                return False
        elif k in _STRUCTURAL:
            structural = True
        elif k in _NOT_PLAIN or (k in _KNOWN and k not in ANNOTATIONS):
            return False
        else:
            meta = _KEYWORDS.get(k)  # title, examples, ...: the meta-schema's type for them
            if meta is not None and not meta(v):
                return False
            if isinstance(v, str):  # a description, most often
                if not v.isascii() and not _text(v):
                    return False
            elif not _value(v, depth + 1):
                return False
    return not structural or _structure(n, depth)


def _structure(n: dict, depth: int) -> bool:
    """The keywords that hold sub-schemas or depend on their siblings."""
    if "pattern" in n and not _lone_pattern(n):
        return False
    if "format" in n and not _lone_format(n):
        return False
    props = n.get("properties")
    if "properties" in n:
        if not isinstance(props, dict):
            return False
        for name, child in props.items():
            # A property that accepts nothing (false) is forbidden or refused: the full check decides.
            if not _text(name) or child is False or not _child(child, depth + 2):
                return False
    required = n.get("required")
    if "required" in n:
        if not isinstance(required, list) or not isinstance(props, dict):
            return False
        if not all(isinstance(r, str) and r in props for r in required) or len(set(required)) != len(required):
            return False
    for k in ("additionalProperties", "items"):
        if k in n and not _child(n[k], depth + 1):
            return False
    return "enum" not in n or _enum(n)


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _child(v: Any, depth: int) -> bool:
    return v is True or v is False or (isinstance(v, dict) and _node(v, depth))


def _is_type(t: Any) -> bool:
    if isinstance(t, str):
        return t in _TYPES
    return isinstance(t, list) and len(t) > 0 and all(isinstance(x, str) and x in _TYPES for x in t) \
        and len(set(t)) == len(t)


def _lone_pattern(n: dict) -> bool:
    """A pattern with no length bound beside it (those tagjit intersects, and may refuse), valid for Python's re."""
    p = n["pattern"]
    if not isinstance(p, str) or not _text(p) or "minLength" in n or "maxLength" in n:
        return False
    try:
        re.compile(p)
    except (re.error, RecursionError, OverflowError):
        return False
    return True


def _lone_format(n: dict) -> bool:
    """A format tagjit enforces (or that constrains nothing JSON can tell), with no string keyword beside it."""
    f = n["format"]
    return isinstance(f, str) and (f in SUPPORTED_FORMATS or f in OPENAPI_FORMATS) and not any(
        k in n for k in ("pattern", "minLength", "maxLength", "enum"))


def _enum(n: dict) -> bool:
    """An enum of scalars, each of the node's type, beside nothing else that constrains: none is filtered out."""
    values = n["enum"]
    if not isinstance(values, list) or not values or len(values) > MAX_ENUM_VALUES:
        return False
    if any(k in n for k in _NUMERIC) or any(k in n for k in _COUNTS) or "pattern" in n or "format" in n:
        return False
    types = n.get("type")
    allowed = (types,) if isinstance(types, str) else tuple(types) if isinstance(types, list) else None
    for v in values:
        kind = _scalar_type(v)
        if kind is None:
            return False
        if allowed is not None and kind not in allowed and not (kind == "integer" and "number" in allowed):
            return False
    return True


def _scalar_type(v: Any) -> str | None:
    """The JSON type of a scalar enum value (1.0 is an integer), None for objects, arrays, NaN and bad text."""
    if isinstance(v, (dict, list)) or (isinstance(v, float) and not math.isfinite(v)) \
            or (isinstance(v, str) and not _text(v)):
        return None
    return json_type(v)


def _value(v: Any, depth: int) -> bool:
    """Any JSON value under an annotation or an unknown keyword: not too deep, no lone surrogate in its text."""
    if isinstance(v, str):
        return _text(v)
    if isinstance(v, (dict, list)):
        if depth > _DEPTH:
            return False
        items = v.items() if isinstance(v, dict) else enumerate(v)
        return all((not isinstance(k, str) or _text(k)) and _value(x, depth + 1) for k, x in items)
    return True


def _text(s: str) -> bool:
    """No lone UTF-16 surrogate (which the grammar cannot encode)."""
    if s.isascii():
        return True
    try:
        s.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


# Keywords checked on their own value alone.
_LOCAL = {"type": _is_type, **{k: _finite for k in _NUMERIC}, **{k: _count for k in _COUNTS}}
