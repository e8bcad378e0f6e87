"""Tool-call arguments in XML styles, built so that the engine's parser returns exactly valid arguments.

xgrammar's XML styles (``qwen_xml``, ``deepseek_xml``, ``glm_xml``) put free whitespace around each
value and count none of it, while the parsers (vLLM 0.32: ``vllm/parser/qwen3.py``,
``deepseek_v4.py``, ``glm47_moe.py``) keep it: a ``maxLength`` string comes back too long. This
module writes the argument part itself, as structural-tag nodes, from a model of what the parser
does with a parameter's text:

1. it cuts the value at the first closing marker (and at any marker its lexer knows), so values
   never contain one (``forbidden``);
2. it unwraps the value: Qwen trims one newline on each side (tagjit writes exactly one), GLM keeps
   the text, DeepSeek keeps it under ``string="true"`` and ``json.loads`` it under ``string="false"``;
3. it coerces each top-level string by the types it reads from the property's schema
   (``vllm.tool_parsers.utils.extract_types_from_schema`` then ``coerce_to_schema_type``: null,
   integer, number, boolean, object/array by ``json.loads``, else the string).

So a parameter whose schema the parser reads as only ``string`` is written as raw text (its length
is the schema's length), any other as JSON text of a valid value, with digits bounded so that
``float`` stays finite; unions that the coercion could turn into an invalid value are refused with
the reason. Whitespace between parameters is the template's, exactly; inside JSON values it is
bounded by ``settings.max_whitespace``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

import xgrammar as xgr

from tagjit.compile.cache import bounded_memo
from tagjit.constraint import compact_json
from tagjit.errors import ConstraintError, EmptySchemaError, UnsupportedFeatureError
from tagjit.build.ebnf import char_class, ebnf_string
from tagjit.build.grammars import json_schema_grammar
from tagjit.settings import Settings, get_settings
from tagjit.build.printed import (bound_numbers, ebnf_admits, json_string_shape, regex_patterns,
                                  string_body, string_literals, without_lt)
from tagjit.schema.keywords import ANNOTATIONS, TYPE_KEYWORDS

WS = r"\s*"  # in a forbidden pattern: any run of whitespace (the parsers' regex \s*)


@dataclass(frozen=True)
class XmlStyle:
    """How a parser reads one parameter: its markup, how it unwraps values, what cuts a value short."""

    name: str
    begin: str
    """Opening of a parameter, with ``{key}`` (and ``{string}``: ``true`` raw, ``false`` JSON, if the style marks it)."""
    end: str
    """Closing of a parameter, including the template's separator after it."""
    forbidden: tuple[str, ...]
    """Texts (``\\s*`` = any whitespace run) the parser's regex or lexer would take as markup inside a value."""
    key_forbidden: str = "<>\"'"
    decodes_json: bool = False
    """The parser json-decodes non-text values, then coerces the strings nested in them by their schemas."""


STYLES: dict[str, XmlStyle] = {
    # <parameter=K>\nV\n</parameter>\n : the parser strips one wrapping newline (_trim_wrapping_newlines).
    "qwen_xml": XmlStyle(
        "qwen_xml", "<parameter={key}>\n", "\n</parameter>\n",
        (f"<{WS}/{WS}parameter{WS}>", f"<{WS}parameter{WS}=", "</function>", "<function=",
         "<tool_call>", "</tool_call>", "<think>", "</think>")),
    # GLM-4.7 template; GLM-4.5 puts newlines after </arg_key> and </arg_value> (format override).
    "glm_xml": XmlStyle(
        "glm_xml", "<arg_key>{key}</arg_key><arg_value>", "</arg_value>",
        ("</arg_value>", "<arg_value>", "<arg_key>", "</arg_key>", "<tool_call>", "</tool_call>",
         "<think>", "</think>")),
    "deepseek_xml": XmlStyle(
        "deepseek_xml", "<｜DSML｜parameter name=\"{key}\" string=\"{string}\">", "</｜DSML｜parameter>\n",
        ("<｜DSML｜", "</｜DSML｜", "<think>", "</think>"), decodes_json=True),
}

MAX_DIGITS = 100  # integer and fraction digits: with a 2-digit exponent float() stays finite
MAX_EXPONENT_DIGITS = 2
# Keywords that would constrain a text value beyond what this module writes (unknown keywords are ignored,
# as JSON Schema does; keywords of other types do not apply to a string).
_REFUSED_ON_TEXT = {"anyOf", "oneOf", "allOf", "$ref", "not", "if", "then", "else", "contentSchema"}
_OBJECT_REFUSED = {"anyOf", "oneOf", "allOf", "$ref", "not", "if", "then", "else", "patternProperties",
                   "minProperties", "maxProperties", "propertyNames", "dependentRequired", "dependentSchemas",
                   "dependencies"}
_TYPE_ALIASES = {"str": "string", "text": "string", "varchar": "string", "char": "string", "enum": "string",
                 "int": "integer", "int32": "integer", "int64": "integer", "uint": "integer",
                 "uint32": "integer", "uint64": "integer", "long": "integer", "short": "integer",
                 "unsigned": "integer", "float": "number", "float32": "number", "float64": "number",
                 "double": "number", "bool": "boolean", "dict": "object", "arr": "array", "list": "array",
                 "sequence": "array"}
# Keywords of the types a text value is not (a value may still be read as a number).
_OTHER_TYPE_KEYWORDS = frozenset(k for t, kws in TYPE_KEYWORDS.items() if t != "string" for k in kws)
_NUMBER_KEYWORDS = {"integer": set(TYPE_KEYWORDS["number"]), "number": set(TYPE_KEYWORDS["number"])}


def style(name: str, overrides: Mapping[str, Any] | None = None) -> XmlStyle:
    """The named XML argument style, with a format's ``begin``/``end`` overrides applied."""
    if name not in STYLES:
        raise ConstraintError(f"unknown XML argument style {name!r}; known: {', '.join(STYLES)}")
    base = STYLES[name]
    if not overrides:
        return base
    return XmlStyle(base.name, overrides.get("begin", base.begin), overrides.get("end", base.end),
                    tuple(overrides.get("forbidden", base.forbidden)), base.key_forbidden, base.decodes_json)


# -- what the parser reads a property as ---------------------------------------------------------

def parser_types(schema: Any) -> set[str]:
    """The types vLLM's parsers read from a property schema (extract_types_from_schema, aliases resolved)."""
    if not isinstance(schema, dict):
        return {"string"}
    types: set[str] = set()
    t = schema.get("type")
    for x in ([t] if isinstance(t, str) else t if isinstance(t, list) else []):
        if isinstance(x, str):
            types.add(x)
    enum = schema.get("enum")
    if isinstance(enum, list):
        for v in enum:
            types.add(_json_type(v))
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list):
            for sub in schema[key]:
                types |= parser_types(sub)
    types = {_TYPE_ALIASES.get(x.strip().lower(), x.strip().lower()) for x in types}
    return types or {"string"}


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


# -- forbidden text: a DFA of "no match anywhere", written as EBNF ------------------------------

# Python's \s (re and the regex module vLLM uses) and str.isspace(): a superset of what any parser trims.
_WHITESPACE = frozenset(chr(c) for c in [*range(0x9, 0xE), *range(0x1C, 0x21), 0x85, 0xA0, 0x1680,
                                         *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F, 0x3000])


def _whitespace() -> frozenset[str]:
    return _WHITESPACE


def _atoms(pattern: str) -> list[str | None]:
    """A pattern as characters and None for a whitespace run."""
    out: list[str | None] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith(WS, i):
            out.append(None)
            i += len(WS)
        else:
            out.append(pattern[i])
            i += 1
    return out


class _Avoider:
    """Deterministic automaton over text that contains none of the forbidden patterns."""

    def __init__(self, forbidden: tuple[str, ...]) -> None:
        self.patterns = [_atoms(p) for p in forbidden]
        self.chars = sorted({a for p in self.patterns for a in p if a is not None})
        ws = _whitespace()
        # Character classes: each literal pattern character, whitespace, everything else.
        self.classes: list[str] = [*self.chars, "WS", "OTHER"]
        self.ws_extra = sorted(ws - set(self.chars))
        self.states: list[frozenset] = []
        self.index: dict[frozenset, int] = {}
        self.delta: dict[int, dict[str, int | None]] = {}
        self._explore(frozenset())

    def _closure(self, positions: set) -> set:
        out = set(positions)
        todo = list(positions)
        while todo:
            p, i = todo.pop()
            if i < len(self.patterns[p]) and self.patterns[p][i] is None and (p, i + 1) not in out:
                out.add((p, i + 1))
                todo.append((p, i + 1))
        return out

    def _matches(self, atom: str | None, cls: str) -> bool:
        if atom is None:
            return cls == "WS" or (cls not in ("OTHER",) and cls in _whitespace())
        return atom == cls

    def _step(self, state: frozenset, cls: str) -> frozenset | None:
        starts = self._closure({(p, 0) for p in range(len(self.patterns))})
        nxt: set = set()
        for p, i in self._closure(set(state)) | starts:
            if i >= len(self.patterns[p]):
                continue
            atom = self.patterns[p][i]
            if self._matches(atom, cls):
                nxt.add((p, i + 1) if atom is not None else (p, i))
                if atom is None:
                    nxt.add((p, i + 1))
        nxt = self._closure(nxt)
        if any(i == len(self.patterns[p]) for p, i in nxt):
            return None  # a forbidden pattern is complete
        return frozenset(nxt)

    def _explore(self, start: frozenset) -> None:
        self.index[start] = 0
        self.states.append(start)
        todo = [start]
        while todo:
            s = todo.pop()
            k = self.index[s]
            self.delta[k] = {}
            for cls in self.classes:
                t = self._step(s, cls)
                if t is None:
                    self.delta[k][cls] = None
                    continue
                if t not in self.index:
                    self.index[t] = len(self.states)
                    self.states.append(t)
                    todo.append(t)
                self.delta[k][cls] = self.index[t]

    def accepts(self, text: str) -> bool:
        """Whether ``text`` contains no forbidden pattern."""
        k: int | None = 0
        for ch in text:
            cls = ch if ch in self.chars else ("WS" if ch in _whitespace() else "OTHER")
            k = self.delta[k][cls]
            if k is None:
                return False
        return True

    def ebnf(self, prefix: str = "text") -> str:
        """Rules ``{prefix}_0`` ... for any text avoiding the patterns (``{prefix}_0`` is the start)."""
        lines = []
        specials = set(self.chars) | set(self.ws_extra)
        for k in range(len(self.states)):
            by_target: dict[int, list[str]] = {}
            for cls, t in self.delta[k].items():
                if t is not None:
                    by_target.setdefault(t, []).append(cls)
            alts = ['""']
            for t, classes in sorted(by_target.items()):
                chars = {c for c in classes if c not in ("WS", "OTHER")}
                if "WS" in classes:
                    chars |= set(self.ws_extra)
                if "OTHER" in classes:
                    body = char_class(specials - chars, negated=True)
                else:
                    body = char_class(chars, negated=False)
                alts.append(f"({body} {prefix}_{t})")
            lines.append(f"{prefix}_{k} ::= " + " | ".join(alts))
        return "\n".join(lines)


@lru_cache(maxsize=64)
def _avoider(forbidden: tuple[str, ...]) -> _Avoider:
    return _Avoider(forbidden)


# -- value grammars --------------------------------------------------------------------------------

def _grammar_node(ebnf: str) -> dict:
    return {"type": "grammar", "grammar": ebnf}


def raw_text(forbidden: tuple[str, ...]) -> dict:
    """Any text the parser returns verbatim: no forbidden pattern anywhere."""
    return _grammar_node(f"root ::= text_0\n{_avoider_ebnf(forbidden)}")


@lru_cache(maxsize=64)
def _avoider_ebnf(forbidden: tuple[str, ...]) -> str:
    return _avoider(forbidden).ebnf()


def _raw_string(schema: dict, where: str, st: XmlStyle, settings: Settings) -> dict:
    """Raw text of a string valid under a string schema (enum, const, length, pattern or format)."""
    refused = set(schema) & _REFUSED_ON_TEXT
    if refused:
        raise UnsupportedFeatureError(
            f"{where}: {', '.join(sorted(refused))} on a parameter the {st.name} parser returns as text")
    avoid = _avoider(st.forbidden)
    if "const" in schema or "enum" in schema:
        values = [schema["const"]] if "const" in schema else list(schema["enum"])
        strings = [v for v in values if isinstance(v, str) and _string_ok(v, schema)]
        if not strings:
            raise EmptySchemaError(f"{where}: no string value is allowed, but the {st.name} parser returns text")
        for v in strings:
            if not avoid.accepts(v):
                raise ConstraintError(f"{where}: value {v!r} contains markup the {st.name} parser cuts at")
        return _grammar_node("root ::= " + " | ".join(ebnf_string(v) for v in dict.fromkeys(strings)))
    lo, hi = int(schema.get("minLength", 0)), schema.get("maxLength")
    if "pattern" in schema or "format" in schema:
        if lo or hi is not None:
            raise UnsupportedFeatureError(f"{where}: pattern or format with minLength/maxLength on a text parameter")
        text = _text_of_json_string(schema, where, settings) if "format" in schema else str(
            xgr.Grammar.from_regex(schema["pattern"]))
        if ebnf_admits(text, "<"):
            raise UnsupportedFeatureError(
                f"{where}: {'pattern' if 'pattern' in schema else 'format'} can produce '<', "
                f"which the {st.name} parser may take as markup")
        return _grammar_node(text)
    if hi is None and lo == 0:
        return raw_text(st.forbidden)
    # Bounded length is counted in characters: '<' (every marker's start) is left out.
    if hi is None:
        return _grammar_node(f"root ::= [^<]{{{lo}, {lo}}} text_0\n{_avoider_ebnf(st.forbidden)}")
    if int(hi) < lo:
        raise ConstraintError(f"{where}: maxLength is below minLength")
    return _grammar_node(f"root ::= [^<]{{{lo}, {int(hi)}}}")


def _text_of_json_string(schema: dict, where: str, settings: Settings) -> str:
    """The raw text of a string format: xgrammar's rules inside the quotes, where no escape can occur."""
    grammar = json_schema_grammar({"type": "string", "format": schema["format"]}, settings).grammar
    shape = json_string_shape(str(grammar))
    if shape is not None:
        inner, regex, others = shape
        if regex is not None:  # the format as one regex: its own grammar is the raw text
            body = str(xgr.Grammar.from_regex(regex))
            if not ebnf_admits(body, '"\\'):
                return body
        else:
            body, own = string_body(inner, others)
            if not ebnf_admits(own, '"\\'):
                return body  # no quote or backslash: JSON text is raw text
    raise UnsupportedFeatureError(f"{where}: format {schema['format']!r} on a text parameter")


def _string_ok(v: str, schema: dict) -> bool:
    return schema.get("minLength", 0) <= len(v) <= schema.get("maxLength", len(v))


def _json_value(schema: Any, defs: Mapping[str, Any], where: str, st: XmlStyle, settings: Settings) -> dict:
    """JSON text of a valid value: xgrammar's converter, digits bounded, no '<' outside literals."""
    full = dict(schema) if isinstance(schema, dict) else schema
    if isinstance(full, dict) and defs:
        full = {**full, **{k: v for k, v in defs.items() if k not in full}}
    try:  # the same small schemas recur across tools: memoised by their JSON text (key order kept)
        return json.loads(_json_value_cached(compact_json(full), st, settings))
    except ConstraintError as e:
        e.args = (f"{where}: {e}",) if not str(e).startswith(where) else e.args
        raise


@bounded_memo(lambda: get_settings().memo_bytes, lambda args, value: len(args[0]) + len(value))
def _json_value_cached(schema_json: str, st: XmlStyle, settings: Settings) -> str:
    return json.dumps(_json_value_node(json.loads(schema_json), "value", st, settings))


def _json_value_node(full: Any, where: str, st: XmlStyle, settings: Settings) -> dict:
    built = json_schema_grammar(full, settings, filter_counts=False)  # inside a structural tag: no filter
    if built.filter_spec is not None:
        raise UnsupportedFeatureError(f"{where}: any-order objects inside {st.name} arguments")
    text = str(built.grammar)
    for pattern in regex_patterns(text):
            try:
                regex_text = str(xgr.Grammar.from_regex(pattern))
            except (RuntimeError, ValueError):
                regex_text = "[^]"
            if ebnf_admits(regex_text, "<"):
                raise UnsupportedFeatureError(
                    f"{where}: a string pattern can produce '<', which the {st.name} parser may take as markup")
    text = bound_numbers(without_lt(text), MAX_DIGITS, MAX_EXPONENT_DIGITS)
    avoid = _avoider(st.forbidden)
    for decoded in string_literals(text):
        if not avoid.accepts(decoded):
            raise ConstraintError(f"{where}: {decoded!r} contains markup the {st.name} parser cuts at")
    return _grammar_node(text)


# -- a parameter ----------------------------------------------------------------------------------

def value_node(schema: Any, defs: Mapping[str, Any], where: str, st: XmlStyle,
               settings: Settings) -> tuple[dict, bool]:
    """(the value's node, written raw?) for one property, or ConstraintError if the parser cannot return it valid."""
    if schema is True or schema == {} or (isinstance(schema, dict) and set(schema) <= ANNOTATIONS):
        return raw_text(st.forbidden), True
    if schema is False:
        raise ConstraintError(f"{where}: the schema false allows no value")
    types = parser_types(schema)
    if "string" not in types:
        if st.decodes_json:
            problem = _nested_coercion_problem(schema)
            if problem:
                raise UnsupportedFeatureError(f"{where}: {problem}, which the {st.name} parser coerces wrongly")
        return _json_value(schema, defs, where, st, settings), False
    if types == {"string"}:
        t = schema.get("type")
        if t not in (None, "string") or set(schema) & {"anyOf", "oneOf", "allOf", "$ref", "not"}:
            raise UnsupportedFeatureError(
                f"{where}: the {st.name} parser reads this schema as text and returns a string; "
                "give the parameter a type (or set strict: false on the tool)")
        other = set(schema) & _OTHER_TYPE_KEYWORDS
        if t is None and other:
            raise UnsupportedFeatureError(
                f"{where}: the {st.name} parser returns a string, but {', '.join(sorted(other))} expects "
                "another type; give the parameter a type")
        return _raw_string(schema, where, st, settings), True
    # A union with string: the parser tries the other types first, so each must take any value of its type.
    others = types - {"string"}
    t = schema.get("type")
    listed = set(t) if isinstance(t, list) else {t}
    constrained = set(schema) & {"enum", "const", "anyOf", "oneOf", "allOf", "$ref", "not"}
    if (others - {"null", "boolean", "integer", "number"} or not others <= listed or constrained
            or any(set(schema) & _NUMBER_KEYWORDS.get(o, set()) for o in others)):
        raise UnsupportedFeatureError(
            f"{where}: the {st.name} parser turns text that reads as {'/'.join(sorted(others))} into that type, "
            "so this union cannot be enforced; use one type or an unconstrained nullable string")
    string_part = {k: v for k, v in schema.items() if k != "type"}
    return _raw_string(string_part, where, st, settings), True


def _nested_coercion_problem(schema: Any, path: str = "") -> str | None:
    """Where the parser's recursive coercion (nested ``properties`` and ``items``) could change a valid value."""
    if not isinstance(schema, dict):
        return None
    children = [(f"{path}.{k}", v) for k, v in (schema.get("properties") or {}).items()] if isinstance(
        schema.get("properties"), dict) else []
    if isinstance(schema.get("items"), dict):
        children.append((f"{path}[]", schema["items"]))
    for where, sub in children:
        if not isinstance(sub, dict) or set(sub) <= ANNOTATIONS:
            continue
        types = parser_types(sub)
        t = sub.get("type")
        typed_string = t == "string" or (t is None and types == {"string"} and ("enum" in sub or "const" in sub))
        if types == {"string"} and not (typed_string and not set(sub) & {"anyOf", "oneOf", "allOf", "$ref"}):
            return f"nested value {where or '.'} has no type the parser can read"
        if "string" in types and types != {"string"}:
            others = types - {"string"}
            listed = set(t) if isinstance(t, list) else {t}
            if (others - {"null", "boolean", "integer", "number"} or not others <= listed
                    or set(sub) & {"enum", "const", "anyOf", "oneOf", "allOf", "$ref"}
                    or any(set(sub) & _NUMBER_KEYWORDS.get(o, set()) for o in others)):
                return f"nested value {where} is a union with string"
        found = _nested_coercion_problem(sub, where)
        if found:
            return found
    return None


def _param(st: XmlStyle, key: str, value: dict, raw: bool) -> dict:
    begin = st.begin.replace("{key}", key).replace("{string}", "true" if raw else "false")
    return {"type": "sequence", "elements": [{"type": "const_string", "value": begin}, value,
                                             {"type": "const_string", "value": st.end}]}


def _key_ok(st: XmlStyle, key: str) -> bool:
    return bool(key) and key == key.strip() and not (set(key) & set(st.key_forbidden)) and _avoider(
        st.forbidden).accepts(key)


def arguments_node(st: XmlStyle, schema: Any, settings: Settings) -> dict:
    """The structural-tag node for one call's parameters in ``st`` under an object schema (None: any)."""
    if schema is None or schema is True or (isinstance(schema, dict) and "properties" not in schema
                                             and schema.get("additionalProperties", True) is not False
                                             and not (set(schema) - ANNOTATIONS - {"type", "$defs",
                                                                                    "definitions"})):
        return _any_params(st)
    if not isinstance(schema, dict):
        raise ConstraintError(f"{st.name} arguments need an object schema")
    if schema.get("type", "object") != "object":
        raise ConstraintError(f"{st.name} arguments must be an object, not {schema.get('type')!r}")
    extra = set(schema) & _OBJECT_REFUSED
    if extra:
        raise UnsupportedFeatureError(f"{', '.join(sorted(extra))} on the arguments of an {st.name} tool call")
    props = schema.get("properties") or {}
    required = list(schema.get("required") or [])
    missing = [r for r in required if r not in props]
    if missing:
        raise UnsupportedFeatureError(f"required {', '.join(missing)} without a declared schema ({st.name})")
    defs = {k: schema[k] for k in ("$defs", "definitions") if k in schema}
    elements = []
    for key, sub in props.items():
        if not _key_ok(st, key):
            raise ConstraintError(f"parameter name {key!r} cannot be written in {st.name}")
        node, raw = value_node(sub, defs, f"parameter {key!r}", st, settings)
        param = _param(st, key, node, raw)
        elements.append(param if key in required else {"type": "optional", "content": param})
    if not elements:
        return {"type": "const_string", "value": ""}
    return elements[0] if len(elements) == 1 else {"type": "sequence", "elements": elements}


def _any_params(st: XmlStyle) -> dict:
    """Any number of parameters with identifier names and raw text values (no schema to follow)."""
    begin, _, after = st.begin.replace("{string}", "true").partition("{key}")
    text = _avoider_ebnf(st.forbidden)
    grammar = (f"root ::= param*\nparam ::= {ebnf_string(begin)} [a-zA-Z_] [a-zA-Z0-9_]* {ebnf_string(after)} "
               f"text_0 {ebnf_string(st.end)}\n{text}")
    return _grammar_node(grammar)


__all__ = ["XmlStyle", "STYLES", "style", "parser_types", "value_node", "arguments_node", "raw_text",
           "bound_numbers"]
