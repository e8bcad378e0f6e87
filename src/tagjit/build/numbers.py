"""``multipleOf`` exactly: the multiples of a decimal step within a range, as a digit automaton written in EBNF.

A JSON Schema step is a finite decimal ``c * 10**-d``. A number ``x`` is a multiple of it iff ``n = x * 10**d`` is
an integer divisible by ``c``: ``x`` has at most ``d`` fraction digits (trailing zeros aside) and the digits of ``n``
(integer part, then the fraction padded to ``d`` digits) leave remainder 0 modulo ``c``. Bounds become bounds on
``n``, compared digit by digit. Numbers are written without exponent: every multiple keeps a spelling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable, Hashable

# Every rule of a multipleOf automaton is named with this prefix (``printed.bound_numbers`` looks for it).
RULE_PREFIX = "tagjit_num_"
# Automaton states tagjit writes for one multipleOf node (before and after minimising); more are refused by name.
MAX_STATES = 4096
MAX_RULES = 1024

_ALPHABET = "0123456789."
_BOUNDS = (("minimum", False, True), ("exclusiveMinimum", True, True), ("maximum", False, False),
           ("exclusiveMaximum", True, False))


def decimal_of(value: int | float) -> Decimal:
    """The decimal a JSON number means (a float by its shortest round-trip spelling)."""
    return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@dataclass(frozen=True)
class Multiples:
    """The numbers a multipleOf node accepts: ``n * 10**-d`` with ``c | n`` and ``n`` in each sign's range."""

    c: int
    d: int
    fraction: bool  # whether a fraction part may be written (type number)
    positive: tuple[int, int | None] | None  # inclusive bounds on n for "x >= 0", None if no such value
    negative: tuple[int, int | None] | None  # bounds on n for "x = -n/10**d < 0"

    def empty(self) -> bool:
        """Whether no number is a multiple in range."""
        return self.positive is None and self.negative is None


def multiples(node: dict, integer: bool) -> Multiples:
    """The multiples of a node's ``multipleOf`` within its bounds (``integer``: only integers are allowed)."""
    sign, digits, exponent = decimal_of(node["multipleOf"]).normalize().as_tuple()
    c = int("".join(map(str, digits)))
    d = -exponent if exponent < 0 else 0
    c *= 10 ** max(exponent, 0)
    if integer:  # an integer x is a multiple of c/10**d iff c / gcd(c, 10**d) divides x
        c, d = c // math.gcd(c, 10 ** d), 0
    lo = hi = None
    lo_open = hi_open = False
    for key, open_, lower in _BOUNDS:
        v = node.get(key)
        if not _is_number(v):
            continue
        x = decimal_of(v)
        if lower and (lo is None or x > lo or (x == lo and open_)):
            lo, lo_open = x, open_
        if not lower and (hi is None or x < hi or (x == hi and open_)):
            hi, hi_open = x, open_
    scale = Decimal(10) ** d
    positive = _range(c, 0, lo * scale if lo is not None else None, lo_open,
                      hi * scale if hi is not None else None, hi_open)
    negative = _range(c, 1, -hi * scale if hi is not None else None, hi_open,
                      -lo * scale if lo is not None else None, lo_open)
    return Multiples(c, d, not integer, positive, negative)


def _range(c: int, least: int, lo: Decimal | None, lo_open: bool, hi: Decimal | None,
           hi_open: bool) -> tuple[int, int | None] | None:
    """Inclusive bounds on the multiples n >= least of c with lo (<) <= n (<) <= hi; None if there is none."""
    n_lo = least
    if lo is not None:
        f = math.ceil(lo)
        n_lo = max(n_lo, f + 1 if lo_open and f == lo else f)
    n_lo = -(-n_lo // c) * c
    n_hi = None
    if hi is not None:
        n_hi = math.ceil(hi) - 1 if hi_open and math.ceil(hi) == hi else math.floor(hi)
        if n_hi < 0:
            return None
        n_hi = n_hi // c * c
        if n_hi < n_lo:
            return None
    return n_lo, n_hi


# -- the digit automaton ---------------------------------------------------------------------------

# A comparison of n's digits with a bound's: (digits compared so far, capped at len+1; -1/0/1 so far).
_Cmp = tuple[int, int]


def _feed(cmp: _Cmp | None, target: str, digit: str) -> _Cmp | None:
    if cmp is None:
        return None
    k, rel = cmp
    if k < len(target):
        return k + 1, rel if rel else (digit > target[k]) - (digit < target[k])
    return len(target) + 1, rel


def _result(cmp: _Cmp, target: str) -> int:
    k, rel = cmp
    return -1 if k < len(target) else 1 if k > len(target) else rel


class _Magnitude:
    """The automaton of one sign's magnitude text: '0' or [1-9][0-9]*, then '.' and digits if allowed."""

    def __init__(self, m: Multiples, bounds: tuple[int, int | None]) -> None:
        self.m = m
        lo, hi = bounds
        self.lo = str(lo) if lo > 0 else None  # n >= 0 always holds
        self.hi = str(hi) if hi is not None else None

    def _targets(self, zero: bool) -> tuple[str | None, str | None]:
        # With integer part 0, n is the fraction's d digits with leading zeros: compare with the bounds padded to d.
        pad = self.m.d if zero else 0
        return (self.lo.zfill(pad) if self.lo else None), (self.hi.zfill(pad) if self.hi else None)

    def start(self) -> Hashable:
        return ("start",)

    def _digit(self, state: tuple, digit: str) -> tuple:
        phase, zero, j, r, cl, ch = state
        tl, th = self._targets(zero)
        return (phase, zero, j, (10 * r + int(digit)) % self.m.c,
                _feed(cl, tl or "", digit), _feed(ch, th or "", digit))

    def step(self, state: tuple, ch: str) -> tuple | None:
        if state[0] == "start":
            if ch == ".":
                return None
            zero = ch == "0"
            fresh = ("int", zero, 0, 0, (0, 0) if self.lo else None, (0, 0) if self.hi else None)
            return fresh if zero else self._digit(fresh, ch)
        phase, zero, j, r, cl, chi = state
        if ch == ".":
            if phase != "int" or not self.m.fraction:
                return None
            return ("dot", zero, 0, r, cl, chi)
        if phase == "int":
            return None if zero else self._digit(state, ch)
        if j >= self.m.d:  # digits past the step's last place must be zeros
            return ("frac", zero, self.m.d, r, cl, chi) if ch == "0" else None
        return self._digit(("frac", zero, j + 1, r, cl, chi), ch)

    def accepts(self, state: tuple) -> bool:
        if state[0] in ("start", "dot"):
            return False
        for _ in range(self.m.d - state[2]):  # pad the fraction to d digits
            state = self._digit(state, "0")
        _, zero, _, r, cl, ch = state
        tl, th = self._targets(zero)
        return r == 0 and (cl is None or _result(cl, tl) >= 0) and (ch is None or _result(ch, th) <= 0)


class TooLarge(Exception):
    """The automaton would have more states than tagjit writes."""


def _explore(start: Hashable, step: Callable[[Any, str], Any], accepts: Callable[[Any], bool]
             ) -> tuple[list[dict[str, int]], list[bool]]:
    index = {start: 0}
    order = [start]
    edges: list[dict[str, int]] = []
    for state in order:
        out: dict[str, int] = {}
        for ch in _ALPHABET:
            nxt = step(state, ch)
            if nxt is None:
                continue
            if nxt not in index:
                if len(order) >= MAX_STATES:
                    raise TooLarge
                index[nxt] = len(order)
                order.append(nxt)
            out[ch] = index[nxt]
        edges.append(out)
    return edges, [accepts(s) for s in order]


def _minimise(edges: list[dict[str, int]], final: list[bool]) -> tuple[list[dict[str, int]], list[bool]]:
    """Moore's partition refinement; class 0 holds the start state. Dead states (no way to accept) are dropped."""
    alive = set(i for i, f in enumerate(final) if f)
    changed = True
    while changed:
        changed = False
        for i, out in enumerate(edges):
            if i not in alive and any(t in alive for t in out.values()):
                alive.add(i)
                changed = True
    if 0 not in alive:
        return [], []
    edges = [{ch: t for ch, t in out.items() if t in alive} for out in edges]
    cls = [int(f) if i in alive else -1 for i, f in enumerate(final)]
    while True:
        sig = {i: (cls[i], tuple((ch, cls[t]) for ch, t in sorted(edges[i].items()))) for i in alive}
        ids: dict[tuple, int] = {}
        new = [-1] * len(cls)
        for i in sorted(alive):
            new[i] = ids.setdefault(sig[i], len(ids))
        if len(ids) == len(set(c for c in cls if c >= 0)):
            cls = new
            break
        cls = new
    renumber = {cls[0]: 0}
    for i in sorted(alive):
        renumber.setdefault(cls[i], len(renumber))
    n = len(renumber)
    out_edges: list[dict[str, int]] = [{} for _ in range(n)]
    out_final = [False] * n
    for i in sorted(alive):
        k = renumber[cls[i]]
        out_final[k] = final[i]
        out_edges[k] = {ch: renumber[cls[t]] for ch, t in edges[i].items()}
    return out_edges, out_final


minimise = _minimise  # shared with build.patterns


def _rules(prefix: str, edges: list[dict[str, int]], final: list[bool]) -> list[str]:
    rules = []
    for i, out in enumerate(edges):
        by_target: dict[int, list[str]] = {}
        for ch, t in out.items():
            by_target.setdefault(t, []).append(ch)
        alts = ['""'] if final[i] else []
        for t, chars in by_target.items():
            alts.append(f"{_chars(chars)} {prefix}_{t}")
        rules.append(f"{prefix}_{i} ::= " + " | ".join(alts))
    return rules


def _chars(chars: list[str]) -> str:
    if chars == ["."]:
        return '"."'
    digits = sorted(c for c in chars if c != ".")
    runs: list[str] = []
    i = 0
    while i < len(digits):
        j = i
        while j + 1 < len(digits) and int(digits[j + 1]) == int(digits[j]) + 1:
            j += 1
        runs.append(digits[i] if i == j else f"{digits[i]}-{digits[j]}")
        i = j + 1
    body = "".join(runs) + ("." if "." in chars else "")
    return f"[{body}]"


def automaton_rules(m: Multiples, name: str) -> list[str]:
    """EBNF rules (rule ``name`` first) accepting exactly the JSON spellings, without exponent, of the multiples."""
    alts, rules = [], []
    for sign, bounds, tag in (("", m.positive, "p"), ('"-" ', m.negative, "n")):
        if bounds is None:
            continue
        mag = _Magnitude(m, bounds)
        edges, final = _minimise(*_explore(mag.start(), mag.step, mag.accepts))
        if not final or not any(final):
            continue
        rules += _rules(f"{name}_{tag}", edges, final)
        alts.append(f"{sign}{name}_{tag}_0")
    if len(rules) > MAX_RULES:
        raise TooLarge
    return [f"{name} ::= " + (" | ".join(alts) if alts else '""'), *rules]


def multiple_of_problem(node: dict, integer: bool) -> str | None:
    """Why a (normalised) multipleOf node cannot be written exactly, or None."""
    try:
        automaton_rules(multiples(node, integer), "probe")
    except TooLarge:
        return f"multipleOf {node['multipleOf']!r} with this range (an automaton of more than {MAX_STATES} states)"
    return None
