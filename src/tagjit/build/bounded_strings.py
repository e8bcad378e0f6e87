"""A JSON string with ``minLength``/``maxLength`` (no ``pattern`` or ``format``) exactly, escapes counted as characters.

Every escape is one character, as in the decoded string's length.

The string is one rule per count of characters still allowed: ``s_k_m ::= "\\"" | RAW s_{k-1} | SHORT s_{k-1} |
U s_{k-1}`` (at most k more, at least m more; the quote only at m = 0; without ``maxLength`` the last rule loops on
itself). The raw class and the short escapes (``\\n``, ``\\"`` ...) are inline; ``\\uXXXX`` (a non-surrogate, either
hex case) and a surrogate pair (one character) are one rule ``U`` every count shares. Strings of one grammar share
their count rules, xgrammar's cross-grammar cache shares them across grammars.

Why this shape (xgrammar 0.2.8): xgrammar precomputes a token mask for each scannable state of each rule, reading a
token on through the rules it references; a token that runs past the end of the rule it starts in is left to the
parser at every mask. Here a token inside the string never leaves the count rule it starts in (the chain ends only at
the closing quote), so masks inside the string are precomputed: ~0.1 ms a token along real walks on Qwen2's 151k
vocabulary, also within a few characters of ``maxLength``, where xgrammar's own ``[^"\\\\]{lo,hi}`` takes 5-25 ms
(0.5-1 ms elsewhere). Only a token that ends inside a ``\\u`` escape leaves ~1.7 ms to the next mask. A repetition
``X{lo,hi}`` of a raw-or-escape rule, or count rules whose character is a rule of its own, leave every token longer
than one character to the parser: 0.2-0.3 s a mask.

Each count costs one precomputed mask, ~80 ms on one thread at 151k tokens (xgrammar's bounded class repetition
costs the same up to 128; above, xgrammar counts at runtime and precomputes ~256 states whatever the bound). So
tagjit writes count rules up to ``MAX_COUNTED`` characters, where its compile stays within ~2x of xgrammar's. Above,
the grammar's string has no lengths and the token filter counts them (``FILTER_COUNTED``, ``anyorder.filter``), where a
filter follows the grammar; inside a structural tag (tool-call arguments), xgrammar's class repetition stays, which
takes no escape (``printed.fix_string_lengths``).
"""

from __future__ import annotations

RULE_PREFIX = "tagjit_len_"
# Largest bound (maxLength, or minLength without one) written as a count rule; above it, xgrammar's repetition, or
# the token filter's count where the grammar has a filter (``FILTER_COUNTED``).
MAX_COUNTED = 256

FILTER_COUNTED = "x-tagjit-length"
"""A normalised string node's keyword (tagjit's own): ``[minLength, maxLength or null]`` that the token filter counts
(``anyorder.filter``) where the grammar cannot: above ``MAX_COUNTED`` characters, or a maxLength beside a ``pattern``
whose automaton with it is too large (``patterns.lengths_apart``). The node holds no minLength/maxLength then."""

# Any character JSON writes raw: not a quote, a backslash or a control character (xgrammar's printed spelling).
_RAW = r'[^\"\\\0-\x1f]'
_HEX = "[0-9a-fA-F]"
# A short escape (inline in every count rule) and a \u escape of one character: a non-surrogate (either hex case) or
# a surrogate pair (one rule, shared by the counts).
_SHORT = '"\\\\" [\\"\\\\/bfnrt]'
_UNICODE = (f'"\\\\u" ([0-9a-cA-CeEfF] {_HEX} {_HEX} {_HEX} | [dD] [0-7] {_HEX} {_HEX}'
            f' | [dD] [89abAB] {_HEX} {_HEX} "\\\\u" [dD] [c-fC-F] {_HEX} {_HEX})')


def counted(node: dict) -> tuple[int, int | None] | None:
    """A string node's (minLength, maxLength) when tagjit writes it as a count rule, else None."""
    lo, hi = node.get("minLength", 0), node.get("maxLength")
    if not _count(lo) or (hi is not None and not _count(hi)):
        return None
    lo, hi = int(lo), (int(hi) if hi is not None else None)
    if (hi is not None and (hi < lo or hi > MAX_COUNTED)) or (hi is None and lo > MAX_COUNTED):
        return None
    return lo, hi


def _count(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 and float(v).is_integer()


def length_rules(lo: int, hi: int | None, name: str, base: str) -> list[str]:
    """EBNF rules (rule ``name`` first) for a JSON string, quotes included, of ``lo``..``hi`` decoded characters.

    Its count rules are named by ``base`` and what is left to read (at most k more, at least m more), so that strings
    of one grammar sharing a ``base`` share them (a rule listed twice is the same text)."""
    rules = [f'{name} ::= "\\"" {_state(base, hi, lo)}', f"{base}_u ::= {_UNICODE}"]
    k, m = hi, lo
    while True:
        nxt = (k - 1 if k is not None else None), max(m - 1, 0)
        alts = ['"\\""'] if m == 0 else []
        if k is None or k > 0:
            alts += [f"{spelling} {_state(base, *nxt)}" for spelling in (_RAW, _SHORT, f"{base}_u")]
        rules.append(f"{_state(base, k, m)} ::= " + " | ".join(alts))
        if (k, m) == nxt or k == 0:
            return rules
        k, m = nxt


def _state(base: str, k: int | None, m: int) -> str:
    return f"{base}_s{'inf' if k is None else k}_{m}"
