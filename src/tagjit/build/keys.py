"""Property-name languages of ``patternProperties`` as automata, and their EBNF.

A language is an expression over patterns and names: ``{"pattern": P}`` (the names P is searched for in, as JSON
Schema reads a patternProperties key), ``{"names": [...]}``, ``{"all": [...]}``, ``{"any": [...]}`` and
``{"not": e}``. ``schema.pattern_properties`` splits an object's names into disjoint languages, one per set of
patterns a name matches, and writes each as a patternProperties key (``key_text``): a Python regex with that very
language, for jsonschema (lookaheads at the start), that carries the expression in a comment, for tagjit. A
language's automaton is the product of its leaves' ``patterns`` search automata (sentinel-wrapped text), each state
holding which leaves accept there; ``key_rules`` writes it minimised as the text between a key's quotes, every JSON
spelling of each character (``patterns.spellings``).
"""

from __future__ import annotations

import hashlib
import json
import re
from functools import lru_cache
from typing import NamedTuple

from interegular.fsm import FSM, Alphabet, anything_else

from tagjit.build.ebnf import complement
from tagjit.build.numbers import MAX_STATES, explore
from tagjit.build.patterns import (_BOS, _EOS, _SENTINELS, PRECOMPUTED_STATES, Lengths, PatternProblem, _fsm,
                                   spelling_parts, spellings)

RULE_PREFIX = "tagjit_key_"
# Most states of one grammar's key automata whose masks xgrammar precomputes (see key_rules): ~5 s of compile with
# Qwen2's vocabulary on this 2-core machine where every state is broad (a searched pattern); a key automaton that
# does not fit leaves its masks to the parser.
PRECOMPUTED_KEY_STATES = 64
# Most languages one object's names may be split into (each is a copy of a merged schema in the grammar).
MAX_LANGUAGES = 64
_COMMENT = "(?#tagjit-keys "
ANY_NAME: dict = {"all": []}


# -- expressions ---------------------------------------------------------------------------------

def all_of(exprs: list[dict]) -> dict:
    """The names in every language of ``exprs``."""
    flat = [x for e in exprs for x in (e["all"] if "all" in e else [e])]
    return flat[0] if len(flat) == 1 else {"all": flat}


def any_of(exprs: list[dict]) -> dict:
    """The names in some language of ``exprs``."""
    flat = [x for e in exprs for x in (e["any"] if "any" in e else [e])]
    return flat[0] if len(flat) == 1 else {"any": flat}


def negate(expr: dict) -> dict:
    """The names not in ``expr``'s language."""
    return expr["not"] if "not" in expr else {"not": expr}


def excluded_names(expr: dict) -> frozenset[str] | None:
    """The names a language leaves out, where it is every name but finitely many (else None)."""
    if "not" in expr and isinstance(expr["not"].get("names"), list):
        return frozenset(expr["not"]["names"])
    if "all" not in expr and not expr.get("any"):
        return None
    parts = [excluded_names(e) for e in expr.get("all", expr.get("any"))]
    if None in parts:
        return None
    return frozenset().union(*parts) if "all" in expr else frozenset.intersection(*parts)


def key_text(expr: dict) -> str:
    """The patternProperties key of a language: a Python regex with that language, the expression in a comment."""
    carried = json.dumps(expr, ensure_ascii=False).replace("%", "%25").replace(")", "%29")
    return f"^{_COMMENT}{carried})" + _assertion(expr)


def is_key_text(key: str) -> bool:
    """Whether a patternProperties key is one ``key_text`` wrote."""
    return key.startswith("^" + _COMMENT)


def key_expr(key: str) -> dict:
    """The language of a patternProperties key: the expression ``key_text`` carries, else the key as a pattern."""
    if not is_key_text(key):
        return {"pattern": key}
    carried = key[len(_COMMENT) + 1:key.index(")")]
    return json.loads(carried.replace("%29", ")").replace("%25", "%"))


def _assertion(e: dict) -> str:
    """A zero-width Python regex, at the start of a name, that holds iff the name is in ``e``'s language."""
    if "pattern" in e:
        return f"(?=[\\s\\S]*?(?:{e['pattern']}))"
    if "names" in e:
        return "(?=(?:" + "|".join(re.escape(n) for n in e["names"]) + ")\\Z)" if e["names"] else "(?!)"
    if "not" in e:
        return f"(?!{_assertion(e['not'])})"
    if "all" in e:
        return "".join(_assertion(x) for x in e["all"])
    return "(?:" + "|".join(_assertion(x) for x in e["any"]) + ")" if e["any"] else "(?!)"


# -- automata ------------------------------------------------------------------------------------
# One crawl of the product of the leaves, dict-indexed: interegular's own products, one per operation, took 20 s for
# six overlapping patterns.

class _Product(NamedTuple):
    """The reachable product of some leaves' automata over the text between the sentinels."""

    leaves: tuple[str, ...]  # each leaf's expression, as JSON
    edges: list[dict[int, int]]
    vectors: list[tuple[bool, ...]]  # per state: whether each leaf accepts a name ending there
    classes: dict[int, list[tuple[int, int]]]  # class -> code point ranges


@lru_cache(maxsize=256)
def _leaf_fsm(text: str):
    """interegular's search automaton of one leaf (None: no name)."""
    e = json.loads(text)
    if "pattern" in e:
        return _fsm(e["pattern"])
    return _names_fsm(e["names"]) if e["names"] else None


def _names_fsm(names: list[str]) -> FSM:
    """The sentinel-wrapped trie of some names, as an interegular automaton (a regex of them would hit the pattern
    size limit at a few dozen names)."""
    symbols: dict = {_BOS: 0, _EOS: 1, anything_else: 2}
    for ch in sorted({c for n in names for c in n}):
        symbols[ch] = len(symbols)
    initial, final, root = 0, 1, 2
    states: dict[int, dict[int, int]] = {initial: {symbols[_BOS]: root}, final: {}, root: {}}
    for n in names:
        at = root
        for ch in n:
            if symbols[ch] not in states[at]:
                states[at][symbols[ch]] = len(states)
                states[len(states)] = {}
            at = states[at][symbols[ch]]
        states[at][symbols[_EOS]] = final
    return FSM(Alphabet(symbols), set(states), initial, {final}, states)


def _leaves(e: dict, out: dict[str, None]) -> dict[str, None]:
    """The leaves (patterns, name lists) of an expression, as JSON, added to ``out`` in order."""
    if "pattern" in e or "names" in e:
        out[json.dumps(e)] = None
    elif "not" in e:
        _leaves(e["not"], out)
    else:
        for x in e["all" if "all" in e else "any"]:
            _leaves(x, out)
    return out


def _holds(e: dict, vector: tuple[bool, ...], index: dict[str, int]) -> bool:
    """Whether ``e`` holds of a name whose leaves' verdicts are ``vector`` (``index``: a leaf's place in it)."""
    if "pattern" in e or "names" in e:
        return vector[index[json.dumps(e)]]
    if "not" in e:
        return not _holds(e["not"], vector, index)
    if "all" in e:
        return all(_holds(x, vector, index) for x in e["all"])
    return any(_holds(x, vector, index) for x in e["any"])


def _verdicts(e: dict, vectors: list[tuple[bool, ...]], index: dict[str, int]) -> list[bool]:
    """Whether ``e`` holds at each state (judged once per distinct vector: states share a few)."""
    once = {v: _holds(e, v, index) for v in set(vectors)}
    return [once[v] for v in vectors]


@lru_cache(maxsize=256)
def _product(leaves: tuple[str, ...]) -> _Product:
    """The product of the leaves' automata, over the classes of characters no leaf tells apart."""
    fsms = [_leaf_fsm(text) for text in leaves]
    live = [f for f in fsms if f is not None]
    named = sorted({ord(c) for f in live for c in f.alphabet if c is not anything_else} - set(map(ord, _SENTINELS)))
    keys: dict[tuple, list[tuple[int, int]]] = {}
    for code in named:
        keys.setdefault(tuple(f.alphabet[chr(code)] if f is not None else None for f in fsms), []).append((code, code))
    other = complement(_merged_ranges(named))
    if other:
        keys.setdefault(tuple(f.alphabet[anything_else] if f is not None else None for f in fsms), []).extend(other)
    symbols = list(keys)
    classes = {k: _merged_ranges_of(ranges) for k, ranges in enumerate(keys.values())}

    def step(state: tuple, k: int) -> tuple:
        return tuple(None if s is None or f is None else f.map.get(s, {}).get(symbols[k][i])
                     for i, (f, s) in enumerate(zip(fsms, state)))

    def accepts(state: tuple) -> tuple[bool, ...]:
        return tuple(s is not None and f.map.get(s, {}).get(f.alphabet[_EOS]) in f.finals
                     for f, s in zip(fsms, state))

    start = tuple(None if f is None else f.map.get(f.initial, {}).get(f.alphabet[_BOS]) for f in fsms)
    edges, order = explore(start, lambda state: ((k, step(state, k)) for k in classes), PatternProblem(_TOO_MANY))
    return _Product(leaves, edges, [accepts(s) for s in order], classes)


def _merged_ranges(codes: list[int]) -> list[tuple[int, int]]:
    """Sorted code points as disjoint ranges."""
    return _merged_ranges_of([(c, c) for c in codes])


def _merged_ranges_of(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Ranges, sorted and with the touching ones joined."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and out[-1][1] >= lo - 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


_TOO_MANY = f"patternProperties (a property-name automaton of more than {MAX_STATES} states)"


def _product_of(exprs: list[dict]) -> tuple[_Product, dict[str, int]]:
    """The product of the leaves of some expressions, and each leaf's place in its vectors."""
    leaves: dict[str, None] = {}
    for e in exprs:
        _leaves(e, leaves)
    product = _product(tuple(sorted(leaves)))
    return product, {text: i for i, text in enumerate(product.leaves)}


def check_expr(expr: dict) -> None:
    """Raise PatternProblem where tagjit cannot build ``expr``'s automaton (a pattern it cannot read, too large)."""
    _language(json.dumps(expr))


def matches(expr: dict, name: str) -> bool:
    """Whether ``name`` is in ``expr``'s language."""
    leaves = _leaves(expr, {})
    vector = tuple(f is not None and bool(f.accepts(_BOS + name + _EOS)) for f in map(_leaf_fsm, leaves))
    return _holds(expr, vector, {text: i for i, text in enumerate(leaves)})


def partition(exprs: list[dict], declared: list[str]) -> list[tuple[tuple[int, ...], dict]]:
    """The non-empty languages of the names not in ``declared``, one per set of ``exprs`` they are in: (the indices
    of that set, the language). The languages are disjoint and cover every such name."""
    return _partition(json.dumps([exprs, declared]))


@lru_cache(maxsize=256)
def _partition(key: str) -> list[tuple[tuple[int, ...], dict]]:
    exprs, declared = json.loads(key)
    names = {"names": declared}
    product, index = _product_of([*exprs, names])
    holds = [_verdicts(e, product.vectors, index) for e in exprs]
    seen = [tuple(i for i, h in enumerate(holds) if h[k]) for k in range(len(product.vectors))]
    cells = dict.fromkeys(m for m, taken in zip(seen, _verdicts(names, product.vectors, index)) if not taken)
    if len(cells) > MAX_LANGUAGES:
        raise PatternProblem(f"patterns that split property names into more than {MAX_LANGUAGES} languages")
    of_name = {n: tuple(i for i, e in enumerate(exprs) if matches(e, n)) for n in declared}
    return [(members, _cell(members, exprs, seen, of_name)) for members in cells]


def _cell(members: tuple[int, ...], exprs: list[dict], seen: list[tuple[int, ...]],
          of_name: dict[str, tuple[int, ...]]) -> dict:
    """The expression of one cell, naming only the other patterns its own overlap and the declared names it would
    hold (``of_name``: the patterns each declared name matches)."""
    together = [set(m) for m in seen if set(members) <= set(m)]
    parts = [exprs[i] for i in members]
    parts += [negate(exprs[j]) for j in range(len(exprs)) if j not in members and any(j in m for m in together)]
    inside = [n for n, m in of_name.items() if m == members]
    if inside:
        parts.append(negate({"names": inside}))
    return all_of(parts) if parts else ANY_NAME


@lru_cache(maxsize=256)
def _language(text: str) -> Lengths:
    """The minimised automaton of a language (as JSON), over code points."""
    expr = json.loads(text)
    product, index = _product_of([expr])
    edges, final = _minimal(product.edges, _verdicts(expr, product.vectors, index))
    return Lengths(edges, final, product.classes)


def _minimal(edges: list[dict[int, int]], final: list[bool]) -> tuple[list[dict[int, int]], list[bool]]:
    """The minimal automaton (Hopcroft's refinement; a counter of 255 names took Moore's 1.5 s), dead states left out,
    states numbered in the order a walk from the start meets them."""
    alive = _alive(edges, final)
    if 0 not in alive:
        return [], []
    dead = len(edges)  # one sink for the missing and dead transitions, so that every state has every class
    classes = sorted({c for out in edges for c in out})
    delta = [{c: out.get(c, dead) if out.get(c, dead) in alive else dead for c in classes} for out in edges]
    delta.append({c: dead for c in classes})
    inverse: dict[tuple[int, int], list[int]] = {}
    for s, out in enumerate(delta):
        for c, t in out.items():
            inverse.setdefault((c, t), []).append(s)
    blocks = [b for b in ({s for s in range(len(delta)) if s < dead and final[s]},
                          {s for s in range(len(delta)) if s == dead or not final[s]}) if b]
    block_of = {s: i for i, b in enumerate(blocks) for s in b}
    work = set(range(len(blocks)))
    while work:
        splitter = set(blocks[work.pop()])
        for c in classes:
            into = {s for t in splitter for s in inverse.get((c, t), ())}
            for i in {block_of[s] for s in into}:
                inside = blocks[i] & into
                if len(inside) == len(blocks[i]):
                    continue
                blocks[i] -= inside
                blocks.append(inside)
                new = len(blocks) - 1
                for s in inside:
                    block_of[s] = new
                # A block waiting to split others waits as both halves; otherwise the smaller half does.
                work.add(new if i in work or len(inside) <= len(blocks[i]) else i)
    number = {block_of[0]: 0}
    order = [0]
    out_edges: list[dict[int, int]] = []
    for s in order:
        row = {}
        for c, t in delta[s].items():
            if t == dead or t not in alive:
                continue
            b = block_of[t]
            if b not in number:
                number[b] = len(order)
                order.append(t)
            row[c] = number[b]
        out_edges.append(row)
    return out_edges, [final[s] for s in order]


def _alive(edges: list[dict[int, int]], final: list[bool]) -> set[int]:
    """The states from which a final state can be reached."""
    back: dict[int, list[int]] = {}
    for s, out in enumerate(edges):
        for t in out.values():
            back.setdefault(t, []).append(s)
    alive = {s for s, f in enumerate(final) if f}
    todo = list(alive)
    while todo:
        for s in back.get(todo.pop(), ()):
            if s not in alive:
                alive.add(s)
                todo.append(s)
    return alive


# -- EBNF ----------------------------------------------------------------------------------------

def key_problem(expr: dict) -> str | None:
    """Why tagjit cannot write ``expr``'s language as a key rule, or None."""
    try:
        check_expr(expr)
    except PatternProblem as e:
        return refusal(e)
    return None


def refusal(e: PatternProblem) -> str:
    """The refused feature a PatternProblem of property names stands for."""
    return str(e) if str(e).startswith("patternProperties") else f"patternProperties {e}"


def key_states(expr: dict) -> int:
    """The states of ``expr``'s minimal automaton (what precomputing its masks costs, see ``key_rules``)."""
    return len(_language(json.dumps(expr)).edges)


def key_rules(expr: dict, name: str, precomputed: bool = True) -> list[str]:
    """EBNF rules (rule ``name`` first) for the text between a property name's quotes, every spelling of every name
    in ``expr``'s language.

    ``precomputed``: as ``patterns.lengths_rules`` does, each state's rule holds the raw characters and short escapes
    of its steps inline, and their ``\\uXXXX`` spellings as a rule: xgrammar 0.2.8 precomputes a state's mask only
    while a token stays in the rule it starts in (with a rule per step, a mask inside a key took 0.2 s with Qwen2's
    vocabulary, inline 1 ms), at the cost of a vocabulary-wide pass per state when the grammar compiles (50-90 ms
    with Qwen2's; ``PRECOMPUTED_KEY_STATES`` bounds them). Otherwise a rule per step: compiled at once, masks left to
    the parser. One alternative per target state, not per class: most classes of a name automaton lead to one state."""
    a = _language(json.dumps(expr))
    shared: dict[str, str] = {}  # rule name -> body: named by content, so one grammar's keys share them
    inline = precomputed and len(a.edges) <= PRECOMPUTED_STATES
    rules = [f"{name} ::= {name}_0"]
    for i, out in enumerate(a.edges):
        alts = ['""'] if a.final[i] else []
        for t, keys in _by_target(out):
            ranges = _merged_ranges_of([r for key in keys for r in a.classes[key]])
            alts += [f"{step} {name}_{t}" for step in (_inline(shared, ranges) if inline
                                                       else [_shared(shared, "c", spellings(ranges))])]
        rules.append(f"{name}_{i} ::= " + " | ".join(alts))
    return rules + [f"{rule} ::= {body}" for rule, body in shared.items()]


def _inline(shared: dict[str, str], ranges: list[tuple[int, int]]) -> list[str]:
    """One step's spellings as a state's alternatives: its raw class, its short escapes, a rule of its \\u ones."""
    raw, short, escaped = spelling_parts(ranges)
    steps = [x for x in (raw, short) if x]
    if escaped:
        steps.append(_shared(shared, "u", " | ".join('"\\\\u" ' + seq for seq in escaped)))
    return steps


def _shared(shared: dict[str, str], kind: str, body: str) -> str:
    """The name of a rule named by its body (``kind``: c for a class, u for its \\u spellings), added to ``shared``."""
    rule = f"{RULE_PREFIX}{kind}{hashlib.sha1(body.encode()).hexdigest()[:12]}"
    shared[rule] = body
    return rule


def _by_target(out: dict[int, int]) -> list[tuple[int, tuple[int, ...]]]:
    """A state's transitions as (target, the classes that lead there)."""
    grouped: dict[int, list[int]] = {}
    for key, t in sorted(out.items()):
        grouped.setdefault(t, []).append(key)
    return [(t, tuple(keys)) for t, keys in sorted(grouped.items())]
