"""``oneOf`` made exact: branches that may overlap are rewritten into pieces no two of which overlap.

A value is valid under ``oneOf`` iff exactly one branch accepts it. Branches tagjit proves disjoint are kept as they
are (their anyOf is the oneOf). Otherwise each branch becomes its difference with every branch it may overlap, and the
oneOf is the anyOf of those differences. A difference ``a \\ b`` is written as plain schemas, one JSON type at a time:

- finite values (``enum``, ``const``, booleans, null): the values of ``a`` that ``b`` rejects;
- numbers: ``a`` within the intervals outside ``b``'s bounds, or between the finite values ``b`` lists; beside an
  integer ``b``, also ``a``'s non-integers (``numbers.NONINTEGRAL``);
- strings: ``a`` outside ``b``'s length range, outside its pattern's or format's language, or without the finite
  values ``b`` lists (tagjit's own automaton of ``a`` minus those sets, ``patterns.EXCEPT``);
- objects: one piece per way an object of ``a`` can fail ``b``: a name ``b`` requires that ``a`` may lack (that name
  forbidden, ``pattern_properties.without_names``, also on an object open to undeclared names), a name either
  declares whose value ``b`` restricts (that name required, its value the difference of the two schemas, ``a``'s
  value of an undeclared name being its pattern's or ``additionalProperties``') or forbids (that name required);
  the names neither declares must take in ``b`` every value they take in ``a``; and ``a`` outside ``b``'s range of
  member counts;
- arrays: ``a`` outside ``b``'s size range, or with an item at a position of ``b``'s ``prefixItems`` that fails it
  (an ``enum`` of arrays is such a prefix), where ``a``'s later items all pass ``b``'s ``items``; where no item
  passes both ``items`` (a list of strings, a list of numbers), ``a``'s non-empty arrays, and ``[]`` if ``b`` rejects it.

Every piece is a subset of ``a`` and none holds a value of ``b``, so nothing invalid is ever accepted; a difference
with no such form (arrays whose items differ, undeclared names whose values ``b`` restricts, automata over 4096
states, ...) is refused by name, as the whole ``oneOf`` was before. Keywords no draft defines are annotations here.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Protocol

from tagjit.build.keys import all_of, key_expr, matches, negate, partition
from tagjit.build.numbers import NONINTEGRAL
from tagjit.build.patterns import EXCEPT, PatternProblem, string_set_empty, strings_disjoint
from tagjit.errors import UnsupportedFeatureError
from tagjit.schema.keywords import PASSIVE
from tagjit.schema.metaschema import KNOWN_KEYWORDS
from tagjit.schema.pattern_properties import admits, undeclared_schema, without_names

# Most pieces one oneOf may become; more are refused by name (each piece is a copy of its branch).
MAX_PIECES = 64
# Differences nest once per property level; deeper ones are refused.
MAX_DEPTH = 6

FAMILIES = ("null", "boolean", "object", "array", "string", "number")
_ARRAY_KEYS = frozenset({"type", "items", "prefixItems", "minItems", "maxItems"})
_STRING_KEYS = frozenset({"minLength", "maxLength", "pattern", "format", "not"})
_OBJECT_KEYS = frozenset({"type", "properties", "required", "additionalProperties", "patternProperties",
                          "minProperties", "maxProperties"})
_BOUNDS = (("minimum", False, True), ("exclusiveMinimum", True, True), ("maximum", False, False),
           ("exclusiveMaximum", True, False))


class Normalizer(Protocol):
    """What the differences need of ``normalize._Normalizer``."""

    strict: bool

    def node(self, n: Any, where: str) -> Any: ...

    def merge(self, a: Any, b: Any, where: str) -> Any: ...

    def resolve_view(self, b: Any, where: str) -> Any: ...

    def accepts(self, schema: Any, value: Any) -> bool | None: ...


class _Inexpressible(Exception):
    """A difference tagjit has no exact form for (the message says which)."""


def exact_one_of(norm: Normalizer, branches: list, overlaps: set[tuple[int, int]], where: str) -> list:
    """anyOf branches accepting exactly what ``oneOf: branches`` accepts; ``overlaps``: the pairs not proved disjoint."""
    pieces: list = []
    for i, branch in enumerate(branches):
        mine = [norm.resolve_view(branch, where)]
        for j in sorted({j for pair in overlaps if i in pair for j in pair if j != i}):
            other = norm.resolve_view(branches[j], where)
            try:
                mine = [p for piece in mine for p in difference(norm, piece, other, 0)]
            except _Inexpressible as e:
                raise UnsupportedFeatureError(f"oneOf whose branches {min(i, j)} and {max(i, j)} may both match "
                                              f"(only anyOf can be enforced: {e})", where) from None
            if len(pieces) + len(mine) > MAX_PIECES:
                raise UnsupportedFeatureError(f"oneOf whose overlapping branches split into more than {MAX_PIECES} "
                                              "exclusive parts", where)
        pieces += mine
    return pieces


# -- a \ b ------------------------------------------------------------------------------------------

def difference(norm: Normalizer, a: Any, b: Any, depth: int) -> list:
    """Schemas whose union accepts exactly the values ``a`` accepts and ``b`` rejects (normalised, refs resolved)."""
    if depth > MAX_DEPTH:
        raise _Inexpressible("differences nested too deeply")
    if a is False:
        return []
    if b is False or b is None:
        return [a]
    if a is True:
        a = {}
    if b is True or _core(b) == {}:
        return []
    for comb in ("anyOf", "oneOf"):
        if isinstance(a.get(comb), list):  # normalised: siblings are merged into the branches
            return [p for x in a[comb] for p in difference(norm, norm.resolve_view(x, "#"), b, depth)]
    for comb in ("anyOf", "oneOf"):
        if isinstance(b.get(comb), list):  # not (x or y) = not x and not y
            pieces = [a]
            for x in b[comb]:
                x = norm.resolve_view(x, "#")
                pieces = [p for piece in pieces for p in difference(norm, piece, x, depth)]
            return pieces
    if subsumes(norm, b, a):  # first: most overlapping branches share most of their schemas
        return []
    if disjoint(norm, a, b):
        return [a]
    out: list = []
    fb = families(norm, b)
    for fam in FAMILIES:
        part = restrict(a, fam)
        if part is None:
            continue
        if fam not in fb:
            out.append(part)
        elif _values(part) is not None:
            out += _finite(norm, part, b)
        else:
            out += _BY_FAMILY[fam](norm, part, restrict(b, fam) or {}, depth)
    return out


def _minus(norm: Normalizer, x: Any, y: Any, depth: int) -> list:
    """``difference`` of two member or item schemas as a node holds them ($refs followed, ``{}`` as any value)."""
    return difference(norm, norm.resolve_view(True if x == {} else x, "#"), norm.resolve_view(y, "#"), depth + 1)


def _finite(norm: Normalizer, a: dict, b: Any) -> list:
    values = a["enum"] if "enum" in a else [a["const"]]
    kept = []
    for v in values:
        verdict = norm.accepts(b, v)
        if verdict is None:
            raise _Inexpressible("a value no validator could judge")
        if not verdict:
            kept.append(v)
    if not kept:
        return []
    out = {k: v for k, v in a.items() if k not in ("enum", "const")}
    out["enum"] = kept
    return [out]


def _booleans(norm: Normalizer, a: dict, b: dict, depth: int) -> list:
    return _finite(norm, {**a, "enum": [True, False]}, b)


def _null(norm: Normalizer, a: dict, b: dict, depth: int) -> list:
    return _finite(norm, {**a, "enum": [None]}, b)


def _arrays(norm: Normalizer, a: dict, b: dict, depth: int) -> list:
    core = _core(b)
    if _items_apart(norm, a, core):  # a's non-empty arrays all fail b; [] is a's unless b takes it too
        takes_empty = norm.accepts(b, [])
        if takes_empty is None:
            raise _Inexpressible("a value no validator could judge")
        if not takes_empty:
            return [a]
        return [m] if (m := _merged(norm, a, {"minItems": 1})) is not None and _sizes_open(m) else []
    if set(core) - _ARRAY_KEYS:
        raise _Inexpressible(f"arrays told apart by {sorted(set(core) - _ARRAY_KEYS)[0]}")
    mine_prefix, theirs_prefix = a.get("prefixItems") or [], core.get("prefixItems") or []
    mine_items, theirs_items = a.get("items", True), core.get("items", True)
    if not all(isinstance(x, (dict, bool)) for x in [mine_items, theirs_items, *mine_prefix, *theirs_prefix]):
        raise _Inexpressible("arrays whose items differ")

    def mine(i: int) -> Any:
        return mine_prefix[i] if i < len(mine_prefix) else mine_items

    hi = core.get("maxItems")
    if theirs_items is False:  # an item past b's prefix fails b: a size piece says it
        hi = len(theirs_prefix) if hi is None else min(hi, len(theirs_prefix))
    elif not (theirs_items is True or theirs_items == {}):  # "some later item fails b's" has no schema
        if any(_minus(norm, x, theirs_items, depth) for x in [mine_items, *mine_prefix[len(theirs_prefix):]]):
            raise _Inexpressible("arrays whose items differ")
    sizes = ([{"maxItems": core["minItems"] - 1}] if core.get("minItems", 0) > 0 else []) + (
        [{"minItems": hi + 1}] if hi is not None else [])
    pieces = [m for p in sizes if (m := _merged(norm, a, p)) is not None]
    for i, theirs in enumerate(theirs_prefix):  # one piece per position of b's prefix whose item a's may fail
        diff = _minus(norm, mine(i), theirs, depth)
        if diff:
            prefix = [mine(j) for j in range(max(i + 1, len(mine_prefix)))]
            prefix[i] = diff[0] if len(diff) == 1 else {"anyOf": diff}
            pieces.append({**a, "prefixItems": prefix, "minItems": max(a.get("minItems", 0), i + 1)})
    return [p for p in pieces if _sizes_open(p)]


def _strings(norm: Normalizer, a: dict, b: dict, depth: int) -> list:
    keys = set(_core(b)) & (_STRING_KEYS | {"enum", "const", EXCEPT})
    if not keys:
        return []
    pieces: list[dict] = []
    values = _values(b)
    if values is not None:  # a without b's values
        excluded = [v for v in values if isinstance(v, str) and norm.accepts(a, v)]
        if not excluded:
            return [a]
        return [_except(a, {"enum": excluded})]
    lo, hi = _lengths(b)  # one piece per keyword of b that a string of a can fail
    if lo > 0:
        pieces.append(_merged(norm, a, {"maxLength": lo - 1}))
    if hi is not None:
        pieces.append(_merged(norm, a, {"minLength": hi + 1}))
    for key in ("pattern", "format"):
        if key in b:
            pieces.append(_except(a, {key: b[key]}))
    if isinstance(b.get("not"), dict):  # b excludes values: a's strings among them fail b
        kept = [v for v in b["not"].get("enum", []) if isinstance(v, str) and norm.accepts(a, v)]
        if kept:
            pieces.append({k: v for k, v in a.items() if k not in _STRING_KEYS | {EXCEPT}} | {"enum": kept})
    for item in b.get(EXCEPT, ()):  # b avoids a set: a's strings in it fail b
        pieces.append(_within(norm, a, item))
    out = []
    for piece in pieces:
        if piece is None or not _length_range_open(piece):
            continue
        try:
            empty = _own_string(piece) and string_set_empty(piece)  # also builds tagjit's automaton: can it?
        except PatternProblem as e:
            raise _Inexpressible(f"strings told apart by an automaton tagjit cannot build ({e})") from None
        if not empty:
            out.append(piece)
    return out


def _except(a: dict, item: dict | None) -> dict:
    """``a`` without the strings of one set (a pattern's, a format's, finite values), as tagjit's own automaton."""
    out = {k: v for k, v in a.items() if k != "not"}
    sets = list(a.get(EXCEPT, ()))
    if isinstance(a.get("not"), dict):  # one place for every exclusion: tagjit's automaton writes them together
        sets.append({"enum": list(a["not"].get("enum", []))})
    out[EXCEPT] = [*sets, item] if item is not None else sets
    return out


def _within(norm: Normalizer, a: dict, item: dict) -> dict | None:
    """``a`` restricted to one string set, or None when that cannot be said."""
    if "enum" in item:
        kept = [v for v in item["enum"] if isinstance(v, str) and norm.accepts(a, v)]
        return ({k: v for k, v in a.items() if k not in _STRING_KEYS | {EXCEPT}} | {"enum": kept}) if kept else None
    key = "pattern" if "pattern" in item else "format"
    if key in a:
        raise _Inexpressible(f"strings told apart by two {key}s")
    return _except({**a, key: item[key]}, None)


def _own_string(n: dict) -> bool:
    return EXCEPT in n or (isinstance(n.get("pattern"), str) and ("format" in n or "minLength" in n
                                                                   or "maxLength" in n))


def _numbers(norm: Normalizer, a: dict, b: dict, depth: int) -> list:
    if "multipleOf" in b:
        raise _Inexpressible("numbers told apart by multipleOf")
    a_int, b_int = _integer_only(a), _integer_only(b)
    if b_int and not a_int:  # a's non-integers, then a's integers outside b
        if "multipleOf" in a:
            raise _Inexpressible("an integer branch beside a number branch with multipleOf")
        fractions = _merged(norm, a, {"type": "number", NONINTEGRAL: True})
        integers = _merged(norm, a, {"type": "integer"})
        return ([fractions] if fractions is not None and _interval_open(fractions) else []) + (
            _numbers(norm, integers, b, depth) if integers is not None else [])
    values = _values(b)
    if values is not None:
        cuts = sorted({v for v in values if _is_number(v) and norm.accepts(a, v)})
        if not cuts:
            return [a]
        pieces = [{"exclusiveMaximum": cuts[0]}, *({"exclusiveMinimum": x, "exclusiveMaximum": y}
                                                   for x, y in zip(cuts, cuts[1:])), {"exclusiveMinimum": cuts[-1]}]
    else:
        lo, lo_open, hi, hi_open = _interval(b)
        pieces = []
        if lo is not None:
            pieces.append({"maximum" if lo_open else "exclusiveMaximum": lo})
        if hi is not None:
            pieces.append({"minimum" if hi_open else "exclusiveMinimum": hi})
    return [m for p in pieces if (m := _merged(norm, a, p)) is not None and _interval_open(m)]


def _objects(norm: Normalizer, a: dict, b: dict, depth: int) -> list:
    core = _core(b)
    if set(core) - _OBJECT_KEYS:
        raise _Inexpressible(f"objects told apart by {sorted(set(core) - _OBJECT_KEYS)[0]}")
    pa, pb = _props(a), _props(b)
    ra, rb = _required(a), _required(b)
    pieces: list = []
    for size in ({"maxProperties": core["minProperties"] - 1} if core.get("minProperties", 0) > 0 else None,
                 {"minProperties": core["maxProperties"] + 1} if "maxProperties" in core else None):
        if size is not None and (m := _merged(norm, a, size)) is not None and m.get("minProperties", 0) <= m.get(
                "maxProperties", math.inf):
            pieces.append(m)
    for name in rb:
        if name in ra:
            continue
        if _value_of(a, name, norm.strict) is False:  # every object of a lacks it: none is one of b's
            return [a]
        pieces.append(_without(a, name, norm.strict))
    for name in dict.fromkeys([*pa, *pb]):  # a name b declares may be one a takes undeclared
        mine, theirs = _value_of(a, name, norm.strict), _value_of(b, name, norm.strict)
        if mine is False or theirs is True or theirs == {}:
            continue
        if theirs is False:
            if name in ra:
                return [a]
            pieces.append(_with(a, name, mine))
            continue
        view = norm.resolve_view(True if mine == {} else mine, "#")
        diff = difference(norm, view, norm.resolve_view(theirs, "#"), depth + 1)
        if not diff:
            continue
        if len(diff) == 1 and diff[0] is view:  # a's value never satisfies b's
            if name in ra:
                return [a]
            diff = [mine]
        pieces.append(_with(a, name, diff[0] if len(diff) == 1 else {"anyOf": diff}))
    # The names neither declares: where a language of a's meets one of b's, b's schema must take every value a's
    # does (else some name a carries fails b, which no piece can say).
    declared = list(dict.fromkeys([*pa, *pb]))
    theirs_all = [(e, t) for e, t in _undeclared(b, norm.strict) if not (t is True or t == {})]
    for mine_expr, mine in _undeclared(a, norm.strict):
        if mine is False:
            continue
        for theirs_expr, theirs in theirs_all:
            if _meet(mine_expr, theirs_expr, declared) and _minus(norm, mine, theirs, depth):
                raise _Inexpressible("objects that may carry undeclared names whose values one branch restricts")
    return pieces


_BY_FAMILY: dict[str, Callable[[Normalizer, dict, dict, int], list]] = {
    "null": _null, "boolean": _booleans, "object": _objects, "array": _arrays, "string": _strings,
    "number": _numbers}


# -- object pieces ----------------------------------------------------------------------------------

def _props(n: dict) -> dict:
    p = n.get("properties")
    return p if isinstance(p, dict) else {}


def _required(n: dict) -> list:
    r = n.get("required")
    return [k for k in r if isinstance(k, str)] if isinstance(r, list) else []


def _patterns(n: dict) -> dict:
    p = n.get("patternProperties")
    return p if isinstance(p, dict) else {}


def _value_of(n: dict, name: str, strict: bool) -> Any:
    """The schema a normalised object gives a member ``name``: its own, its pattern's (the exact form's languages are
    disjoint), or ``additionalProperties``'; False where it takes no such member."""
    props = _props(n)
    if name in props:
        return props[name]
    for key, schema in _patterns(n).items():
        try:
            if matches(key_expr(key), name):
                return schema
        except PatternProblem:
            raise _Inexpressible("objects whose patternProperties tagjit cannot read") from None
    return undeclared_schema(n, strict)


def _undeclared(n: dict, strict: bool) -> list[tuple[dict, Any]]:
    """(language, schema) for the names a normalised object does not declare: its patterns' and the rest's."""
    exprs = [key_expr(k) for k in _patterns(n)]
    rest = all_of([*([negate({"names": list(_props(n))})] if _props(n) else []), *map(negate, exprs)])
    return [*zip(exprs, _patterns(n).values()), (rest, undeclared_schema(n, strict))]


def _meet(x: dict, y: dict, declared: list[str]) -> bool:
    """Whether some name outside ``declared`` is in both languages (True where tagjit cannot tell)."""
    try:
        return any(len(members) == 2 for members, _ in partition([x, y], declared))
    except PatternProblem:
        return True


def _forbids(n: dict, name: str, strict: bool) -> bool:
    """Whether object ``n`` takes no member ``name`` (False where one of its patternProperties may admit it)."""
    props = _props(n)
    if name in props:
        return props[name] is False
    if any(admits(key, name) for key in _patterns(n)):
        return False
    return undeclared_schema(n, strict) is False


def _without(a: dict, name: str, strict: bool) -> dict:
    """``a`` with ``name`` absent."""
    if "propertyNames" in a:
        raise _Inexpressible(f"an object that must lack {name!r} but whose names propertyNames restricts")
    return {**without_names(a, [name], strict), "type": "object"}


def _with(a: dict, name: str, value: Any) -> dict:
    """``a`` with ``name`` present and its value under ``value``."""
    out = dict(a)
    out["type"] = "object"
    out["properties"] = {**_props(a), name: value}
    out["required"] = [*_required(a), name] if name not in _required(a) else _required(a)
    return out


# -- what a schema may hold ---------------------------------------------------------------------------

def families(norm: Normalizer, n: Any, depth: int = 0) -> set[str]:
    """The JSON types (integer counted as number) a schema's values may have."""
    if n is False:
        return set()
    if not isinstance(n, dict) or depth > MAX_DEPTH:
        return set(FAMILIES)
    n = norm.resolve_view(n, "#") if "$ref" in n else n
    if not isinstance(n, dict):
        return set(FAMILIES) if n is not False else set()
    return _node_families(n, lambda x: families(norm, x, depth + 1))


def written_families(n: Any, resolve: Callable[[str], Any], seen: tuple[str, ...] = ()) -> set[str]:
    """``families`` of a schema as written, its $refs followed by ``resolve``: a $ref cycle may hold any type, and
    a $ref's siblings are not read (drafts before 2019-09 ignore them), so the answer never leaves a type out."""
    if n is False:
        return set()
    if not isinstance(n, dict) or len(seen) > 16:
        return set(FAMILIES)
    ref = n.get("$ref")
    if isinstance(ref, str):
        return set(FAMILIES) if ref in seen else written_families(resolve(ref), resolve, seen + (ref,))
    return _node_families(n, lambda x: written_families(x, resolve, seen))


def _node_families(n: dict, of: Callable[[Any], set[str]]) -> set[str]:
    """The families of a node without $ref: its values, else its types narrowed by its combinators (``of``)."""
    values = _values(n)
    if values is not None:
        return {_family(v) for v in values}
    types = _types(n)
    fams = {"number" if t == "integer" else t for t in types} & set(FAMILIES) if types else set(FAMILIES)
    for comb in ("anyOf", "oneOf"):
        if isinstance(n.get(comb), list):
            fams &= set().union(*(of(x) for x in n[comb]))
    if isinstance(n.get("allOf"), list):
        for x in n["allOf"]:
            fams &= of(x)
    return fams


def restrict(n: dict, fam: str) -> dict | None:
    """The part of a (normalised, single) schema of one type family, or None if it has none."""
    values = _values(n)
    if values is not None:
        kept = [v for v in values if _family(v) == fam]
        if not kept:
            return None
        out = {k: v for k, v in n.items() if k not in ("enum", "const")}
        out["enum"] = kept
        return out
    types = _types(n)
    if fam == "number":
        mine = [t for t in types if t in ("integer", "number")] if types else ["number"]
        if not mine:
            return None
        kept_type: Any = "integer" if "number" not in mine else "number"
    else:
        if types and fam not in types:
            return None
        kept_type = fam
    return {**n, "type": kept_type}


def disjoint(norm: Normalizer, a: Any, b: Any) -> bool:
    """Whether no value is accepted by both schemas (False when tagjit cannot tell)."""
    if a is False or b is False:
        return True
    if not (isinstance(a, dict) and isinstance(b, dict)) or _core(a) == _core(b):
        return False
    if not families(norm, a) & families(norm, b):
        return True
    for x, y in ((a, b), (b, a)):
        values = _values(x)
        if values is not None and len(values) <= 256:
            verdicts = [norm.accepts(y, v) for v in values]
            if all(v is False for v in verdicts):
                return True
    ta, tb = _types(a), _types(b)
    if ta and tb and all(t in ("integer", "number") for t in ta + tb):
        if _intervals_apart(a, b):
            return True
    if _families_only(norm, a, "string") and _families_only(norm, b, "string"):
        la, lb = _lengths(a), _lengths(b)
        if (la[1] is not None and la[1] < lb[0]) or (lb[1] is not None and lb[1] < la[0]):
            return True
        if any(k in x for x in (a, b) for k in ("pattern", "format", EXCEPT)):
            try:
                return strings_disjoint(restrict(a, "string") or {}, restrict(b, "string") or {})
            except PatternProblem:
                return False
    if _families_only(norm, a, "array") and _families_only(norm, b, "array"):
        (la, ha), (lb, hb) = _item_counts(a), _item_counts(b)
        if (ha is not None and ha < lb) or (hb is not None and hb < la):
            return True
        if max(la, lb) >= 1 and _items_apart(norm, a, b):  # only [] could pass both
            return True
    if _families_only(norm, a, "object") and _families_only(norm, b, "object"):
        pa, pb = _props(a), _props(b)
        shared = set(_required(b))
        for name in dict.fromkeys(_required(a)):  # in a's order: a set's order would follow string hashing
            if name not in shared or name not in pa or name not in pb:
                continue
            try:
                if disjoint(norm, norm.resolve_view(pa[name], "#"), norm.resolve_view(pb[name], "#")):
                    return True
            except UnsupportedFeatureError:  # this name's value reaches the oneOf again; another name may decide
                continue
        xa, xb = undeclared_schema(a, norm.strict), undeclared_schema(b, norm.strict)
        for x, px, xx, y, py in ((a, pa, xa, b, pb), (b, pb, xb, a, pa)):
            if any(_forbids(y, name, norm.strict) for name in _required(x)):
                return True
    return False


def subsumes(norm: Normalizer, b: Any, a: Any) -> bool:
    """Whether every value ``a`` accepts, ``b`` accepts (False when tagjit cannot tell)."""
    if b is True or (isinstance(b, dict) and _core(b) == {}):
        return True
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return False
    if _core(a) == _core(b):
        return True
    values = _values(a)
    if values is not None:
        return all(norm.accepts(b, v) is True for v in values)
    if set(_core(b)) == {"type"}:
        tb = _types(b)
        ta = _types(a)
        return bool(ta) and all(t in tb or (t == "integer" and "number" in tb) for t in ta)
    return False


# -- small helpers ----------------------------------------------------------------------------------

def _core(n: Any) -> Any:
    """A node's constraints: neither annotations nor keywords no draft defines (``esriDocumentation``, ``_format``)."""
    if not isinstance(n, dict):
        return n
    return {k: v for k, v in n.items() if k not in PASSIVE and (k in KNOWN_KEYWORDS or k.startswith("x-tagjit"))}


def _values(n: Any) -> list | None:
    if not isinstance(n, dict):
        return None
    if "const" in n:
        return [n["const"]]
    if isinstance(n.get("enum"), list):
        return n["enum"]
    return None


def _types(n: dict) -> list[str]:
    t = n.get("type")
    return [t] if isinstance(t, str) else [x for x in t if isinstance(x, str)] if isinstance(t, list) else []


def _family(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object"}.get(type(v), "object")


def _families_only(norm: Normalizer, n: dict, fam: str) -> bool:
    return families(norm, n) == {fam}


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _integer_only(n: dict) -> bool:
    types = _types(n)
    return "integer" in types and "number" not in types


def _interval(n: dict) -> tuple[Any, bool, Any, bool]:
    """(lower bound, open, upper bound, open) of a number node; None for no bound."""
    lo = hi = None
    lo_open = hi_open = False
    for key, open_, lower in _BOUNDS:
        v = n.get(key)
        if not _is_number(v):
            continue
        if lower and (lo is None or v > lo or (v == lo and open_)):
            lo, lo_open = v, open_
        if not lower and (hi is None or v < hi or (v == hi and open_)):
            hi, hi_open = v, open_
    return lo, lo_open, hi, hi_open


def _interval_open(n: dict) -> bool:
    """Whether a number node's bounds leave any value (an integer one, for integer nodes)."""
    lo, lo_open, hi, hi_open = _interval(n)
    if lo is None or hi is None:
        return True
    if _integer_only(n):
        first = math.floor(lo) + 1 if lo_open or lo != math.floor(lo) else lo
        last = math.ceil(hi) - 1 if hi_open or hi != math.ceil(hi) else hi
        return first <= last
    return lo < hi or (lo == hi and not lo_open and not hi_open)


def _intervals_apart(a: dict, b: dict) -> bool:
    alo, alo_open, ahi, ahi_open = _interval(a)
    blo, blo_open, bhi, bhi_open = _interval(b)

    def below(hi: Any, hi_open: bool, lo: Any, lo_open: bool) -> bool:
        return hi is not None and lo is not None and (hi < lo or (hi == lo and (hi_open or lo_open)))

    return below(ahi, ahi_open, blo, blo_open) or below(bhi, bhi_open, alo, alo_open)


def _counts(n: dict, low: str, high: str) -> tuple[int, int | None]:
    lo, hi = n.get(low, 0), n.get(high)
    return (lo if isinstance(lo, int) else 0), (hi if isinstance(hi, int) else None)


def _lengths(n: dict) -> tuple[int, int | None]:
    return _counts(n, "minLength", "maxLength")


def _item_counts(n: dict) -> tuple[int, int | None]:
    return _counts(n, "minItems", "maxItems")


def _sizes_open(n: dict) -> bool:
    lo, hi = _item_counts(n)
    return hi is None or lo <= hi


def _items_apart(norm: Normalizer, a: dict, b: dict) -> bool:
    """Whether no item passes both arrays' ``items`` (no ``prefixItems``): then only ``[]`` may pass both."""
    x, y = a.get("items"), b.get("items")
    if a.get("prefixItems") or b.get("prefixItems") or not (isinstance(x, dict) and isinstance(y, dict)):
        return False
    return disjoint(norm, norm.resolve_view(x, "#"), norm.resolve_view(y, "#"))


def _length_range_open(n: dict) -> bool:
    lo, hi = _lengths(n)
    return hi is None or lo <= hi


def _merged(norm: Normalizer, a: dict, piece: dict) -> dict | None:
    m = norm.merge(a, piece, "#")
    return m if isinstance(m, dict) else None


def canonical(n: Any) -> str:
    """The text of a schema, keys in their order (for telling identical pieces apart)."""
    return json.dumps(n)
