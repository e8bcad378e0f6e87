"""JSON Schema checks: validity, and the features tagjit cannot enforce (named, never dropped)."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import jsonschema
from jsonschema.exceptions import SchemaError

from tagjit.compile.cache import bounded_memo
from tagjit.errors import CompileLimitError, ConstraintError, EmptySchemaError, UnsupportedFeatureError
from tagjit.schema.metaschema import quick_valid
from tagjit.settings import get_settings
from tagjit.build.bounded_strings import FILTER_COUNTED, counted
from tagjit.build.numbers import multiple_of_problem
from tagjit.build.patterns import EXCEPT, format_lengths_problem, format_pattern, lengths_apart, pattern_lengths_problem
from tagjit.build.strings import exclusion_problem
from tagjit.schema.formats import SUPPORTED_FORMATS
from tagjit.schema.normalize import normalize_schema
from tagjit.schema.pattern_properties import pattern_keys_problem, wants_exact_keys
from tagjit.schema.keywords import KEYS, TYPE_KEYWORDS, path_text, subschemas
from tagjit.schema.productive import unproductive_refs


# Keywords whose constraint xgrammar does not enforce (it would accept text the schema forbids). normalize rewrites
# every dependencies/dependentRequired/dependentSchemas (schema.dependencies) or refuses it by name: one still in a
# normalised node would be a bug, refused here rather than ignored.
_UNSUPPORTED = ("if", "then", "else", "dependentRequired", "dependentSchemas", "dependencies",
                "contains", "minContains", "maxContains", "$dynamicRef", "$recursiveRef",
                "unevaluatedItems")

MAX_DEPTH = 128
# xgrammar compiles a JSON enum value by value: 10k values take ~6 s with a 128k vocabulary, 100k
# more than two minutes (the compile keeps a core busy after the request's time limit has passed).
MAX_ENUM_VALUES = 4096


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


def prepare_schema(schema: dict | bool, strict: bool = True, filter_counts: frozenset[str] | None = None,
                   ) -> dict | bool:
    """Check a schema and return its normalised form (see normalize_schema), which xgrammar enforces exactly
    (``strict``: xgrammar's strict mode, the ``strict_mode`` setting; ``filter_counts``: string lengths the grammar
    cannot count exactly move to ``FILTER_COUNTED`` for a token filter to count, but at these paths)."""
    if isinstance(schema, bool):
        return schema
    _check_validity(schema)
    try:
        normalized = normalize_schema(schema, strict)
    except RecursionError:
        raise ConstraintError(f"JSON schema nests deeper than {MAX_DEPTH} levels") from None
    if filter_counts is not None and isinstance(normalized, dict):
        normalized = _filter_counted(normalized, filter_counts)
    if isinstance(normalized, dict):
        refs = False
        for node, path in subschemas(normalized):
            refs = refs or "$ref" in node
            if not _CHECKED.isdisjoint(node):
                problem = _node_problem(node)
                if problem is not None:
                    raise UnsupportedFeatureError(problem, path_text(path))
        # Only a $ref cycle can leave a node without a value here; most tools have no $ref at all.
        empty = unproductive_refs(normalized) if refs else []
        if empty:
            raise EmptySchemaError(f"JSON schema at '{empty[0]}' accepts no value: its $ref cycle ("
                                   + ", ".join(sorted(set(empty))[:4]) + ") never reaches a value without another "
                                   "reference (no base case)")
    return normalized


# A parsed, normalised schema takes 3-6 times its JSON text in Python objects (measured on BFCL and
# JSONSchemaBench); 8 keeps the estimate on the safe side.
@bounded_memo(lambda: get_settings().memo_bytes, lambda args, _value: 8 * len(args[0]))
def prepared(text: str, strict: bool = True) -> Any:
    """``prepare_schema`` of a schema given as its ``spec.compact_json`` text, once per distinct text (key order kept).

    Tool sets repeat the same tools in new combinations and each check costs about a millisecond,
    so the tool-tag builder and the tag validation share this one memo. The result is shared:
    do not mutate it.
    """
    return prepare_schema(json.loads(text), strict)


def _filter_counted(schema: dict, uncounted: frozenset[str]) -> dict:
    """The schema with each string's lengths that the grammar cannot count exactly under ``FILTER_COUNTED`` (but
    at the ``uncounted`` paths)."""
    paths = {path_text(path) for node, path in subschemas(schema) if _filter_counts(node)} - uncounted
    if not paths:
        return schema
    schema = copy.deepcopy(schema)  # normalize may hand back the caller's own nodes
    found = {id(node): node for node, path in subschemas(schema) if path_text(path) in paths}  # a shared node once
    for node in found.values():
        lo, hi = node.pop("minLength", 0), node.pop("maxLength", None)
        node[FILTER_COUNTED] = [int(lo), None if hi is None else int(hi)]
        if "pattern" in node or "format" in node:
            node[EXCEPT] = []  # the pattern/format alone as tagjit's automaton (patterns.lengths_apart)
    return schema


def _filter_counts(node: dict) -> bool:
    """Whether a string node's lengths are the token filter's to count: alone above ``MAX_COUNTED``, or a maxLength
    beside a pattern or format whose automaton with it is too large to build or to precompute
    (``patterns.lengths_apart``; the node exact without it)."""
    if "minLength" not in node and "maxLength" not in node:
        return False
    types = _types(node)
    if types and "string" not in types or not _BESIDE_COUNT.isdisjoint(node):
        return False
    lo, hi = node.get("minLength", 0), node.get("maxLength")
    if not _whole(lo) or hi is not None and (not _whole(hi) or hi < lo):
        return False  # normalize's to judge
    if "pattern" not in node and "format" not in node:
        return counted(node) is None
    if _node_problem({k: v for k, v in node.items() if k not in ("minLength", "maxLength")}) is not None:
        return False  # refused without its lengths too: that is the feature to name
    return lengths_apart(node)


def _whole(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 and float(v).is_integer()


def _check_validity(schema: dict) -> None:
    if _scan(schema):  # _check_text walks again, in its order, for the error and its path
        _check_text(schema, "#")
    if quick_valid(schema):
        return
    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
    except SchemaError as e:
        path = "/".join(str(p) for p in e.absolute_path)
        raise ConstraintError(f"invalid JSON schema at '/{path}': {e.message}") from None
    except RecursionError:
        raise ConstraintError(f"JSON schema nests deeper than {MAX_DEPTH} levels") from None


def _scan(schema: dict) -> bool:
    """Raise if the schema nests deeper than MAX_DEPTH; whether _check_text would refuse it (no paths built)."""
    found = False
    stack: list[tuple[Any, int]] = [(schema, 0)]
    while stack:
        node, depth = stack.pop()
        if not node:
            continue
        if depth >= MAX_DEPTH:  # a non-empty container here has a value deeper than MAX_DEPTH
            raise ConstraintError(f"JSON schema nests deeper than {MAX_DEPTH} levels")
        depth += 1
        if isinstance(node, dict):
            enum = node.get("enum")
            if isinstance(enum, list) and len(enum) > MAX_ENUM_VALUES:
                found = True
            for k, v in node.items():
                if isinstance(k, str) and not k.isascii() and has_lone_surrogate(k):
                    found = True
                if isinstance(v, str):
                    if not v.isascii() and has_lone_surrogate(v):
                        found = True
                elif isinstance(v, (dict, list)):
                    stack.append((v, depth))
        else:
            for v in node:
                if isinstance(v, str):
                    if not v.isascii() and has_lone_surrogate(v):
                        found = True
                elif isinstance(v, (dict, list)):
                    stack.append((v, depth))
    return found


def _check_text(node: Any, where: str) -> None:
    """Refuse lone surrogates (not Unicode text; they cannot be encoded for the grammar) and huge enums."""
    if isinstance(node, str):
        if has_lone_surrogate(node):
            raise ConstraintError(f"JSON schema at '{where}' contains a lone UTF-16 surrogate, which is not "
                                  "valid Unicode")
    elif isinstance(node, dict):
        enum = node.get("enum")
        if isinstance(enum, list) and len(enum) > MAX_ENUM_VALUES:
            raise CompileLimitError(f"JSON schema at '{where}' has an enum of {len(enum)} values, more than "
                                    f"tagjit's limit of {MAX_ENUM_VALUES}")
        for k, v in node.items():
            _check_text(k, where)
            _check_text(v, f"{where}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _check_text(v, f"{where}/{i}")


def has_lone_surrogate(text: str) -> bool:
    """Whether a Python string holds a UTF-16 surrogate code point (from a lone \\uD800-style escape)."""
    try:
        text.encode("utf-8")
        return False
    except UnicodeEncodeError:
        return True


def _types(node: dict) -> set[str]:
    t = node.get("type")
    if isinstance(t, str):
        return {t}
    if isinstance(t, list):
        return {x for x in t if isinstance(x, str)}
    return set()


def _node_problem(node: dict) -> str | None:
    """The first feature of one (normalised) schema node that tagjit cannot enforce, or None."""
    for kw in _UNSUPPORTED:
        if kw in node:
            return kw
    types = _types(node)
    if node.get("uniqueItems") is True:
        return "uniqueItems"
    if "multipleOf" in node or "not" in node:
        problem = _own_rule_problem(node, types)
        if problem is not None:
            return problem
    fmt = node.get("format")
    lengths = "minLength" in node or "maxLength" in node
    # Strings tagjit writes as its own automaton (EXCEPT) were built when normalize wrote them.
    stringy = (not types or "string" in types) and EXCEPT not in node
    if isinstance(fmt, str) and lengths and stringy:  # exact where build.patterns writes the format's language
        beside = [k for k in _ANY_TYPE if k in node]
        if beside and (fmt in SUPPORTED_FORMATS or format_pattern(fmt) is not None):
            return f"format with minLength/maxLength together with {beside[0]}"
        if format_pattern(fmt) is None and fmt not in SUPPORTED_FORMATS:
            return f"format: {fmt}"
        problem = format_lengths_problem(node)
        if problem is not None:
            return problem
    elif isinstance(fmt, str) and fmt not in SUPPORTED_FORMATS and stringy:
        return f"format: {fmt}"
    if isinstance(node.get("pattern"), str) and ("minLength" in node or "maxLength" in node) and stringy:
        beside = [k for k in _ANY_TYPE if k in node]
        if beside:
            return f"pattern with minLength/maxLength together with {beside[0]}"
        problem = pattern_lengths_problem(node)
        if problem is not None:
            return problem
    ref = node.get("$ref")
    if isinstance(ref, str) and not ref.startswith("#"):
        return f"$ref to an external document ({ref})"
    if isinstance(node.get("allOf"), list) and len(node["allOf"]) > 1:
        return "allOf with more than one branch"
    if "pattern" in node and "format" in node and not lengths and stringy:  # with lengths: intersected above
        return "pattern together with format"
    pattern_props = node.get("patternProperties")
    if isinstance(pattern_props, dict) and pattern_props and wants_exact_keys(node):
        problem = pattern_keys_problem(pattern_props)
        if problem is not None:
            return problem
    if "propertyNames" in node:
        if "properties" in node or "patternProperties" in node:
            return "propertyNames together with properties"
        if node.get("unevaluatedProperties", True) is not True:
            return "propertyNames together with unevaluatedProperties"
    return None


# Keywords that apply to every type: a node tagjit writes its own rule for (multipleOf, not) must have none of them.
_ANY_TYPE = ("enum", "const", "$ref", "allOf", "anyOf", "oneOf", "not", "if", "then", "else")

# A node whose lengths the filter counts says nothing but type, pattern and format (so the grammar's string is the
# node's own, whole); other keywords, unknown to JSON Schema, are annotations.
_BESIDE_COUNT = frozenset({*KEYS, *_ANY_TYPE, *_UNSUPPORTED, EXCEPT,
                           *(kw for t, kws in TYPE_KEYWORDS.items() if t != "string" for kw in kws)})


def _own_rule_problem(node: dict, types: set[str]) -> str | None:
    """Why tagjit cannot write its own rule for a normalised multipleOf or ``not: {enum}`` node, or None."""
    if "not" in node:
        neg = node["not"]
        if not (isinstance(neg, dict) and list(neg) == ["enum"] and isinstance(neg["enum"], list)
                and all(isinstance(v, str) for v in neg["enum"]) and "type" in node):
            return "not"  # normalize_schema rewrites every other shape it can enforce
        beside = [k for k in ("minLength", "maxLength", "pattern", "format") if k in node]
        if beside:
            return f"not: {{enum}} together with {beside[0]}"
        problem = exclusion_problem(neg["enum"])
        if problem is not None:
            return problem
    beside = [k for k in _ANY_TYPE if k in node and k != "not"]
    if beside:
        return f"{'multipleOf' if 'multipleOf' in node else 'not'} together with {beside[0]}"
    if "multipleOf" in node:
        m = node["multipleOf"]
        if not isinstance(m, (int, float)) or isinstance(m, bool) or not math.isfinite(m) or m <= 0:
            return "multipleOf"
        return multiple_of_problem(node, bool(types) and "number" not in types)
    return None


# A node with none of these keys has no problem _node_problem could report.
_CHECKED = frozenset({*_UNSUPPORTED, "not", "uniqueItems", "multipleOf", "format", "pattern", "$ref", "allOf",
                      "patternProperties", "propertyNames"})
