"""The nearest looser schema tagjit can enforce, for a schema it cannot enforce exactly: one named step at a time.

Each step removes the constraint tagjit named in its refusal, at the node it named, and nothing else: a ``oneOf``
whose branches overlap becomes ``anyOf``, ``uniqueItems`` or a ``not`` is dropped, ``allOf`` keeps its first branch,
and so on. Every step accepts a superset of what the schema accepted, so a relaxed constraint never rejects a
valid value; it may let through values the schema forbids, which is why every step is reported by its name.
Where the named node cannot be found, the node (or, last, the whole schema) keeps only its ``type``.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, TypeVar

from tagjit.errors import ConstraintError, EmptySchemaError, UnsupportedFeatureError
from tagjit.schema.dependencies import DEPENDENCY_KEYWORDS
from tagjit.schema.keywords import LISTS, MAPS, VALUES, step as pointer_step
from tagjit.schema.normalize import normalize_schema

T = TypeVar("T")

# Most steps one schema may take; a schema that needs more keeps only its type.
MAX_STEPS = 64


@dataclass(frozen=True)
class Relaxation:
    """One step: its name (what a server or request opts into), the node it loosened, the feature refused there."""

    name: str
    where: str
    feature: str

    def __str__(self) -> str:
        return f"{self.name} at {self.where} ({self.feature})"


# name -> (does a refused feature belong to it, the keywords it drops from the named node)
_FAMILIES: dict[str, tuple[Callable[[str], bool], tuple[str, ...]]] = {
    "oneOf": (lambda f: f.startswith(("oneOf", "anyOf together with oneOf")), ()),
    "not": (lambda f: f.startswith("not"), ("not",)),
    "multipleOf": (lambda f: f.startswith("multipleOf"), ("multipleOf",)),
    "uniqueItems": (lambda f: f == "uniqueItems", ("uniqueItems",)),
    "if": (lambda f: f in ("if", "then", "else"), ("if", "then", "else")),
    "dependencies": (lambda f: f.startswith(("dependentRequired", "dependentSchemas", "dependencies")),
                     ("dependentRequired", "dependentSchemas", "dependencies")),
    "contains": (lambda f: f in ("contains", "minContains", "maxContains"), ("contains", "minContains", "maxContains")),
    "unevaluatedItems": (lambda f: f == "unevaluatedItems", ("unevaluatedItems",)),
    "length": (lambda f: "minLength" in f or "maxLength" in f, ("minLength", "maxLength")),
    "format": (lambda f: f.startswith("format") or f == "pattern together with format" or " format " in f,
               ("format",)),
    "allOf": (lambda f: f.startswith(("allOf", "combining two different")), ()),
    "patternProperties": (lambda f: "patternProperties" in f, ("patternProperties",)),
    "propertyNames": (lambda f: f.startswith("propertyNames"), ("propertyNames",)),
    "$ref": (lambda f: f.startswith(("$ref", "$dynamicRef", "$recursiveRef")),
             ("$ref", "$dynamicRef", "$recursiveRef")),
}
# The last resort, a node (or the whole schema) reduced to its type.
ANY = "type-only"
NAMES = (*_FAMILIES, ANY)


def family(feature: str) -> str:
    """The name of the relaxation that loosens a refused feature (``type-only`` when no step is specific to it)."""
    for name, (belongs, _) in _FAMILIES.items():
        if belongs(feature):
            return name
    return ANY


def relax(schema: dict | bool, attempt: Callable[[Any], T], allowed: Callable[[str], bool] = lambda _: True,
          ) -> tuple[T, Any, tuple[Relaxation, ...]]:
    """``attempt`` of the schema, loosened step by step while it refuses a feature: (its result, the schema it
    took, the steps). A step whose name ``allowed`` rejects re-raises that refusal."""
    current: Any = schema
    steps: list[Relaxation] = []
    seen: set[tuple[str, str]] = set()
    for _ in range(MAX_STEPS):
        try:
            return attempt(current), current, tuple(steps)
        except UnsupportedFeatureError as e:
            repeated = (e.feature, e.where) in seen  # the step did not remove it: loosen the node to its type
            seen.add((e.feature, e.where))
            current, step = _loosen(current, e, generic=repeated)
            if not allowed(step.name):
                raise
            steps.append(step)
        except EmptySchemaError:
            raise
        except (ConstraintError, RuntimeError, ValueError) as e:  # the loosened schema confused a later stage
            if not steps or steps[-1].where == "#" and steps[-1].name == ANY:
                raise
            current, step = _type_only_root(current, f"{steps[-1].feature} (its relaxation failed: {e})")
            if not allowed(step.name):
                raise
            steps.append(step)
    current, step = _type_only_root(current, f"more than {MAX_STEPS} features tagjit cannot enforce")
    return attempt(current), current, (*steps, step)


def _loosen(schema: Any, err: UnsupportedFeatureError, generic: bool) -> tuple[Any, Relaxation]:
    """The schema with the node the refusal names loosened by its family's step (to its type if ``generic``), or
    the nearest node above it that the schema has."""
    where = err.where or _parameter_pointer(err.feature)
    root = copy.deepcopy(schema)
    if _locate(root, where)[0] is None:  # it may name a node of the normalised schema (a $ref inlined, allOf merged)
        try:
            normalized = normalize_schema(root)
            if _locate(normalized, where)[0] is not None:
                root = normalized
        except ConstraintError:
            pass
    chain, above = _schema_chain(where)
    name = above or (ANY if generic else family(err.feature))
    for at in reversed(chain):
        parent, key = _locate(root, at)
        if parent is None:
            continue
        node = parent[key] if key is not None else root
        if name == ANY and not generic and isinstance(node, dict) and not DEPENDENCY_KEYWORDS.isdisjoint(node):
            name = "dependencies"  # the anyOf normalize wrote for them may be the shape a later stage refused
        loosened = _step(node, name) if name != ANY else node
        if loosened == node:
            name, loosened = ANY, _type_only(node)
        if loosened != node:
            if key is None:
                return loosened, Relaxation(name, at, err.feature)
            parent[key] = loosened
            return root, Relaxation(name, at, err.feature)
        name = ANY  # as loose as a type already: the node above it keeps only its type
    return _type_only_root(root, err.feature)


def _schema_chain(where: str) -> tuple[list[str], str | None]:
    """The pointers of the schema nodes on the way to ``where``, root first, ending above any ``not``, ``if`` or
    ``oneOf`` on the way (loosening below those can tighten the whole: a looser oneOf branch takes values from the
    others), and the step such an end takes (``not``, ``if``, ``oneOf``, which makes it an anyOf)."""
    chain = ["#"]
    parts = where[2:].split("/") if where.startswith("#/") else []
    i = 0
    while i < len(parts):
        p = parts[i]
        if p in ("not", "if", "then", "else", "oneOf"):
            return chain, {"not": "not", "oneOf": "oneOf"}.get(p, "if")
        if (p in MAPS or p in LISTS or p == "items" and i + 1 < len(parts) and parts[i + 1].isdigit()) \
                and i + 1 < len(parts):
            chain.append(f"{chain[-1]}/{p}/{parts[i + 1]}")
            i += 2
        elif p in VALUES:
            chain.append(f"{chain[-1]}/{p}")
            i += 1
        else:
            break
    return chain, None


def _step(node: Any, name: str) -> Any:
    if not isinstance(node, dict):
        return node
    out = {k: v for k, v in node.items() if k not in _FAMILIES.get(name, (None, ()))[1]}
    if name == "oneOf":
        if "anyOf" in out and "oneOf" in out:  # anyOf and oneOf side by side: the anyOf alone is looser
            del out["oneOf"]
        elif "oneOf" in out:
            out = {("anyOf" if k == "oneOf" else k): v for k, v in out.items()}
    elif name == "allOf" and isinstance(out.get("allOf"), list) and len(out["allOf"]) > 1:
        out["allOf"] = out["allOf"][:1]
    elif name == "patternProperties":  # names the patterns let in must stay allowed (absent means none: strict mode)
        out["additionalProperties"] = True
        out.pop("unevaluatedProperties", None)
    return out


def _type_only(node: Any) -> Any:
    return {"type": node["type"]} if isinstance(node, dict) and "type" in node else {}


def _type_only_root(root: Any, feature: str) -> tuple[Any, Relaxation]:
    return _type_only(root), Relaxation(ANY, "#", feature)


_PARAMETER = re.compile(r"^parameter '([^'/~]+)': ")


def _parameter_pointer(feature: str) -> str:
    """The pointer of a tool parameter an XML-argument refusal names in its text ('' if none)."""
    m = _PARAMETER.match(feature)
    return f"#/properties/{m.group(1)}" if m else ""


def _locate(root: Any, where: str) -> tuple[Any, Any]:
    """(parent container, key) of the node at a '#/a/0' pointer (written as ``path_text`` writes it), (root, None)
    for '#', (None, None) if not there."""
    if where == "#":
        return root, None
    if not where.startswith("#/"):
        return None, None
    parent: Any = None
    key: Any = None
    node = root
    try:
        for part in where[2:].split("/"):
            parent, key, node = node, int(part) if isinstance(node, list) else part, pointer_step(node, part)
    except LookupError:
        return None, None
    return parent, key


def allowed_by(names: Iterable[str]) -> Callable[[str], bool]:
    """The ``allowed`` test of a list of relaxation names (``all`` allows every one)."""
    chosen = set(names)
    return (lambda _: True) if "all" in chosen else chosen.__contains__


__all__ = ["Relaxation", "NAMES", "ANY", "MAX_STEPS", "family", "relax", "allowed_by"]
