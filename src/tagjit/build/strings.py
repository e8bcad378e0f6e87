"""Any JSON string but a finite set of values (``not: {enum: [...]}``), as EBNF over every spelling of each character.

A string is read one decoded character at a time along a trie of the excluded values; each character may be
written raw, as a short escape or as ``\\uXXXX`` (hex digits in either case), and every spelling moves the same
way, so no escaped form of an excluded value gets through. Leaving the trie leads to any string remainder.
"""

from __future__ import annotations

from tagjit.build.ebnf import char_class, ebnf_string, trie

# Most trie nodes tagjit writes for one set of excluded strings.
MAX_TRIE_NODES = 20000

_SHORT = {'"': '"', "\\": "\\", "/": "/", "\b": "b", "\f": "f", "\n": "n", "\r": "r", "\t": "t"}
SHORT_ESCAPES = _SHORT  # shared with build.patterns
_RAW_FORBIDDEN = {chr(c) for c in range(0x20)} | {'"', "\\"}
RAW_FORBIDDEN = _RAW_FORBIDDEN
_HEX = "0123456789abcdef"


def exclusion_problem(values: list[str]) -> str | None:
    """Why a set of excluded strings cannot be written, or None."""
    if any(ord(ch) > 0xFFFF for v in values for ch in v):
        return "not: {enum} with a character outside the Basic Multilingual Plane"
    if sum(len(v) for v in values) + 1 > MAX_TRIE_NODES:
        return f"not: {{enum}} with more than {MAX_TRIE_NODES} characters in its strings"
    return None


def _hex_digit(h: str) -> str:
    return f"[{h}{h.upper()}]" if h.isalpha() else f'"{h}"'


def _hex_class(digits: set[str]) -> str:
    chars = sorted(digits) + sorted(h.upper() for h in digits if h.isalpha())
    return "[" + "".join(chars) + "]"


def _spellings(ch: str) -> list[str]:
    """Every JSON spelling of one BMP character, as EBNF sequences."""
    out = [] if ch in _RAW_FORBIDDEN else [ebnf_string(ch)]
    if ch in _SHORT:
        out.append(ebnf_string("\\" + _SHORT[ch]))
    out.append(ebnf_string("\\u") + " " + " ".join(_hex_digit(h) for h in f"{ord(ch):04x}"))
    return out


def _other_hex(base: str, prefix: str, codes: list[str], rest: str, rules: list[str]) -> str | None:
    """A rule for the hex digits after ``prefix`` that spell none of ``codes`` (4-digit lowercase), then ``rest``."""
    depth = len(prefix)
    used = {c[depth] for c in codes if c.startswith(prefix)}
    alts = []
    free = set(_HEX) - used
    if free:
        alts.append(" ".join([_hex_class(free)] + ["[0-9a-fA-F]"] * (3 - depth) + [rest]))
    if depth < 3:
        for h in sorted(used):
            sub = _other_hex(base, prefix + h, codes, rest, rules)
            if sub is not None:
                alts.append(f"{_hex_digit(h)} {sub}")
    if not alts:
        return None
    name = f"{base}_u{prefix}"
    rules.append(f"{name} ::= " + " | ".join(alts))
    return name


def exclusion_rules(values: list[str], name: str) -> list[str]:
    """EBNF rules (rule ``name`` first) for any JSON string, quotes included, whose value is not in ``values``."""
    kids, end = trie(values)
    rest = f"{name}_rest"
    rules = [f'{name} ::= "\\"" {name}_0',
             f'{rest} ::= "\\"" | {char_class(_RAW_FORBIDDEN, True)} {rest} | "\\\\" ([\\"\\\\/bfnrt] | "u" '
             f"[A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]) {rest}"]
    for t, children in enumerate(kids):
        alts = [] if end[t] else ['"\\""']
        alts.append(f"{char_class(_RAW_FORBIDDEN | set(children), True)} {rest}")
        short = [e for c, e in _SHORT.items() if c not in children]
        if short:
            alts.append(f'"\\\\" [{"".join(_class_char(e) for e in short)}] {rest}')
        other = _other_hex(f"{name}_{t}", "", [f"{ord(c):04x}" for c in children], rest, rules)
        if other is not None:
            alts.append(f'"\\\\u" {other}')
        for ch, kid in children.items():
            for spelling in _spellings(ch):
                alts.append(f"{spelling} {name}_{kid}")
        rules.append(f"{name}_{t} ::= " + " | ".join(alts))
    return rules


def _class_char(c: str) -> str:
    return "\\" + c if c in '\\]^-["' else c
