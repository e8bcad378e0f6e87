"""Values tagjit writes its own EBNF for, spliced into xgrammar's grammar.

They are ``multipleOf``, number ranges xgrammar does not write exactly (every ``number`` range: xgrammar writes at most
6 fraction digits; ``integer`` bounds that are not whole or lie outside int64, which xgrammar refuses), number values
of ``enum``/``const`` (xgrammar prints 0.4 as 0.40000000000000002 and 9.0 as 9 only), ``not: {enum}`` strings,
``pattern`` (and/or ``format``) with ``minLength``/``maxLength``, and ``minLength``/``maxLength`` alone (xgrammar's
bounded string takes no escape; ``bounded_strings``).

Each such value becomes a placeholder string constant before xgrammar converts the schema; xgrammar prints every
constant as one literal, which ``printed.swap_const_literals`` replaces by the name of tagjit's rule for the value.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import xgrammar as xgr

from tagjit.build.bounded_strings import FILTER_COUNTED, RULE_PREFIX as LENGTH_PREFIX, counted, length_rules
from tagjit.build.numbers import (NONINTEGRAL, RANGE_PREFIX, RULE_PREFIX, VALUE_PREFIX, Range, TooLarge,
                                  automaton_rules, is_number, multiples, own_range, range_rules, value_rules)
from tagjit.build.patterns import EXCEPT, RULE_PREFIX as PATTERN_PREFIX, Track, lengths_rules, node_automaton, track
from tagjit.build.keys import (PRECOMPUTED_KEY_STATES, RULE_PREFIX as KEY_PREFIX, is_key_text, key_expr, key_rules,
                               key_states)
from tagjit.build.printed import swap_const_literals, swap_key_regexes
from tagjit.build.strings import exclusion_rules
from tagjit.errors import EmptySchemaError, UnsupportedFeatureError
from tagjit.schema.keywords import LISTS, MAPS, PASSIVE, VALUES

_NUMERIC = ("multipleOf", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_STRING = ("minLength", "maxLength", "pattern", "format")
_ALL_TYPES = ["null", "boolean", "object", "array", "number", "string"]
# Keywords beside which a string's lengths stay xgrammar's: they apply to the whole node, which tagjit's part would
# leave out (a pattern or format with lengths is ``patterns``' rule).
_BESIDE_LENGTHS = ("pattern", "format", "enum", "const", "$ref", "allOf", "anyOf", "oneOf", "not", "if", "then", "else")


PLACEHOLDER_PREFIX = "__tagjit_own_"
"""How every placeholder constant begins: a value that is tagjit's rule, not that string."""


class Lifted:
    """A schema with placeholder constants, and the EBNF rules that replace them (``json_style``: also the rules that
    only JSON-style content takes, number ranges and values and bounded strings; content in another style keeps
    xgrammar's)."""

    def __init__(self, json_style: bool = True) -> None:
        self.nonce = uuid.uuid4().hex[:12]
        self.json_style = json_style
        self.rules: dict[str, tuple[str, list[str]]] = {}  # placeholder -> (rule name, rules)
        self.key_states = 0  # states of the property-name automata whose masks xgrammar precomputes
        self.key_exprs: dict[str, dict] = {}  # placeholder of a patternProperties key -> its language
        # id of a lifted string node -> (minLength, maxLength or None, its pattern's Track or None) that the token
        # filter counts (FILTER_COUNTED)
        self.counts: dict[int, tuple[int, int | None, Track | None]] = {}

    def _placeholder(self, prefix: str, rules: Any) -> str:
        """A new placeholder constant for the rules ``rules(name)`` under a fresh rule name."""
        k = len(self.rules)
        name = f"{prefix}{self.nonce}_{k}"
        self.rules[f"{PLACEHOLDER_PREFIX}{self.nonce}_{k}__"] = (name, rules(name))
        return f"{PLACEHOLDER_PREFIX}{self.nonce}_{k}__"

    def canonical(self, text: str) -> str:
        """The text with each placeholder written as its rules, their own names blanked: equal schemas, equal text."""
        def rules(m: re.Match) -> str:
            hit = self.rules.get(m.group(0))
            return m.group(0) if hit is None else "\n".join(hit[1]).replace(hit[0], "@")
        return re.sub(re.escape(PLACEHOLDER_PREFIX) + r"\w+?__", rules, text)

    def node(self, n: Any) -> Any:
        if not isinstance(n, dict):
            return n
        out: dict[str, Any] = {}
        if FILTER_COUNTED in n:  # a string node without lengths (check._filter_counts), counted by the filter
            out = {k: v for k, v in n.items() if k != FILTER_COUNTED}
            if EXCEPT in out:  # a pattern that is tagjit's automaton alone
                out = self._split(out, None, None)
            lo, hi = n[FILTER_COUNTED]
            self.counts[id(out)] = (lo, hi, track(n))
            return out
        for k, v in n.items():
            if k in MAPS and isinstance(v, dict):
                out[k] = {name: self.node(c) for name, c in v.items()}
            elif (k in LISTS or k == "items") and isinstance(v, list):
                out[k] = [self.node(c) for c in v]
            elif k in VALUES and k != "not" and isinstance(v, dict):
                out[k] = self.node(v)
            else:
                out[k] = v
        out = self._pattern_keys(out)
        if self.json_style:
            out = self._number_values(out)
        rng, lengths = self._range(out), self._lengths(out)
        if ("multipleOf" not in out and "not" not in out and not pattern_with_lengths(out) and rng is None
                and lengths is None):
            return out
        return self._split(out, rng, lengths)

    def _number_values(self, n: dict) -> dict:
        """The node with its enum/const number values as one placeholder (the values' spellings, ``value_rules``)."""
        key = "const" if "const" in n else "enum" if isinstance(n.get("enum"), list) else None
        if key is None or set(n) - PASSIVE - {key}:  # normalised values stand alone; anything else stays xgrammar's
            return n
        values = [n["const"]] if key == "const" else n["enum"]
        numbers = [v for v in values if is_number(v)]
        if not numbers:
            return n
        placeholder = self._placeholder(VALUE_PREFIX, lambda name: value_rules(numbers, name))
        if key == "const":
            return {**n, "const": placeholder}
        first = next(i for i, v in enumerate(values) if is_number(v))
        kept = [placeholder if i == first else v for i, v in enumerate(values) if i == first or not is_number(v)]
        return {**n, "enum": kept}

    def _range(self, n: dict) -> Range | None:
        if not self.json_style or "multipleOf" in n:
            if n.get(NONINTEGRAL) is True:  # xgrammar's numbers would take whole ones too
                raise UnsupportedFeatureError("non-integer numbers (a oneOf of integers and numbers) here", "#")
            return None
        return own_range(n, _types(n))

    def _lengths(self, n: dict) -> tuple[int, int | None] | None:
        if not self.json_style or "string" not in _types(n) or any(k in n for k in (*_BESIDE_LENGTHS, EXCEPT)):
            return None
        return counted(n) if "minLength" in n or "maxLength" in n else None

    def _split(self, n: dict, rng: Range | None, lengths: tuple[int, int | None] | None) -> dict:
        """The node as anyOf its own-EBNF parts and the rest of its types (xgrammar's)."""
        types = _types(n)
        parts: list[dict] = []
        if "multipleOf" in n:
            m = multiples(n, "number" not in types)
            parts.append(self._own(RULE_PREFIX, lambda name: automaton_rules(m, name)))
            types = [x for x in types if x not in ("integer", "number")]
        own_numbers = "multipleOf" in n
        if rng is not None:
            try:
                rules = range_rules(rng, "probe")
            except TooLarge:  # xgrammar's range: as close as before, never refused
                if rng.nonintegral:  # xgrammar's would take whole numbers too
                    raise UnsupportedFeatureError("non-integer numbers within bounds too long to write", "#") from None
                rules = rng = None
            if rng is not None:
                types = [x for x in types if x not in ("integer", "number")]
                own_numbers = True
                if rules is not None:
                    parts.append(self._own(RANGE_PREFIX, lambda name: range_rules(rng, name)))
                elif not types:
                    raise EmptySchemaError("JSON schema accepts no value: no number lies within its bounds")
        if "not" in n:
            excluded = list(dict.fromkeys(n["not"]["enum"]))
            parts.append(self._own("tagjit_notstr_", lambda name: exclusion_rules(excluded, name)))
            types = [x for x in types if x != "string"]
        own_string = "not" in n
        if pattern_with_lengths(n) and "string" in types:
            a = node_automaton(n)  # with the node's format too, where it has one beside the pattern
            parts.append(self._own(PATTERN_PREFIX, lambda name: lengths_rules(a, name)))
            types = [x for x in types if x != "string"]
            own_string = True
        if lengths is not None and "string" in types:
            lo, hi = lengths
            base = f"{LENGTH_PREFIX}{self.nonce}"  # strings of one grammar share their count rules
            parts.append(self._own(LENGTH_PREFIX, lambda name: length_rules(lo, hi, name, base)))
            types = [x for x in types if x != "string"]
            own_string = True
        if types:
            rest = {k: v for k, v in n.items() if k not in ("not", "$defs", "definitions", EXCEPT)
                    and not (k in _NUMERIC and own_numbers) and not (k in _STRING and own_string)}
            rest["type"] = types[0] if len(types) == 1 else types
            parts.append(rest)
        keep = {k: v for k, v in n.items() if k in ("$defs", "definitions")}
        return {**keep, "anyOf": parts} if len(parts) > 1 else {**parts[0], **keep}

    def key_rule(self, placeholder: str) -> tuple[str, list[str]]:
        """The rule name and rules of a patternProperties key's placeholder (for grammars tagjit writes around it)."""
        return self.rules[placeholder]

    def _own(self, prefix: str, rules: Any) -> dict:
        return {"const": self._placeholder(prefix, rules)}

    def splice(self, grammar: xgr.Grammar) -> xgr.Grammar:
        """xgrammar's grammar of the lifted schema with every placeholder replaced by tagjit's rule."""
        if not self.rules:
            return grammar
        grammar = self._swap_keys(grammar)
        text, printed = swap_const_literals(str(grammar), {p: name for p, (name, _) in self.rules.items()})
        extra = _undefined(text, (rule for p in printed for rule in self.rules[p][1]))  # shared rules once
        return xgr.Grammar.from_ebnf(text + "\n" + "\n".join(extra) + "\n", root_rule_name="root")

    def _pattern_keys(self, n: dict) -> dict:
        """The node with each patternProperties key ``schema.pattern_properties`` wrote as a placeholder pattern, and
        its language's rule (``keys.key_rules``) to replace xgrammar's regex of it."""
        pattern_props = n.get("patternProperties")
        if not isinstance(pattern_props, dict) or not any(is_key_text(k) for k in pattern_props):
            return n
        renamed = {}
        for key, schema in pattern_props.items():
            if not is_key_text(key):
                renamed[key] = schema
                continue
            expr = key_expr(key)
            # Keys' masks are precomputed while their states fit one budget for the whole grammar.
            precomputed = self.key_states + key_states(expr) <= PRECOMPUTED_KEY_STATES
            if precomputed:
                self.key_states += key_states(expr)
            placeholder = self._placeholder(KEY_PREFIX, lambda name: key_rules(expr, name, precomputed))
            self.key_exprs[placeholder] = expr
            renamed[placeholder] = schema
        return {**n, "patternProperties": renamed}

    def _swap_keys(self, grammar: xgr.Grammar) -> xgr.Grammar:
        """xgrammar's grammar with the regex of each placeholder key replaced by its language's rule."""
        keys = {p: name for p, (name, _) in self.rules.items() if name.startswith(KEY_PREFIX)}
        if not keys:
            return grammar
        text, printed = swap_key_regexes(str(grammar), keys)
        extra = _undefined(text, (rule for p in printed for rule in self.rules[p][1]))  # class rules once
        return xgr.Grammar.from_ebnf(text + "\n" + "\n".join(extra) + "\n", root_rule_name="root")


def _undefined(text: str, rules: Any) -> list[str]:
    """The rules, once each, that the grammar text does not define yet (a grammar written around placeholders, as
    the any-order one, may hold some already)."""
    wanted = list(dict.fromkeys(rules))
    if not wanted:
        return []
    defined = {line.split(" ::= ", 1)[0] for line in text.splitlines() if " ::= " in line}
    return [r for r in wanted if r.split(" ::= ", 1)[0] not in defined]


def pattern_with_lengths(n: dict) -> bool:
    """Whether tagjit writes a node's string rule: a ``pattern`` beside ``minLength``/``maxLength``, or strings it must
    avoid (``patterns.EXCEPT``, from an exact oneOf)."""
    return EXCEPT in n or isinstance(n.get("pattern"), str) and ("minLength" in n or "maxLength" in n)


def _types(n: dict) -> list[str]:
    t = n.get("type")
    return [t] if isinstance(t, str) else list(t) if isinstance(t, list) else list(_ALL_TYPES)


def lift(schema: Any, json_style: bool = True) -> tuple[Any, Lifted]:
    """A normalised schema with its own-EBNF values replaced by placeholders, and what replaces them (``json_style``:
    the rules only JSON-style content takes too)."""
    lifted = Lifted(json_style)
    return lifted.node(schema), lifted
