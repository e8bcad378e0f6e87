"""``patternProperties`` made exact: every member name takes exactly the schemas JSON Schema gives it.

A declared name takes its ``properties`` schema and that of every pattern it matches (searched for, ECMA-262); an
undeclared name takes every pattern it matches, or ``additionalProperties`` if none (absent: any value, or no such
member under strict mode). xgrammar gives a declared name its own schema only, and an extra member the first pattern
its anchored key regex matches, or ``additionalProperties`` for any name at all. So the object is rewritten:

- each declared name's schema is merged with those of the patterns it matches;
- the undeclared names are split into disjoint languages, one per set of patterns they match ("none" taking
  ``additionalProperties``), each without the declared names (``build.keys.partition``); languages whose merged
  schemas are the same are joined, and one that takes no value is left out;
- each language is one patternProperties entry, keyed by ``keys.key_text`` (a regex jsonschema reads, carrying the
  language for tagjit), and ``additionalProperties`` is false.

The splice writes each key as tagjit's automaton of its language (``build.keys.key_rules``). Two objects with
patternProperties merge (allOf, anyOf/oneOf siblings) into one that keeps both sides' patterns and adds, for a side
whose ``additionalProperties`` constrains, a pattern for the names none of its patterns or names cover.
"""

from __future__ import annotations

import json
import logging
from functools import reduce
from typing import Any, Protocol

from tagjit.build.keys import (all_of, any_of, check_expr, is_key_text, key_expr, key_problem, key_text, matches,
                               negate, partition, refusal)
from tagjit.build.patterns import PatternProblem
from tagjit.errors import EmptySchemaError, UnsupportedFeatureError
from tagjit.schema.keywords import ANNOTATIONS

log = logging.getLogger("tagjit")


class Normalizer(Protocol):
    """What the rewrite needs of ``normalize._Normalizer``."""

    strict: bool
    forbidden: list[str]

    def node(self, n: Any, where: str) -> Any: ...

    def merge(self, a: Any, b: Any, where: str) -> Any: ...

    def member(self, schema: Any, at: str) -> Any: ...


def wants_exact_keys(n: dict) -> bool:
    """Whether a node's patternProperties are rewritten (an object may have them and they name a pattern)."""
    types = n.get("type")
    types = [types] if isinstance(types, str) else types if isinstance(types, list) else None
    return isinstance(n.get("patternProperties"), dict) and bool(n["patternProperties"]) and (
        types is None or "object" in types)


def exact_pattern_properties(norm: Normalizer, n: dict, where: str) -> dict:
    """Take a node's properties, patternProperties and additionalProperties out of it and return them normalised in
    the exact form (see the module docstring)."""
    if n.get("unevaluatedProperties", True) is not True:
        raise UnsupportedFeatureError("patternProperties together with unevaluatedProperties", where)
    pattern_props = n.pop("patternProperties")
    props = n.pop("properties", None)
    props = props if isinstance(props, dict) else {}
    extra = n.pop("additionalProperties") if "additionalProperties" in n else not norm.strict
    entries = [(key, _expr(key, where), schema) for key, schema in pattern_props.items()]
    required = [k for k in n.get("required", []) if isinstance(k, str)] if isinstance(n.get("required"), list) else []
    names = list(dict.fromkeys([*props, *required]))
    held: dict[str, Any] = {}
    declared = _declared(norm, names, props, entries, extra, required, where)
    if declared or props:
        held["properties"] = declared
    languages = _languages(norm, names, entries, extra, where)
    if languages:
        held["patternProperties"] = languages
    held["additionalProperties"] = False
    return held


def _expr(key: str, where: str) -> dict:
    expr = key_expr(key)
    try:
        check_expr(expr)
    except PatternProblem as e:
        raise UnsupportedFeatureError(refusal(e), where) from None
    return expr


def _declared(norm: Normalizer, names: list[str], props: dict, entries: list, extra: Any, required: list[str],
              where: str) -> dict:
    """Each declared (or required) name's schema merged with those of the patterns it matches, normalised; an
    optional name that takes no value is left out (no language below holds it, so it is forbidden)."""
    out: dict[str, Any] = {}
    for name in names:
        at = f"{where}/properties/{name}"
        if props.get(name, True) is False and name not in required:  # said false: forbidden, nothing to report
            continue
        matched = [schema for _, expr, schema in entries if matches(expr, name)]
        own = [props[name]] if name in props else [] if matched else [extra]
        try:
            value = _merged(norm, [*own, *matched], at)
            if value is False:
                raise EmptySchemaError(f"JSON schema at '{at}' accepts no value" + (
                    "" if name in props or matched else f": additionalProperties is false at '{where}'"))
            out[name] = norm.member(value, at)
        except EmptySchemaError as e:
            if name in required:
                raise EmptySchemaError(f"{e}; it is required at '{where}', so no object satisfies it") from None
            log.warning("tagjit: %s; the property is optional, so it is forbidden", e)
            norm.forbidden.append(at)
    return out


def _languages(norm: Normalizer, names: list[str], entries: list, extra: Any, where: str) -> dict:
    """The patternProperties of the undeclared names: one entry per language, keyed by ``keys.key_text``."""
    try:
        cells = partition([expr for _, expr, _ in entries], names)
    except PatternProblem as e:
        raise UnsupportedFeatureError(refusal(e), where) from None
    groups: dict[str, tuple[list[dict], Any]] = {}
    for members, language in cells:
        at = f"{where}/patternProperties/{entries[members[0]][0]}" if members else f"{where}/additionalProperties"
        value = _merged(norm, [entries[i][2] for i in members] if members else [extra], at)
        try:
            value = norm.member(value, at)
        except EmptySchemaError:
            value = False
        if value is False:  # no member of this language: left out, additionalProperties false forbids it
            continue
        if value is True:
            value = {}
        text = json.dumps(value)
        groups.setdefault(text, ([], value))[0].append(language)
    return {key_text(any_of(languages)): value for languages, value in groups.values()}


def _merged(norm: Normalizer, schemas: list, where: str) -> Any:
    return reduce(lambda a, b: norm.merge(a, b, where), schemas, True)


def merge_pattern_objects(norm: Normalizer, a: dict, b: dict, where: str) -> Any:
    """The object keywords of ``allOf: [a, b]`` where either has patternProperties (False: no object), as JSON Schema
    reads them: each side's patterns kept, and a pattern per side for the names it leaves to additionalProperties."""
    entries: dict[str, Any] = {}
    for side in (a, b):
        for key, schema in _pattern_props(side).items():
            entries[key] = norm.merge(entries[key], schema, f"{where}/patternProperties/{key}") \
                if key in entries else schema
    closing = False
    for side in (a, b):
        extra = side.get("additionalProperties", True)
        if extra is True or (isinstance(extra, dict) and ANNOTATIONS.issuperset(extra)):
            continue
        props = side.get("properties") if isinstance(side.get("properties"), dict) else {}
        rest = [negate(key_expr(k)) for k in _pattern_props(side)] + ([negate({"names": list(props)})] if props else [])
        key = key_text(all_of(rest))
        entries[key] = norm.merge(entries[key], extra, f"{where}/additionalProperties") if key in entries else extra
        closing = True
    required = list(dict.fromkeys([*a.get("required", []), *b.get("required", [])]))
    pa, pb = a.get("properties", {}), b.get("properties", {})
    props: dict[str, Any] = {}
    for name in dict.fromkeys([*pa, *pb]):
        props[name] = norm.merge(pa.get(name, True), pb.get(name, True), f"{where}/properties/{name}")
        if props[name] is False and name in required:
            return False
    out: dict[str, Any] = {}
    if props:
        out["properties"] = props
    if required:
        out["required"] = required
    out["patternProperties"] = entries
    if closing:  # every name a side leaves to additionalProperties has its own entry now
        out["additionalProperties"] = False
    elif "additionalProperties" in a or "additionalProperties" in b:
        out["additionalProperties"] = True  # an explicit true stays: strict mode closes an object that omits it
    return out


def undeclared_schema(n: dict, strict: bool) -> Any:
    """What an object gives a name it neither declares nor matches by pattern: ``additionalProperties``, or when
    absent, nothing under strict mode on an object that declares names (as xgrammar reads it) and any value else."""
    if "additionalProperties" in n:
        return n["additionalProperties"]
    return not (strict and any(k in n for k in ("properties", "required", "patternProperties")))


def admits(key: str, name: str) -> bool:
    """Whether a patternProperties key admits the name (a pattern tagjit cannot read is taken to admit it)."""
    try:
        return matches(key_expr(key), name)
    except PatternProblem:
        return True


def without_names(n: dict, names: list[str], strict: bool) -> dict:
    """Object node ``n`` (not yet normalised) with no member named in ``names``; the caller has checked that ``n``
    requires none of them. A closed object leaves them out of ``properties``; one open to undeclared names keeps its
    other names as they were through key languages: each pattern without ``names``, and a pattern for the names
    ``additionalProperties`` took, without ``names``."""
    props = dict(n.get("properties") or {})
    required = [k for k in n["required"] if isinstance(k, str)] if isinstance(n.get("required"), list) else []
    extra = undeclared_schema(n, strict)
    patterns = _pattern_props(n)
    for name in names:
        props.pop(name, None)
    if extra is False and not patterns:
        if "additionalProperties" not in n:  # strict mode lets in the names an object requires but does not declare
            for k in required:
                props.setdefault(k, {})
        return {**n, "properties": props, "additionalProperties": False}
    gone = negate({"names": list(names)})
    keyed = {key_text(all_of([key_expr(k), gone])): v for k, v in patterns.items()}
    if extra is not False:
        rest = key_text(all_of([negate({"names": [*props, *names]}), *(negate(key_expr(k)) for k in patterns)]))
        keyed[rest] = extra
    return {**n, "properties": props, "patternProperties": keyed, "additionalProperties": False}


def pattern_keys_problem(pattern_props: dict) -> str | None:
    """Why tagjit cannot write the keys of a normalised node's patternProperties, or None."""
    for key in pattern_props:
        if not is_key_text(key):  # normalize writes every key of an object's patternProperties
            return "patternProperties"
        problem = key_problem(key_expr(key))
        if problem is not None:
            return problem
    return None


def _pattern_props(n: dict) -> dict:
    p = n.get("patternProperties")
    return p if isinstance(p, dict) else {}


__all__ = ["wants_exact_keys", "exact_pattern_properties", "merge_pattern_objects", "undeclared_schema", "admits",
           "without_names", "pattern_keys_problem"]
