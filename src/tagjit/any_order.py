"""Objects whose properties may come in any order (opt-in with ``x-any-order``), exactly.

An exact any-order grammar is exponential (all subsets) or factorial (all permutations), so the
work is split in two. The grammar lets an opted-in object hold any sequence of its ``"key": value``
pairs (each value keeps its own schema), and a per-request token filter tracks which keys each such
object already has: it removes tokens that would repeat a key, close the object while a required
key is missing, or start a key (or a ``,``) that no unused key can finish. Values use xgrammar's own
JSON-schema converter, so every other object keeps its declared order.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any, Iterator

import numpy as np
import xgrammar as xgr

from .ebnf import Built, ebnf_string
from .errors import ConstraintError, UnsupportedFeatureError
from .settings import Settings

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


def build(schema: dict, settings: Settings) -> Built:
    """The grammar and token filter of a schema with any-order objects."""
    default = settings.any_order_default
    if isinstance(schema.get(KEYWORD_DEFAULT), bool):
        default = schema[KEYWORD_DEFAULT]
    plan = _Plan(schema, default, settings.strict_mode)
    if not plan.ao:
        return Built(_xgr_json(_strip_keywords(schema), settings))
    ebnf = _Ebnf(plan, settings).text()
    return Built(xgr.Grammar.from_ebnf(ebnf), AnyOrderSpec(plan.root_val))


def _xgr_json(schema: Any, settings: Settings) -> xgr.Grammar:
    return xgr.Grammar.from_json_schema(json.dumps(schema), any_whitespace=True,
                                        max_whitespace_cnt=settings.max_whitespace,
                                        strict_mode=settings.strict_mode)


# ---------------------------------------------------------------------------------------------
# Schema analysis: which objects opt in, and where the filter must follow the JSON structure.
# ---------------------------------------------------------------------------------------------

_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_VALUES = ("items", "additionalProperties", "unevaluatedProperties", "propertyNames",
           "additionalItems", "contains", "not", "if", "then", "else")
_OTHER_SHAPES = ("anyOf", "oneOf", "allOf", "$ref", "enum", "const", "patternProperties", "propertyNames")


def _children(node: dict) -> Iterator[Any]:
    for key in _MAPS:
        sub = node.get(key)
        if isinstance(sub, dict):
            yield from sub.values()
    for key in _LISTS:
        sub = node.get(key)
        if isinstance(sub, list):
            yield from sub
    for key in _VALUES:
        sub = node.get(key)
        if isinstance(sub, dict):
            yield sub
        elif key == "items" and isinstance(sub, list):
            yield from sub


class _Val:
    """What a value position can open: a tracked object and/or a tracked array (None: not tracked)."""

    __slots__ = ("obj", "arr")

    def __init__(self) -> None:
        self.obj: _Obj | None = None
        self.arr: _Arr | None = None


class _Obj:
    """A tracked object: any-order (keys checked) or declared-order (followed to reach nested ones)."""

    __slots__ = ("ao", "names", "index", "children", "extra_ok", "extra", "req", "all", "min", "max",
                 "next", "term", "below", "path")

    def __init__(self) -> None:
        self.ao = False
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.children: list[_Val | None] = []
        self.extra_ok = False
        self.extra: _Val | None = None
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
        self.prefix: list[_Val | None] = []
        self.items: _Val | None = None


class _Ambiguous(Exception):
    def __init__(self, where: str, ids: set[int]) -> None:
        super().__init__(where)
        self.where = where
        self.ids = ids


def key_spelling(name: str) -> str:
    """The JSON text of a property name between its quotes, as the grammar writes it."""
    return json.dumps(name, ensure_ascii=False)[1:-1]


class _Plan:
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
        while True:
            self._reach()
            try:
                self.root_val = self._build_vals()
                return
            except _Ambiguous as amb:
                bad = amb.ids & self.ao
                if bad & self.explicit or not bad:
                    raise UnsupportedFeatureError(
                        f"{KEYWORD} below an anyOf/oneOf whose branches can be several objects or arrays "
                        "(the filter cannot tell which branch the text is in)", amb.where) from None
                self.ao -= bad  # server default: those objects keep their declared order

    # -- graph -----------------------------------------------------------------------------------
    def _collect(self, node: Any, path: str) -> None:
        if not isinstance(node, dict) or id(node) in self.nodes:
            return
        self.nodes[id(node)] = node
        self.paths[id(node)] = path
        out: list[int] = []
        for key in _MAPS:
            sub = node.get(key)
            if isinstance(sub, dict):
                for name, child in sub.items():
                    self._collect(child, f"{path}/{key}/{name}")
                    if isinstance(child, dict):
                        out.append(id(child))
        for key in _LISTS + ("items",):
            sub = node.get(key)
            if isinstance(sub, list):
                for j, child in enumerate(sub):
                    self._collect(child, f"{path}/{key}/{j}")
                    if isinstance(child, dict):
                        out.append(id(child))
        for key in _VALUES:
            sub = node.get(key)
            if isinstance(sub, dict):
                self._collect(sub, f"{path}/{key}")
                out.append(id(sub))
        ref = node.get("$ref")
        if isinstance(ref, str):
            target = self._resolve(ref)
            if isinstance(target, dict):
                self._collect(target, ref)
                out.append(id(target))
        self.edges[id(node)] = out

    def _resolve(self, ref: str) -> Any:
        if not ref.startswith("#"):
            return None
        node: Any = self.root
        for part in ref[1:].split("/")[1:] if ref != "#" else []:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return None
        return node

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
    def _build_vals(self) -> _Val | None:
        self._vals: dict[int, _Val] = {}
        self._objs: dict[int, _Obj] = {}
        self._arrs: dict[int, _Arr] = {}
        return self._val(self.root)

    def _val(self, node: Any) -> _Val | None:
        if not isinstance(node, dict) or id(node) not in self.has_ao:
            return None
        hit = self._vals.get(id(node))
        if hit is not None:
            return hit
        val = self._vals[id(node)] = _Val()
        leaves = self._leaves(node, set())
        objs = [x for x in leaves if _admits(x, "object")]
        arrs = [x for x in leaves if _admits(x, "array")]
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
        subs = list((node.get("properties") or {}).values()) if isinstance(node.get("properties"), dict) else []
        for kw in ("additionalProperties", "unevaluatedProperties"):
            subs.append(node.get(kw))
        if isinstance(node.get("patternProperties"), dict):
            subs.extend(node["patternProperties"].values())
        return any(isinstance(s, dict) and id(s) in self.has_ao for s in subs)

    def _arr_has_ao(self, node: dict) -> bool:
        subs: list[Any] = [node.get("items"), node.get("additionalItems")]
        for kw in ("prefixItems", "items"):
            if isinstance(node.get(kw), list):
                subs.extend(node[kw])
        return any(isinstance(s, dict) and id(s) in self.has_ao for s in subs)

    def _obj(self, node: dict) -> _Obj:
        hit = self._objs.get(id(node))
        if hit is not None:
            return hit
        o = self._objs[id(node)] = _Obj()
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
        if isinstance(pattern, dict) and any(isinstance(s, dict) and id(s) in self.has_ao for s in pattern.values()):
            raise UnsupportedFeatureError(f"{KEYWORD} below patternProperties", o.path)
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


def _admits(node: dict, kind: str) -> bool:
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


# ---------------------------------------------------------------------------------------------
# Grammar: xgrammar converts every value schema; any-order objects are EBNF spliced around them.
# ---------------------------------------------------------------------------------------------

def _strip_keywords(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip_keywords(v) for k, v in node.items() if k not in (KEYWORD, KEYWORD_DEFAULT)}
    if isinstance(node, list):
        return [_strip_keywords(v) for v in node]
    return node


class _Ebnf:
    """EBNF for a plan: one xgrammar conversion of every value schema, plus the any-order object rules."""

    def __init__(self, plan: _Plan, settings: Settings) -> None:
        self.plan = plan
        self.settings = settings
        self.nonce = uuid.uuid4().hex[:12]
        self.ao_index: dict[int, int] = {}
        for i in plan.nodes:
            if i in plan.ao:
                self.ao_index[i] = len(self.ao_index)
        self.needs_root_def = False

    def _placeholder(self, k: int) -> str:
        return f"__tagjit_ao_{self.nonce}_{k}__"

    def _t(self, node: Any) -> Any:
        """The schema with any-order objects replaced by placeholder constants."""
        if not isinstance(node, dict):
            return node
        if id(node) in self.plan.ao:
            return {"const": self._placeholder(self.ao_index[id(node)])}
        out: dict[str, Any] = {}
        for k, v in node.items():
            if k in (KEYWORD, KEYWORD_DEFAULT):
                continue
            if k in _MAPS and isinstance(v, dict):
                out[k] = {n: self._t(c) for n, c in v.items()}
            elif (k in _LISTS or k == "items") and isinstance(v, list):
                out[k] = [self._t(c) for c in v]
            elif k in _VALUES and isinstance(v, dict):
                out[k] = self._t(v)
            elif k == "$ref" and isinstance(v, str):
                out[k] = self._ref(v)
            else:
                out[k] = v
        return out

    def _ref(self, ref: str) -> str:
        parts = ref[1:].split("/")[1:] if ref.startswith("#/") else []
        node: Any = self.plan.root
        for part in parts[:-1]:  # a pointer may end at, but not pass through, an any-order object
            part = part.replace("~1", "/").replace("~0", "~")
            node = node.get(part) if isinstance(node, dict) else (
                node[int(part)] if isinstance(node, list) and part.isdigit() and int(part) < len(node) else None)
            if isinstance(node, dict) and id(node) in self.plan.ao:
                raise UnsupportedFeatureError(f"$ref into an {KEYWORD} object ({ref})")
        if ref == "#":
            self.needs_root_def = True
            return "#/$defs/__tagjit_root"
        if parts and parts[0] in ("$defs", "definitions"):
            return ref
        if ref.startswith("#/"):
            self.needs_root_def = True
            return "#/$defs/__tagjit_root/" + ref[2:]
        return ref

    def text(self) -> str:
        plan, s = self.plan, self.settings
        root = plan.root
        body = {k: v for k, v in root.items() if k not in ("$defs", "definitions")}
        root_t = self._t(root if id(root) in plan.ao else body)
        branches: list[Any] = [{"const": f"__tagjit_first_{self.nonce}__"}, root_t]
        ao_nodes = [plan.nodes[i] for i in self.ao_index]
        value_slots: list[list[int]] = []
        extra_slots: list[int] = []
        for node in ao_nodes:
            slots = []
            for child in node["properties"].values():
                slots.append(len(branches))
                branches.append(self._t(child) if isinstance(child, dict) else child)
            value_slots.append(slots)
            extra = node.get("additionalProperties", node.get("unevaluatedProperties"))
            if extra is False or (extra is None and s.strict_mode):
                extra_slots.append(-1)
            else:
                extra_slots.append(len(branches))
                branches.append(self._t(extra) if isinstance(extra, dict) else {})
        doc: dict[str, Any] = {"anyOf": branches}
        defs = {n: self._t(c) for n, c in (root.get("$defs") or {}).items()}
        if isinstance(root.get("definitions"), dict):
            doc["definitions"] = {n: self._t(c) for n, c in root["definitions"].items()}
        if self.needs_root_def:
            defs["__tagjit_root"] = root_t
        if defs:
            doc["$defs"] = defs
        text = str(_xgr_json(doc, s))
        alts, lines = _split_root(text)
        if len(alts) != len(branches):
            raise ConstraintError(f"{KEYWORD}: unexpected grammar shape from xgrammar ({len(alts)} branches)")
        ws = _ws(s.max_whitespace)
        rules = ["root ::= " + alts[1]]
        for k, node in enumerate(ao_nodes):
            name = f"tagjit_ao_{self.nonce}_{k}"
            pairs = [f"({_lit(json.dumps(n, ensure_ascii=False))} {ws} \":\" {ws} {alts[j]})"
                     for n, j in zip(node["properties"], value_slots[k])]
            if extra_slots[k] >= 0:
                pairs.append(f"(\"\\\"\" {name}_key_0 {ws} \":\" {ws} {alts[extra_slots[k]]})")
                rules.extend(_other_key_rules(f"{name}_key", list(node["properties"]), f"tagjit_str_{self.nonce}"))
            if pairs:
                rules.append(f"{name} ::= \"{{\" {ws} ({name}_pair ({ws} \",\" {ws} {name}_pair)* {ws})? \"}}\"")
                rules.append(f"{name}_pair ::= " + " | ".join(pairs))
            else:
                rules.append(f"{name} ::= \"{{\" {ws} \"}}\"")
        rules.append(f"tagjit_str_{self.nonce} ::= \"\\\"\" | [^\\0-\\x1f\\\"\\\\] tagjit_str_{self.nonce} "
                     f"| \"\\\\\" ([\\\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]) "
                     f"tagjit_str_{self.nonce}")
        out = "\n".join(lines + rules) + "\n"
        for k in range(len(ao_nodes)):
            out = out.replace(_lit(json.dumps(self._placeholder(k))), f"tagjit_ao_{self.nonce}_{k}")
        return out


def _ws(limit: int | None) -> str:
    if limit is None:
        return "[ \\n\\r\\t]*"
    if limit <= 0:
        return '""'
    return f"[ \\n\\r\\t]{{0, {limit}}}"


def _lit(text: str) -> str:
    return ebnf_string(text)


def _split_root(text: str) -> tuple[list[str], list[str]]:
    """The top-level alternatives of xgrammar's ``root`` rule, and every other rule line."""
    lines = text.splitlines()
    others: list[str] = []
    body = None
    for line in lines:
        if line.startswith("root ::= "):
            body = line[len("root ::= "):]
        elif line.strip():
            others.append(line)
    if body is None or not (body.startswith("(") and body.endswith(")")):
        raise ConstraintError(f"{KEYWORD}: unexpected grammar shape from xgrammar")
    inner = body[1:-1]
    alts, depth, start, i, n = [], 0, 0, 0, len(inner)
    while i < n:
        c = inner[i]
        if c == '"':
            i += 1
            while inner[i] != '"':
                i += 2 if inner[i] == "\\" else 1
        elif c == "[":
            i += 1
            while inner[i] != "]":
                i += 2 if inner[i] == "\\" else 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            alts.append(inner[start:i].strip())
            start = i + 1
        i += 1
    alts.append(inner[start:].strip())
    return alts, others


def _class_char(c: str) -> str:
    return "\\" + c if c in "\\]^-[\"" else c


def _other_key_rules(name: str, names: list[str], rest: str) -> list[str]:
    """Rules for a key body (after its opening quote) that spells none of the declared names."""
    units_of = [_units(key_spelling(n)) for n in names]
    trie: list[dict[str, int]] = [{}]
    term = [False]
    for units in units_of:
        t = 0
        for u in units:
            if u not in trie[t]:
                trie[t][u] = len(trie)
                trie.append({})
                term.append(False)
            t = trie[t][u]
        term[t] = True
    rules = []
    for t, kids in enumerate(trie):
        plain = "".join(_class_char(u) for u in kids if len(u) == 1)
        escs = {u[1] for u in kids if len(u) == 2}
        alts = [] if term[t] else ['"\\""']
        alts.append(f"[^\\0-\\x1f\\\"\\\\{plain}] {rest}")
        other = "".join(_class_char(c) for c in '"\\/bfnrt' if c not in escs)
        if other:
            alts.append(f"\"\\\\\" [{other}] {rest}")
        alts.append(f"\"\\\\u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] {rest}")
        alts.extend(f"{_lit(u)} {name}_{kid}" for u, kid in kids.items())
        rules.append(f"{name}_{t} ::= " + " | ".join(alts))
    return rules


def _units(spelling: str) -> list[str]:
    out, i = [], 0
    while i < len(spelling):
        if spelling[i] == "\\":
            out.append(spelling[i:i + 2])
            i += 2
        else:
            out.append(spelling[i])
            i += 1
    return out


# ---------------------------------------------------------------------------------------------
# The token filter: follows the JSON structure of the output and checks each any-order object's keys.
# ---------------------------------------------------------------------------------------------

# Lexical modes.
_N, _S, _SE, _L, _K, _KE = range(6)
# Frame kinds: root, tracked object, tracked array, untracked (opaque) object or array.
_R, _O, _A, _X = range(4)
# Phases of root/object/array frames.
_VALUE, _AFTER, _KEY_OR_END, _KEY, _AFTER_KEY, _VALUE_OR_END = range(6)
_WS = frozenset(b" \t\r\n")
_STR_STOP = re.compile(rb'["\\]')
_LIT_STOP = re.compile(rb"[ \t\r\n,}\]]")
_REJECT = -1

State = tuple  # (mode, stack): stack is a tuple of frame tuples, the root frame first


def _slack(obj: _Obj, used: int, count: int) -> tuple[int, bool]:
    """Keys that may still be chosen (bitmask over declared names) and whether other names may."""
    missing = obj.req & ~used
    slack = obj.max - count - bin(missing).count("1")
    if slack > 0:
        return obj.all & ~used, obj.extra_ok
    return missing, False


def _step(mode: int, stack: list, data: bytes) -> int:
    """Advance (mode, stack) by data in place; returns the new mode or _REJECT."""
    i, n = 0, len(data)
    while i < n:
        if mode == _S:
            m = _STR_STOP.search(data, i)
            if m is None:
                return mode
            i = m.end()
            mode = _N if data[i - 1] == 0x22 else _SE
            continue
        if mode == _SE:
            i += 1
            mode = _S
            continue
        if mode == _L:
            m = _LIT_STOP.search(data, i)
            if m is None:
                return mode
            i = m.start()
            mode = _N
            continue
        top = stack[-1]
        if mode == _K or mode == _KE:
            i, mode = _key_run(mode, stack, top, data, i)
            if mode == _REJECT:
                return _REJECT
            continue
        b = data[i]
        i += 1
        if b in _WS:
            continue
        kind = top[0]
        if kind == _X:
            if b == 0x7B or b == 0x5B:  # { [
                stack[-1] = (_X, top[1] + 1)
            elif b == 0x7D or b == 0x5D:  # } ]
                if top[1] == 1:
                    stack.pop()
                else:
                    stack[-1] = (_X, top[1] - 1)
            elif b == 0x22:
                mode = _S
            continue
        phase = top[2]
        if kind == _R:
            if phase == _AFTER:
                return mode  # after the value only stop tokens (or whitespace) remain: the grammar decides
            mode = _start_value(stack, top, top[1], b)
        elif kind == _O:
            if phase == _AFTER:
                if b == 0x2C:  # ,
                    if top[1].ao:
                        ok, extra = _slack(top[1], top[3], top[5])
                        if not ok and not extra:
                            return _REJECT
                    stack[-1] = top[:2] + (_KEY,) + top[3:6] + (None,)
                elif b == 0x7D:
                    if not _can_close(top):
                        return _REJECT
                    stack.pop()
                else:
                    return _REJECT
            elif phase == _KEY_OR_END or phase == _KEY:
                if b == 0x22:
                    obj = top[1]
                    if obj.ao:
                        ok, extra = _slack(obj, top[3], top[5])
                        if not ok and not extra:
                            return _REJECT
                    stack[-1] = top[:6] + ((0 if obj.ao else -1, b""),)
                    mode = _K
                elif b == 0x7D and phase == _KEY_OR_END:
                    if not _can_close(top):
                        return _REJECT
                    stack.pop()
                else:
                    return _REJECT
            elif phase == _AFTER_KEY:
                if b != 0x3A:  # :
                    return _REJECT
                stack[-1] = top[:2] + (_VALUE,) + top[3:]
            else:  # _VALUE
                mode = _start_value(stack, top, top[6], b)
        else:  # _A
            if phase == _AFTER:
                if b == 0x2C:
                    stack[-1] = (_A, top[1], _VALUE, top[3] + 1)
                elif b == 0x5D:
                    stack.pop()
                else:
                    return _REJECT
            elif b == 0x5D and phase == _VALUE_OR_END:
                stack.pop()
            else:
                arr = top[1]
                child = arr.prefix[top[3]] if top[3] < len(arr.prefix) else arr.items
                mode = _start_value(stack, top, child, b)
        if mode == _REJECT:
            return _REJECT
    return mode


def _can_close(top: tuple) -> bool:
    obj = top[1]
    return not obj.ao or (not (obj.req & ~top[3]) and top[5] >= obj.min)


def _start_value(stack: list, top: tuple, child: _Val | None, b: int) -> int:
    if b in b"}],:":
        return _REJECT
    if top[0] == _O:
        stack[-1] = top[:2] + (_AFTER,) + top[3:6] + (None,)
    else:
        stack[-1] = top[:2] + (_AFTER,) + top[3:]
    if b == 0x7B:
        if child is not None and child.obj is not None:
            stack.append((_O, child.obj, _KEY_OR_END, 0, frozenset(), 0, None))
        else:
            stack.append((_X, 1))
        return _N
    if b == 0x5B:
        if child is not None and child.arr is not None:
            stack.append((_A, child.arr, _VALUE_OR_END, 0))
        else:
            stack.append((_X, 1))
        return _N
    if b == 0x22:
        return _S
    return _L


def _key_run(mode: int, stack: list, top: tuple, data: bytes, i: int) -> tuple[int, int]:
    """Consume key bytes up to the closing quote (or the end of data); returns (index, mode)."""
    obj: _Obj = top[1]
    t, raw = top[6]
    n = len(data)
    start = i
    while i < n:
        b = data[i]
        if mode == _KE:
            mode = _K
        elif b == 0x22:
            break
        elif b == 0x5C:
            mode = _KE
        if t >= 0 and obj.ao:
            t = obj.next[t].get(b, -1)
        i += 1
    raw = raw + data[start:i]
    if obj.ao:
        # Keys below a trie node only shrink as the key grows, so checking the end of the run suffices.
        ok, extra = _slack(obj, top[3], top[5])
        if not extra and (t < 0 or not obj.below[t] & ok):
            return i, _REJECT
    if i < n:  # the closing quote
        return i + 1, _close_key(stack, top, obj, t, raw)
    stack[-1] = top[:6] + ((t, raw),)
    return i, mode


def _close_key(stack: list, top: tuple, obj: _Obj, t: int, raw: bytes) -> int:
    used, extras, count = top[3], top[4], top[5]
    if obj.ao and t >= 0 and obj.term[t] >= 0:
        k = obj.term[t]
        ok, _ = _slack(obj, used, count)
        if not (ok >> k) & 1:
            return _REJECT
        stack[-1] = (_O, obj, _AFTER_KEY, used | (1 << k), extras, count + 1, obj.children[k])
        return _N
    try:
        name = json.loads(b'"' + raw + b'"')
    except ValueError:
        return _REJECT
    if not obj.ao:
        k = obj.index.get(name, -1)
        child = obj.children[k] if k >= 0 else obj.extra
        stack[-1] = top[:2] + (_AFTER_KEY,) + top[3:6] + (child,)
        return _N
    _, extra_ok = _slack(obj, used, count)
    # A declared name spelled differently (escapes) must use its own spelling; no name twice.
    if not extra_ok or name in obj.index or name in extras:
        return _REJECT
    stack[-1] = (_O, obj, _AFTER_KEY, used, extras | {name}, count + 1, obj.extra)
    return _N


def _initial(root: _Val | None) -> State:
    return (_N, ((_R, root, _VALUE),))


def step_state(state: State, data: bytes) -> State | None:
    """The filter state after data, or None if the text breaks an any-order rule."""
    mode, stack = state
    lst = list(stack)
    mode = _step(mode, lst, data)
    if mode == _REJECT:
        return None
    return (mode, tuple(lst))


# -- vocabulary tables ------------------------------------------------------------------------

class _Vocab:
    """Per-tokenizer tables: each token's bytes and which tokens can matter in each situation."""

    def __init__(self, info: xgr.TokenizerInfo) -> None:
        self.tokens: list[bytes] = list(info.decoded_vocab)
        self.words = (info.vocab_size + 31) // 32
        n = len(self.tokens)
        rel = {name: np.zeros(self.words * 32, dtype=bool) for name in
               ("S", "SE", "L", "Kq", "Nall", "Nopen")}
        open_only = re.compile(rb'[ \t\r\n]*("([^"\\]|\\.)*\\?|[-+.0-9A-Za-z]+)')
        for tid, tok in enumerate(self.tokens):
            if not tok:
                continue
            rel["S"][tid] = _closes_then_more(tok, False)
            rel["SE"][tid] = _closes_then_more(tok, True)
            rel["L"][tid] = any(c in b",}]" for c in tok)
            rel["Kq"][tid] = 0x22 in tok
            stripped = tok.strip(b" \t\r\n")
            rel["Nall"][tid] = bool(stripped)
            rel["Nopen"][tid] = bool(stripped) and open_only.fullmatch(tok) is None
        del n
        self.relevant = {k: np.packbits(v, bitorder="little").view(np.int32) for k, v in rel.items()}


def _closes_then_more(tok: bytes, escaped: bool) -> bool:
    i = 0
    if escaped:
        i = 1
    while i < len(tok):
        c = tok[i]
        if c == 0x5C:
            i += 2
            continue
        if c == 0x22:
            return bool(tok[i + 1:].strip(b" \t\r\n"))
        i += 1
    return False


def vocab_tables(info: xgr.TokenizerInfo) -> _Vocab:
    """The vocabulary tables of a tokenizer, computed once per tokenizer."""
    from .tokenizer import per_tokenizer

    return per_tokenizer(info, "any_order.vocab_tables", _Vocab)


class AnyOrderSpec:
    """FilterSpec of a schema with any-order objects (vocabulary-independent, shared by requests)."""

    def __init__(self, root: _Val | None) -> None:
        self.root = root

    def new(self, tokenizer_info: xgr.TokenizerInfo) -> "AnyOrderFilter":
        """A filter in its initial state for this vocabulary."""
        return AnyOrderFilter(self.root, vocab_tables(tokenizer_info))


class AnyOrderFilter:
    """Per-request key bookkeeping of any-order objects (a TokenFilter)."""

    def __init__(self, root: _Val | None, vocab: _Vocab) -> None:
        self._vocab = vocab
        self._initial = _initial(root)
        self._history: list[State] = [self._initial]
        self._verdicts: dict[State, dict[int, bool]] = {}
        self._clears: dict[tuple, list[tuple[int, int]]] = {}

    @property
    def state(self) -> State:
        """The current state (tests, debugging)."""
        return self._history[-1]

    def accept(self, token_id: int) -> bool:
        """Advance by one token; False (state unchanged) if it breaks an any-order rule."""
        state = self._history[-1]
        tokens = self._vocab.tokens
        if not 0 <= token_id < len(tokens):
            return False
        new = step_state(state, tokens[token_id])
        if new is None:
            return False
        self._history.append(new)
        return True

    def accept_bytes(self, data: bytes) -> bool:
        """Advance by raw text; False (state unchanged) if it breaks an any-order rule."""
        new = step_state(self._history[-1], bytes(data))
        if new is None:
            return False
        self._history[-1] = new
        return True

    def rollback(self, num_tokens: int) -> None:
        """Undo the last num_tokens accepted tokens."""
        if num_tokens <= 0:
            return
        if num_tokens >= len(self._history):
            raise ValueError(f"cannot roll back {num_tokens} tokens, only {len(self._history) - 1} accepted")
        del self._history[-num_tokens:]

    def reset(self) -> None:
        """Return to the initial state."""
        self._history = [self._initial]

    def restrict(self, bitmask: Any, index: int) -> None:
        """Clear the bits of tokens that break an any-order rule in row index."""
        state = self._history[-1]
        mode, stack = state
        top = stack[-1]
        if top[0] == _R and top[2] == _AFTER and mode != _L:
            return
        row = bitmask[index].numpy() if hasattr(bitmask, "numpy") else bitmask[index]
        rel = self._vocab.relevant[self._relevance(mode, top)]
        width = min(len(row), len(rel))
        hit = row[:width] & rel[:width]
        words = np.flatnonzero(hit)
        if words.size == 0:
            return
        bits = hit[words]
        key = (state, words.tobytes(), bits.tobytes())
        clear = self._clears.get(key)
        if clear is None:
            clear = self._compute(state, words, bits)
            if len(self._clears) > 4096:
                self._clears.clear()
            self._clears[key] = clear
        for w, keep in clear:
            row[w] &= keep

    def _relevance(self, mode: int, top: tuple) -> str:
        if mode == _S:
            return "S"
        if mode == _SE:
            return "SE"
        if mode == _L:
            return "L"
        if mode == _K or mode == _KE:
            obj = top[1]
            if obj.ao and not _slack(obj, top[3], top[5])[1]:
                return "Nall"
            return "Kq"
        if top[0] == _X or top[2] in (_VALUE, _VALUE_OR_END):
            return "Nopen"
        if top[0] == _O and top[2] in (_KEY, _KEY_OR_END):
            obj = top[1]
            if not obj.ao or _slack(obj, top[3], top[5])[1]:
                return "Nopen"
        return "Nall"

    def _compute(self, state: State, words: np.ndarray, bits: np.ndarray) -> list[tuple[int, int]]:
        verdicts = self._verdicts.get(state)
        if verdicts is None:
            if len(self._verdicts) > 4096:
                self._verdicts.clear()
            verdicts = self._verdicts[state] = {}
        tokens = self._vocab.tokens
        ntok = len(tokens)
        clears = []
        for w, word in zip(words.tolist(), bits.tolist()):
            word &= 0xFFFFFFFF
            bad = 0
            while word:
                low = word & -word
                word ^= low
                tid = w * 32 + low.bit_length() - 1
                ok = verdicts.get(tid)
                if ok is None:
                    ok = verdicts[tid] = tid >= ntok or step_state(state, tokens[tid]) is not None
                if not ok:
                    bad |= low
            if bad:
                keep = ~bad & 0xFFFFFFFF
                clears.append((w, keep - (1 << 32) if keep >= 1 << 31 else keep))
        return clears
