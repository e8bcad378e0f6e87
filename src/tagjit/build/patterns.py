"""``pattern`` (and/or ``format``) with ``minLength``/``maxLength`` exactly, as a character automaton.

The automaton (interegular) is multiplied by a length counter. A format is its language written as a regex (``format_pattern``); beside a pattern, the two
automata are intersected.

Match semantics are the ones tagjit gives a plain ``pattern`` (``normalize`` anchors it as ``^[\\s\\S]*(?:p)...$``,
so JSON Schema's search, "ab" accepts "xaby"): the pattern is searched for in the decoded string, ``^`` and ``$``
match only at its start and end (ECMA-262 without the m flag), ``.`` is any character but a newline, ``\\d``/``\\w``/
``\\s`` are ASCII classes (xgrammar's and interegular's reading). Lengths count Unicode characters (code points) of
the decoded string, as ``len`` does.

The anchors become two sentinel characters (surrogates, which no string holds) around the text, so the automaton
of ``[\\s\\S]*(?:p)[\\s\\S]*`` read from after the first sentinel, accepting where the second one leads to a final
state, is the pattern's search language. Each transition's character class accepts every JSON spelling of its
characters: raw where JSON allows, the short escapes, ``\\uXXXX`` in any hex case, surrogate pairs above U+FFFF.
"""

from __future__ import annotations

import bisect
import json
import re
from functools import lru_cache
from typing import Any, NamedTuple

import interegular
from interegular.fsm import anything_else

from tagjit.build.ebnf import class_char, complement
from tagjit.build.numbers import MAX_STATES, explore, minimise
from tagjit.build.strings import RAW_FORBIDDEN, SHORT_ESCAPES
from tagjit.errors import EmptySchemaError

RULE_PREFIX = "tagjit_pat_"
_BOS, _EOS = "\ud800", "\ud801"
_SURROGATES = (0xD800, 0xDFFF)
_SENTINELS = _BOS + _EOS
# Classes of "anything but": written so that they never read a sentinel.
_NEGATED_SHORTHANDS = {"S": f"[^\\s{_SENTINELS}]", "W": f"[^\\w{_SENTINELS}]", "D": f"[^\\d{_SENTINELS}]"}


class PatternProblem(Exception):
    """A pattern tagjit cannot turn into an automaton exactly (the message names the feature; ``size``: one it reads,
    whose automaton is too large to build)."""

    def __init__(self, message: str, size: bool = False) -> None:
        super().__init__(message)
        self.size = size


class Lengths(NamedTuple):
    """The minimised automaton of one pattern and length range: transitions by class index, the classes' code
    point ranges, and which states accept."""

    edges: list[dict[int, int]]
    final: list[bool]
    classes: dict[int, list[tuple[int, int]]]

    def empty(self) -> bool:
        return not self.final


# -- ECMA-262 pattern text -> interegular pattern text ----------------------------------------------

def _literal(ch: str) -> str:
    return ch if (ch.isascii() and ch.isalnum()) or not ch.isascii() else "\\" + ch


def _hex_at(p: str, i: int, n: int) -> int | None:
    text = p[i:i + n]
    if len(text) == n and all(c in "0123456789abcdefABCDEF" for c in text):
        return int(text, 16)
    return None


def _unicode_escape(p: str, i: int) -> tuple[str, int]:
    """The character of a ``\\u`` escape starting at ``p[i] == 'u'`` and the index after it."""
    if p.startswith("{", i + 1):
        end = p.find("}", i + 2)
        code = _hex_at(p, i + 2, end - i - 2) if end > i + 2 else None
        if code is None or code > 0x10FFFF:
            raise PatternProblem("pattern with an invalid \\u{...} escape")
        i = end + 1
    else:
        code = _hex_at(p, i + 1, 4)
        if code is None:
            raise PatternProblem("pattern with an invalid \\u escape")
        i += 5
        if 0xD800 <= code <= 0xDBFF and p.startswith("\\u", i) and (low := _hex_at(p, i + 2, 4)) is not None \
                and 0xDC00 <= low <= 0xDFFF:
            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
            i += 6
    if _SURROGATES[0] <= code <= _SURROGATES[1]:
        raise PatternProblem("pattern with a lone surrogate escape")
    return chr(code), i


def _tokens(p: str) -> list[tuple[str, str]]:
    """The pattern as (kind, interegular text) tokens; kinds: open, close, bar, bos, eos, atom."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(p)
    while i < n:
        c = p[i]
        if c == "\\":
            if i + 1 >= n:
                raise PatternProblem("pattern ending in a backslash")
            e = p[i + 1]
            if e == "u":
                ch, i = _unicode_escape(p, i + 1)
                out.append(("atom", _literal(ch)))
                continue
            if e in "bB":
                raise PatternProblem("pattern with a word boundary (\\b)")
            if e in "pPck" or e.isdigit() and e != "0":
                raise PatternProblem(f"pattern with \\{e}")
            out.append(("atom", _NEGATED_SHORTHANDS.get(e, p[i:i + 2])))
            i += 2
        elif c == "[" and p.startswith(("[\\s\\S]", "[\\S\\s]"), i):  # any character (normalize's anchoring)
            out.append(("atom", f"[^{_SENTINELS}]"))
            i += 6
        elif c == "[":
            j = i + 1
            body = ["["]
            if p.startswith("^", j):
                body.append("^" + _SENTINELS)  # a negated class never reads a sentinel
                j += 1
            if p.startswith("]", j):
                raise PatternProblem("pattern with an empty character class")
            negated: list[str] = []  # \S, \W, \D in a class that is not negated: alternatives of their own
            while j < n and p[j] != "]":
                if p[j] == "\\" and j + 1 < n:
                    if p[j + 1] == "u":
                        ch, j = _unicode_escape(p, j + 1)
                        body.append(_literal(ch))
                        continue
                    if p[j + 1] in "pPck":
                        raise PatternProblem(f"pattern with \\{p[j + 1]}")
                    if p[j + 1] in "SWD" and body[1:2] != ["^" + _SENTINELS]:
                        negated.append(_NEGATED_SHORTHANDS[p[j + 1]])
                        j += 2
                        continue
                    body.append(p[j:j + 2])
                    j += 2
                elif p[j] == "[":
                    body.append("\\[")
                    j += 1
                else:
                    body.append(p[j])
                    j += 1
            if j >= n:
                raise PatternProblem("pattern with an unclosed character class")
            alternatives = (["".join(body) + "]"] if len(body) > 1 else []) + negated
            out.append(("atom", alternatives[0] if len(alternatives) == 1 else f"(?:{'|'.join(alternatives)})"))
            i = j + 1
        elif c == "(":
            if p.startswith("(?:", i):
                i += 3
            elif p.startswith(("(?=", "(?!", "(?<=", "(?<!"), i):
                raise PatternProblem("pattern with a lookahead or lookbehind")
            elif p.startswith(("(?<", "(?P<"), i):
                end = p.find(">", i)
                if end < 0:
                    raise PatternProblem("pattern with an unclosed group name")
                i = end + 1
            elif p.startswith("(?", i):
                raise PatternProblem("pattern with inline flags or another (? group")
            else:
                i += 1
            out.append(("open", "(?:"))
        elif c == ")":
            out.append(("close", ")"))
            i += 1
        elif c == "|":
            out.append(("bar", "|"))
            i += 1
        elif c == "^":
            out.append(("bos", _BOS))
            i += 1
        elif c == "$":
            out.append(("eos", _EOS))
            i += 1
        else:
            out.append(("atom", f"[^\\n{_SENTINELS}]" if c == "." else c))
            i += 1
    return out


def _drop_repeated(tokens: list[tuple[str, str]], anchor: str, opener: str, closer: str) -> list[tuple[str, str]]:
    """Leave out an anchor that another one of its kind always directly precedes (``^(?:^a|^b)``): with one
    sentinel character for both, the second would need a second sentinel."""
    out, stack, after = [], [], False
    for kind, text in tokens:
        if kind == anchor:
            if after:
                continue
            after = True
        elif kind == opener:
            stack.append(after)
        elif kind == "bar":
            after = stack[-1] if stack else False
        elif kind == closer:
            if stack:
                stack.pop()
            after = False
        else:
            after = False
        out.append((kind, text))
    return out


def interegular_pattern(pattern: str) -> str:
    """The pattern in interegular's syntax, anchors as sentinels, searched for anywhere in sentinel-wrapped text."""
    tokens = _drop_repeated(_tokens(pattern), "bos", "open", "close")
    tokens = _drop_repeated(tokens[::-1], "eos", "close", "open")[::-1]
    # Read over the text between a BOS and an EOS sentinel: the optional ones take the sentinels where the pattern's
    # own anchors do not, and no class reads a sentinel, so ``^``/``$`` hold only at the ends.
    inside = f"[^{_SENTINELS}]*"
    return f"{_BOS}?{inside}(?:" + "".join(t for _, t in tokens) + f"){inside}{_EOS}?"


MAX_PATTERN_SIZE = 512


def _unbounded(node) -> bool:
    if hasattr(node, "options"):
        return any(_unbounded(o) for o in node.options)
    if hasattr(node, "parts"):
        return any(_unbounded(o) for o in node.parts)
    if hasattr(node, "base"):
        return node.max is None or _unbounded(node.base)
    return False


def _size(node) -> int:
    """Characters of the pattern with every counted repetition written out (unbounded ones once)."""
    if hasattr(node, "options"):
        return sum(_size(o) for o in node.options)
    if hasattr(node, "parts"):
        return sum(_size(o) for o in node.parts)
    if hasattr(node, "base"):
        count = node.max if node.max is not None else node.min + 1
        if count > 2 and not hasattr(node.base, "chars") and _unbounded(node.base):
            return MAX_PATTERN_SIZE + 1  # a counted repetition of a loop: interegular's automaton explodes
        return _size(node.base) * max(1, count)
    if hasattr(node, "inner"):
        return _size(node.inner)
    return 1


# -- the automaton ---------------------------------------------------------------------------------

def _ranges(codes: set[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for c in sorted(codes):
        if out and out[-1][1] == c - 1:
            out[-1] = (out[-1][0], c)
        else:
            out.append((c, c))
    return out


@lru_cache(maxsize=512)
def _fsm(pattern: str):
    """interegular's automaton of the pattern's search language over sentinel-wrapped text (shared: never mutated)."""
    if pattern in _CLASSES_TOO_LARGE:
        raise PatternProblem(_TOO_LARGE, size=True)
    try:
        parsed = interegular.parse_pattern(interegular_pattern(pattern))
        if _size(parsed) > MAX_PATTERN_SIZE:  # interegular would take minutes building it
            raise PatternProblem(f"pattern with repetitions of more than {MAX_PATTERN_SIZE} characters in all",
                                 size=True)
        return parsed.to_fsm()
    except PatternProblem:
        raise
    except interegular.Unsupported as e:
        raise PatternProblem(f"pattern with {str(e).strip(chr(39)) or 'a construct'} interegular cannot read") from None
    except Exception:  # interegular.InvalidSyntax and its parser's own errors
        raise PatternProblem("pattern interegular cannot parse") from None


_TOO_MANY = f"pattern (an automaton of more than {MAX_STATES} states with its lengths)"


@lru_cache(maxsize=256)
def lengths_automaton(pattern: str, lo: int, hi: int | None, also: str | None = None) -> Lengths:
    """The minimised automaton of the strings (by code point) that ``pattern`` (and ``also``, if given) matches,
    with ``lo..hi`` characters."""
    fsm = _fsm(pattern)
    if also is not None:
        fsm = fsm & _fsm(also)
    return _fsm_lengths(fsm, lo, hi)


def _fsm_lengths(fsm, lo: int, hi: int | None) -> Lengths:
    """The minimised automaton of the strings a sentinel-wrapped search automaton accepts, with ``lo..hi`` characters."""
    alphabet = fsm.alphabet
    by_key = alphabet.by_transition
    # A sentinel the pattern does not name (no ``$``) shares its class with other characters: read it by its class.
    k_bos, k_eos = alphabet[_BOS], alphabet[_EOS]
    named = {ord(s) for s in alphabet if s is not anything_else}
    classes: dict[int, list[tuple[int, int]]] = {}
    for key, symbols in by_key.items():
        codes = {ord(s) for s in symbols if s is not anything_else} - set(range(_SURROGATES[0], _SURROGATES[1] + 1))
        if anything_else in symbols:
            ranges = sorted([*complement(_ranges(named)), *_ranges(codes)])
        else:
            ranges = _ranges(codes)
        if ranges:
            classes[key] = ranges
    first = fsm.map.get(fsm.initial, {}).get(k_bos)
    if first is None:
        return Lengths([], [], classes)
    # The pattern's own automaton over the text between the sentinels, minimised before the lengths multiply it.
    base, order = explore(first, lambda s: ((key, t) for key, t in fsm.map.get(s, {}).items() if key in classes),
                          PatternProblem(_TOO_MANY, size=True))
    base, base_final = minimise(base, [fsm.map.get(s, {}).get(k_eos) in fsm.finals for s in order])
    if not base:
        return Lengths([], [], classes)
    return Lengths(*_times_lengths(base, base_final, lo, hi), classes)


def _times_lengths(base: list[dict[int, int]], base_final: list[bool], lo: int, hi: int | None,
                   ) -> tuple[list[dict[int, int]], list[bool]]:
    """The minimised product of a minimal automaton (every state alive) and a counter of characters, lo..hi.

    The counter only grows, up to ``hi`` (or up to ``lo``, where it stays when there is no ``hi``), so the product is
    layered by count: classified from the last layer down, a state's class is its finality and its targets' classes,
    which is the minimal automaton where the layers are acyclic (the capped layer is the minimal base itself)."""
    cap = lo if hi is None else hi
    index = {(0, 0): 0}
    order = [(0, 0)]
    edges: list[dict[int, int]] = []
    for s, k in order:
        out: dict[int, int] = {}
        if hi is None or k < hi:
            for key, t in base[s].items():
                nxt = (t, min(k + 1, cap) if hi is None else k + 1)
                if nxt not in index:
                    if len(order) >= MAX_STATES:
                        raise PatternProblem(_TOO_MANY, size=True)
                    index[nxt] = len(order)
                    order.append(nxt)
                out[key] = index[nxt]
        edges.append(out)
    final = [k >= lo and base_final[s] for s, k in order]
    cls = [-1] * len(order)  # -1: no accepting state ahead
    ids: dict[object, int] = {}
    for i in sorted(range(len(order)), key=lambda i: -order[i][1]):
        s, k = order[i]
        if hi is None and k == cap:  # the base automaton itself: minimal, every state alive
            cls[i] = ids.setdefault(("base", s), len(ids))
            continue
        out = tuple(sorted((key, cls[t]) for key, t in edges[i].items() if cls[t] >= 0))
        if final[i] or out:
            cls[i] = ids.setdefault((final[i], out), len(ids))
    if cls[0] < 0:
        return [], []
    # Number the classes in the order a walk from the start meets them (the start is 0).
    rep: dict[int, int] = {}
    for i in range(len(order)):
        if cls[i] >= 0:
            rep.setdefault(cls[i], i)
    number = {cls[0]: 0}
    walk = [cls[0]]
    out_edges: list[dict[int, int]] = []
    out_final: list[bool] = []
    for c in walk:
        i = rep[c]
        out = {}
        for key, t in edges[i].items():
            if cls[t] >= 0:
                if cls[t] not in number:
                    number[cls[t]] = len(walk)
                    walk.append(cls[t])
                out[key] = number[cls[t]]
        out_edges.append(out)
        out_final.append(final[i])
    return out_edges, out_final


# -- EBNF ------------------------------------------------------------------------------------------

_ANY_HEX = "[0-9a-fA-F]"


def _hex_class(a: int, b: int) -> str:
    """Hex digits a..b (0-15), either case."""
    if a == b and a < 10:
        return f'"{a}"'
    digits = [f"{x:x}" for x in range(a, b + 1)]
    num = [d for d in digits if d.isdigit()]
    let = [d for d in digits if d.isalpha()]
    body = ""
    if num:
        body += num[0] if len(num) == 1 else f"{num[0]}-{num[-1]}"
    if let:
        body += let[0] if len(let) == 1 else f"{let[0]}-{let[-1]}"
        up = [d.upper() for d in let]
        body += up[0] if len(up) == 1 else f"{up[0]}-{up[-1]}"
    return f"[{body}]"


def _hex_range(lo: int, hi: int, width: int) -> list[str]:
    """EBNF sequences for the ``width``-digit hex spellings (either case) of lo..hi."""
    if width == 0:
        return [""]
    size = 16 ** (width - 1)
    if lo == 0 and hi == 16 * size - 1:
        return [" ".join([_ANY_HEX] * width)]
    hl, ll = divmod(lo, size)
    hh, lh = divmod(hi, size)
    if hl == hh:
        return [f"{_hex_class(hl, hl)} {x}".strip() for x in _hex_range(ll, lh, width - 1)]
    out = []
    full_lo, full_hi = hl, hh
    if ll:
        out += [f"{_hex_class(hl, hl)} {x}".strip() for x in _hex_range(ll, size - 1, width - 1)]
        full_lo += 1
    if lh != size - 1:
        full_hi -= 1
    if full_lo <= full_hi:
        out.append(" ".join([_hex_class(full_lo, full_hi)] + [_ANY_HEX] * (width - 1)))
    if lh != size - 1:
        out += [f"{_hex_class(hh, hh)} {x}".strip() for x in _hex_range(0, lh, width - 1)]
    return out


def _alt(seqs: list[str]) -> str:
    return seqs[0] if len(seqs) == 1 else "(" + " | ".join(seqs) + ")"


def spellings(ranges: list[tuple[int, int]]) -> str:
    """An EBNF expression for every JSON spelling, inside a string, of one character from ``ranges``."""
    raw, short, escaped = spelling_parts(ranges)
    return _alt([x for x in (raw, short) if x] + (['"\\\\u" ' + _alt(escaped)] if escaped else []))


def spelling_parts(ranges: list[tuple[int, int]]) -> tuple[str | None, str | None, list[str]]:
    """The JSON spellings of one character from ``ranges``: the class of those JSON writes raw, the short escapes
    (``"\\\\" [nt]``), and the sequences that follow ``\\u`` (one BMP character, or a surrogate pair)."""
    codes_small = {c for lo, hi in ranges if lo < 0x80 for c in range(lo, min(hi, 0x7F) + 1)}
    raw_forbidden = sorted({ord(c) for c in RAW_FORBIDDEN})
    raw_chars: list[tuple[int, int]] = []
    for lo, hi in ranges:  # split around the characters JSON never writes raw, never walking a range (up to 1.1M)
        c = lo
        for f in raw_forbidden:
            if f > hi:
                break
            if f >= c:
                if f > c:
                    raw_chars.append((c, f - 1))
                c = f + 1
        if c <= hi:
            raw_chars.append((c, hi))
    raw = _class_of_ranges(raw_chars) if raw_chars else None
    codes = [e for ch, e in SHORT_ESCAPES.items() if ord(ch) in codes_small]
    short = ('"\\\\" [' + "".join("\\" + e if e in '\\]^-["' else e for e in codes) + "]") if codes else None
    bmp = [(lo, min(hi, 0xFFFF)) for lo, hi in ranges if lo <= 0xFFFF]
    escaped = [seq for lo, hi in bmp for seq in _hex_range(lo, hi, 4)]
    for lo, hi in ranges:
        if hi < 0x10000:
            continue
        lo = max(lo, 0x10000)
        for h_lo, h_hi, l_lo, l_hi in _pairs(lo - 0x10000, hi - 0x10000):
            escaped += [f'{high} "\\\\u" {low}' for high in _hex_range(h_lo, h_hi, 4)
                        for low in _hex_range(l_lo, l_hi, 4)]
    return raw, short, escaped


def _class_of_ranges(ranges: list[tuple[int, int]]) -> str:
    return "[" + "".join(class_char(a) if a == b else f"{class_char(a)}-{class_char(b)}" for a, b in ranges) + "]"


def _pairs(lo: int, hi: int) -> list[tuple[int, int, int, int]]:
    """UTF-16 surrogate pieces (high lo..hi, low lo..hi) of the supplementary offsets lo..hi."""
    h1, l1 = divmod(lo, 0x400)
    h2, l2 = divmod(hi, 0x400)
    H, L = 0xD800, 0xDC00
    if h1 == h2:
        return [(H + h1, H + h1, L + l1, L + l2)]
    out = []
    if l1:
        out.append((H + h1, H + h1, L + l1, L + 0x3FF))
        h1 += 1
    last = None
    if l2 != 0x3FF:
        last = (H + h2, H + h2, L, L + l2)
        h2 -= 1
    if h1 <= h2:
        out.append((H + h1, H + h2, L, L + 0x3FF))
    if last:
        out.append(last)
    return out


# Most states of a string automaton whose masks xgrammar precomputes (see lengths_rules).
PRECOMPUTED_STATES = 256


def lengths_rules(a: Lengths, name: str) -> list[str]:
    """EBNF rules (rule ``name`` first) for a JSON string, quotes included, whose value the automaton accepts.

    Up to ``PRECOMPUTED_STATES`` states, each state's rule holds its classes' raw characters and short escapes
    inline and their ``\\uXXXX`` spellings as one rule per class: xgrammar 0.2.8 precomputes a state's mask only
    while a token stays in the rule it starts in, so a class written as a rule of its own left every mask inside the
    string to its parser (15-60 ms a token with a 151k vocabulary; inline ~0.01-0.06 ms, as ``bounded_strings``).
    Each precomputed state costs a vocabulary-wide pass at compile time (~50 ms on one thread, more for broad
    classes), so a larger automaton keeps the class rules: compiled at once, its masks left to the parser."""
    if a.empty():
        raise EmptySchemaError("a pattern with minLength/maxLength that accepts no string")
    used = sorted({key for out in a.edges for key in out})
    rules = [f'{name} ::= "\\"" {name}_0']
    if len(a.edges) > PRECOMPUTED_STATES:
        rules += [f"{name}_c{key} ::= {spellings(a.classes[key])}" for key in used]
        for i, out in enumerate(a.edges):
            alts = ['"\\""'] if a.final[i] else []
            alts += [f"{name}_c{key} {name}_{t}" for key, t in sorted(out.items())]
            rules.append(f"{name}_{i} ::= " + " | ".join(alts))
        return rules
    parts = {key: spelling_parts(a.classes[key]) for key in used}
    for key, (_, _, escaped) in parts.items():
        if escaped:
            rules.append(f"{name}_u{key} ::= " + " | ".join('"\\\\u" ' + seq for seq in escaped))
    for i, out in enumerate(a.edges):
        alts = ['"\\""'] if a.final[i] else []
        for key, t in sorted(out.items()):
            raw, short, escaped = parts[key]
            alts += [f"{x} {name}_{t}" for x in (raw, short) if x]
            if escaped:
                alts.append(f"{name}_u{key} {name}_{t}")
        rules.append(f"{name}_{i} ::= " + " | ".join(alts))
    return rules


# Characters JSON writes only escaped, as code point ranges.
_CONTROL, _QUOTE, _BACKSLASH_CODE = (0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)


def spelled_by_tagjit(pattern: str) -> bool:
    """Whether a pattern alone (no lengths, no format) is written as tagjit's own automaton rather than xgrammar's
    regex rule, which matches the JSON spelling between the quotes, not the string it decodes to.

    A pattern that names a backslash must be (xgrammar took the text ``"a\\b"``, the string a + backspace, for
    ``^a\\\\b$``, and refused the string a + backslash + b). One that matches a quote or a control character is, where
    it is short (up to ``SPELLED_PATTERN_CHARS``: interegular took 1.2 s on a 220-character alternation, minutes once
    anchored) and its automaton has its masks precomputed: xgrammar took no escape there (refusing ``\\n`` for
    ``\\s``, ``\\"`` for ``.``), which is sound. A pattern interegular cannot read stays xgrammar's."""
    if not _names_backslash(pattern) and len(pattern) > SPELLED_PATTERN_CHARS:
        return False
    try:
        a = lengths_automaton(pattern, 0, None)
    except PatternProblem:
        return False
    used = {key for out in a.edges for key in out}

    def reads(lo: int, hi: int) -> bool:
        return any(a0 <= hi and lo <= b0 for key in used for a0, b0 in a.classes[key])

    if reads(*_BACKSLASH_CODE):
        return True
    return len(a.edges) <= PRECOMPUTED_STATES and (reads(*_CONTROL) or reads(*_QUOTE))


# Longest pattern tagjit reads into an automaton only to take escapes xgrammar's rule refuses (see spelled_by_tagjit).
SPELLED_PATTERN_CHARS = 128
# A pattern that may match a backslash: an escaped backslash or its code point, or a range around it (``[ -~]``).
_BACKSLASH = re.compile(r"\\\\|\\x5[cC]|\\u005[cC]")
_END = r"\\x[0-9a-fA-F]{2}|\\u[0-9a-fA-F]{4}|\\.|[^\\\]]"
_RANGE = re.compile(f"({_END})-({_END})")


def _names_backslash(pattern: str) -> bool:
    def code(end: str) -> int:
        return int(end[2:], 16) if end[:2] in ("\\x", "\\u") else ord(end[-1])
    return _BACKSLASH.search(pattern) is not None or any(code(a) <= 0x5C <= code(b) for a, b in _RANGE.findall(pattern))


def bounds(node: dict) -> tuple[int, int | None]:
    lo = node.get("minLength", 0)
    hi = node.get("maxLength")
    return int(lo), (int(hi) if hi is not None else None)


def match_lengths(pattern: str, anchored: bool) -> tuple[int, int | None] | None:
    """The fewest and most characters (None: no most) of a string the pattern matches, read off the pattern itself
    (no automaton: a repetition such as ``{0,99}`` costs nothing here); the most only where ``anchored`` (each
    alternative must match the whole string), else None. None where interegular cannot read the pattern."""
    try:  # interegular_pattern writes BOS? inside* (pattern) inside* EOS?: the pattern is the third part
        group = interegular.parse_pattern(interegular_pattern(pattern)).options[0].parts[2]
    except Exception:  # interegular's own errors
        return None
    lo, hi = _span(group)
    return lo, (hi if anchored else None)


def _span(node) -> tuple[int, int | None]:
    if hasattr(node, "options"):
        spans = [_span(o) for o in node.options]
        return min(a for a, _ in spans), (None if any(b is None for _, b in spans) else max(b for _, b in spans))
    if hasattr(node, "parts"):
        spans = [_span(o) for o in node.parts]
        return sum(a for a, _ in spans), (None if any(b is None for _, b in spans) else sum(b for _, b in spans))
    if hasattr(node, "base"):
        a, b = _span(node.base)
        if b == 0:
            return 0, 0
        return a * node.min, (None if node.max is None or b is None else b * node.max)
    if not node.negated and node.chars and node.chars <= set(_SENTINELS):  # ^ or $: no character
        return 0, 0
    return 1, 1


def pattern_lengths_problem(node: dict) -> str | None:
    """Why a normalised node's pattern with minLength/maxLength cannot be written exactly, or None."""
    try:
        lengths_automaton(node["pattern"], *bounds(node))
    except PatternProblem as e:
        return f"{e} together with minLength/maxLength"
    return None


# -- format with minLength/maxLength ---------------------------------------------------------------
_HEX = "[0-9A-Fa-f]"
_PCT = f"%{_HEX}{{2}}"
_TIME = ("(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\\.[0-9]+)?(?:Z|[+\\-](?:[01][0-9]|2[0-3]):[0-5][0-9])")
_USER = f"(?:[a-zA-Z0-9_.~!$&'()*+,;=:\\-]|{_PCT})"
_HOST = f"(?:[a-zA-Z0-9_.~!$&'()*+,;=\\-]|{_PCT})"
_PCHAR = f"(?:[a-zA-Z0-9_.~!$&'()*+,;=:@\\-]|{_PCT})"
_NCHAR = f"(?:[a-zA-Z0-9_.~!$&'()*+,;=@\\-]|{_PCT})"
_QCHAR = f"(?:[a-zA-Z0-9_.~!$&'()*+,;=:@/?\\-]|{_PCT})"
_AUTH = f"//(?:{_USER}*@)?{_HOST}*(?::[0-9]*)?(?:/{_PCHAR}*)*"
_TAIL = f"(?:\\?{_QCHAR}*)?(?:#{_QCHAR}*)?"
_H4 = f"{_HEX}{{1,4}}"
_OCTET6 = "(?:25[0-5]|(?:2[0-4]|1?[0-9])?[0-9])"
_DUR_T = "T(?:[0-9]+S|[0-9]+M(?:[0-9]+S)?|[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?)"
_VAR = f"(?:[a-zA-Z0-9_]|{_PCT})"
_VARSPEC = f"{_VAR}(?:\\.?{_VAR})*(?::[1-9][0-9]{{0,3}}|\\*)?"
_POINTER = "(?:/(?:[^/~]|~[01])*)*"
_URI = f"[a-zA-Z][a-zA-Z+.\\-]*:(?:{_AUTH}|/?(?:{_PCHAR}+(?:/{_PCHAR}*)*)?){_TAIL}"
_ATEXT = "[a-zA-Z0-9_!#$%&'*+/=?^`{|}~\\-]"
_OCTET4 = "(?:25[0-5]|2[0-4][0-9]|[01]?[0-9]?[0-9])"
# RFC 3987's IRI: RFC 3986's URI with ucschar in iunreserved and iprivate in the query. An IP-literal host ("[::1]")
# is left out (sound: fewer strings), as the uri rule leaves it out.
UCSCHAR = "\u00a0-\ud7ff\uf900-\ufdcf\ufdf0-\uffef" + "".join(
    f"{chr(plane)}-{chr(plane + 0xFFFD)}" for plane in range(0x10000, 0xE0000, 0x10000)) + "\U000e1000-\U000efffd"
IPRIVATE = "\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd"
_IUNRES = f"a-zA-Z0-9\\-._~{UCSCHAR}"
_SUB = "!$&'()*+,;="
_IPCHAR = f"(?:[{_IUNRES}{_SUB}:@]|{_PCT})"
_IPATH = f"(?:/{_IPCHAR}*)*"
_IAUTH = f"(?:(?:[{_IUNRES}{_SUB}:]|{_PCT})*@)?(?:[{_IUNRES}{_SUB}]|{_PCT})*(?::[0-9]*)?"
_ITAIL = f"(?:\\?(?:{_IPCHAR}|[{IPRIVATE}/?])*)?(?:#(?:{_IPCHAR}|[/?])*)?"
_IRI = f"[a-zA-Z][a-zA-Z0-9+\\-.]*:(?://{_IAUTH}{_IPATH}|/(?:{_IPCHAR}+{_IPATH})?|{_IPCHAR}+{_IPATH})?{_ITAIL}"
_IRELATIVE = (f"(?://{_IAUTH}{_IPATH}|/(?:{_IPCHAR}+{_IPATH})?|(?:[{_IUNRES}{_SUB}@]|{_PCT})+{_IPATH})?{_ITAIL}")
# RFC 3339 full-date with the days of each month and leap years (xgrammar's "date" accepts 2021-02-31).
DATE = ("(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
        "|02-(?:0[1-9]|1[0-9]|2[0-8]))|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)"
        "-02-29)")
BASE64 = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
# Each format's language, by the characters of the decoded string, as the format alone enforces it: xgrammar's
# rules read as a regex (its quirks kept: a scheme without digits, lower-case hostnames, 'T' and 'Z' upper case), date
# as tagjit's exact calendar (DATE), uri-reference as RFC 3986's (a URI too), byte as base64. Escapes are the JSON
# spelling, not the language: the quoted local part of an email is RFC 5321's quoted-pair, json-pointer takes every
# character but '/' and '~'.
_FORMATS = {
    "date-time": f"[0-9]{{4}}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])T{_TIME}",
    "time": _TIME,
    "duration": f"P(?:(?:[0-9]+D|[0-9]+M(?:[0-9]+D)?|[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?)(?:{_DUR_T})?|{_DUR_T}|[0-9]+W)",
    "email": (f"(?:{_ATEXT}+(?:\\.{_ATEXT}+)*|\"(?:[ !#-\\[\\]-~]|\\\\[ -~])*\")"
              "@[A-Za-z0-9](?:[\\-A-Za-z0-9]*[A-Za-z0-9])?(?:\\.[A-Za-z0-9][\\-A-Za-z0-9]*[A-Za-z0-9])*"),
    "hostname": "[a-z0-9](?:[a-z0-9\\-]*[a-z0-9])?(?:\\.[a-z0-9](?:[a-z0-9\\-]*[a-z0-9])?)*",
    "ipv4": f"(?:{_OCTET4}\\.){{3}}{_OCTET4}",
    "ipv6": (f"(?:(?:{_H4}:){{7}}{_H4}|(?:{_H4}:){{1,7}}:|(?:{_H4}:){{1,6}}:{_H4}|(?:{_H4}:){{1,5}}(?::{_H4}){{1,2}}"
             f"|(?:{_H4}:){{1,4}}(?::{_H4}){{1,3}}|(?:{_H4}:){{1,3}}(?::{_H4}){{1,4}}|(?:{_H4}:){{1,2}}(?::{_H4}){{1,5}}"
             f"|{_H4}:(?::{_H4}){{1,6}}|:(?:(?::{_H4}){{1,7}}|:)"
             f"|::(?:ffff(?::0{{1,4}})?:)?(?:{_OCTET6}\\.){{3}}{_OCTET6}|(?:{_H4}:){{1,4}}:(?:{_OCTET6}\\.){{3}}{_OCTET6})"),
    "uuid": f"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}",
    "uri": _URI,
    # RFC 3986's URI-reference is a URI or a relative reference; xgrammar's rule takes only the latter.
    "uri-reference": f"{_URI}|(?:{_AUTH}|/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?|{_NCHAR}+(?:/{_PCHAR}*)*)?{_TAIL}",
    "uri-template": (f"(?:[!#-$&(-;=?-\\[\\]_a-z~]|{_PCT}|\\{{[+#./;?&=,!@|]?{_VARSPEC}(?:,{_VARSPEC})*\\}})*"),
    "iri": _IRI,
    "iri-reference": f"{_IRI}|{_IRELATIVE}",
    "json-pointer": _POINTER,
    "relative-json-pointer": f"(?:0|[1-9][0-9]*)(?:#|{_POINTER})",
}


def format_pattern(fmt: object) -> str | None:
    """The anchored pattern of a format's language (None: tagjit has none for it)."""
    if fmt == "date":
        return f"^{DATE}$"
    if fmt == "byte":
        return BASE64
    return f"^(?:{_FORMATS[fmt]})$" if isinstance(fmt, str) and fmt in _FORMATS else None


# The IRI formats' classes hold every Unicode letter (~1M code points each): interegular takes seconds to parse them
# and minutes to build the automaton, so these languages are written only alone, as xgrammar's regex rule.
_CLASSES_TOO_LARGE = frozenset({format_pattern("iri"), format_pattern("iri-reference")})
_TOO_LARGE = "its character classes (all of Unicode's letters) are too large for an automaton"


def node_automaton(node: dict) -> Lengths:
    """The automaton of a normalised node's ``pattern`` and/or ``format`` with its minLength/maxLength (and the
    strings it excludes, ``EXCEPT``)."""
    if EXCEPT in node:
        return _except_automaton(json.dumps(node))
    pattern, fmt = node.get("pattern"), format_pattern(node.get("format"))
    if not isinstance(pattern, str):
        assert fmt is not None
        return lengths_automaton(fmt, *bounds(node))
    return lengths_automaton(pattern, *bounds(node), also=fmt)


def lengths_apart(node: dict) -> bool:
    """Whether a normalised string node's maxLength is better counted apart from its ``pattern``/``format``: the
    pattern/format alone as tagjit's automaton (which takes every JSON spelling), beside a token filter that counts
    characters and runs the same automaton (``Track``), so that no text passes the point where the pattern can still
    end within maxLength. Apart where the automaton with the lengths is too large to build or for xgrammar to
    precompute its masks (over ``PRECOMPUTED_STATES``: 10-60 ms a token at a 151k vocabulary) and the one alone is
    not; a minLength beside a pattern stays in one automaton (whether a long enough ending exists needs every length
    the pattern can still take, not only the fewest)."""
    pattern = node["pattern"] if isinstance(node.get("pattern"), str) else None
    fmt = format_pattern(node["format"]) if isinstance(node.get("format"), str) else None
    lo, hi = bounds(node)
    if lo > 0 or isinstance(node.get("format"), str) and fmt is None:
        return False
    first, also = (pattern, fmt) if pattern is not None else (fmt, None)
    try:
        if len(lengths_automaton(first, lo, hi, also=also).edges) <= PRECOMPUTED_STATES:
            return False
    except PatternProblem as e:
        if not e.size:
            return False
    alone = track(node)
    # Alone over PRECOMPUTED_STATES its masks are the parser's too, worth it only where xgrammar's rule would misread
    # a backslash.
    return alone is not None and (alone.states <= PRECOMPUTED_STATES or pattern is not None
                                  and _names_backslash(pattern))


class Track:
    """A pattern's automaton as a token filter runs it beside a character count: each state's transitions by code
    point, and the fewest characters from each state to an accepting one (``need``), so that the count never lets a
    string past the point where the pattern can still end within maxLength."""

    def __init__(self, a: Lengths) -> None:
        self.states = len(a.edges)
        self.starts: list[list[int]] = []
        self.ranges: list[list[tuple[int, int, int]]] = []
        for out in a.edges:
            ranges = sorted((lo, hi, t) for key, t in out.items() for lo, hi in a.classes[key])
            self.ranges.append(ranges)
            self.starts.append([r[0] for r in ranges])
        back: list[list[int]] = [[] for _ in a.edges]
        for s, out in enumerate(a.edges):
            for t in out.values():
                back[t].append(s)
        self.need = [0 if f else -1 for f in a.final]
        todo = [s for s, f in enumerate(a.final) if f]
        for s in todo:
            for r in back[s]:
                if self.need[r] < 0:
                    self.need[r] = self.need[s] + 1
                    todo.append(r)
        self.most_need = max(self.need, default=0)
        # The fewest characters to an accepting state that reads one more first (a character begun, not whole yet)
        self.after = [1 + min((self.need[t] for t in out.values()), default=1 << 30) for out in a.edges]

    def after_codes(self, state: int, spans: list[tuple[int, int]]) -> int:
        """The fewest characters to an accepting state that reads first one character of ``spans`` (code point
        ranges: a character begun, not whole yet); over ``1 << 30`` where the pattern reads none of them."""
        best = 1 << 30
        for lo, hi, t in self.ranges[state]:
            if self.need[t] < best and any(lo <= b and a <= hi for a, b in spans):
                best = self.need[t]
        return 1 + best

    def step(self, state: int, code: int) -> int:
        """The state after one character, or -1 where the pattern cannot read it."""
        i = bisect.bisect_right(self.starts[state], code) - 1
        if i < 0:
            return -1
        lo, hi, t = self.ranges[state][i]
        return t if code <= hi else -1


def track(node: dict) -> Track | None:
    """The ``Track`` of a normalised string node's pattern and/or format, its lengths aside (None: none is built)."""
    pattern = node["pattern"] if isinstance(node.get("pattern"), str) else None
    fmt = format_pattern(node["format"]) if isinstance(node.get("format"), str) else None
    if pattern is None and fmt is None:
        return None
    return _track(pattern or fmt, fmt if pattern is not None else None)


@lru_cache(maxsize=256)
def _track(first: str, also: str | None) -> Track | None:
    try:
        a = lengths_automaton(first, 0, None, also=also)
    except PatternProblem:
        return None
    return None if a.empty() else Track(a)


def format_lengths_problem(node: dict) -> str | None:
    """Why a normalised string node's ``format`` beside minLength/maxLength (and a ``pattern``, if it has one)
    cannot be written exactly, or None."""
    fmt = node["format"]
    anchored = format_pattern(fmt)
    if anchored is None:
        return f"minLength/maxLength together with format: {fmt}"
    try:
        lo, hi = bounds(node)
    except (TypeError, ValueError):
        return "minLength/maxLength together with format"
    try:
        lengths_automaton(anchored, lo, hi)
    except PatternProblem as e:
        return f"minLength/maxLength together with format: {fmt} ({_reason(e)})"
    if isinstance(node.get("pattern"), str):
        problem = pattern_lengths_problem(node)
        if problem is not None:
            return problem
        try:
            lengths_automaton(node["pattern"], lo, hi, also=anchored)
        except PatternProblem as e:
            return f"pattern together with format: {fmt} and minLength/maxLength ({_reason(e)})"
    elif "pattern" in node:
        return "minLength/maxLength together with format"
    return None


def _reason(e: PatternProblem) -> str:
    text = str(e).removeprefix("pattern ")
    return text[1:-1] if text.startswith("(") and text.endswith(")") else text


# -- string sets: a string node's language as an automaton, for oneOf branches only automata tell apart ---------------

EXCEPT = "x-tagjit-except"
"""A normalised string node's keyword (tagjit's own): a list of string sets, each ``{"pattern": P}``, ``{"format": F}``
or ``{"enum": [...]}``, that the node's strings must all avoid. ``one_of`` writes it; ``node_automaton`` enforces it."""


def _literals(values: list[str]) -> str:
    """An anchored pattern matching exactly the given strings."""
    def escape(ch: str) -> str:
        if _SURROGATES[0] <= ord(ch) <= _SURROGATES[1]:
            raise PatternProblem("a string value holding a lone surrogate")
        return ch if ch.isalnum() or not ch.isascii() else "\\" + ch
    return "^(?:" + "|".join("".join(escape(c) for c in v) for v in values) + ")$"


def _set_fsm(item: dict):
    """The search automaton of one string set: a pattern, a format's language, or finite values (None: no string)."""
    if "pattern" in item:
        return _fsm(item["pattern"])
    if "format" in item:
        anchored = format_pattern(item["format"])
        if anchored is None:
            raise PatternProblem(f"format: {item['format']} (tagjit has no automaton for it)")
        return _fsm(anchored)
    values = [v for v in item.get("enum", []) if isinstance(v, str)]
    return _fsm(_literals(values)) if values else None


def string_fsm(node: dict):
    """The search automaton of a normalised string node's strings, its lengths aside: its pattern, format and finite
    values, without the values of ``not: {enum}`` and the sets of ``EXCEPT`` (None: no string)."""
    fsm = _fsm(node["pattern"]) if isinstance(node.get("pattern"), str) else _fsm("")
    if "format" in node:
        fsm = fsm & _set_fsm({"format": node["format"]})
    values = [node["const"]] if "const" in node else node.get("enum")
    if isinstance(values, list):
        mine = _set_fsm({"enum": values})
        if mine is None:
            return None
        fsm = fsm & mine
    excluded = [_set_fsm({"enum": node["not"]["enum"]})] if isinstance(node.get("not"), dict) else []
    excluded += [_set_fsm(item) for item in node.get(EXCEPT, ())]
    for other in excluded:
        if other is not None:
            fsm = fsm.difference(other)
    return fsm


@lru_cache(maxsize=256)
def _except_automaton(text: str) -> Lengths:
    node = json.loads(text)
    fsm = string_fsm(node)
    return Lengths([], [], {}) if fsm is None else _fsm_lengths(fsm, *bounds(node))


def strings_disjoint(a: dict, b: dict) -> bool:
    """Whether no string is accepted by both normalised string nodes (PatternProblem if tagjit cannot tell)."""
    return _strings_disjoint(json.dumps(a), json.dumps(b))


@lru_cache(maxsize=1024)
def _strings_disjoint(a_text: str, b_text: str) -> bool:
    a, b = json.loads(a_text), json.loads(b_text)
    fa, fb = string_fsm(a), string_fsm(b)
    if fa is None or fb is None:
        return True
    (la, ha), (lb, hb) = bounds(a), bounds(b)
    hi = ha if hb is None else hb if ha is None else min(ha, hb)
    return _fsm_lengths(fa & fb, max(la, lb), hi).empty()


def string_set_empty(node: dict) -> bool:
    """Whether a normalised string node (with ``EXCEPT``) accepts no string (PatternProblem if too large)."""
    return node_automaton(node).empty()
