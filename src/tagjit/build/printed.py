"""Every repair of xgrammar's *printed* EBNF in one place.

Where xgrammar's API cannot build what tagjit needs, tagjit edits the EBNF text xgrammar prints. Each
function here depends on the printer's exact spelling; ``tests/test_printed_ebnf.py`` pins that
spelling so that an xgrammar upgrade that changes it fails loudly instead of silently skipping a repair.
"""

from __future__ import annotations

import json
import re
from typing import Mapping

import xgrammar as xgr

from tagjit.build.ebnf import char_class, ebnf_string
from tagjit.build.numbers import RANGE_PREFIX as RANGE_RULE_PREFIX, RULE_PREFIX as NUMBER_RULE_PREFIX
from tagjit.errors import ConstraintError, UnsupportedFeatureError


class PrinterChanged(ConstraintError):
    """xgrammar printed EBNF in a shape tagjit's repairs do not know (an xgrammar upgrade changed its printer)."""


# xgrammar 0.2.8 writes a string with minLength/maxLength as "\"" X{min,max} "\"" where X is this class:
# any character but quote, backslash, CR and LF (inline, or as a rule of its own for a bound above 1).
# It allows raw control characters such as TAB (invalid JSON) and forbids every escape.
_XGR_LENGTH_CHAR = r'[^\"\\\r\n]'
# The repair keeps one character class and takes the controls out, so every output is valid JSON. It does not
# add escapes (a multi-character alternative in the repeated rule): xgrammar cannot precompute such a repetition,
# and a mask inside the string then costs 0.2-0.3 s (xgrammar 0.2.8, Qwen2's vocabulary). tagjit's JSON strings
# reach this repair only above bounded_strings.MAX_COUNTED characters (below, its count rules take escapes) and in
# structural-tag content of another style. Free strings (basic_string_sub) exclude U+0000-U+001F the same way.
_BOUNDED_CHAR = r'[^\"\\\0-\x1f]'


def fix_string_lengths(grammar: xgr.Grammar) -> xgr.Grammar:
    """Make every length-bounded JSON string rule refuse raw control characters (invalid JSON)."""
    return repair_json(grammar, bounded_whitespace=False)


def repair_json(grammar: xgr.Grammar, bounded_whitespace: bool) -> xgr.Grammar:
    """``fix_string_lengths`` and, under bounded whitespace, ``tighten_separators``: one print, at most one parse."""
    text = str(grammar)
    edited = text.replace(_XGR_LENGTH_CHAR, _BOUNDED_CHAR)
    if bounded_whitespace:
        edited = _tightened(edited)
    return grammar if edited == text else xgr.Grammar.from_ebnf(edited, root_rule_name="root")


# xgrammar 0.2.8 writes each bounded whitespace slot as a rule of its own, one per place: ("" | ([ \n\r\t])) with a
# lookahead for a bound of 1, (([ \n\r\t])) referenced as name{0, N} for a bound N above 1.
_WHITESPACE_RULE = re.compile(r'^(\w+) ::= (?:\(""\s*\|\s*\(\[ \\n\\r\\t\]\)\)|\(\(\[ \\n\\r\\t\]\)\))(?: \(=.*\))?$',
                              re.M)


def tighten_separators(grammar: xgr.Grammar) -> xgr.Grammar:
    """Take the bounded whitespace slots before ``,`` and ``:`` out of xgrammar's JSON grammar.

    No JSON printer puts whitespace there; each slot is an xgrammar rule that every token closing a string and
    running on into a separator must walk, so a mask inside a string cost 1.3-2x that of unbounded whitespace
    (``benchmarks/mask_fill.py``). Whitespace after ``{ [ , :`` and before ``} ]`` stays as bounded as before.
    """
    text = str(grammar)
    tightened = _tightened(text)
    return grammar if tightened == text else xgr.Grammar.from_ebnf(tightened, root_rule_name="root")


def _tightened(text: str) -> str:
    slots = set(_WHITESPACE_RULE.findall(text))
    if not slots:
        return text
    # From each separator back to the reference before it (``name `` or ``name{0, N} ``): one regex over the whole
    # text tried every position and cost 4x as much (713k characters for a 200-tool tag: ~100 ms against ~25).
    pieces, last = [], 0
    for m in _SEPARATOR.finditer(text):
        end = m.start()
        if text[end - 1] == "}":  # a repeated slot, name{0, N}; any other repetition is no slot
            brace = text.rfind("{", last, end)
            if brace < 0 or not _SLOT_REPEAT.fullmatch(text, brace, end):
                continue
            end = brace
        start = end
        while start > last and (text[start - 1].isalnum() or text[start - 1] == "_"):
            start -= 1
        if start < end and text[start - 1] not in ".-" and text[start:end] in slots:
            pieces.append(text[last:start])
            last = m.end()
    pieces.append(text[last:])
    return "".join(pieces)


_SEPARATOR = re.compile(r' (?="[,:]")')
_SLOT_REPEAT = re.compile(r"\{0, \d+\}")


def swap_const_literals(text: str, rules: Mapping[str, str]) -> tuple[str, list[str]]:
    """Replace the literal xgrammar prints for each string const of ``rules`` by its rule; the consts it printed."""
    printed = []
    for value, rule in rules.items():
        literal = ebnf_string(json.dumps(value))
        if text.count(value) != text.count(literal):  # a const spelled any other way would keep its text
            raise PrinterChanged(f"xgrammar no longer prints the string const {value!r} as one literal")
        if literal in text:
            text = text.replace(literal, rule)
            printed.append(value)
    return text, printed


def swap_key_regexes(text: str, rules: Mapping[str, str]) -> tuple[str, list[str]]:
    """Replace the regex call xgrammar prints for each patternProperties key of ``rules`` (a placeholder pattern) by
    its rule; the keys it printed."""
    printed = []
    for key, rule in rules.items():
        call = f"Regex({ebnf_string(key)}, json_string=true)"
        if text.count(key) != text.count(call):  # a key spelled any other way would keep xgrammar's regex
            raise PrinterChanged(f"xgrammar no longer prints the patternProperties key {key!r} as one regex call")
        if call in text:
            text = text.replace(call, rule)
            printed.append(key)
    return text, printed


def split_root(text: str) -> tuple[list[str], list[str]]:
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
        raise PrinterChanged(f"unexpected root rule from xgrammar's printer: {body!r:.80}")
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


def reroot_any_of(text: str, branches: int, root: int, probe: str,
                  consts: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """xgrammar's ``anyOf`` branches and rules, rooted at branch ``root``, each string const of ``consts`` its rule."""
    # The first branch must be {"const": probe}: a const every printing keeps, whose literal pins the spelling the
    # replacement looks for (other consts may be absent, e.g. in a $defs entry nothing references).
    alts, lines = split_root(text)
    if len(alts) != branches:
        raise PrinterChanged(f"xgrammar printed {len(alts)} branches of an anyOf of {branches}")
    if ebnf_string(json.dumps(probe)) not in text:
        raise PrinterChanged(f"xgrammar no longer prints the string const {probe!r} as one literal")
    literals = {ebnf_string(json.dumps(value)): rule for value, rule in consts.items()}

    def swap(ebnf: str) -> str:
        for literal, rule in literals.items():
            ebnf = ebnf.replace(literal, rule)
        return ebnf

    alts = [swap(a) for a in alts]
    return alts, [swap(line) for line in lines] + ["root ::= " + alts[root]]


def string_body(inner: str, others: list[str]) -> tuple[str, str]:
    """Of ``json_string_shape``'s rules: a grammar of the text between the quotes, and the rules of that text alone."""
    # Every printed JSON grammar carries xgrammar's ``basic_`` rules (JSON strings, numbers ...), with quotes and
    # backslashes, whether used or not: they are left out of the second text, which is sound only while no rule of
    # the string's own reaches one.
    own = [line for line in others if not line.startswith("basic_")]
    if not any(line.startswith(f"{inner} ::= ") for line in own):
        raise PrinterChanged(f"xgrammar printed no rule {inner!r} for the inside of a JSON string")
    for line in own:
        name, sep, body = line.partition(" ::= ")
        if not sep or name == "root" or re.search(r"\bbasic_\w", _CLASS_RE.sub(" ", body)):
            raise PrinterChanged(f"unexpected rule in xgrammar's grammar of a JSON string: {line!r:.80}")
    return "\n".join([*others, f"root ::= {inner}"]), "\n".join(own)


_CLASS_RE = re.compile(r'"(?:[^"\\]|\\.)*"|\[(\^?)((?:[^\]\\]|\\.)*)\]')


def ebnf_admits(ebnf: str, chars: str) -> bool:
    """Whether any character class or literal of an EBNF text can produce one of ``chars``."""
    for m in _CLASS_RE.finditer(ebnf):
        if m.group(0).startswith('"'):
            try:
                lit = json.loads(m.group(0))
            except json.JSONDecodeError:
                lit = m.group(0)
            if set(lit) & set(chars):
                return True
        elif m.group(1):
            if any(ord(c) not in _class_codes(m.group(2)) for c in chars):
                return True
        elif set(map(ord, chars)) & _class_codes(m.group(2)):
            return True
    return False


def without_lt(ebnf: str) -> str:
    """Take '<' out of every character class (JSON strings can still write it as \\u003c)."""

    def fix(m: re.Match) -> str:
        if m.group(0).startswith('"'):
            return m.group(0)
        negated, body = m.group(1), m.group(2)
        if negated:
            return f"[^{body}<]" if "<" not in body else m.group(0)
        codes = _class_codes(body)
        if ord("<") not in codes:
            return m.group(0)
        codes.discard(ord("<"))
        if not codes:
            raise UnsupportedFeatureError("a value that can only be '<' cannot be written in XML arguments")
        return char_class({chr(c) for c in codes}, False)
    return _CLASS_RE.sub(fix, ebnf)


def _class_codes(body: str) -> set[int]:
    """The code points of a positive EBNF character class body as xgrammar prints it."""
    items: list[int] = []
    i = 0
    escapes = {"n": 10, "r": 13, "t": 9, "0": 0, "\\": 92, "]": 93, "[": 91, "-": 45, "^": 94, '"': 34, "/": 47,
               "b": 8, "f": 12}
    dash: list[int] = []
    while i < len(body):
        if body[i] == "\\":
            c = body[i + 1]
            if c in "xuU":
                n = {"x": 2, "u": 4, "U": 8}[c]
                items.append(int(body[i + 2:i + 2 + n], 16))
                i += 2 + n
            else:
                items.append(escapes.get(c, ord(c)))
                i += 2
        elif body[i] == "-" and items and i + 1 < len(body):
            dash.append(len(items))
            i += 1
        else:
            items.append(ord(body[i]))
            i += 1
    codes: set[int] = set()
    j = 0
    while j < len(items):
        if j + 1 in dash:
            codes.update(range(items[j], items[j + 1] + 1))
            j += 2
        else:
            codes.add(items[j])
            j += 1
    return codes


_RULE_RE = re.compile(r"^(\w+) ::= (.*)$", re.M)


def bound_numbers(ebnf: str, max_digits: int, max_exponent_digits: int) -> str:
    """Bound every unbounded digit run of xgrammar's JSON grammar so float() of the text stays finite."""
    if re.search(rf"^{NUMBER_RULE_PREFIX}\w* ::=", ebnf, re.M):  # a digit automaton's cycles have no run to bound
        raise UnsupportedFeatureError("multipleOf where numbers must have a bounded count of digits")
    digit_rules = {m.group(1) for m in _RULE_RE.finditer(ebnf) if m.group(2) == "(([0-9]))"}
    out = []
    for line in ebnf.splitlines():
        name, sep, body = line.partition(" ::= ")
        if sep:
            if "[eE]" in body:
                body = re.sub(r"(\w+)\{1, -1\}", lambda m: f"{m.group(1)}{{1, {max_exponent_digits}}}"
                              if m.group(1) in digit_rules else m.group(0), body)
            body = body.replace("[0-9]*", f"[0-9]{{0, {max_digits}}}")
            if name.startswith(RANGE_RULE_PREFIX):  # a range automaton's only cycles: digit loops such as [0]*
                body = re.sub(r"(\[[0-9\-]+\])\*", rf"\1{{0, {max_digits}}}", body)
            body = re.sub(r"(\w+)\{(\d+), -1\}", lambda m: f"{m.group(1)}{{{m.group(2)}, {max_digits}}}"
                          if m.group(1) in digit_rules else m.group(0), body)
            line = f"{name}{sep}{body}"
        out.append(line)
    return "\n".join(out)


def ebnf_unquote(literal: str) -> str:
    """The text of an EBNF string literal as xgrammar prints it."""
    escapes = {"n": "\n", "t": "\t", "r": "\r", "0": "\0"}
    return re.sub(r"\\(.)", lambda m: escapes.get(m.group(1), m.group(1)), literal[1:-1])


_REGEX_RE = re.compile(r'Regex\(("(?:[^"\\]|\\.)*")')
_LITERAL_RE = re.compile(r'"((?:[^"\\]|\\.)*)"')


def regex_patterns(ebnf: str) -> list[str]:
    """The regex of every ``Regex("...")`` call xgrammar printed (JSON-schema patterns and formats)."""
    return [ebnf_unquote(p) for p in _REGEX_RE.findall(ebnf)]


def string_literals(ebnf: str) -> list[str]:
    """The decoded text of every string literal of a printed grammar (those JSON cannot decode are skipped)."""
    out = []
    for lit in _LITERAL_RE.findall(ebnf):
        try:
            out.append(json.loads(f'"{lit}"'))
        except json.JSONDecodeError:
            continue
    return out


def json_string_shape(ebnf: str) -> tuple[str, str | None, list[str]] | None:
    """Of xgrammar's grammar for one JSON string: the rule inside the quotes, its regex when that rule is one
    ``Regex(..., json_string=true)``, and every line but the root; None for any other shape."""
    lines = ebnf.splitlines()
    root = next((ln for ln in lines if ln.startswith("root ::= ")), "")
    m = re.fullmatch(r'root ::= \(\("\\"" (\w+) "\\""\)\)', root)
    if not m:
        return None
    inner = m.group(1)
    inner_rule = next((ln for ln in lines if ln.startswith(f"{inner} ::= ")), "")
    regex = re.fullmatch(rf'{inner} ::= Regex\(("(?:[^"\\]|\\.)*"), json_string=true\)', inner_rule)
    return inner, ebnf_unquote(regex.group(1)) if regex else None, [ln for ln in lines if ln != root]
