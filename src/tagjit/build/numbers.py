"""Numbers xgrammar 0.2.8 does not write exactly, as digit automata in EBNF: multipleOf, ranges, enum/const values.

Ranges: xgrammar writes a ``number`` range with at most 6 fraction digits (0.0160425 >= 0 is rejected) and refuses an
``integer`` bound that is not whole or lies outside int64. ``own_range`` is the minimised automaton of the plain
decimal spellings (no exponent, any count of fraction digits, trailing zeros allowed) of the numbers in range: the
integer part is compared with a bound's by length and then digit by digit, the fraction digit by digit. Its only
cycles are digit self-loops, written as ``[..]*`` so that ``printed.bound_numbers`` can bound them in XML arguments.
A whole int64 integer range stays xgrammar's (exact). Values: ``value_spellings``.

``multipleOf``: the multiples of a decimal step within a range.

A JSON Schema step is a finite decimal ``c * 10**-d``. A number ``x`` is a multiple of it iff ``n = x * 10**d`` is
an integer divisible by ``c``: ``x`` has at most ``d`` fraction digits (trailing zeros aside) and the digits of ``n``
(integer part, then the fraction padded to ``d`` digits) leave remainder 0 modulo ``c``. Bounds become bounds on
``n``, compared digit by digit. Numbers are written without exponent: every multiple keeps a spelling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable, Hashable, Iterable, NamedTuple

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


def is_number(v: Any) -> bool:
    """Whether a JSON value is a finite number (not a boolean)."""
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


def bounds_of(node: dict) -> tuple[Decimal | None, bool, Decimal | None, bool]:
    """The tightest lower and upper bound of a node (None: unbounded) and whether each is exclusive."""
    lo = hi = None
    lo_open = hi_open = False
    for key, open_, lower in _BOUNDS:
        v = node.get(key)
        if not is_number(v):
            continue
        x = decimal_of(v)
        if lower and (lo is None or x > lo or (x == lo and open_)):
            lo, lo_open = x, open_
        if not lower and (hi is None or x < hi or (x == hi and open_)):
            hi, hi_open = x, open_
    return lo, lo_open, hi, hi_open


def multiples(node: dict, integer: bool) -> Multiples:
    """The multiples of a node's ``multipleOf`` within its bounds (``integer``: only integers are allowed)."""
    sign, digits, exponent = decimal_of(node["multipleOf"]).normalize().as_tuple()
    c = int("".join(map(str, digits)))
    d = -exponent if exponent < 0 else 0
    c *= 10 ** max(exponent, 0)
    if integer:  # an integer x is a multiple of c/10**d iff c / gcd(c, 10**d) divides x
        c, d = c // math.gcd(c, 10 ** d), 0
    lo, lo_open, hi, hi_open = bounds_of(node)
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


def explore(start: Hashable, moves: Callable[[Any], Iterable[tuple[Any, Any]]], too_large: Exception
            ) -> tuple[list[dict[Any, int]], list[Any]]:
    """The states reachable from ``start``, in the order met, and each one's moves (key -> state number; a move to
    None is none); raises ``too_large`` past ``MAX_STATES`` states."""
    index = {start: 0}
    order = [start]
    edges: list[dict[Any, int]] = []
    for state in order:
        out: dict[Any, int] = {}
        for key, nxt in moves(state):
            if nxt is None:
                continue
            if nxt not in index:
                if len(order) >= MAX_STATES:
                    raise too_large
                index[nxt] = len(order)
                order.append(nxt)
            out[key] = index[nxt]
        edges.append(out)
    return edges, order


def _explore(start: Hashable, step: Callable[[Any, str], Any], accepts: Callable[[Any], bool]
             ) -> tuple[list[dict[str, int]], list[bool]]:
    edges, order = explore(start, lambda state: ((ch, step(state, ch)) for ch in _ALPHABET), TooLarge())
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


# -- ranges ----------------------------------------------------------------------------------------

# Every rule of a range automaton is named with this prefix: ``printed.bound_numbers`` bounds its digit loops.
RANGE_PREFIX = "tagjit_range_"
# Every rule of enum/const number values is named with this prefix.
VALUE_PREFIX = "tagjit_value_"
# Integer bounds xgrammar 0.2.8 writes exactly (whole numbers within int64; others it refuses).
_INT64 = (-(2 ** 63), 2 ** 63 - 1)
# Keywords beside which a range stays xgrammar's: they apply to the whole node, which tagjit's part would leave out.
_ANY_TYPE = ("enum", "const", "$ref", "allOf", "anyOf", "oneOf", "if", "then", "else", "multipleOf")

_Bound = tuple[Decimal, bool]  # a bound's value and whether it is exclusive
_Side = tuple[_Bound | None, _Bound | None]  # lower and upper bound of one sign's magnitude


@dataclass(frozen=True)
class Range:
    """The numbers of a bounded node: each sign's magnitude bounds, None where that sign has no value (``-0``
    belongs to the negative sign, so it is written wherever 0 is in range)."""

    fraction: bool  # whether a fraction part may be written (type number)
    positive: _Side | None
    negative: _Side | None
    nonintegral: bool = False  # only numbers that are not whole (a non-zero fraction digit, ``NONINTEGRAL``)


NONINTEGRAL = "x-tagjit-nonintegral"
"""A normalised number node's keyword (tagjit's own, ``one_of`` writes it): only the numbers that are not whole, each
spelled with a non-zero fraction digit and no exponent (``1.50``, not ``1.0`` or ``15e-1``), within the node's bounds."""


def own_range(node: dict, types: list[str]) -> Range | None:
    """The range tagjit writes for a node's numbers (``types``: the node's types), or None where xgrammar's is exact
    or the node has none."""
    lo, lo_open, hi, hi_open = bounds_of(node)
    if node.get(NONINTEGRAL) is True and "number" in types:
        neg_lo, neg_hi = (-hi if hi is not None else None), (-lo if lo is not None else None)
        return Range(True, _side(lo, lo_open, hi, hi_open), _side(neg_lo, hi_open, neg_hi, lo_open), True)
    if (lo is None and hi is None) or any(k in node for k in _ANY_TYPE):
        return None
    if "number" not in types:
        if "integer" not in types or all(b is None or (b == b.to_integral_value() and _INT64[0] <= b <= _INT64[1])
                                         for b in (lo, hi)):
            return None  # xgrammar writes every digit of a whole int64 bound
    neg_lo, neg_hi = (-hi if hi is not None else None), (-lo if lo is not None else None)
    return Range("number" in types, _side(lo, lo_open, hi, hi_open), _side(neg_lo, hi_open, neg_hi, lo_open))


def _side(lo: Decimal | None, lo_open: bool, hi: Decimal | None, hi_open: bool) -> _Side | None:
    """Bounds on a magnitude m >= 0 with lo (<)<= m (<)<= hi, None if no m >= 0 qualifies."""
    if hi is not None and (hi < 0 or (hi == 0 and hi_open)):
        return None
    lower = (lo, lo_open) if lo is not None and (lo > 0 or (lo == 0 and lo_open)) else None
    return lower, ((hi, hi_open) if hi is not None else None)


class _Digits(NamedTuple):
    """A bound's integer digits and its fraction digits without trailing zeros."""

    whole: str
    fraction: str


def _digits_of(d: Decimal) -> _Digits:
    whole, _, fraction = format(abs(d), "f").partition(".")
    return _Digits(whole, fraction.rstrip("0"))


class _RangeMagnitude:
    """The automaton of one sign's magnitude text ('0' or [1-9][0-9]*, then '.' and digits if allowed) between two
    bounds: the integer part is compared with a bound's by length and then digit by digit, the fraction digit by digit
    with the bound's fraction padded by zeros."""

    def __init__(self, side: _Side, fraction: bool, nonintegral: bool = False) -> None:
        (self.lo, self.hi), self.fraction, self.nonintegral = side, fraction, nonintegral
        self.targets = tuple(_digits_of(b[0]) if b else None for b in (self.lo, self.hi))

    def start(self) -> Hashable:
        return ("start",)

    def _int(self, cmps: tuple, digit: str) -> tuple:
        out = []
        for cmp, t in zip(cmps, self.targets):
            if cmp is not None:
                cmp = _feed(cmp, t.whole, digit)
                cmp = (cmp[0], 0) if cmp[0] > len(t.whole) else cmp  # longer than the bound: greater, whatever rel
            out.append(cmp)
        return tuple(out)

    def _to_fraction(self, cmps: tuple) -> tuple:
        out = []
        for cmp, t in zip(cmps, self.targets):
            if cmp is not None:
                rel = _result(cmp, t.whole)
                cmp = ("f", 0) if rel == 0 else ("d", rel)
            out.append(cmp)
        return tuple(out)

    @staticmethod
    def _frac(cmps: tuple, targets: tuple, digit: str) -> tuple:
        out = []
        for cmp, t in zip(cmps, targets):
            if cmp is not None and cmp[0] == "f":
                j = cmp[1]
                if j < len(t.fraction):
                    rel = (digit > t.fraction[j]) - (digit < t.fraction[j])
                    cmp = ("d", rel) if rel else ("f", j + 1)
                elif digit != "0":
                    cmp = ("d", 1)
            out.append(cmp)
        return tuple(out)

    def step(self, state: tuple, ch: str) -> tuple | None:
        phase = state[0]
        if phase == "start":
            if ch == ".":
                return None
            return ("int", ch == "0", self._int(((0, 0) if self.lo else None, (0, 0) if self.hi else None), ch))
        _, zero, cmps = state[:3]
        if ch == ".":
            return ("dot", zero, self._to_fraction(cmps)) if phase == "int" and self.fraction else None
        if phase == "int":
            return None if zero else ("int", zero, self._int(cmps, ch))
        whole = len(state) < 4 or state[3]  # the fraction read so far is all zeros
        return ("frac", zero, self._frac(cmps, self.targets, ch), self.nonintegral and whole and ch == "0")

    def _relation(self, cmp: Any, t: _Digits) -> int:
        """The magnitude read so far against a bound: -1 below, 0 equal, 1 above."""
        if cmp[0] == "d":
            return cmp[1]
        if cmp[0] == "f":
            return -1 if cmp[1] < len(t.fraction) else 0
        rel = _result(cmp, t.whole)
        return -1 if rel == 0 and t.fraction else rel

    def accepts(self, state: tuple) -> bool:
        if state[0] in ("start", "dot"):
            return False
        if self.nonintegral and (state[0] == "int" or state[3]):
            return False
        cl, ch = state[2]
        if cl is not None:
            rel = self._relation(cl, self.targets[0])
            if rel < 0 or (rel == 0 and self.lo[1]):
                return False
        if ch is not None:
            rel = self._relation(ch, self.targets[1])
            if rel > 0 or (rel == 0 and self.hi[1]):
                return False
        return True


def range_rules(r: Range, name: str) -> list[str] | None:
    """EBNF rules (rule ``name`` first) accepting exactly the JSON spellings, without exponent, of the numbers in
    range; None if there is none. Raises TooLarge past MAX_STATES."""
    alts, rules = [], []
    for sign, side, tag in (("", r.positive, "p"), ('"-" ', r.negative, "n")):
        if side is None:
            continue
        mag = _RangeMagnitude(side, r.fraction, r.nonintegral)
        edges, final = _minimise(*_explore(mag.start(), mag.step, mag.accepts))
        if not any(final):
            continue
        if not _only_self_loops(edges):  # never seen; bound_numbers could not bound such a cycle
            raise TooLarge
        rules += _loop_rules(f"{name}_{tag}", edges, final)
        alts.append(f"{sign}{name}_{tag}_0")
    if len(rules) > MAX_RULES:
        raise TooLarge
    return [f"{name} ::= " + " | ".join(alts), *rules] if alts else None


def _only_self_loops(edges: list[dict[str, int]]) -> bool:
    """Whether every cycle of an automaton is a state's loop on itself."""
    state = [0] * len(edges)  # 0 unseen, 1 on the path, 2 done
    for root in range(len(edges)):
        stack = [(root, iter(edges[root].values()))] if state[root] == 0 else []
        if stack:
            state[root] = 1
        while stack:
            u, targets = stack[-1]
            t = next((t for t in targets if t != u), None)
            if t is None:
                state[u] = 2
                stack.pop()
            elif state[t] == 1:
                return False
            elif state[t] == 0:
                state[t] = 1
                stack.append((t, iter(edges[t].values())))
    return True


def _loop_rules(prefix: str, edges: list[dict[str, int]], final: list[bool]) -> list[str]:
    """A range automaton's rules, each self-loop written as a repetition ``[..]*`` (the only cycles a range has), so
    that ``printed.bound_numbers`` can bound its digit runs."""
    rules = []
    for i, out in enumerate(edges):
        loop = sorted(ch for ch, t in out.items() if t == i)
        by_target: dict[int, list[str]] = {}
        for ch, t in out.items():
            if t != i:
                by_target.setdefault(t, []).append(ch)
        exits = (['""'] if final[i] else []) + [f"{_chars(chars)} {prefix}_{t}" for t, chars in by_target.items()]
        body = exits[0] if len(exits) == 1 else "(" + " | ".join(exits) + ")"
        if loop:
            body = f"{_chars(loop)}*" + ("" if exits == ['""'] else f" {body}")
        rules.append(f"{prefix}_{i} ::= {body}")
    return rules


# -- enum and const values -------------------------------------------------------------------------

def value_rules(values: list[int | float], name: str) -> list[str]:
    """EBNF rule ``name`` accepting the spellings of each number value (see ``value_spellings``)."""
    unique = dict.fromkeys(Decimal(0) if v == 0 else decimal_of(v).normalize() for v in values)
    return [f"{name} ::= " + " | ".join(value_spellings(d) for d in unique)]


def value_spellings(d: Decimal) -> str:
    """An EBNF expression for the spellings of one number value tagjit accepts in an enum or const.

    A value is the decimal of its shortest round-trip spelling (0.4, not 0.40000000000000002). With significant
    digits s (no leading or trailing zeros) it is accepted, after "-" if negative, as
      * plain decimal: s with the point in place and any count of trailing zeros after a point (0.4, 0.40; 1e-05
        as 0.00001); an integral value with or without a point (9, 9.0, 9.00; 1e+20 as 100000000000000000000);
      * scientific: s's first digit, then "." and the rest of s (any count of trailing zeros after a point), "e" or
        "E", and the exponent that makes the value, with optional leading zeros, "-" if negative, "+" optional
        otherwise (1e-05, 1e-5, 1E-05, 1.0e-5; 4e-1; 1.5e+300; 9e0).
    json.dumps writes one of these (plain for 1e-4 <= |x| < 1e16, else scientific). Zero is "0" or "-0", with any
    count of zeros after a point and any exponent. Other spellings of the value (45e-2, 0.04e1) are not accepted.
    """
    if d == 0:
        return '("-"? "0" ("." "0"+)? ([eE] ("+" | "-")? [0-9]+)?)'
    sign, digit_tuple, exp = d.normalize().as_tuple()
    s = "".join(map(str, digit_tuple))
    if exp >= 0:
        plain = f'"{s}{"0" * exp}" ("." "0"+)?'
    else:
        point = len(s) + exp
        plain = f'"{s[:point]}.{s[point:]}" "0"*' if point > 0 else f'"0.{"0" * -point}{s}" "0"*'
    mantissa = f'"{s[0]}.{s[1:]}" "0"*' if len(s) > 1 else f'"{s}" ("." "0"+)?'
    a = len(s) - 1 + exp
    exponent = f'"+"? "0"* "{a}"' if a > 0 else f'"-" "0"* "{-a}"' if a < 0 else '("+" | "-")? "0"+'
    minus = '"-" ' if sign else ""
    return f"({minus}({plain} | {mantissa} [eE] {exponent}))"
