"""The vocabulary-free building blocks every grammar builder shares: the built result, EBNF literals and classes."""

from __future__ import annotations

from typing import Any, Iterable, NamedTuple, Sequence

import xgrammar as xgr

from tagjit.settings import Settings

# xgrammar 0.2.8 added max_whitespace_cnt to structural-tag JSON content; 0.2.7 (SGLang's pin) lacks it.
TAG_WHITESPACE_BOUND: bool = "max_whitespace_cnt" in getattr(
    getattr(getattr(xgr, "structural_tag", None), "JSONSchemaFormat", None), "model_fields", {})

# The separators of Python's json.dumps and of chat templates' tojson filter (Settings.json_style "dumps").
DUMPS_SEPARATORS = (", ", ": ")


def whitespace_options(settings: Settings) -> dict[str, Any]:
    """xgrammar's whitespace keywords for tagjit's settings (bound 0: compact JSON; ``json_style`` dumps)."""
    if settings.max_whitespace == 0:
        return {"any_whitespace": False, "separators": (",", ":")}
    if settings.dumps_spacing:
        return {"any_whitespace": False, "separators": DUMPS_SEPARATORS}
    return {"any_whitespace": True, "max_whitespace_cnt": settings.max_whitespace}


class Built(NamedTuple):
    """A constraint's grammar and, where a CFG cannot say everything, a per-request token filter."""

    grammar: xgr.Grammar
    filter_spec: Any = None


def ebnf_string(text: str) -> str:
    """Quote a Python string as an EBNF string literal."""
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def char_class(chars: set[str], negated: bool) -> str:
    """A character class; a negated one is written as the positive ranges of its complement, because
    xgrammar 0.2.7 (SGLang's pin) mishandles negated classes holding non-ASCII characters (it accepts
    U+0085 from a class that excludes it, and some such classes fail to compile)."""
    ranges: list[tuple[int, int]] = []
    for c in sorted(ord(ch) for ch in chars):
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1] = (ranges[-1][0], c)
        else:
            ranges.append((c, c))
    if negated:
        ranges = complement(ranges)
    parts = [_class_char(a) if a == b else f"{_class_char(a)}-{_class_char(b)}" for a, b in ranges]
    return "[" + "".join(parts) + "]"


def complement(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The code points outside sorted disjoint ranges, surrogates left out (they are not text)."""
    out: list[tuple[int, int]] = []
    start = 0
    bounds = sorted([*ranges, (0xD800, 0xDFFF)])
    for lo, hi in bounds:
        if lo > start:
            out.append((start, lo - 1))
        start = max(start, hi + 1)
    if start <= 0x10FFFF:
        out.append((start, 0x10FFFF))
    return out


def _class_char(code: int) -> str:
    ch = chr(code)
    if ch.isalnum() and code < 128:
        return ch
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def trie(words: Iterable[Sequence[str]]) -> tuple[list[dict[str, int]], list[bool]]:
    """A trie of words over any units: each node's children by unit, and whether a word ends at the node."""
    kids: list[dict[str, int]] = [{}]
    end = [False]
    for word in words:
        t = 0
        for unit in word:
            if unit not in kids[t]:
                kids[t][unit] = len(kids)
                kids.append({})
                end.append(False)
            t = kids[t][unit]
        end[t] = True
    return kids, end


class_char = _class_char  # one code point as a character-class item (shared with build.patterns)
