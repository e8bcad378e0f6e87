"""Values tagjit writes its own EBNF for, spliced into xgrammar's grammar.

They are ``multipleOf``, ``not: {enum}`` strings and ``pattern`` (and/or ``format``) with ``minLength``/``maxLength``.

Each such value becomes a placeholder string constant before xgrammar converts the schema; xgrammar prints every
constant as one literal, which ``printed.swap_const_literals`` replaces by the name of tagjit's rule for the value.
"""

from __future__ import annotations

import uuid
from typing import Any

import xgrammar as xgr

from tagjit.build.numbers import RULE_PREFIX, automaton_rules, multiples
from tagjit.build.patterns import EXCEPT, RULE_PREFIX as PATTERN_PREFIX, lengths_rules, node_automaton
from tagjit.build.printed import swap_const_literals
from tagjit.build.strings import exclusion_rules
from tagjit.schema.keywords import LISTS, MAPS, VALUES

_NUMERIC = ("multipleOf", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_STRING = ("minLength", "maxLength", "pattern", "format")
_ALL_TYPES = ["null", "boolean", "object", "array", "number", "string"]


class Lifted:
    """A schema with placeholder constants, and the EBNF rules that replace them."""

    def __init__(self) -> None:
        self.nonce = uuid.uuid4().hex[:12]
        self.rules: dict[str, tuple[str, list[str]]] = {}  # placeholder -> (rule name, rules)

    def _placeholder(self, prefix: str, rules_of: Any) -> dict:
        k = len(self.rules)
        name = f"{prefix}{self.nonce}_{k}"
        self.rules[f"__tagjit_own_{self.nonce}_{k}__"] = (name, rules_of(name))
        return {"const": f"__tagjit_own_{self.nonce}_{k}__"}

    def node(self, n: Any) -> Any:
        if not isinstance(n, dict):
            return n
        out: dict[str, Any] = {}
        for k, v in n.items():
            if k in MAPS and isinstance(v, dict):
                out[k] = {name: self.node(c) for name, c in v.items()}
            elif (k in LISTS or k == "items") and isinstance(v, list):
                out[k] = [self.node(c) for c in v]
            elif k in VALUES and k != "not" and isinstance(v, dict):
                out[k] = self.node(v)
            else:
                out[k] = v
        if "multipleOf" not in out and "not" not in out and not pattern_with_lengths(out):
            return out
        return self._split(out)

    def _split(self, n: dict) -> dict:
        """The node as anyOf its own-EBNF parts and the rest of its types (xgrammar's)."""
        t = n.get("type")
        types = [t] if isinstance(t, str) else list(t) if isinstance(t, list) else list(_ALL_TYPES)
        parts: list[dict] = []
        if "multipleOf" in n:
            m = multiples(n, "number" not in types)
            parts.append(self._placeholder(RULE_PREFIX, lambda name: automaton_rules(m, name)))
            types = [x for x in types if x not in ("integer", "number")]
        if "not" in n:
            excluded = list(dict.fromkeys(n["not"]["enum"]))
            parts.append(self._placeholder("tagjit_notstr_", lambda name: exclusion_rules(excluded, name)))
            types = [x for x in types if x != "string"]
        own_string = "not" in n
        if pattern_with_lengths(n) and "string" in types:
            a = node_automaton(n)  # with the node's format too, where it has one beside the pattern
            parts.append(self._placeholder(PATTERN_PREFIX, lambda name: lengths_rules(a, name)))
            types = [x for x in types if x != "string"]
            own_string = True
        if types:
            rest = {k: v for k, v in n.items() if k not in ("not", "$defs", "definitions", EXCEPT, *_NUMERIC)
                    and not (k in _STRING and own_string)}
            rest["type"] = types[0] if len(types) == 1 else types
            parts.append(rest)
        keep = {k: v for k, v in n.items() if k in ("$defs", "definitions")}
        return {**keep, "anyOf": parts} if len(parts) > 1 else {**parts[0], **keep}

    def splice(self, grammar: xgr.Grammar) -> xgr.Grammar:
        """xgrammar's grammar of the lifted schema with every placeholder replaced by tagjit's rule."""
        if not self.rules:
            return grammar
        text, printed = swap_const_literals(str(grammar), {p: name for p, (name, _) in self.rules.items()})
        extra = [rule for p in printed for rule in self.rules[p][1]]
        return xgr.Grammar.from_ebnf(text + "\n" + "\n".join(extra) + "\n", root_rule_name="root")


def pattern_with_lengths(n: dict) -> bool:
    """Whether tagjit writes a node's string rule: a ``pattern`` beside ``minLength``/``maxLength``, or strings it must
    avoid (``patterns.EXCEPT``, from an exact oneOf)."""
    return EXCEPT in n or isinstance(n.get("pattern"), str) and ("minLength" in n or "maxLength" in n)


def lift(schema: Any) -> tuple[Any, Lifted]:
    """A normalised schema with its own-EBNF values replaced by placeholders, and what replaces them."""
    lifted = Lifted()
    return lifted.node(schema), lifted
