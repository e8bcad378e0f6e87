"""Normalisation: equivalent (or stricter, never looser) forms of a checked schema that xgrammar enforces exactly."""

from __future__ import annotations

import json
import logging
import re
from functools import cached_property
from typing import Any, Iterator

import jsonschema

from tagjit.build.numbers import multiples
from tagjit.build.patterns import (BASE64, EXCEPT, PatternProblem, bounds as length_bounds,
                                   format_lengths_problem, format_pattern, lengths_automaton, node_automaton,
                                   match_lengths, spelled_by_tagjit, string_set_empty)
from tagjit.errors import ConstraintError, EmptySchemaError, UnsupportedFeatureError
from tagjit.schema.dependencies import DEPENDENCY_KEYWORDS, expand_dependencies
from tagjit.schema.formats import apply_format
from tagjit.schema.metaschema import KNOWN_KEYWORDS
from tagjit.schema.pattern_properties import (exact_pattern_properties, merge_pattern_objects, undeclared_schema,
                                             wants_exact_keys)
from tagjit.schema.keywords import (ANNOTATIONS, KEYS, LISTS, MAPS, PASSIVE, TYPE_KEYWORDS, VALUES, path_text, resolve,
                                    subschemas)

log = logging.getLogger("tagjit")


def normalize_schema(schema: dict | bool, strict: bool = True) -> dict | bool:
    """Rewrite a checked schema so that every constraint in it is one xgrammar enforces (never loosened).

    xgrammar 0.2.8 silently drops several constraints; each is rewritten into a form it enforces:
    sibling keywords of ``allOf``/``anyOf``/``oneOf`` (merged into the branches), type-specific
    keywords on a node without ``type`` (the type is inferred from them), ``enum``/``const`` beside
    other keywords (values the other keywords reject are removed), ``required`` keys missing from
    ``properties`` (added with the ``additionalProperties`` schema), ``multipleOf: 1`` (an integer),
    draft-4 tuple ``items`` and boolean exclusive bounds, and unanchored ``pattern``s (xgrammar anchors
    every pattern). A ``oneOf`` whose branches may overlap is made exact (``one_of``) or refused: xgrammar would
    enforce anyOf. ``strict``: objects that declare names take no others unless they say so (xgrammar's strict mode,
    which the grammar is compiled with).
    """
    if isinstance(schema, bool):
        return schema
    return _Normalizer(schema, strict).node(schema, "#")


class _Normalizer:
    def __init__(self, root: dict, strict: bool = True) -> None:
        self.root = root
        self.strict = strict
        self._inlining: list[str] = []
        self._unrolls_of: dict[str, bool] = {}  # $ref -> whether inlining its target inlines it again below
        self._views: dict[str, Any] = {}  # $ref -> its normalised target, for oneOf differences
        self._viewing: list[str] = []
        self.forbidden: list[str] = []  # optional properties left out because they accept no value
        self._empty_refs: dict[str, bool] = {}  # $ref -> whether its target accepts no value

    # Built on first use: most schemas have no enum beside other keywords and no plain-name $ref.
    @cached_property
    def _validator(self) -> Any:
        cls = jsonschema.validators.validator_for(self.root, default=jsonschema.Draft202012Validator)
        return cls(self.root)

    @cached_property
    def _draft_7(self) -> bool:
        """Whether the root's draft has ``if``/``then``/``else`` (draft 7 on; before it they are annotations)."""
        return not re.search(r"json-schema\.org/draft-0[346]/schema", str(self.root.get("$schema", "")))

    @cached_property
    def _anchor_paths(self) -> dict[str, str]:
        return dict(_anchors(self.root, "#"))

    # -- one node ------------------------------------------------------------------------------
    def node(self, n: Any, where: str) -> Any:
        if not isinstance(n, dict):
            return n
        n = _draft4(dict(n))
        ref = n.get("$ref")
        if isinstance(ref, str) and ref.startswith("#") and ref != "#" and not ref.startswith("#/"):
            if ref not in self._anchor_paths:  # xgrammar would silently accept anything here
                raise ConstraintError(f"JSON schema at '{where}': $ref {ref!r} names no anchor in the schema")
            n["$ref"] = self._anchor_paths[ref]
        if "format" in n and not _byte_lengths(n):
            apply_format(n)
        _exact_format(n)
        condition = _conditional(n, self._draft_7) if not _CONDITIONAL.isdisjoint(n) else None
        if isinstance(n.get("allOf"), list) or condition is not None:
            branches = n.pop("allOf", [])
            merged: Any = n
            # The condition's refusals name the if (relax drops if/then/else there), its emptiness the allOf.
            for at, b in [*((f"{where}/allOf/{i}", b) for i, b in enumerate(branches)),
                          *([(f"{where}/if", self.node(condition, f"{where}/if"))] if condition is not None else [])]:
                merged = self.merge(merged, b, at)
            if merged is False:
                raise EmptySchemaError(f"JSON schema at '{where}' accepts no value (its allOf branches conflict)")
            n = dict(merged) if isinstance(merged, dict) else {}  # a lone branch is the caller's own dict
        if not DEPENDENCY_KEYWORDS.isdisjoint(n):  # after allOf (its branches may bring them), before anyOf/not
            n = expand_dependencies(n, where, self.strict, self.merge, self._inline)
        combinators = [k for k in ("anyOf", "oneOf") if isinstance(n.get(k), list)]
        if "not" in n and not combinators:  # beside anyOf/oneOf it is merged into each branch first
            if "$ref" in n:  # xgrammar reads no keyword beside a $ref, so the rewrite would be dropped
                raise UnsupportedFeatureError("not together with $ref", where)
            n = _negate(self._not_target(n, where), where)
            combinators = [k for k in ("anyOf",) if isinstance(n.get(k), list)]
        if len(combinators) == 2:
            raise UnsupportedFeatureError("anyOf together with oneOf", where)
        if combinators:
            n = self._distribute(n, combinators[0], where)
        held = exact_pattern_properties(self, n, where) if wants_exact_keys(n) else {}
        if not KEYS.isdisjoint(n):  # most nodes are leaves
            self._children(n, where)
        n.update(held)  # normalised already, in the exact form (schema.pattern_properties)
        if combinators and combinators[0] == "oneOf":
            n["oneOf"] = self._one_of(n["oneOf"], where)
        _infer_type(n, self.strict, root=where == "#")
        _open_sized(n)
        _multiple_of(n, where)
        _implied_lengths(n)
        _format_lengths(n, where)
        _pattern_format(n, where)
        _spelled_pattern(n)
        _anchor_pattern(n)
        _pattern_lengths(n, where)
        self._required_properties(n, where)
        return _structured_values(self._filter_enum(n, where))

    def _children(self, n: dict, where: str) -> None:
        for key in _DEFINITIONS:  # before the properties, whose $refs ask whether a definition accepts a value
            if isinstance(n.get(key), dict):
                n[key] = {name: self._definition(child, f"{where}/{key}/{name}") for name, child in n[key].items()}
        # The maps present now: patternProperties that _properties writes come normalised already.
        for key in [k for k in MAPS if k not in _DEFINITIONS and isinstance(n.get(k), dict)]:
            if key == "properties":
                n[key] = self._properties(n, where)
            else:
                n[key] = {name: self.node(child, f"{where}/{key}/{name}") for name, child in n[key].items()}
        for key in LISTS:
            if isinstance(n.get(key), list):
                n[key] = self._branches(n[key], key, where) if key in ("anyOf", "oneOf") else \
                    [self.node(child, f"{where}/{key}/{i}") for i, child in enumerate(n[key])]
        for key in VALUES:
            if isinstance(n.get(key), dict):
                n[key] = self.node(n[key], f"{where}/{key}")

    def _definition(self, n: Any, where: str) -> Any:
        """A normalised definition; one that accepts no value is false (only what refers to it fails or is left out)."""
        if where.startswith("#/"):
            self._empty_refs.setdefault(where, False)  # provisionally, as in accepts_nothing
        try:
            out = self.node(n, where)
            if self.accepts_nothing(out, where):
                out = False
        except EmptySchemaError:
            out = False
        if where.startswith("#/"):
            self._empty_refs[where] = out is False
        return out

    def accepts_nothing(self, n: Any, where: str) -> bool:
        """Whether a normalised node is a plain ``$ref`` (annotations aside) whose target accepts no value."""
        chain: list[str] = []
        while isinstance(n, dict) and isinstance(n.get("$ref"), str) and ANNOTATIONS.issuperset(set(n) - {"$ref"}):
            ref = self._anchor_paths.get(n["$ref"], n["$ref"])
            if ref in self._empty_refs:
                return self._empty_refs[ref]
            if ref in chain:  # references all the way round: no value
                break
            chain.append(ref)
            try:
                n = self._resolve(ref, where)
            except ConstraintError:
                return False  # reported where the $ref itself is checked
        else:
            if not chain:
                return n is False
            # Provisionally productive while it is normalised: a target that reaches itself again is judged by
            # check's $ref-cycle test, and this keeps the walk from recursing.
            self._empty_refs.update(dict.fromkeys(chain, False))
            try:
                empty = n is False or (isinstance(n, dict) and self.node(n, chain[-1]) is False)
            except EmptySchemaError:
                empty = True
            except ConstraintError:
                empty = False
            self._empty_refs.update(dict.fromkeys(chain, empty))
            return empty
        self._empty_refs.update(dict.fromkeys(chain, True))
        return True

    def _branches(self, branches: list, key: str, where: str) -> list:
        """Normalised anyOf/oneOf branches; one that accepts no value is left out (it matches nothing, so this is
        exact for oneOf too), and if all do, so does the node."""
        out, first = [], None
        for i, child in enumerate(branches):
            try:
                out.append(self.node(child, f"{where}/{key}/{i}"))
            except EmptySchemaError as e:
                first = first or e
        if first is not None and not out:
            raise EmptySchemaError(f"JSON schema at '{where}' accepts no value: no {key} branch accepts one ({first})")
        return out

    def _properties(self, n: dict, where: str) -> dict:
        """The normalised properties; an optional one that accepts no value is left out, so that it is forbidden
        (exact: no valid object has it). On an object open to undeclared names the names go to the exact key form
        (``pattern_properties``), whose language of undeclared names leaves the forbidden one out."""
        out, required, dropped = {}, n.get("required") if isinstance(n.get("required"), list) else (), False
        for name, child in n["properties"].items():
            at = f"{where}/properties/{name}"
            try:
                out[name] = self.member(child, at)
            except EmptySchemaError as e:
                if name in required:
                    raise EmptySchemaError(f"{e}; it is required at '{where}', so no object satisfies it") from None
                if undeclared_schema(n, self.strict) is not False:
                    # Rare: the properties before this one are normalised once more there.
                    held = exact_pattern_properties(self, {**n, "patternProperties": {}}, where)
                    n.update({k: v for k, v in held.items() if k != "properties"})
                    return held.get("properties", {})
                log.warning("tagjit: %s; the property is optional, so it is forbidden", e)
                self.forbidden.append(at)
                dropped = True
        if dropped and "additionalProperties" not in n:
            for k in required:  # required names it let in as extra keys stay allowed
                if isinstance(k, str) and k not in n["properties"]:
                    out.setdefault(k, {})
            n["additionalProperties"] = False  # a left-out name must not come back as an extra key
        return out

    def member(self, schema: Any, at: str) -> Any:
        """A member's schema, normalised; EmptySchemaError if it accepts no value (false, or a $ref to such a one)."""
        if schema is False:
            raise EmptySchemaError(f"JSON schema at '{at}' is false: it accepts no value")
        value = self.node(schema, at)
        if self.accepts_nothing(value, at):
            raise EmptySchemaError(f"JSON schema at '{at}' accepts no value: its $ref {value['$ref']!r} accepts none")
        return value

    def _distribute(self, n: dict, comb: str, where: str) -> dict:
        siblings = {k: v for k, v in n.items() if k not in PASSIVE and k != comb}
        if not siblings:
            return n
        branches = []
        for i, b in enumerate(n[comb]):
            merged = self.merge(siblings, b, f"{where}/{comb}/{i}")
            if merged is not False:
                branches.append(merged)
        if not branches:
            raise EmptySchemaError(f"JSON schema at '{where}' accepts no value (no {comb} branch fits its siblings)")
        out = {k: v for k, v in n.items() if k not in siblings}
        out[comb] = branches
        return out

    def _required_properties(self, n: dict, where: str) -> None:
        required = n.get("required")
        if not isinstance(required, list) or "patternProperties" in n or not _allows(n, "object"):
            return
        props = n.get("properties")
        props = dict(props) if isinstance(props, dict) else {}
        extra = n.get("additionalProperties", True)
        missing = [k for k in required if isinstance(k, str) and k not in props]
        if not missing:
            return
        if extra is False:
            raise EmptySchemaError(f"JSON schema at '{where}' requires {missing[0]!r}, which additionalProperties: "
                                   "false forbids: no object satisfies it")
        for k in missing:
            props[k] = extra if isinstance(extra, dict) else {}
        n["properties"] = props

    def _filter_enum(self, n: dict, where: str) -> dict:
        key = "const" if "const" in n else "enum" if isinstance(n.get("enum"), list) else None
        if key is None:
            return n
        rest = {k: v for k, v in n.items() if k not in PASSIVE and k not in ("enum", "const")}
        if not rest:
            return n
        values = [n["const"]] if key == "const" else n["enum"]
        check = self._validator.evolve(schema=rest)
        kept = [v for v in values if check.is_valid(v)]
        if not kept:
            raise EmptySchemaError(f"JSON schema at '{where}' accepts no value: no {key} value satisfies its "
                                  f"other keywords ({', '.join(rest)})")
        out = {k: v for k, v in n.items() if k in PASSIVE}
        if key == "const":
            out["const"] = kept[0]
        else:
            out["enum"] = kept
        return out

    def _one_of(self, branches: list, where: str) -> list:
        """oneOf branches rewritten so that no two overlap (their anyOf is the oneOf), or UnsupportedFeatureError."""
        from tagjit.schema.one_of import disjoint, exact_one_of, written_families

        try:
            resolved = [self.resolve_view(b, where) for b in branches]
        except UnsupportedFeatureError:  # a branch reaches this oneOf again: its types are still known as written
            fams = [written_families(b, lambda ref: self._resolve(ref, where)) for b in branches]
            if all(not (fams[i] & fams[j]) for i in range(len(fams)) for j in range(i + 1, len(fams))):
                return branches
            raise
        overlaps = {(i, j) for i in range(len(branches)) for j in range(i + 1, len(branches))
                    if not disjoint(self, resolved[i], resolved[j])}
        if not overlaps:
            return branches
        try:
            pieces = [self.node(piece, where) for piece in exact_one_of(self, branches, overlaps, where)]
            if not pieces:
                raise EmptySchemaError(f"JSON schema at '{where}' accepts no value: each value one of its oneOf "
                                       "branches accepts, another accepts too")
            return pieces
        except UnsupportedFeatureError:
            key = _discriminator([self._view(b) for b in branches])
            if key is None:
                raise
        # Requiring the discriminator makes the branches disjoint: stricter than oneOf, never looser.
        out = []
        for i, b in enumerate(branches):
            merged = self.merge(b, {"required": [key]}, f"{where}/oneOf/{i}")
            out.append(self.node(merged, f"{where}/oneOf/{i}") if merged is not False else False)
        return [b for b in out if b is not False]

    def resolve_view(self, b: Any, where: str) -> Any:
        """A normalised branch with its $ref chain followed (the target normalised), for oneOf differences."""
        chain: list[str] = []
        while isinstance(b, dict) and isinstance(b.get("$ref"), str):
            ref = self._anchor_paths.get(b["$ref"], b["$ref"])
            if ref in self._views:
                return self._views[ref]
            if ref in chain or ref in self._viewing or len(chain) > 16:
                raise UnsupportedFeatureError("oneOf whose branches reach each other through $ref", where)
            chain.append(ref)
            b = self._resolve(ref, where)
        if not chain:
            return b
        self._viewing += chain
        try:
            view = self.node(b, chain[-1]) if isinstance(b, dict) else b
        finally:
            del self._viewing[-len(chain):]
        for ref in chain:
            self._views[ref] = view
        return view

    def accepts(self, schema: Any, value: Any) -> bool | None:
        """Whether a (normalised) schema accepts a JSON value, by the root's draft; None if that cannot be told."""
        try:
            return bool(self._validator.evolve(schema=schema).is_valid(value))
        except Exception:  # noqa: BLE001 - a schema jsonschema cannot apply: no verdict
            return None

    def _view(self, b: Any) -> Any:
        """A branch with its $ref chain followed and its type inferred, for disjointness checks."""
        for _ in range(16):
            if not (isinstance(b, dict) and isinstance(b.get("$ref"), str)):
                break
            b = self._resolve(b["$ref"], "#")
        if isinstance(b, dict):
            b = dict(b)
            _infer_type(b, self.strict)
        return b

    # -- combining two schemas (allOf semantics) -------------------------------------------------
    def merge(self, a: Any, b: Any, where: str) -> Any:
        """A schema accepting exactly what both a and b accept (False: nothing); refuses what it cannot say."""
        if a is False or b is False:
            return False
        if a is True or (isinstance(a, dict) and ANNOTATIONS.issuperset(a)):
            return b
        if b is True or (isinstance(b, dict) and ANNOTATIONS.issuperset(b)):  # allOf: [{$ref}, {title}] keeps the $ref
            return a
        if not isinstance(a, dict) or not isinstance(b, dict):
            raise ConstraintError(f"invalid JSON schema at '{where}': a schema must be an object or a boolean")
        a, b = self._inline(a, where), self._inline(b, where)
        if a is False or b is False:
            return False
        if "allOf" in a or "allOf" in b or not _CONDITIONAL.isdisjoint(a) or not _CONDITIONAL.isdisjoint(b):
            a, b = self.node(a, where), self.node(b, where)  # an if becomes an anyOf, merged below
        if isinstance(a.get("anyOf"), list) and isinstance(b.get("anyOf"), list):
            return self._merge_any_ofs(a, b, where)
        for x, y in ((a, b), (b, a)):
            comb = next((k for k in ("anyOf", "oneOf") if k in x), None)
            rest_first = x is b  # a's properties come first, whichever side holds the branches
            if comb is not None:
                if any(k in y for k in ("anyOf", "oneOf")):
                    raise UnsupportedFeatureError(f"{comb} combined with another anyOf/oneOf", where)
                # Definitions stay at the top, where the schema's $refs point.
                defs = {k: v for k, v in (*x.items(), *y.items()) if k in ("$defs", "definitions")}
                base = {k: v for k, v in x.items() if k != comb and k not in defs}
                rest = {k: v for k, v in y.items() if k not in defs}
                branches = [self.merge(base, br, f"{where}/{comb}/{i}") for i, br in enumerate(x[comb])]
                branches = [self.merge(rest, br, where) if rest_first else self.merge(br, rest, where)
                            for br in branches if br is not False]
                branches = [br for br in branches if br is not False]
                return {**defs, comb: branches} if branches else False
        out = dict(a)
        if _has_object_shape(a) or _has_object_shape(b):
            obj = self._merge_object(a, b, where)
            if obj is False:
                return False
            for k in _OBJECT_SHAPE:
                out.pop(k, None)
            out.update(obj)
        for k, vb in b.items():
            if k in _OBJECT_SHAPE:
                continue
            if k not in out:
                out[k] = vb
                continue
            va = out[k]
            if va == vb or k in PASSIVE:
                continue
            merged = self._merge_keyword(k, va, vb, where)
            if merged is False and k in ("type", "enum", "const"):
                return False
            out[k] = merged
        return out

    def _merge_keyword(self, k: str, va: Any, vb: Any, where: str) -> Any:
        if k == "type":
            ta, tb = _type_list(va), _type_list(vb)
            both = [t for t in ta if t in tb or (t == "integer" and "number" in tb)]
            both += [t for t in tb if t == "integer" and "number" in ta and t not in both]
            return (both[0] if len(both) == 1 else both) if both else False
        if k == "required":
            return list(dict.fromkeys([*va, *vb]))
        if k == "enum":
            keys = {json.dumps(v, sort_keys=True) for v in vb}
            both = [v for v in va if json.dumps(v, sort_keys=True) in keys]
            return both or False
        if k == "const":
            return False
        if k == "not" and _enum_only(va) and _enum_only(vb):  # not A and not B = not (A or B)
            return {"enum": [*va["enum"], *(v for v in vb["enum"] if not any(_json_equal(v, x) for x in va["enum"]))]}
        if k in ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties") \
                and _number(va) and _number(vb):
            return max(va, vb)
        if k in ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties") \
                and _number(va) and _number(vb):
            return min(va, vb)
        if k in ("items", "additionalItems", "propertyNames"):
            return self.merge(va, vb, f"{where}/{k}")
        if k not in KNOWN_KEYWORDS and not k.startswith("x-tagjit"):  # an annotation: either value will do
            return va
        raise UnsupportedFeatureError(f"combining two different {k!r} values (allOf, or anyOf/oneOf siblings)", where)

    def _merge_any_ofs(self, a: dict, b: dict, where: str) -> Any:
        """``allOf: [a, b]`` where both have an anyOf: one branch per pair of branches (exact: both must hold), the
        pairs that accept nothing left out, a's members first."""
        if "oneOf" in a or "oneOf" in b:
            raise UnsupportedFeatureError("anyOf combined with another anyOf/oneOf", where)
        if len(a["anyOf"]) * len(b["anyOf"]) > MAX_ANY_OF_PRODUCT:
            raise UnsupportedFeatureError(f"anyOf combined with another anyOf (more than {MAX_ANY_OF_PRODUCT} "
                                          "branches together)", where)
        defs = {k: v for k, v in (*a.items(), *b.items()) if k in _DEFINITIONS}
        sides = []
        for n in (a, b):
            base = {k: v for k, v in n.items() if k != "anyOf" and k not in defs}
            sides.append([m for i, br in enumerate(n["anyOf"])
                          if (m := self.merge(base, br, f"{where}/anyOf/{i}")) is not False])
        branches = [m for left in sides[0] for right in sides[1] if (m := self.merge(left, right, where)) is not False]
        return {**defs, "anyOf": branches} if branches else False

    def _merge_object(self, a: dict, b: dict, where: str) -> Any:
        if "patternProperties" in a or "patternProperties" in b:
            return merge_pattern_objects(self, a, b, where)
        pa, pb = a.get("properties", {}), b.get("properties", {})
        ea, eb = a.get("additionalProperties", True), b.get("additionalProperties", True)
        extra = self.merge(ea, eb, f"{where}/additionalProperties")
        required = list(dict.fromkeys([*a.get("required", []), *b.get("required", [])]))
        props: dict = {}
        for name in dict.fromkeys([*pa, *pb]):
            merged = self.merge(pa.get(name, ea), pb.get(name, eb), f"{where}/properties/{name}")
            if merged is False:
                if name in required:
                    return False
                if extra is not False and ("additionalProperties" in a or "additionalProperties" in b):
                    raise UnsupportedFeatureError(f"property {name!r} forbidden by one allOf/anyOf part only", where)
                if extra is not False:  # normalising the merged node forbids it (as it does an optional false)
                    props[name] = False
                continue
            props[name] = merged
        out: dict = {}
        if props:
            out["properties"] = props
        if required:
            out["required"] = required
        if extra is not True or "additionalProperties" in a or "additionalProperties" in b:
            out["additionalProperties"] = extra  # an explicit true stays: strict mode closes an object that omits it
        return out

    def _inline(self, n: dict, where: str) -> Any:
        """Replace a local $ref that has sibling keywords by its (non-recursive) target."""
        ref = n.get("$ref")
        if not isinstance(ref, str):
            return n
        if ref in self._inlining or self._unrolls(ref, where):
            raise UnsupportedFeatureError("$ref to a recursive definition combined with other keywords", where)
        target = self._resolve(ref, where)
        rest = {k: v for k, v in n.items() if k != "$ref"}
        self._inlining.append(ref)
        try:  # refs inside the target stay refs: the root keeps its definitions
            return self.merge(target, rest, where) if rest else target
        finally:
            self._inlining.pop()

    def _unrolls(self, ref: str, where: str) -> bool:
        """Whether the target of ref, once inlined, merges ref again (through allOfs that inline $refs, transitively):
        each normalised copy would hold another, without end."""
        hit = self._unrolls_of.get(ref)
        if hit is None:
            seen: set[str] = set()
            todo = [ref]
            hit = False
            while todo and not hit:
                r = todo.pop()
                if r in seen:
                    continue
                seen.add(r)
                try:
                    target = self._resolve(r, where)
                except ConstraintError:  # refused where it is inlined, if it ever is
                    continue
                for node, _ in subschemas(target):
                    merged = _inlined_refs(node)
                    hit = hit or ref in merged
                    todo.extend(merged)
            self._unrolls_of[ref] = hit
        return hit

    def _not_target(self, n: dict, where: str) -> dict:
        """The node with ``not: {$ref}`` replaced by the target, where the target holds no $ref (negating a
        definition that reaches itself would unroll without end)."""
        neg = n.get("not")
        if not (isinstance(neg, dict) and isinstance(neg.get("$ref"), str) and ANNOTATIONS.issuperset(
                k for k in neg if k != "$ref")):
            return n
        target = self._resolve(neg["$ref"], f"{where}/not")
        if any("$ref" in sub for sub, _ in subschemas(target)):
            return n
        return {**n, "not": target}

    def _resolve(self, ref: str, where: str) -> Any:
        ref = self._anchor_paths.get(ref, ref)
        if not ref.startswith("#"):
            raise UnsupportedFeatureError(f"$ref to an external document ({ref})", where)
        try:
            return resolve(self.root, ref)
        except LookupError:
            raise ConstraintError(f"JSON schema at '{where}': $ref {ref!r} does not resolve") from None


_DEFINITIONS = ("$defs", "definitions")


def _inlined_refs(node: dict) -> list[str]:
    """The $refs an allOf at this node inlines: all of its $ref parts, where two or more parts (the node's own
    keywords, the branches) say more than annotations (a lone {$ref} beside a description stays a $ref)."""
    branches = node.get("allOf")
    if not isinstance(branches, list):
        return []
    base = {k: v for k, v in node.items() if k not in ("allOf", *_DEFINITIONS)}
    said = [p for p in (base, *branches) if p is False or (isinstance(p, dict) and not ANNOTATIONS.issuperset(p))]
    if len(said) < 2:
        return []
    return [p["$ref"] for p in said if isinstance(p, dict) and isinstance(p.get("$ref"), str)]


# Most branches two anyOfs merged under allOf may make (one per pair): past it the grammar grows faster than it helps.
MAX_ANY_OF_PRODUCT = 64
_OBJECT_SHAPE = ("properties", "additionalProperties", "required", "patternProperties")


def _enum_only(n: Any) -> bool:
    return isinstance(n, dict) and set(n) == {"enum"} and isinstance(n["enum"], list)


def _has_object_shape(n: dict) -> bool:
    return any(k in n for k in _OBJECT_SHAPE)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _type_list(t: Any) -> list[str]:
    return [t] if isinstance(t, str) else [x for x in t if isinstance(x, str)] if isinstance(t, list) else []


def _allows(n: dict, type_name: str) -> bool:
    types = _type_list(n.get("type"))
    return not types or type_name in types


def _draft4(n: dict) -> dict:
    """Draft-4 forms xgrammar does not read: tuple ``items`` and boolean exclusive bounds."""
    if isinstance(n.get("items"), list):
        n["prefixItems"] = n.pop("items")
        if "additionalItems" in n:
            n["items"] = n.pop("additionalItems")
    for exclusive, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        flag = n.get(exclusive)
        if isinstance(flag, bool):
            del n[exclusive]
            if flag and bound in n:
                n[exclusive] = n.pop(bound)
    return n


def _infer_type(n: dict, strict: bool, root: bool = False) -> None:
    if "type" in n or any(k in n for k in ("enum", "const", "$ref", "anyOf", "oneOf", "allOf", "not")):
        return
    said = [k for kws in TYPE_KEYWORDS.values() for k in kws if k in n]
    # The root keeps its type: a response_format that says {"properties": {}} asks for an object, as tools' do.
    if said and not root and all(_vacuous(k, n[k], strict) for k in said):
        for k in said:  # they hold for every value of their type: the node says nothing of any type
            del n[k]
        return
    types = [t for t, kws in TYPE_KEYWORDS.items() if any(k in n for k in kws)]
    if types:  # only those types: stricter than JSON Schema (other types pass), never looser
        n["type"] = types[0] if len(types) == 1 else types


def _vacuous(keyword: str, value: Any, strict: bool) -> bool:
    """Whether a type keyword holds for every value of its type (``required: []``; ``properties: {}`` unless strict
    mode closes objects that say it)."""
    if keyword in ("properties", "patternProperties"):
        return value == {} and not strict
    if keyword in ("additionalProperties", "unevaluatedProperties", "items", "additionalItems"):
        return value is True or value == {}
    return (keyword == "required" and value == []
            or keyword in ("minLength", "minItems", "minProperties") and _number(value) and value == 0
            or keyword == "uniqueItems" and value is False)


def _open_sized(n: dict) -> None:
    """Say ``items``/``additionalProperties`` where a size bound stands alone: xgrammar's strict mode reads their
    absence beside minItems/maxItems (minProperties/maxProperties) as false, so ``maxItems: 2`` took only ``[]`` and
    ``minItems: 1`` failed to compile, while a bare array or object takes any items or names."""
    if ("minItems" in n or "maxItems" in n) and "items" not in n and "prefixItems" not in n:
        n["items"] = {}
    if ("minProperties" in n or "maxProperties" in n) and not any(
            k in n for k in ("properties", "patternProperties", "additionalProperties", "required")):
        n["additionalProperties"] = True


def _multiple_of(n: dict, where: str) -> None:
    """Drop a multipleOf that constrains nothing (no number allowed, or every integer a multiple) and refuse an empty
    range; tagjit writes the rest as a digit automaton (build.numbers)."""
    m = n.get("multipleOf")
    if not _number(m) or m <= 0:
        return
    types = _type_list(n.get("type"))
    if types and "integer" not in types and "number" not in types:
        del n["multipleOf"]
        return
    if m == 1 and "number" in types:  # 2.0 is also a multiple of 1; integers are the stricter form
        n["type"] = [("integer" if t == "number" else t) for t in types if t != "integer" or "number" not in types]
        if len(n["type"]) == 1:
            n["type"] = n["type"][0]
        types = _type_list(n["type"])
    found = multiples(n, bool(types) and "number" not in types)
    if found.c == 1 and found.d == 0:
        del n["multipleOf"]
    elif found.empty() and types in (["integer"], ["number"]):
        raise EmptySchemaError(f"JSON schema at '{where}' accepts no value: no multiple of {m} lies within its bounds")


_ALL_TYPES = ["null", "boolean", "object", "array", "number", "string"]


def _negate(n: dict, where: str) -> dict:
    """A node's ``not`` rewritten as keywords tagjit enforces: the types or values it excludes, or the required names
    of which one must be absent; ``not: {enum}`` of strings stays for tagjit's own string rule. Refuses other shapes."""
    neg = n.pop("not")
    core = {k: v for k, v in neg.items() if k not in ANNOTATIONS} if isinstance(neg, dict) else neg
    if core is False:
        return n
    if core is True or core == {}:
        raise EmptySchemaError(f"JSON schema at '{where}' accepts no value: its 'not' schema accepts every value")
    if not isinstance(core, dict):
        raise ConstraintError(f"invalid JSON schema at '{where}/not': a schema must be an object or a boolean")
    keys = set(core)
    if keys == {"type"}:
        return _without_types(n, set(_type_list(core["type"])), where)
    if keys & {"enum", "const"} and keys <= {"enum", "const", "type"} and isinstance(core.get("enum", []), list):
        values = [core["const"]] if "const" in core else list(core["enum"])
        if "const" in core and "enum" in core:
            values = [v for v in values if any(_json_equal(v, e) for e in core["enum"])]
        if "type" in core:  # not (T and v): values of other types pass
            inner = set(_type_list(core["type"]))
            values = [v for v in values if _json_type(v) in inner or (_json_type(v) == "integer" and "number" in inner)]
        return _without_values(n, values, where)
    if keys == {"pattern"} and isinstance(core["pattern"], str):  # non-strings match a pattern: strings outside it
        types = _type_list(n.get("type"))
        if types and "string" not in types:
            raise EmptySchemaError(f"JSON schema at '{where}' accepts no value: its 'not' holds every non-string")
        out = {**n, "type": "string", EXCEPT: [*n.get(EXCEPT, []), {"pattern": core["pattern"]}]}
        try:
            empty = string_set_empty(out)
        except PatternProblem as e:
            raise UnsupportedFeatureError(f"not: {{pattern}} ({str(e).removeprefix('pattern ')})", where) from None
        if empty:
            raise EmptySchemaError(f"JSON schema at '{where}' accepts no value: every string matches its 'not' pattern")
        return out
    if keys == {"anyOf"} and isinstance(core["anyOf"], list):  # not (A or B) = not A and not B
        for i, branch in enumerate(core["anyOf"]):
            if "anyOf" in n:
                raise UnsupportedFeatureError("not: {anyOf} whose branches split the schema", where)
            n = _negate({**n, "not": branch}, f"{where}/not/anyOf/{i}")
        return n
    if keys <= {"required", "type"} and isinstance(core.get("required"), list) and core.get("type", "object") == "object":
        return _without_all_of(n, [k for k in core["required"] if isinstance(k, str)], "type" in core, where)
    if "properties" in keys and keys <= {"properties", "required", "type"} and isinstance(core["properties"], dict) \
            and isinstance(core.get("required", []), list) and core.get("type", "object") == "object":
        branches = _unless_properties(core)
        if not branches:
            raise EmptySchemaError(f"JSON schema at '{where}' accepts no value: its 'not' schema accepts every value")
        return {**n, "anyOf": branches}
    raise UnsupportedFeatureError("not: {" + ", ".join(core) + "}", where)


_CONDITIONAL = frozenset({"if", "then", "else"})


def _conditional(n: dict, draft_7: bool) -> Any:
    """``if``/``then``/``else`` taken out of a node, as the allOf part ``anyOf: [{allOf: [if, then]}, {allOf: [{not: if},
    else]}]`` (None: no constraint): its branches are disjoint, so the anyOf is exact (``not`` refuses the conditions
    it cannot negate). ``then`` or ``else`` without ``if``, and all three before draft 7, constrain nothing."""
    cond = n.pop("if", None)
    then, otherwise = n.pop("then", True), n.pop("else", True)
    if cond is None or (then is True and otherwise is True) or not draft_7:
        return None
    if cond is True or cond is False:
        return then if cond is True else otherwise
    return {"anyOf": [{"allOf": [cond, then]}, {"allOf": [{"not": cond}, otherwise]}]}


def _unless_properties(core: dict) -> list[dict]:
    """``not: {properties, required}`` as anyOf branches: an object that lacks a required name, or has a member whose
    value its schema rejects; with ``type: object`` in the ``not``, any other value too (``properties`` and ``required``
    hold for every non-object)."""
    branches: list[dict] = [{"type": "object", "not": {"required": [name]}}
                            for name in dict.fromkeys(core.get("required", [])) if isinstance(name, str)]
    branches += [{"type": "object", "required": [name], "properties": {name: {"not": schema}}}
                 for name, schema in core["properties"].items() if schema is not True]
    if "type" in core:
        branches.append({"type": [t for t in _ALL_TYPES if t != "object"]})
    return branches


def _types_of(n: dict) -> list[str]:
    types = _type_list(n.get("type"))
    return list(types) if types else list(_ALL_TYPES)


def _set_types(n: dict, types: list[str], where: str) -> dict:
    if not types:
        raise EmptySchemaError(f"JSON schema at '{where}' accepts no value: its 'not' excludes every type it allows")
    n["type"] = types[0] if len(types) == 1 else types
    return n


def _without_types(n: dict, excluded: set[str], where: str) -> dict:
    types = _types_of(n)
    if "number" in excluded:
        excluded.add("integer")
    elif "integer" in excluded and "number" in types:
        raise UnsupportedFeatureError("not: {type: integer} where numbers are allowed (non-integers only)", where)
    return _set_types(n, [t for t in types if t not in excluded], where)


def _without_values(n: dict, values: list, where: str) -> dict:
    """The node without the given JSON values."""
    if "const" in n or isinstance(n.get("enum"), list):
        mine = [n.pop("const")] if "const" in n else n.pop("enum")
        n["enum"] = [v for v in mine if not any(_json_equal(v, x) for x in values)]
        if not n["enum"]:
            raise EmptySchemaError(f"JSON schema at '{where}' accepts no value: its 'not' excludes every enum value")
        return n
    types = _types_of(n)
    kinds = {_json_type(v) for v in values}
    if "null" in kinds:
        types = [t for t in types if t != "null"]
    if "boolean" in kinds:
        if {True, False} <= {v for v in values if isinstance(v, bool)}:
            types = [t for t in types if t != "boolean"]
        elif "boolean" in types:
            raise UnsupportedFeatureError("not: {enum} with one boolean where booleans are allowed", where)
    for kind, allowed in (("integer", ("integer", "number")), ("number", ("number",)), ("object", ("object",)),
                          ("array", ("array",))):
        if kind in kinds and set(types) & set(allowed):
            what = "number" if kind == "integer" else kind
            raise UnsupportedFeatureError(f"not: {{enum}} with a value of type {what} where {what}s are allowed", where)
    strings = list(dict.fromkeys(v for v in values if isinstance(v, str)))
    n = _set_types(n, types, where)
    if strings and "string" in types:
        if types == ["string"] and any(k in n for k in ("minLength", "maxLength", "pattern", "format", EXCEPT)):
            n[EXCEPT] = [*n.get(EXCEPT, []), {"enum": strings}]  # one automaton holds the lengths, pattern and values
        else:
            n["not"] = {"enum": strings}
    return n


def _without_all_of(n: dict, names: list[str], typed: bool, where: str) -> dict:
    """``not: {required: names}``: objects lack at least one of the names; other values pass only if ``typed``
    (``not: {type: object, required: ...}``), since ``required`` holds for every non-object."""
    types = _types_of(n)
    others = [t for t in types if t != "object"] if typed else []
    branches: list[dict] = []
    if "object" in types:
        required = n.get("required") if isinstance(n.get("required"), list) else []
        for name in dict.fromkeys(names):
            if name not in required:
                branches.append(_forbid(n, name, where))
    if others:
        branches.append(_set_types({k: v for k, v in n.items() if k not in ("properties", "required",
                                    "additionalProperties", "patternProperties", "propertyNames")}, others, where))
    if not branches:
        raise EmptySchemaError(f"JSON schema at '{where}' accepts no value: its 'not' requires a name absent that it "
                               "requires present")
    if len(branches) == 1:
        return branches[0]
    keep = {k: v for k, v in n.items() if k in PASSIVE}
    return {**keep, "anyOf": [{k: v for k, v in b.items() if k not in PASSIVE} for b in branches]}


def _forbid(n: dict, name: str, where: str) -> dict:
    """The object part of a node, with property ``name`` forbidden."""
    if isinstance(n.get("patternProperties"), dict) and "propertyNames" not in n:  # declared false: no key language
        return {**n, "type": "object", "properties": {**(n.get("properties") or {}), name: False}}  # holds it
    if "patternProperties" in n or "propertyNames" in n or n.get("additionalProperties", False) is not False:
        raise UnsupportedFeatureError("not: {required} where other keywords admit the name (additionalProperties, "
                                      "patternProperties or propertyNames)", where)
    out = dict(n)
    out["type"] = "object"
    props = dict(out.get("properties") or {})
    if "additionalProperties" not in n:  # required names it would have let in as extra keys stay allowed
        for k in out.get("required") or ():
            props.setdefault(k, {})
    props.pop(name, None)
    out["properties"] = props
    out["additionalProperties"] = False  # a left-out name must not come back as an extra key
    return out


def _json_equal(a: Any, b: Any) -> bool:
    """JSON Schema equality: 1 equals 1.0, true equals no number, objects compare by keys."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    if _number(a) and _number(b):
        return a == b
    return type(a) is type(b) and a == b


def _anchor_pattern(n: dict) -> None:
    """xgrammar matches a pattern against the whole string; JSON Schema searches for it anywhere."""
    p = n.get("pattern")
    if not isinstance(p, str) or "minLength" in n or "maxLength" in n or EXCEPT in n:  # build.patterns searches it
        return
    alternatives = _alternatives(p)
    if len(alternatives) > 1:  # "^a|b$": each alternative has its own anchors
        n["pattern"] = "^(?:" + "|".join(_searched(a) for a in alternatives) + ")$"
        return
    if p.startswith("^") and p.endswith("$") and not p.endswith("\\$"):
        return
    # [\s\S], not ".": a searched pattern may sit after a newline (tagjit's pattern-with-length rule reads escapes;
    # xgrammar's own pattern rule takes no escape, so for it the two are the same).
    head = "" if p.startswith("^") else "[\\s\\S]*"
    tail = "" if p.endswith("$") and not p.endswith("\\$") else "[\\s\\S]*"
    n["pattern"] = f"^{head}(?:{p}){tail}$"  # anchored again, so normalising twice changes nothing


def _implied_lengths(n: dict) -> None:
    """Drop a minLength/maxLength the pattern already implies (``^[0-9a-f]{24}$`` with maxLength 24): the pattern alone
    is a smaller automaton than the pattern times a character counter, which can be too large to build (then the
    pattern is left to xgrammar's rule)."""
    p = n.get("pattern")
    if not isinstance(p, str) or "format" in n or EXCEPT in n or not _lengths(n) \
            or any(k in n for k in _BESIDE_OWN_STRING):  # check refuses those by name, as before
        return
    try:
        lo, hi = length_bounds(n)
    except (TypeError, ValueError):
        return
    anchored = all(a.startswith("^") and a.endswith("$") and not a.endswith("\\$") for a in _alternatives(p))
    span = match_lengths(p, anchored)
    if span is None:
        return
    if "minLength" in n and lo <= span[0]:
        del n["minLength"]
    if "maxLength" in n and hi is not None and span[1] is not None and hi >= span[1]:
        del n["maxLength"]
    if not _lengths(n):  # still tagjit's automaton where it can be built: xgrammar's rule takes no "\\u0039" for 9
        try:
            lengths_automaton(p, 0, None)
        except PatternProblem:
            return
        n[EXCEPT] = []


def _spelled_pattern(n: dict) -> None:
    """A pattern alone whose strings hold characters JSON escapes, as tagjit's own automaton (an empty
    ``patterns.EXCEPT`` marks it): xgrammar's pattern rule reads the escapes' spelling as the string."""
    p = n.get("pattern")
    if not isinstance(p, str) or EXCEPT in n or _lengths(n) or "format" in n \
            or any(k in n for k in _BESIDE_OWN_STRING):
        return
    types = _type_list(n.get("type"))
    if (not types or "string" in types) and spelled_by_tagjit(p):
        n[EXCEPT] = []


def _alternatives(p: str) -> list[str]:
    """The top-level alternatives of a pattern (split at each ``|`` outside groups and character classes)."""
    out, depth, start, i, in_class = [], 0, 0, 0, False
    while i < len(p):
        c = p[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c in "()":
            depth += 1 if c == "(" else -1
        elif c == "|" and depth == 0:
            out.append(p[start:i])
            start = i + 1
        i += 1
    return [*out, p[start:]]


def _searched(a: str) -> str:
    """One alternative as a whole-string match of JSON Schema's search for it (its own anchors kept as ends)."""
    start = a.startswith("^")
    end = a.endswith("$") and not a.endswith("\\$")
    core = a[1 if start else 0:len(a) - 1 if end else len(a)]
    return ("" if start else "[\\s\\S]*") + f"(?:{core})" + ("" if end else "[\\s\\S]*")


def _lengths(n: dict) -> bool:
    return "minLength" in n or "maxLength" in n


def _renamed(n: dict, old: str, new: str, value: Any) -> None:
    """Replace key ``old`` by ``new`` in place, where ``old`` stood (the node's key order is kept)."""
    items = [(new, value) if k == old else (k, v) for k, v in n.items()]
    n.clear()
    n.update(items)


def _byte_lengths(n: dict) -> bool:
    """OpenAPI ``byte`` on a string beside minLength/maxLength is base64 with those lengths (build.patterns): alone it
    becomes that pattern; beside a pattern it stays, for both to be intersected. Whether it was handled here."""
    if n.get("format") != "byte" or not _lengths(n) or "string" not in _type_list(n.get("type")):
        return False
    if "pattern" not in n:
        _renamed(n, "format", "pattern", BASE64)
    return True


# Keywords beside which a string rule of tagjit's own cannot stand (check refuses the node, naming the one it meets).
_BESIDE_OWN_STRING = ("enum", "const", "$ref", "allOf", "anyOf", "oneOf", "not", "if", "then", "else")


def _format_lengths(n: dict, where: str) -> None:
    """``format`` beside minLength/maxLength, enforced by build.patterns: the format's language (as a regex) times
    the lengths. Alone it becomes its anchored pattern, as ``_exact_format`` does; beside a pattern both stay, for the
    splice to intersect them. No string of the length in the format: no value if only strings are allowed, else
    the other types alone. What tagjit cannot write exactly is left for check to refuse by name."""
    fmt = n.get("format")
    if not isinstance(fmt, str) or not _lengths(n) or any(k in n for k in _BESIDE_OWN_STRING):
        return
    types = _type_list(n.get("type"))
    if types and "string" not in types or format_lengths_problem(n) is not None:
        return
    if node_automaton(n).empty():
        if types == ["string"] or not types:
            raise EmptySchemaError(f"JSON schema at '{where}' accepts no value: no string of its length is in its "
                                   f"format ({fmt})" + (" and matches its pattern" if "pattern" in n else ""))
        rest = [t for t in types if t != "string"]
        n["type"] = rest if len(rest) > 1 else rest[0]
        for k in ("pattern", "minLength", "maxLength", "format"):
            n.pop(k, None)
        return
    if "pattern" not in n:
        _renamed(n, "format", "pattern", format_pattern(fmt))


def _pattern_format(n: dict, where: str) -> None:
    """A ``pattern`` beside a ``format`` (no lengths): both languages intersected, as tagjit's own automaton (an empty
    ``patterns.EXCEPT`` marks it). What tagjit cannot write is left for check to refuse by name."""
    if not (isinstance(n.get("pattern"), str) and isinstance(n.get("format"), str)) or _lengths(n) \
            or EXCEPT in n or any(k in n for k in _BESIDE_OWN_STRING) or format_pattern(n["format"]) is None:
        return
    types = _type_list(n.get("type"))
    if types and "string" not in types:
        return
    try:
        empty = string_set_empty({**n, EXCEPT: []})
    except PatternProblem:
        return
    if not empty:
        n[EXCEPT] = []
        return
    if types == ["string"] or not types:
        raise EmptySchemaError(f"JSON schema at '{where}' accepts no value: no string in its format "
                               f"({n['format']}) matches its pattern")
    n["type"] = [t for t in types if t != "string"] if len(types) > 2 else [t for t in types if t != "string"][0]
    for k in ("pattern", "format"):
        n.pop(k, None)


def _pattern_lengths(n: dict, where: str) -> None:
    """A pattern with minLength/maxLength that no string satisfies (build.patterns' automaton is empty): no value
    if only strings are allowed, else the other types alone. One tagjit cannot read is left for check to refuse."""
    if not isinstance(n.get("pattern"), str) or not ("minLength" in n or "maxLength" in n) \
            or "enum" in n or "const" in n:
        return
    types = _type_list(n.get("type"))
    if types and "string" not in types:
        return
    try:
        empty = lengths_automaton(n["pattern"], *length_bounds(n)).empty()
    except (PatternProblem, TypeError, ValueError):
        return
    if not empty:
        return
    if types == ["string"] or not types:
        raise EmptySchemaError(f"JSON schema at '{where}' accepts no value: no string of its length matches its "
                               "pattern")
    n["type"] = [t for t in types if t != "string"] if len(types) > 2 else [t for t in types if t != "string"][0]
    for k in ("pattern", "minLength", "maxLength", "format"):
        n.pop(k, None)


def _structured_values(n: dict) -> dict:
    """``enum``/``const`` object and array values as schemas of exactly those values: xgrammar matches such a value
    only as its compact text, so ``{"a": 1}`` was refused where ``{"a":1}`` was taken (keys keep their order)."""
    key = "const" if "const" in n else "enum" if isinstance(n.get("enum"), list) else None
    if key is None:
        return n
    values = [n["const"]] if key == "const" else n["enum"]
    if not any(isinstance(v, (dict, list)) for v in values):
        return n
    scalars = [v for v in values if not isinstance(v, (dict, list))]
    branches = ([{"enum": scalars}] if scalars else []) + [_value_schema(v) for v in values if isinstance(v, (dict, list))]
    out = {k: v for k, v in n.items() if k != key}
    if len(branches) == 1:
        out.update(branches[0])
    else:
        out["anyOf"] = branches
    return out


def _value_schema(v: Any) -> dict:
    """The schema that accepts exactly the JSON value v (objects in v's key order)."""
    if isinstance(v, dict):
        return {"type": "object", "properties": {k: _value_schema(x) for k, x in v.items()}, "required": list(v),
                "additionalProperties": False}
    if isinstance(v, list):
        return {"type": "array", "prefixItems": [_value_schema(x) for x in v], "items": False, "minItems": len(v),
                "maxItems": len(v)}
    return {"const": v}


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "integer" if v.is_integer() else "number"
    return {str: "string", list: "array", dict: "object"}.get(type(v), "object")


def _values(n: Any) -> set[str] | None:
    if not isinstance(n, dict):
        return None
    if "const" in n:
        return {json.dumps(n["const"], sort_keys=True)}
    if isinstance(n.get("enum"), list):
        return {json.dumps(v, sort_keys=True) for v in n["enum"]}
    return None


def _discriminator(views: list) -> str | None:
    """A property every branch declares with const/enum values no two branches share."""
    if not all(isinstance(v, dict) and isinstance(v.get("properties"), dict) for v in views):
        return None
    for key in views[0]["properties"]:
        sets = [_values(v["properties"].get(key)) for v in views]
        if all(x is not None for x in sets) and sum(len(x) for x in sets) == len(set().union(*sets)):
            return key
    return None


def _anchors(node: Any, where: str) -> Iterator[tuple[str, str]]:
    """Plain-name fragments (draft-4 ``id: "#name"``, ``$id``, ``$anchor``) and their JSON pointers."""
    for sub, path in subschemas(node, where):
        if _ANCHOR_KEYS.isdisjoint(sub):
            continue
        for key in ("id", "$id"):
            if isinstance(sub.get(key), str) and sub[key].startswith("#") and len(sub[key]) > 1:
                yield sub[key], path_text(path)
        if isinstance(sub.get("$anchor"), str):
            yield "#" + sub["$anchor"], path_text(path)


_ANCHOR_KEYS = frozenset({"id", "$id", "$anchor"})


# Formats whose xgrammar rule is not the format's language (date takes 2021-02-31, uri-reference no absolute URI), or
# that xgrammar has no rule for (iri, iri-reference).
_OWN_FORMATS = ("date", "uri-reference", "iri", "iri-reference")
# Of those, the ones tagjit writes only alone: beside lengths or a pattern they are refused by name (build.patterns).
_ALONE_FORMATS = ("iri", "iri-reference")


def _exact_format(n: dict) -> None:
    if n.get("format") in _OWN_FORMATS and "pattern" not in n and not (n["format"] in _ALONE_FORMATS and _lengths(n)):
        n["pattern"] = format_pattern(n.pop("format"))
