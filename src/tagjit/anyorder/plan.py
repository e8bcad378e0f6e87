"""The any-order plan: which objects opt in, and the structure the token filter follows."""

from __future__ import annotations

import json
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


from tagjit.errors import ConstraintError, UnsupportedFeatureError
from tagjit.schema import keywords
from tagjit.schema.keywords import children, resolve


_OTHER_SHAPES = ("anyOf", "oneOf", "allOf", "$ref", "enum", "const", "patternProperties", "propertyNames")


def _children(node: dict) -> Iterator[Any]:
    return (child for _, child in children(node))


class Val:
    """What a value position can open: a tracked object and/or a tracked array (None: not tracked)."""

    __slots__ = ("obj", "arr")

    def __init__(self) -> None:
        self.obj: Obj | None = None
        self.arr: _Arr | None = None


class Obj:
    """A tracked object: any-order (keys checked) or declared-order (followed to reach nested ones)."""

    __slots__ = ("ao", "names", "index", "children", "extra_ok", "extra", "req", "all", "min", "max",
                 "next", "term", "below", "path")

    def __init__(self) -> None:
        self.ao = False
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.children: list[Val | None] = []
        self.extra_ok = False
        self.extra: Val | None = None
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


_BRANCHES = (f"{KEYWORD} below an anyOf/oneOf whose branches can be several objects or arrays (the filter cannot "
             "tell which branch the text is in)")


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

    def __init__(self, schema: dict, default: bool, strict: bool) -> None:
        self.root = schema
        self.strict = strict
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
        while True:
            self._reach()
            try:
                self.root_val = self._build_vals()
                return
            except _Ambiguous as amb:
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
        seen = set(self.ao)
        todo = list(self.ao)
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
            raise _Ambiguous(where, self._ao_below(tracked_objs))
        if tracked_arrs and len(arrs) > 1:
            raise _Ambiguous(where, self._ao_below(tracked_arrs))
        if tracked_objs:
            val.obj = self._obj(tracked_objs[0])
        if tracked_arrs:
            val.arr = self._arr(tracked_arrs[0])
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
        return seen & self.ao

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
            raise UnsupportedFeatureError(f"{KEYWORD} with {'/'.join(sorted(own))} beside $ref/anyOf/oneOf/allOf",
                                          self.paths.get(id(node), "#"))
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

    def _obj(self, node: dict) -> Obj:
        hit = self._objs.get(id(node))
        if hit is not None:
            return hit
        o = self._objs[id(node)] = Obj()
        o.path = self.paths.get(id(node), "#")
        o.ao = id(node) in self.ao
        props = node.get("properties") if isinstance(node.get("properties"), dict) else {}
        o.names = list(props)
        o.index = {n: i for i, n in enumerate(o.names)}
        o.children = [self._val(props[n]) for n in o.names]
        extra = node.get("additionalProperties", node.get("unevaluatedProperties"))
        if extra is None:
            o.extra_ok = not self.strict or "patternProperties" in node
        else:
            o.extra_ok = extra is not False
        if isinstance(extra, dict):
            o.extra = self._val(extra)
        pattern = node.get("patternProperties")
        below = [s for s in pattern.values() if isinstance(s, dict) and id(s) in self.has_ao] \
            if isinstance(pattern, dict) else []
        if below:  # the filter would have to tell which pattern a name matches
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


def _refs_into_root(schema: dict) -> bool:
    """Whether a ``$ref`` points into one of the root's members other than its definitions (``#/bolts/...``)."""
    refs = [n["$ref"] for n, _ in keywords.subschemas(schema) if isinstance(n.get("$ref"), str)]
    return any(r.startswith("#/") and not r.startswith(("#/$defs/", "#/definitions/")) for r in refs)


def admits(node: dict, kind: str) -> bool:
    t = node.get("type")
    if isinstance(t, str):
        return t == kind
    if isinstance(t, list):
        return kind in t
    want = dict if kind == "object" else list
    if "const" in node:
        return isinstance(node["const"], want)
    if isinstance(node.get("enum"), list):
        return any(isinstance(v, want) for v in node["enum"])
    return True
