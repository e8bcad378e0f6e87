"""The JSON Schema keyword table (which keywords hold sub-schemas), walks over it, and local ``$ref`` resolution.

Every part of tagjit that walks a schema (checks, normalisation, lint, any-order planning) uses this
one table, so a keyword added here is seen by all of them.
"""

from __future__ import annotations

from typing import Any, Iterator

MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
"""Keywords whose value maps names to sub-schemas."""
LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
"""Keywords whose value is a list of sub-schemas (draft-4 tuple ``items`` is handled with ``VALUES``)."""
VALUES = ("items", "additionalProperties", "unevaluatedProperties", "propertyNames",
          "additionalItems", "contains", "not", "if", "then", "else")
"""Keywords whose value is one sub-schema (``items`` may also be a draft-4 list)."""
KEYS = frozenset({*MAPS, *LISTS, *VALUES})
MEMBER_VALUES = ("properties", "patternProperties", "additionalProperties", "unevaluatedProperties")
"""The keywords whose sub-schemas describe an object's member values."""
ITEM_VALUES = ("prefixItems", "items", "additionalItems")
"""The keywords whose sub-schemas describe an array's items."""

# Keywords with no effect on the accepted text.
ANNOTATIONS = frozenset({
    "title", "description", "default", "examples", "example", "$comment", "deprecated",
    "readOnly", "writeOnly", "$schema", "$id", "id", "$anchor", "contentMediaType",
    "contentEncoding", "contentSchema", "markdownDescription", "errorMessage", "x-any-order",
})

# Keywords that only constrain instances of one JSON type (xgrammar ignores them on a node without "type").
TYPE_KEYWORDS = {
    "string": ("minLength", "maxLength", "pattern", "format"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
    "object": ("properties", "required", "additionalProperties", "patternProperties", "minProperties",
               "maxProperties", "propertyNames", "unevaluatedProperties"),
    "array": ("items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "contains"),
}
# Keywords that are not constraints on the node's own value (kept aside when combining schemas).
PASSIVE = ANNOTATIONS | {"$defs", "definitions"}

# A subschema's location, rendered by path_text() only when an error or an anchor needs it: the root's
# text, or (parent path, part, ...).
Path = str | tuple


def path_text(path: Path) -> str:
    """The '#/a/b' text of a Path (parts written as they are, unescaped)."""
    parts: list[Any] = []
    while not isinstance(path, str):
        parts.extend(reversed(path[1:]))
        path = path[0]
    parts.reverse()
    return path + "".join(f"/{p}" for p in parts)


def children(node: dict, only: tuple[str, ...] | None = None) -> Iterator[tuple[tuple, Any]]:
    """Each sub-schema position of a node (or of its keywords in ``only``) as (path parts, value), in keyword-table
    order; values may be non-dicts."""
    if KEYS.isdisjoint(node):
        return
    if only is not None:
        for parts, child in children(node):
            if parts[0] in only:
                yield parts, child
        return
    for key in MAPS:
        sub = node.get(key)
        if isinstance(sub, dict):
            for name, child in sub.items():
                yield (key, name), child
    for key in LISTS:
        sub = node.get(key)
        if isinstance(sub, list):
            for i, child in enumerate(sub):
                yield (key, i), child
    for key in VALUES:
        sub = node.get(key)
        if isinstance(sub, dict):
            yield (key,), sub
        elif key == "items" and isinstance(sub, list):
            for i, child in enumerate(sub):
                yield (key, i), child


def subschemas(root: Any, where: str = "#") -> Iterator[tuple[dict, Path]]:
    """Every schema node under root (itself first), depth-first in keyword order, with its path."""
    if not isinstance(root, dict):
        return
    stack: list[tuple[dict, Path]] = [(root, where)]
    while stack:
        node, path = stack.pop()
        yield node, path
        below = [(child, (path, *parts)) for parts, child in children(node) if isinstance(child, dict)]
        below.reverse()
        stack += below


def escape(part: str) -> str:
    """A name as one JSON-pointer token (``~`` and ``/`` escaped)."""
    return part.replace("~", "~0").replace("/", "~1")


def pointer_parts(ref: str) -> list[str] | None:
    """The unescaped tokens of a local ``$ref`` ("#" -> []), or None for any other reference."""
    if ref == "#":
        return []
    if not ref.startswith("#/"):
        return None
    return [p.replace("~1", "/").replace("~0", "~") for p in ref[2:].split("/")]


def step(node: Any, part: str) -> Any:
    """One pointer token into a JSON value; raises LookupError where it does not lead anywhere."""
    if isinstance(node, dict) and part in node:
        return node[part]
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return node[int(part)]
    raise LookupError(part)


def resolve(root: Any, ref: str) -> Any:
    """The value a local ``$ref`` points to in root; raises LookupError if it points nowhere or elsewhere."""
    parts = pointer_parts(ref)
    if parts is None:
        raise LookupError(ref)
    node = root
    for part in parts:
        node = step(node, part)
    return node
