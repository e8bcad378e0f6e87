"""What tagjit does with each ``format`` value: enforce it, refuse it by name, or treat it as an annotation.

JSON Schema (2019-09 and later) makes ``format`` an annotation unless a validator opts into asserting it, and
validators do assert the formats the specification defines. So a specification format tagjit cannot enforce is
refused by name (exactness: a validator could reject what tagjit lets through), while any other value is an
annotation: dropped, with a lint note. The OpenAPI formats real tool definitions carry are enforced where they
constrain a value (``int32``/``int64`` as ranges, ``byte`` as base64); ``binary``, ``password``, ``float`` and
``double`` constrain nothing JSON can tell apart.
"""

from __future__ import annotations

from tagjit.build.patterns import BASE64

# Formats xgrammar's converter turns into exact grammars.
SUPPORTED_FORMATS = frozenset({
    "email", "date", "time", "date-time", "duration", "ipv4", "ipv6", "hostname", "uuid",
    "uri", "uri-reference", "uri-template", "json-pointer", "relative-json-pointer",
})

# Every format the JSON Schema specification defines (draft 2020-12, section 7.3).
SPEC_FORMATS = SUPPORTED_FORMATS | {"idn-email", "idn-hostname", "iri", "iri-reference", "regex"}

INTEGER_RANGES = {"int32": (-(2 ** 31), 2 ** 31 - 1), "int64": (-(2 ** 63), 2 ** 63 - 1)}
OPENAPI_FORMATS = frozenset({*INTEGER_RANGES, "byte", "binary", "password", "float", "double"})


def is_annotation(fmt: object) -> bool:
    """Whether a ``format`` value is neither a specification format nor an OpenAPI one (dropped, with a lint note)."""
    return isinstance(fmt, str) and fmt not in SPEC_FORMATS and fmt not in OPENAPI_FORMATS


def apply_format(node: dict) -> None:
    """Replace a node's non-specification ``format`` by what enforces it, or drop it (an annotation)."""
    fmt = node.get("format")
    if not isinstance(fmt, str) or fmt in SPEC_FORMATS:
        return
    del node["format"]
    declared = node.get("type")
    # Only on a declared type: on an untyped node the range or pattern would also constrain the other types.
    types = {declared} if isinstance(declared, str) else set(declared) if isinstance(declared, list) else set()
    if fmt in INTEGER_RANGES and types & {"integer", "number"}:
        low, high = INTEGER_RANGES[fmt]
        for key, bound, tighter in (("minimum", low, max), ("maximum", high, min)):
            value = node.get(key)
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            node[key] = tighter(value, bound) if number else bound
    elif fmt == "byte" and "string" in types and not {"pattern", "minLength", "maxLength"} & set(node):
        node["pattern"] = BASE64
