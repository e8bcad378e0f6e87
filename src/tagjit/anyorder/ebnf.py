"""The any-order grammar: xgrammar converts every value schema; any-order objects are EBNF spliced around them."""

from __future__ import annotations

import json
import uuid
from typing import Any

import xgrammar as xgr

from tagjit.build.ebnf import ebnf_string, trie, whitespace_options
from tagjit.errors import UnsupportedFeatureError
from tagjit.settings import Settings
from tagjit.anyorder.plan import AnyOrderPlan, KEYWORD, KEYWORD_DEFAULT, key_spelling
from tagjit.build.printed import reroot_any_of, tighten_separators
from tagjit.schema.keywords import LISTS, MAPS, VALUES, pointer_parts, step


def strip_keywords(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: strip_keywords(v) for k, v in node.items() if k not in (KEYWORD, KEYWORD_DEFAULT)}
    if isinstance(node, list):
        return [strip_keywords(v) for v in node]
    return node


class AnyOrderEbnf:
    """EBNF for a plan: one xgrammar conversion of every value schema, plus the any-order object rules."""

    def __init__(self, plan: AnyOrderPlan, settings: Settings) -> None:
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
            if k in MAPS and isinstance(v, dict):
                out[k] = {n: self._t(c) for n, c in v.items()}
            elif (k in LISTS or k == "items") and isinstance(v, list):
                out[k] = [self._t(c) for c in v]
            elif k in VALUES and isinstance(v, dict):
                out[k] = self._t(v)
            elif k == "$ref" and isinstance(v, str):
                out[k] = self._ref(v)
            else:
                out[k] = v
        return out

    def _ref(self, ref: str) -> str:
        parts = (pointer_parts(ref) or []) if ref.startswith("#/") else []
        node: Any = self.plan.root
        for part in parts[:-1]:  # a pointer may end at, but not pass through, an any-order object
            try:
                node = step(node, part)
            except LookupError:
                node = None
            if isinstance(node, dict) and id(node) in self.plan.ao:
                raise UnsupportedFeatureError(f"$ref into an {KEYWORD} object ({ref})")
        if ref == "#":
            self.needs_root_def = True
            return "#/$defs/__tagjit_root"
        if parts and parts[0] in ("$defs", "definitions"):
            return ref
        if ref.startswith("#/"):
            if id(self.plan.root) in self.plan.ao:  # the root's rule is tagjit's: its other members are not kept
                raise UnsupportedFeatureError(f"$ref into a member of an {KEYWORD} root ({ref})")
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
        pattern_slots: list[list[tuple[str, int]]] = []
        extra_slots: list[int] = []
        for node in ao_nodes:
            slots = []
            for child in node["properties"].values():
                slots.append(len(branches))
                branches.append(self._t(child) if isinstance(child, dict) else child)
            value_slots.append(slots)
            keyed = []
            for key, child in (node.get("patternProperties") or {}).items():
                keyed.append((key, len(branches)))
                branches.append(self._t(child) if isinstance(child, dict) else child)
            pattern_slots.append(keyed)
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
        names = {self._placeholder(k): f"tagjit_ao_{self.nonce}_{k}" for k in range(len(ao_nodes))}
        alts, rules = reroot_any_of(str(xgr_json(doc, s)), len(branches), 1, branches[0]["const"], names)
        # Whitespace inside the braces (ws), before "," and ":" (pre) and after them (post).
        ws = '""' if s.dumps_spacing else _ws(s.max_whitespace)
        pre = ws if s.max_whitespace is None and not s.dumps_spacing else '""'  # bounded: as tighten_separators
        post = '" "' if s.dumps_spacing else ws
        key_lines: dict[str, None] = {}
        for k, node in enumerate(ao_nodes):
            name = f"tagjit_ao_{self.nonce}_{k}"
            pairs = [f"({_lit(json.dumps(n, ensure_ascii=False))} {pre} \":\" {post} {alts[j]})"
                     for n, j in zip(node["properties"], value_slots[k])]
            for key, slot in pattern_slots[k]:
                assert plan.lifted is not None  # the plan takes only objects whose keys the lift wrote
                rule, key_rules = plan.lifted.key_rule(key)
                pairs.append(f"(\"\\\"\" {rule} \"\\\"\" {pre} \":\" {post} {alts[slot]})")
                key_lines.update(dict.fromkeys(key_rules))  # keys of one grammar share class rules
            if extra_slots[k] >= 0:
                pairs.append(f"(\"\\\"\" {name}_key_0 {pre} \":\" {post} {alts[extra_slots[k]]})")
                rules.extend(_other_key_rules(f"{name}_key", list(node["properties"]), f"tagjit_str_{self.nonce}"))
            if pairs:
                rules.append(f"{name} ::= \"{{\" {ws} ({name}_pair ({pre} \",\" {post} {name}_pair)* {ws})? \"}}\"")
                rules.append(f"{name}_pair ::= " + " | ".join(pairs))
            else:
                rules.append(f"{name} ::= \"{{\" {ws} \"}}\"")
        rules.extend(key_lines)
        rules.append(f"tagjit_str_{self.nonce} ::= \"\\\"\" | [^\\0-\\x1f\\\"\\\\] tagjit_str_{self.nonce} "
                     f"| \"\\\\\" ([\\\"\\\\/bfnrt] | \"u\" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]) "
                     f"tagjit_str_{self.nonce}")
        return "\n".join(rules) + "\n"


def _ws(limit: int | None) -> str:
    if limit is None:
        return "[ \\n\\r\\t]*"
    if limit <= 0:
        return '""'
    return f"[ \\n\\r\\t]{{0, {limit}}}"


def _lit(text: str) -> str:
    return ebnf_string(text)


def _class_char(c: str) -> str:
    return "\\" + c if c in "\\]^-[\"" else c


def _other_key_rules(name: str, names: list[str], rest: str) -> list[str]:
    """Rules for a key body (after its opening quote) that spells none of the declared names."""
    nodes, term = trie(_units(key_spelling(n)) for n in names)
    rules = []
    for t, kids in enumerate(nodes):
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


def xgr_json(schema: Any, settings: Settings) -> xgr.Grammar:
    grammar = xgr.Grammar.from_json_schema(json.dumps(schema), strict_mode=settings.strict_mode,
                                           **whitespace_options(settings))
    return tighten_separators(grammar) if settings.bounded_whitespace else grammar
