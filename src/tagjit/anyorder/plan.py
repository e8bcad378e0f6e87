"""The any-order plan: which objects opt in, and the structure the token filter follows."""

from __future__ import annotations

import json
import re
from typing import Any, Iterator

KEYWORD = "x-any-order"
KEYWORD_DEFAULT = "x-any-order-default"
"""Root keyword carrying a per-request default (see ``with_any_order``)."""


def wants_any_order(schema: Any, default: bool) -> bool:
    """Whether any object in the schema opts into any property order."""
    if isinstance(schema, dict) and isinstance(schema.get(KEYWORD_DEFAULT), bool):
        default = schema[KEYWORD_DEFAULT]
    return _wants(schema, default)


def _wants(schema: Any, default: bool) -> bool:
    if isinstance(schema, dict):
        if schema.get(KEYWORD) is True or (default and "properties" in schema and schema.get(KEYWORD) is not False):
            return True
        return any(_wants(v, default) for v in schema.values())
    if isinstance(schema, list):
        return any(_wants(v, default) for v in schema)
    return False


def with_any_order(schema: dict | bool, enabled: bool) -> dict | bool:
    """The schema with a per-request any-order default (objects saying ``x-any-order: false`` keep their order)."""
    if not isinstance(schema, dict):
        return schema
    out = {k: v for k, v in schema.items() if k != KEYWORD_DEFAULT}
    out[KEYWORD_DEFAULT] = bool(enabled)
    return out


from tagjit.build.keys import excluded_names
from tagjit.build.splice import PLACEHOLDER_PREFIX, Lifted
from tagjit.errors import ConstraintError, UnsupportedFeatureError
from tagjit.schema import keywords
from tagjit.schema.keywords import children, pointer_parts, resolve, step
from tagjit.schema.normalize import _json_type as json_type


_OTHER_SHAPES = ("anyOf", "oneOf", "allOf", "$ref", "enum", "const", "propertyNames")


def _children(node: dict) -> Iterator[Any]:
    return (child for _, child in children(node))


class Val:
    """What a value position can open: a tracked object (or one of several, ``alts``) and/or a tracked array
    (None: not tracked); ``check``: the scalar values the position may hold, where the filter must check them;
    ``length``: the (minLength, maxLength or None, the pattern's ``Track`` or None) of a string there that the filter
    counts."""

    __slots__ = ("obj", "alts", "arr", "check", "length")

    def __init__(self) -> None:
        self.obj: Obj | None = None
        self.alts: tuple[Obj, ...] = ()
        self.arr: _Arr | None = None
        self.check: frozenset | None = None
        self.length: tuple | None = None


class Obj:
    """A tracked object: any-order (keys checked) or declared-order (followed to reach nested ones)."""

    __slots__ = ("ao", "names", "index", "children", "extra_ok", "extra", "forbidden", "req", "all", "min", "max",
                 "next", "term", "below", "path")

    def __init__(self) -> None:
        self.ao = False
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.children: list[Val | None] = []
        self.extra_ok = False
        self.extra: Val | None = None
        self.forbidden: frozenset[str] = frozenset()  # undeclared names the grammar of this object does not write
        self.req = 0
        self.all = 0
        self.min = 0
        self.max = 1 << 30
        # Byte trie of the raw key spellings (any-order objects): child maps, key at node, keys below.
        self.next: list[dict[int, int]] = [{}]
        self.term: list[int] = [-1]
        self.below: list[int] = [0]
        self.path = "#"


class _Arr:
    __slots__ = ("prefix", "items")

    def __init__(self) -> None:
        self.prefix: list[Val | None] = []
        self.items: Val | None = None


_BRANCHES = (f"{KEYWORD} below an anyOf/oneOf whose branches can be several arrays, or objects the filter cannot "
             "follow together (an object in declared order among them, or a name whose value differs between them and "
             "is not an enum/const of scalars)")


class CountUnfollowable(Exception):
    """Strings whose lengths the filter would count lie where it cannot follow the text (``paths``: theirs)."""

    def __init__(self, where: str, paths: frozenset[str]) -> None:
        super().__init__(where)
        self.paths = paths


class _Ambiguous(Exception):
    """Any-order objects the filter cannot follow (``ids``), and why: the server default leaves them in order."""

    def __init__(self, where: str, ids: set[int], feature: str = _BRANCHES) -> None:
        super().__init__(where)
        self.where = where
        self.ids = ids
        self.feature = feature


def key_spelling(name: str) -> str:
    """The JSON text of a property name between its quotes, as the grammar writes it."""
    return json.dumps(name, ensure_ascii=False)[1:-1]


class AnyOrderPlan:
    """Finds the any-order objects and builds the structure the token filter follows."""

    def __init__(self, schema: dict, default: bool, strict: bool, lifted: Lifted | None = None) -> None:
        self.root = schema
        self.strict = strict
        self.lifted = lifted  # what stands behind the schema's placeholders (its key languages, its rules)
        self.canonical = lifted.canonical if lifted else (lambda text: text)
        self.keys = lifted.key_exprs if lifted else {}
        self.counts = lifted.counts if lifted else {}  # strings whose lengths the filter counts
        self._gaps_of: dict[int, frozenset[str] | None] = {}
        self.nodes: dict[int, dict] = {}
        self.paths: dict[int, str] = {}
        self.edges: dict[int, list[int]] = {}
        self._collect(schema, "#")
        self.explicit: set[int] = set()
        self.ao: set[int] = set()
        for i, node in self.nodes.items():
            if not isinstance(node.get("properties"), dict):
                continue
            kw = node.get(KEYWORD)
            if kw is True or (default and kw is not False):
                reason = self._unsupported_shape(node)
                if kw is True:
                    if reason:
                        raise UnsupportedFeatureError(f"{KEYWORD} on an object with {reason}", self.paths[i])
                    self.explicit.add(i)
                if not reason:
                    self.ao.add(i)
        if id(schema) in self.ao - self.explicit and _refs_into_root(schema):
            self.ao.discard(id(schema))  # server default: the root keeps its order, its members stay addressable
        for i in self._passed_by_refs() & self.ao:
            if i in self.explicit:
                raise UnsupportedFeatureError(f"$ref into an {KEYWORD} object", self.paths[i])
            self.ao.discard(i)  # server default: it keeps its order, what a $ref reaches inside it stays addressable
        while True:
            self._reach()
            try:
                self.root_val = self._build_vals()
                return
            except _Ambiguous as amb:
                counted = amb.ids & self.counts.keys()
                if counted:
                    raise CountUnfollowable(amb.where, frozenset(self.paths[i] for i in counted)) from None
                bad = amb.ids & self.ao
                if bad & self.explicit or not bad:
                    raise UnsupportedFeatureError(amb.feature, amb.where) from None
                self.ao -= bad  # server default: those objects keep their declared order

    # -- graph -----------------------------------------------------------------------------------
    def _collect(self, node: Any, path: str) -> None:
        if not isinstance(node, dict) or id(node) in self.nodes:
            return
        self.nodes[id(node)] = node
        self.paths[id(node)] = path
        out: list[int] = []
        for parts, child in children(node):
            self._collect(child, path + "".join(f"/{p}" for p in parts))
            if isinstance(child, dict):
                out.append(id(child))
        ref = node.get("$ref")
        if isinstance(ref, str):
            target = self._resolve(ref)
            if isinstance(target, dict):
                self._collect(target, ref)
                out.append(id(target))
        self.edges[id(node)] = out

    def _passed_by_refs(self) -> set[int]:
        """The nodes a ``$ref`` pointer passes through on its way to its target (not the targets themselves)."""
        passed: set[int] = set()
        for node in self.nodes.values():
            ref = node.get("$ref")
            parts = pointer_parts(ref) if isinstance(ref, str) and ref.startswith("#/") else None
            at: Any = self.root
            for part in (parts or [])[:-1]:
                try:
                    at = step(at, part)
                except LookupError:
                    break
                if isinstance(at, dict):
                    passed.add(id(at))
        return passed

    def _resolve(self, ref: str) -> Any:
        try:
            return resolve(self.root, ref)
        except LookupError:
            return None

    def _unsupported_shape(self, node: dict) -> str:
        t = node.get("type", "object")
        if t != "object":
            return f"type {json.dumps(t)}"
        for kw in _OTHER_SHAPES:
            if kw in node:
                return f"'{kw}' beside 'properties'"
        pattern = node.get("patternProperties", {})
        if not isinstance(pattern, dict) or any(key not in self.keys for key in pattern):
            return "'patternProperties' beside 'properties' that tagjit does not write as its own key rule"
        req = node.get("required", [])
        missing = [r for r in req if r not in node["properties"]] if isinstance(req, list) else []
        if missing:
            return f"required keys not in properties ({', '.join(map(str, missing))})"
        if node.get("maxProperties", 1 << 30) < len(set(req)):
            return "maxProperties below the number of required keys"
        for name in node["properties"]:
            if isinstance(name, str) and any(ord(c) < 0x20 for c in name):
                return "a property name with a control character"
        return ""

    def _reach(self) -> None:
        """Which nodes have an any-order object at or below them (through $ref too)."""
        back: dict[int, list[int]] = {}
        for src, dsts in self.edges.items():
            for d in dsts:
                back.setdefault(d, []).append(src)
        seen = set(self.ao) | (self.counts.keys() & self.nodes.keys())
        todo = list(seen)
        while todo:
            for src in back.get(todo.pop(), ()):
                if src not in seen:
                    seen.add(src)
                    todo.append(src)
        self.has_ao = seen

    # -- tracking structure ----------------------------------------------------------------------
    def _build_vals(self) -> Val | None:
        self._vals: dict[int, Val] = {}
        self._objs: dict[int, Obj] = {}
        self._arrs: dict[int, _Arr] = {}
        self._checked: set[int] = set()  # objects that are a union's branch somewhere: their scalars are checked
        return self._val(self.root)

    def _val(self, node: Any) -> Val | None:
        if not isinstance(node, dict) or id(node) not in self.has_ao:
            return None
        hit = self._vals.get(id(node))
        if hit is not None:
            return hit
        val = self._vals[id(node)] = Val()
        leaves = self._leaves(node, set())
        objs = [x for x in leaves if admits(x, "object")]
        arrs = [x for x in leaves if admits(x, "array")]
        tracked_objs = [x for x in objs if self._obj_has_ao(x)]
        tracked_arrs = [x for x in arrs if self._arr_has_ao(x)]
        where = self.paths.get(id(node), "#")
        if tracked_objs and len(objs) > 1:
            if not self._followable(objs):
                raise _Ambiguous(where, self._ao_below(tracked_objs))
            val.alts = tuple(self._obj(x, checked=True) for x in objs)
        elif tracked_objs:
            val.obj = self._obj(tracked_objs[0])
        if tracked_arrs and len(arrs) > 1:
            raise _Ambiguous(where, self._ao_below(tracked_arrs))
        if tracked_arrs:
            val.arr = self._arr(tracked_arrs[0])
        counted = [x for x in leaves if id(x) in self.counts]
        if counted:
            if len([x for x in leaves if admits(x, "string")]) > 1:  # which string it is, only the grammar knows
                raise _Ambiguous(where, {id(x) for x in counted})
            val.length = self.counts[id(counted[0])]
        return val

    def _ao_below(self, nodes: list[dict]) -> set[int]:
        seen: set[int] = set()
        todo = [id(n) for n in nodes]
        while todo:
            i = todo.pop()
            if i in seen:
                continue
            seen.add(i)
            todo.extend(self.edges.get(i, ()))
        return seen & (self.ao | self.counts.keys())

    def _leaves(self, node: dict, seen: set[int]) -> list[dict]:
        if id(node) in seen:
            return []
        seen.add(id(node))
        branches: list[Any] = []
        if isinstance(node.get("$ref"), str):
            branches.append(self._resolve(node["$ref"]))
        for kw in ("anyOf", "oneOf"):
            if isinstance(node.get(kw), list):
                branches.extend(node[kw])
        if isinstance(node.get("allOf"), list) and len(node["allOf"]) == 1:
            branches.append(node["allOf"][0])
        if not branches:
            return [node]
        own = {"properties", "additionalProperties", "items", "prefixItems"} & node.keys()
        if own and id(node) in self.has_ao:
            raise _Ambiguous(self.paths.get(id(node), "#"), self._ao_below([node]),
                             f"{KEYWORD} with {'/'.join(sorted(own))} beside $ref/anyOf/oneOf/allOf")
        out: list[dict] = []
        for b in branches:
            if isinstance(b, dict):
                out.extend(self._leaves(b, seen))
            elif b is True:
                out.append({})
        return out

    def _obj_has_ao(self, node: dict) -> bool:
        if id(node) in self.ao:
            return True
        return any(isinstance(s, dict) and id(s) in self.has_ao
                   for _, s in keywords.children(node, keywords.MEMBER_VALUES))

    def _arr_has_ao(self, node: dict) -> bool:
        return any(isinstance(s, dict) and id(s) in self.has_ao for _, s in keywords.children(node, keywords.ITEM_VALUES))

    def _followable(self, objs: list[dict]) -> bool:
        """Whether the filter can follow every branch of a union of objects at once, soundly.

        The grammar is the union of the branches' grammars and the filter the union of their key checks, so a text
        one branch's grammar writes may pass another branch's checks. That is sound for each pair of branches a, b
        where no text of a's grammar passes b's checks (``_told_apart``), or where whatever a's grammar writes under
        a name b takes is also b's value there: the same schema, a value anything satisfies, or scalars the filter
        itself checks (``_writes_within``)."""
        if not all(id(x) in self.ao and self._gaps(x) is not None for x in objs):
            return False  # an object in declared order (or untracked) gives the filter nothing to follow
        return all(self._told_apart(a, b) or self._writes_within(a, b) for a in objs for b in objs if a is not b)

    def _told_apart(self, a: dict, b: dict) -> bool:
        """Whether no text a's grammar writes passes b's checks: b requires a name whose scalars the filter checks,
        and a writes that name only with other values, or not at all (a discriminating ``type: "Point"``)."""
        pa, pb = a.get("properties") or {}, b.get("properties") or {}
        for name in b.get("required") or []:
            allowed = scalar_values(pb.get(name))
            if allowed is None:
                continue
            if name in pa:
                written = scalar_values(pa[name])
                if pa[name] is False or written is not None and not written & allowed:
                    return True
            elif self._extra(a) is False or name in (self._gaps(a) or ()):
                return True
        return False

    def _writes_within(self, a: dict, b: dict) -> bool:
        """Whether each name a's grammar writes holds a value b's takes there, or a name b's filter refuses."""
        pa, pb = a.get("properties") or {}, b.get("properties") or {}
        extra_a, extra_b = self._extra(a), self._extra(b)
        gone_a, gone_b = self._gaps(a) or frozenset(), self._gaps(b) or frozenset()
        for name, sa in pa.items():
            if name in pb:
                if not self._within(sa, pb[name]):
                    return False
            elif not (extra_b is False or name in gone_b or self._within(sa, extra_b, False)):
                return False
        if extra_a is False:
            return True
        return (all(self._within(extra_a, sb) for name, sb in pb.items() if name not in pa and name not in gone_a)
                and (extra_b is False or self._within(extra_a, extra_b, False)))

    def _within(self, a: Any, b: Any, checked: bool = True) -> bool:
        """Whether every value schema a takes passes a position whose schema is b, where the filter checks b's
        scalars if ``checked`` (a declared name of a union's branch; not an undeclared one)."""
        if a is False or b is True or (isinstance(b, dict) and not set(b) - keywords.ANNOTATIONS):
            return True
        if b is False:
            return False
        if checked and scalar_values(b) is not None:
            return True
        # Written order matters (a declared-order object below): compare the schemas as written, keys in order.
        return self.canonical(json.dumps(a)) == self.canonical(json.dumps(b))

    def _extra(self, node: dict) -> Any:
        """What an undeclared name's value may be: a schema, True, or False (no undeclared name); None where the
        names' values differ by pattern (more than one patternProperties language)."""
        pattern = node.get("patternProperties")
        if isinstance(pattern, dict) and pattern:
            # Normalised (schema.pattern_properties): the languages are the only undeclared names.
            return next(iter(pattern.values())) if len(pattern) == 1 else None
        extra = node.get("additionalProperties", node.get("unevaluatedProperties"))
        if extra is None:
            return True if not self.strict or "patternProperties" in node else False
        return extra if isinstance(extra, dict) else extra is not False

    def _gaps(self, node: dict) -> frozenset[str] | None:
        """The undeclared names a normalised object's grammar does not write though its filter would take them: none
        without patternProperties, those its one language leaves out ("every name but these"), None where the filter
        cannot tell its names as the grammar does (a pattern, several languages)."""
        if id(node) in self._gaps_of:
            return self._gaps_of[id(node)]
        pattern = node.get("patternProperties")
        gaps: frozenset[str] | None = frozenset()
        if isinstance(pattern, dict) and pattern:
            expr = self.keys.get(next(iter(pattern))) if len(pattern) == 1 else None
            gaps = excluded_names(expr) if expr is not None else None
            if gaps is not None:
                gaps -= set(node.get("properties") or {})
        self._gaps_of[id(node)] = gaps
        return gaps

    def _obj(self, node: dict, checked: bool = False) -> Obj:
        hit = self._objs.get(id(node))
        if hit is not None:
            if checked:
                self._checked.add(id(node))
                if len(hit.children) == len(hit.names):  # else it is being built: it adds them when done
                    _add_checks(hit, node)
            return hit
        o = self._objs[id(node)] = Obj()
        o.path = self.paths.get(id(node), "#")
        o.ao = id(node) in self.ao
        props = node.get("properties") if isinstance(node.get("properties"), dict) else {}
        o.names = list(props)
        o.index = {n: i for i, n in enumerate(o.names)}
        o.children = [self._val(props[n]) for n in o.names]
        if checked:
            self._checked.add(id(node))
        if id(node) in self._checked:
            _add_checks(o, node)
        extra = node.get("additionalProperties", node.get("unevaluatedProperties"))
        pattern = node.get("patternProperties")
        if extra is None:
            o.extra_ok = not self.strict or "patternProperties" in node
        else:
            o.extra_ok = extra is not False or bool(pattern)  # the grammar writes only the patterns' names
        if isinstance(extra, dict):
            o.extra = self._val(extra)
        o.forbidden = self._gaps(node) or frozenset()
        below = [s for s in pattern.values() if isinstance(s, dict) and id(s) in self.has_ao] \
            if isinstance(pattern, dict) else []
        if below and len(pattern) == 1 and extra is False:  # every undeclared name takes that value
            o.extra = self._val(below[0])
        elif below:  # the filter would have to tell which pattern a name matches
            raise _Ambiguous(o.path, self._ao_below(below), f"{KEYWORD} below patternProperties")
        if not o.ao:
            return o
        o.all = (1 << len(o.names)) - 1
        for r in dict.fromkeys(node.get("required", [])):
            o.req |= 1 << o.index[r]
        o.min = int(node.get("minProperties", 0))
        o.max = int(node.get("maxProperties", 1 << 30))
        if not o.extra_ok and o.min > len(o.names):
            raise ConstraintError(f"minProperties {o.min} exceeds the {len(o.names)} allowed keys at {o.path}")
        for k, name in enumerate(o.names):
            t = 0
            o.below[t] |= 1 << k
            for b in key_spelling(name).encode():
                nxt = o.next[t].get(b)
                if nxt is None:
                    nxt = o.next[t][b] = len(o.next)
                    o.next.append({})
                    o.term.append(-1)
                    o.below.append(0)
                t = nxt
                o.below[t] |= 1 << k
            o.term[t] = k
        return o

    def _arr(self, node: dict) -> _Arr:
        hit = self._arrs.get(id(node))
        if hit is not None:
            return hit
        a = self._arrs[id(node)] = _Arr()
        items = node.get("items")
        if isinstance(items, list):
            a.prefix = [self._val(x) for x in items]
            a.items = self._val(node.get("additionalItems"))
        else:
            a.prefix = [self._val(x) for x in node.get("prefixItems") or []]
            a.items = self._val(items)
        return a


def _add_checks(o: Obj, node: dict) -> None:
    """A branch of a union: the filter checks its discriminating scalars (see ``_followable``)."""
    props = node.get("properties") if isinstance(node.get("properties"), dict) else {}
    for k, name in enumerate(o.names):
        allowed = scalar_values(props[name])
        if allowed is not None and o.children[k] is None:
            o.children[k] = Val()
            o.children[k].check = allowed


def scalar_key(value: Any) -> tuple:
    """A JSON scalar as a set member: 1 and 1.0 meet, true and 1 do not."""
    t = json_type(value)
    return ("number" if t == "integer" else t, value)


# A pattern that spells out its strings: an anchored literal or a group of them (``^success$``, ``^(fail|error)$``;
# ``^ok|no$`` is "starts with ok or ends with no").
_LITERALS = re.compile(r"\^(?:\(([\w -]+(?:\|[\w -]+)*)\)|([\w -]+))\$")


def scalar_values(schema: Any) -> frozenset | None:
    """The values an ``enum``/``const`` of scalars allows (as ``scalar_key``s), or a string ``pattern`` that lists
    its strings, if that is all the schema says."""
    if not isinstance(schema, dict):
        return None
    said = set(schema) - keywords.ANNOTATIONS
    if said == {"type", "pattern"} and schema["type"] == "string" and isinstance(schema["pattern"], str):
        m = _LITERALS.fullmatch(schema["pattern"])
        return None if m is None else frozenset(scalar_key(v) for v in (m.group(1) or m.group(2)).split("|"))
    if not said - {"type"} <= {"enum", "const"}:
        return None
    values = [schema["const"]] if "const" in schema else schema.get("enum")
    if not isinstance(values, list) or "const" in schema and "enum" in schema:
        return None
    if any(isinstance(v, (dict, list)) or isinstance(v, str) and v.startswith(PLACEHOLDER_PREFIX) for v in values):
        return None  # a placeholder stands for tagjit's rule of number values (build.splice), not for that string
    t = schema.get("type")
    if t is not None:
        types = t if isinstance(t, list) else [t]
        values = [v for v in values if json_type(v) in types or json_type(v) == "integer" and "number" in types]
    return frozenset(scalar_key(v) for v in values)


def _refs_into_root(schema: dict) -> bool:
    """Whether a ``$ref`` points into one of the root's members other than its definitions (``#/bolts/...``)."""
    refs = [n["$ref"] for n, _ in keywords.subschemas(schema) if isinstance(n.get("$ref"), str)]
    return any(r.startswith("#/") and not r.startswith(("#/$defs/", "#/definitions/")) for r in refs)


_PYTHON_TYPES = {"object": dict, "array": list, "string": str}


def admits(node: dict, kind: str) -> bool:
    """Whether a leaf schema may take a value of ``kind`` ("object", "array" or "string")."""
    t = node.get("type")
    if isinstance(t, str):
        return t == kind
    if isinstance(t, list):
        return kind in t
    want = _PYTHON_TYPES[kind]
    if "const" in node:
        return isinstance(node["const"], want)
    if isinstance(node.get("enum"), list):
        return any(isinstance(v, want) for v in node["enum"])
    return True
