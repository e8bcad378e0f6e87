"""Tool-call structural tags compiled per part, so a new combination of known tools compiles in little time.

xgrammar compiles a structural tag as one grammar and reuses nothing across combinations: the same 200
tools in another order, or 199 of them, cost a full compile (~0.5 s with a 150k vocabulary), and most of
that cost is the begin literals with the tool names. A tag of the tool-call shape (a tree of ``sequence``,
``or``, ``tags_with_separator`` and ``const_string`` whose leaves are ``tag`` nodes) is split here into:

- the *outer* language: every literal (begins, ends, separators, constants) as a small automaton that
  tagjit runs itself. It needs no compile: its masks come from a sorted index of the vocabulary and are
  memoised per automaton state;
- one xgrammar grammar per tag content (a *unit*), compiled once and cached under an order-preserving
  key, so the same tool in any other combination is a cache hit.

Contents must be JSON-style schemas (with regexes and constants around them, as for ``{index}`` formats);
XML argument styles, raw grammars and free text keep the whole-tag compile (``plan`` returns None).

A composite matcher runs the automaton until a begin literal completes, then that tag's unit matcher
until it completes, then the automaton again. A token may straddle a boundary (``": {"``, ``"}}"``): the
mask there is the union of the current part's own mask and the tokens ``a + b`` where the current part
accepts ``a`` and completes and the next part accepts ``b``. Where the split of a token between parts
could be ambiguous the matcher switches, exactly, to the full grammar (compiled then) and replays.
"""

from __future__ import annotations

import re
import threading
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch
import xgrammar as xgr

from .spec import compact_json
from .tokenizer import per_tokenizer, token_bytes

# Node types of the outer tree.
_OUTER_TYPES = {"sequence", "or", "tags_with_separator", "const_string", "tag"}
_JSON_CLOSERS = {"object": b"}", "array": b"]", "string": b'"'}
_FINAL = (-1, 0)


class Ambiguous(Exception):
    """A token could be split between parts in more than one way: the full grammar decides."""


# -- planning: the vocabulary-independent split ---------------------------------------------------

@dataclass
class Plan:
    """The outer automaton (edges labelled by literals or unit holes) and the unit tags it refers to."""

    edge_src: list[int] = field(default_factory=list)
    edge_lit: list[bytes | None] = field(default_factory=list)  # None: a hole
    edge_dst: list[int] = field(default_factory=list)
    edge_unit: list[int] = field(default_factory=list)  # unit index of a hole, else -1
    out: list[list[int]] = field(default_factory=list)
    final: int = 0
    units: list[str] = field(default_factory=list)  # unit formats as compact JSON, one per distinct unit
    unit_last: list[bytes | None] = field(default_factory=list)  # bytes a complete unit can end with (None: any)
    unit_nested: list[bool] = field(default_factory=list)  # a bare JSON object/array: completes at depth 0
    begins: list[bytes] = field(default_factory=list)

    def node(self) -> int:
        self.out.append([])
        return len(self.out) - 1

    def edge(self, src: int, lit: bytes | None, dst: int, unit: int = -1) -> None:
        self.edge_src.append(src)
        self.edge_lit.append(lit)
        self.edge_dst.append(dst)
        self.edge_unit.append(unit)
        self.out[src].append(len(self.edge_lit) - 1)


def plan(fmt: Any) -> Plan | None:
    """Split a structural-tag format into outer automaton and units, or None if it does not fit.

    Contents are taken as given (their schemas are checked when a unit compiles), so a unit's key is
    that of the request's own text and a known tool costs no schema work.
    """
    p = Plan()
    unit_index: dict[str, int] = {}
    start = p.node()
    p.final = p.node()
    try:
        _build(fmt, start, p.final, p, unit_index)
    except _NoFit:
        return None
    if not p.units or not _begins_prefix_free(p.begins):
        return None
    return p


class _NoFit(Exception):
    pass


def _lit(value: Any) -> bytes:
    if not isinstance(value, str):
        raise _NoFit
    return value.encode("utf-8")


def _build(node: Any, src: int, dst: int, p: Plan, units: dict[str, int]) -> None:
    if not isinstance(node, dict) or node.get("type") not in _OUTER_TYPES:
        raise _NoFit
    kind = node["type"]
    if kind == "const_string":
        p.edge(src, _lit(node.get("value")), dst)
    elif kind == "sequence":
        elements = node.get("elements")
        if not isinstance(elements, list) or not elements:
            raise _NoFit
        cur = src
        for i, el in enumerate(elements):
            nxt = dst if i == len(elements) - 1 else p.node()
            _build(el, cur, nxt, p, units)
            cur = nxt
    elif kind == "or":
        elements = node.get("elements")
        if not isinstance(elements, list) or not elements:
            raise _NoFit
        for el in elements:
            _build(el, src, dst, p, units)
    elif kind == "tag":
        _build_tag(node, src, dst, p, units)
    else:
        _build_tws(node, src, dst, p, units)


def _build_tws(node: dict, src: int, dst: int, p: Plan, units: dict[str, int]) -> None:
    tags = node.get("tags")
    if not isinstance(tags, list) or not tags or set(node) - {"type", "tags", "separator", "at_least_one",
                                                               "stop_after_first"}:
        raise _NoFit
    sep = _lit(node.get("separator", ""))
    at_least_one = bool(node.get("at_least_one", False))
    single = bool(node.get("stop_after_first", False))
    parts = []
    for tag in tags:
        if not isinstance(tag, dict) or tag.get("type") != "tag":
            raise _NoFit
        parts.append(_tag_parts(tag, p, units))
    loop = p.node()
    for part in parts:
        _tag_edges(part, src, loop, p)
    p.edge(loop, b"", dst)
    if not single:
        again = p.node()
        p.edge(loop, sep, again)
        for part in parts:
            _tag_edges(part, again, loop, p)
    if not at_least_one:
        p.edge(src, b"", dst)


def _build_tag(node: dict, src: int, dst: int, p: Plan, units: dict[str, int]) -> None:
    _tag_edges(_tag_parts(node, p, units), src, dst, p)


def _tag_parts(node: dict, p: Plan, units: dict[str, int]) -> tuple[bytes, int, list[bytes]]:
    """(begin, unit index, end literals left in the outer automaton) of one tag."""
    if set(node) - {"type", "begin", "content", "end"}:
        raise _NoFit
    begin = _lit(node.get("begin"))
    end = node.get("end", "")
    ends = [_lit(e) for e in end] if isinstance(end, list) else [_lit(end)]
    content = node.get("content")
    if not begin or not ends or not isinstance(content, dict) or _has_forbidden(content):
        raise _NoFit
    last = _json_closer(content)
    if last is not None or len(ends) != 1 or not ends[0]:
        # The unit is the content alone; the end literal(s) stay in the outer automaton.
        unit_tag, tail = content, ends
    else:
        # Content and end compile together, so xgrammar settles where the content stops.
        unit_tag = {"type": "sequence", "elements": [content, {"type": "const_string", "value": end}]}
        tail, last = [b""], ends[0][-1:]
    text = compact_json(unit_tag)
    u = units.get(text)
    if u is None:
        u = units[text] = len(p.units)
        p.units.append(text)
        p.unit_nested.append(tail is ends and last in (b"}", b"]"))
        p.unit_last.append(last)
    p.begins.append(begin)
    return begin, u, tail


def _tag_edges(part: tuple[bytes, int, list[bytes]], src: int, dst: int, p: Plan) -> None:
    begin, u, tail = part
    mid, after = p.node(), p.node()
    p.edge(src, begin, mid)
    p.edge(mid, None, after, unit=u)
    for e in tail:
        p.edge(after, e, dst)


def _json_closer(content: dict) -> bytes | None:
    """The last byte of any complete value of a JSON-style content whose top-level type is fixed."""
    if content.get("type") != "json_schema" or content.get("style", "json") != "json":
        return None
    schema = content.get("json_schema")
    if isinstance(schema, dict) and isinstance(schema.get("type"), str):
        return _JSON_CLOSERS.get(schema["type"])
    return None


def _has_forbidden(node: Any) -> bool:
    """Whether a content holds anything but JSON-style schemas, regexes and constants.

    Free text and nested tags belong to the outer language; XML argument styles and raw grammars are
    left to the whole-tag compile because each would carry its own copy of heavy shared rules
    (seconds per tool in xgrammar 0.2.8), where the whole tag shares them.
    """
    if isinstance(node, list):
        return any(_has_forbidden(x) for x in node)
    if not isinstance(node, dict):
        return True
    kind = node.get("type")
    if kind == "json_schema":
        return node.get("style", "json") != "json"
    if kind in ("regex", "const_string"):
        return False
    if kind == "sequence":
        return _has_forbidden(node.get("elements"))
    return True


def _begins_prefix_free(begins: list[bytes]) -> bool:
    distinct = sorted(set(begins))
    return all(not b.startswith(a) for a, b in zip(distinct, distinct[1:]))


# -- the vocabulary index ------------------------------------------------------------------------

class VocabIndex:
    """A tokenizer's non-special tokens sorted by bytes (prefix ranges by bisection) and split tables."""

    def __init__(self, info: xgr.TokenizerInfo) -> None:
        vocab = token_bytes(info)
        special = set(info.special_token_ids)
        by: dict[bytes, list[int]] = {}
        self.vocab = [b""] * info.vocab_size  # b"" for special tokens
        for i, b in enumerate(vocab[: info.vocab_size]):
            if b and i not in special:
                by.setdefault(b, []).append(i)
                self.vocab[i] = b
        self.by_bytes = by
        self.keys = sorted(by)
        self.vocab_size = info.vocab_size
        self.words = (info.vocab_size + 31) // 32
        self.stop_ids = list(info.stop_token_ids)
        self.single = [by[bytes([c])][0] if bytes([c]) in by else -1 for c in range(256)]
        single = np.array(self.single, dtype=np.int64)
        # Bytes with a one-byte token, those tokens' mask words and bits: a unit's first bytes in one numpy step.
        self.single_bytes = np.flatnonzero(single >= 0)
        self.single_words = single[self.single_bytes] >> 5
        self.single_bits = (single[self.single_bytes] & 31).astype(np.uint32)
        self.no_single = [c for c in range(256) if self.single[c] < 0]
        self._exits: dict[tuple[bytes | None, frozenset[int]], tuple[np.ndarray, ...]] = {}
        self._lock = threading.Lock()

    def bytes_of(self, token: int) -> bytes:
        """A token's bytes (b'' for special and unknown tokens)."""
        return self.vocab[token] if 0 <= token < len(self.vocab) else b""

    def with_prefix(self, prefix: bytes) -> list[bytes]:
        """Token byte strings that start with prefix (including prefix itself)."""
        lo = bisect_left(self.keys, prefix)
        upper = _successor(prefix)
        hi = len(self.keys) if upper is None else bisect_left(self.keys, upper, lo)
        return self.keys[lo:hi]

    def has_prefix(self, prefix: bytes) -> bool:
        """Whether any token starts with prefix."""
        i = bisect_left(self.keys, prefix)
        return i < len(self.keys) and self.keys[i].startswith(prefix)

    def longest_token_prefix(self, data: bytes) -> int:
        """Id of the longest non-empty prefix of data that is a token (-1 if none)."""
        for n in range(len(data), 0, -1):
            ids = self.by_bytes.get(data[:n])
            if ids:
                return ids[0]
        return -1

    def exit_table(self, last: bytes | None, follow: frozenset[int]) -> tuple[np.ndarray, ...]:
        """Split points for unit exits: token ids, splits, ids of the longest token prefix of the left part,
        and the left part's effect on JSON nesting from each lexer start (see ``_lex_effects``).

        A token ``t`` may end a unit at ``k`` only if ``t[k-1]`` can end the unit (``last``; None: any
        byte) and ``t[k]`` can follow it (``follow``).
        """
        key = (last, follow)
        with self._lock:
            hit = self._exits.get(key)
        if hit is not None:
            return hit
        if not follow:
            return (np.zeros(0, dtype=np.int64),) * 3 + (np.zeros((0, 3, 3), dtype=np.int64),)
        tids, splits, pids, effects = [], [], [], []
        wanted = re.compile(b"[" + b"".join(re.escape(bytes([c])) for c in sorted(follow)) + b"]")
        for b, ids in self.by_bytes.items():
            if len(b) < 2 or not wanted.search(b, 1) or (last is not None and last not in b[:-1]):
                continue
            for k in range(1, len(b)):
                if b[k] in follow and (last is None or b[k - 1] == last[0]):
                    pid = self.longest_token_prefix(b[:k])
                    if pid < 0:
                        continue
                    effect = _lex_effects(b[:k])
                    for t in ids:
                        tids.append(t)
                        splits.append(k)
                        pids.append(pid)
                        effects.append(effect)
        table = (np.array(tids, dtype=np.int64), np.array(splits, dtype=np.int64), np.array(pids, dtype=np.int64),
                 np.array(effects, dtype=np.int64).reshape(-1, 3, 3))
        with self._lock:
            self._exits[key] = table
        return table


# A JSON lexer state: (depth, inside a string, after a backslash in a string). Classes of start states:
_LEX_CLASSES = ((False, False), (True, False), (True, True))


def _lex(state: tuple[int, bool, bool], data: bytes) -> tuple[int, bool, bool]:
    depth, in_str, esc = state
    for c in data:
        if in_str:
            if esc:
                esc = False
            elif c == 0x5C:
                esc = True
            elif c == 0x22:
                in_str = False
        elif c == 0x22:
            in_str = True
        elif c in (0x7B, 0x5B):
            depth += 1
        elif c in (0x7D, 0x5D):
            depth -= 1
    return depth, in_str, esc


def _lex_effects(data: bytes) -> list[list[int]]:
    """Per start class: [depth change, lowest depth change before the last byte, ends outside a string]."""
    out = []
    for in_str, esc in _LEX_CLASSES:
        state, low = (0, in_str, esc), 1 << 20
        for i in range(len(data) - 1):
            state = _lex(state, data[i:i + 1])
            low = min(low, state[0])
        state = _lex(state, data[-1:])
        out.append([state[0], low, int(not state[1])])
    return out


def _successor(prefix: bytes) -> bytes | None:
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


def vocab_index(info: xgr.TokenizerInfo) -> VocabIndex:
    """The vocabulary index of a tokenizer, built once."""
    return per_tokenizer(info, "composite.vocab_index", VocabIndex)


# -- compiled parts ------------------------------------------------------------------------------

@dataclass
class Unit:
    """One compiled tag content (maybe with its end literal), shared by every combination that uses it."""

    grammar: xgr.CompiledGrammar
    key: str
    first: frozenset[int]  # bytes a fresh unit accepts first
    nbytes: int


def make_unit(grammar: xgr.CompiledGrammar, key: str, index: VocabIndex) -> Unit:
    """Wrap a compiled unit grammar with the set of bytes it may start with."""
    m = xgr.GrammarMatcher(grammar)
    mask = xgr.allocate_token_bitmask(1, index.vocab_size)
    m.fill_next_token_bitmask(mask, 0)
    row = mask[0].numpy().view(np.uint32)
    allowed = (row[index.single_words] >> index.single_bits) & 1
    first = set(index.single_bytes[allowed.astype(bool)].tolist())
    for c in index.no_single:
        if m.accept_string(bytes([c])):
            m.rollback(1)
            first.add(c)
    return Unit(grammar, key, frozenset(first), int(grammar.memory_size_bytes))


class CompositeGrammar:
    """The compiled form of a decomposed structural tag: outer automaton, units, memoised masks."""

    def __init__(self, p: Plan, units: Sequence[Unit], index: VocabIndex,
                 full: Callable[[], xgr.CompiledGrammar]) -> None:
        self.plan = p
        self.units = list(units)
        self.index = index
        self._full = full
        self._full_grammar: xgr.CompiledGrammar | None = None
        self._lock = threading.RLock()
        self._closure: dict[int, frozenset] = {}
        self._state_ids: dict[frozenset, int] = {}
        self._states: list[frozenset] = []
        self._trans: list[dict[int, int]] = []
        self._meta: list[tuple[int, bool, bytes]] = []  # (hole edge or -1, final, next bytes)
        self._masks: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._hole_sims: dict[tuple[int, bytes], bool] = {}
        self._outer_sims: dict[tuple[int, bytes], bool] = {}
        self._scratch: dict[int, xgr.GrammarMatcher] = {}
        self._follow: dict[int, frozenset[int]] = {}
        self._exit_sel: dict[tuple[int, int, int, int], np.ndarray] = {}
        self.start = self._state(self._close(0))
        self.nbytes = sum(u.nbytes for u in self.units) + 200 * len(p.edge_lit) + 4096

    # -- the outer automaton ------------------------------------------------------------------
    def _close(self, node: int) -> frozenset:
        hit = self._closure.get(node)
        if hit is not None:
            return hit
        p, out, seen, todo = self.plan, set(), {node}, [node]
        while todo:
            n = todo.pop()
            if n == p.final:
                out.add(_FINAL)
            for e in p.out[n]:
                lit = p.edge_lit[e]
                if lit == b"":
                    if p.edge_dst[e] not in seen:
                        seen.add(p.edge_dst[e])
                        todo.append(p.edge_dst[e])
                else:
                    out.add((e, 0))
        result = self._closure[node] = frozenset(out)
        return result

    def _state(self, positions: frozenset) -> int:
        sid = self._state_ids.get(positions)
        if sid is not None:
            return sid
        p = self.plan
        holes = [e for e, k in positions if e >= 0 and p.edge_lit[e] is None]
        if holes and len(positions) > 1:
            raise Ambiguous("a begin literal completes where the outer text could also go on")
        nxt = bytes(sorted({p.edge_lit[e][k] for e, k in positions if e >= 0 and p.edge_lit[e] is not None}))
        sid = len(self._states)
        self._state_ids[positions] = sid
        self._states.append(positions)
        self._trans.append({})
        self._meta.append((holes[0] if holes else -1, _FINAL in positions, nxt))
        return sid

    def step(self, sid: int, byte: int) -> int:
        """The outer state after one byte, or -1."""
        nxt = self._trans[sid].get(byte)
        if nxt is not None:
            return nxt
        with self._lock:
            p, out = self.plan, set()
            for e, k in self._states[sid]:
                if e < 0:
                    continue
                lit = p.edge_lit[e]
                if lit is not None and lit[k] == byte:
                    if k + 1 == len(lit):
                        out |= self._close(p.edge_dst[e])
                    else:
                        out.add((e, k + 1))
            nxt = self._state(frozenset(out)) if out else -1
            self._trans[sid][byte] = nxt
            return nxt

    def hole(self, sid: int) -> int:
        """The hole edge a state stands before (a begin literal just completed), or -1."""
        return self._meta[sid][0]

    def is_final(self, sid: int) -> bool:
        """Whether the outer text may end here."""
        return self._meta[sid][1]

    def after(self, edge: int) -> int:
        """The outer state right after a unit."""
        with self._lock:
            return self._state(self._close(self.plan.edge_dst[edge]))

    def unit_of(self, edge: int) -> Unit:
        """The unit a hole edge stands for."""
        return self.units[self.plan.edge_unit[edge]]

    def follow(self, edge: int) -> frozenset[int]:
        """Bytes that may come right after the unit of a hole edge."""
        hit = self._follow.get(edge)
        if hit is None:
            sid = self.after(edge)
            nxt = set(self._meta[sid][2])
            h = self.hole(sid)
            if h >= 0:
                nxt |= self.unit_of(h).first
            hit = self._follow[edge] = frozenset(nxt)
        return hit

    # -- static simulation (fresh units): what the memoised masks are made of ---------------
    def accepts_outer(self, sid: int, data: bytes) -> bool:
        """Whether the outer text from state sid (entering fresh units at holes) accepts data."""
        key = (sid, data)
        hit = self._outer_sims.get(key)
        if hit is not None:
            return hit
        ok = True
        for i, byte in enumerate(data):
            h = self.hole(sid)
            if h >= 0:
                ok = self.accepts_hole(h, data[i:])
                break
            sid = self.step(sid, byte)
            if sid < 0:
                ok = False
                break
        self._outer_sims[key] = ok
        return ok

    def accepts_hole(self, edge: int, data: bytes) -> bool:
        """Whether a fresh unit at hole edge accepts data (going on in the outer text if it completes)."""
        key = (edge, data)
        hit = self._hole_sims.get(key)
        if hit is not None:
            return hit
        with self._lock:
            u = self.plan.edge_unit[edge]
            m = self._scratch.pop(u, None) or xgr.GrammarMatcher(self.units[u].grammar)
            m.reset()
            ok = False
            if m.accept_string(data):
                ok = True
            else:
                for i in range(len(data)):
                    if not m.accept_string(data[i:i + 1]):
                        break
                    if m.is_completed():
                        ok = self.accepts_outer(self.after(edge), data[i + 1:])
                        break
            m.reset()
            self._scratch[u] = m
        self._hole_sims[key] = ok
        return ok

    def outer_mask(self, sid: int) -> tuple[np.ndarray, np.ndarray]:
        """The outer state's allowed tokens (stop tokens aside) as packed (word index, bits) pairs."""
        hit = self._masks.get(sid)
        if hit is not None:
            return hit
        index, allowed = self.index, []
        stack = [(b"", sid)]
        while stack:
            path, s = stack.pop()
            for byte in self._meta[s][2]:
                s2 = self.step(s, byte)
                p2 = path + bytes([byte])
                if s2 < 0 or not index.has_prefix(p2):
                    continue
                allowed.extend(index.by_bytes.get(p2, ()))
                h = self.hole(s2)
                if h < 0:
                    stack.append((p2, s2))
                    continue
                for c in sorted(self.unit_of(h).first):
                    for tb in index.with_prefix(p2 + bytes([c])):
                        if self.accepts_hole(h, tb[len(p2):]):
                            allowed.extend(index.by_bytes[tb])
        packed = _pack(np.array(allowed, dtype=np.int64))
        with self._lock:
            self._masks[sid] = packed
        return packed

    def full_grammar(self) -> xgr.CompiledGrammar:
        """The whole tag compiled by xgrammar (only where a split is ambiguous)."""
        with self._lock:
            if self._full_grammar is None:
                self._full_grammar = self._full()
            return self._full_grammar

    def new_matcher(self, stop_token_ids: Sequence[int] | None = None) -> "CompositeMatcher":
        """A fresh matcher over this grammar."""
        return CompositeMatcher(self, stop_token_ids)


def _pack(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if ids.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint32)
    words = ids >> 5
    bits = (np.uint32(1) << (ids & 31).astype(np.uint32)).astype(np.uint32)
    uniq, inv = np.unique(words, return_inverse=True)
    vals = np.zeros(len(uniq), dtype=np.uint32)
    np.bitwise_or.at(vals, inv, bits)
    return uniq, vals


@dataclass
class _Frame:
    edge: int
    matcher: xgr.GrammarMatcher
    lex: list[tuple[int, bool, bool]] | None = None  # JSON lexer state after each step (bare JSON units)

    def stepped(self, data: bytes) -> None:
        if self.lex is not None:
            self.lex.append(_lex(self.lex[-1], data))


class CompositeMatcher:
    """Drives a CompositeGrammar like an ``xgr.GrammarMatcher`` (accept, rollback, masks, completion)."""

    def __init__(self, grammar: CompositeGrammar, stop_token_ids: Sequence[int] | None) -> None:
        self.g = grammar
        self.stop_ids = list(stop_token_ids) if stop_token_ids is not None else list(grammar.index.stop_ids)
        self._stop_set = set(self.stop_ids)
        self._delegate: xgr.GrammarMatcher | None = None
        self.reset()

    def reset(self) -> None:
        """Return to the initial state."""
        self.sid = self.g.start
        self.frame: _Frame | None = None
        self.terminated = False
        # Per accepted token: (state before, frame before, [(frame, unit steps)]) or the replay item.
        self._undo: list[tuple[int, _Frame | None, list[tuple[_Frame, int]], bool]] = []
        self._inputs: list[int | bytes] = []
        if self._delegate is not None:
            self._delegate.reset()

    # -- advancing -------------------------------------------------------------------------
    def accept_token(self, token: int) -> bool:
        """Advance by one token; False (state unchanged) if it is not allowed."""
        if self._delegate is not None:
            return self._delegated(token)
        if self.terminated:
            return False
        if token in self._stop_set:
            if self.frame is None and self.g.is_final(self.sid):
                self._undo.append((self.sid, None, [], True))
                self._inputs.append(token)
                self.terminated = True
                return True
            return False
        data = self.g.index.bytes_of(token)
        if not data:
            return False
        return self._accept(data, token)

    def accept_string(self, data: str | bytes) -> bool:
        """Advance by raw text (one rollback step); False (state unchanged) if it is not allowed."""
        data = data.encode() if isinstance(data, str) else bytes(data)
        if self._delegate is not None:
            return self._delegated(data)
        if self.terminated:
            return False
        return self._accept(data, data)

    def _accept(self, data: bytes, item: int | bytes) -> bool:
        record: tuple[int, _Frame | None, list[tuple[_Frame, int]], bool] = (self.sid, self.frame, [], False)
        try:
            ok = self._feed(data, record[2])
        except Ambiguous:
            self._undo_one(record)
            self._switch_to_full()
            return self._delegated(item)
        if not ok:
            self._undo_one(record)
            return False
        self._undo.append(record)
        self._inputs.append(item)
        return True

    def _feed(self, data: bytes, steps: list[tuple[_Frame, int]]) -> bool:
        g, pos = self.g, 0
        while pos < len(data):
            frame = self.frame
            if frame is None:
                sid = g.step(self.sid, data[pos])
                if sid < 0:
                    return False
                self.sid = sid
                pos += 1
                h = g.hole(sid)
                if h >= 0:
                    nested = g.plan.unit_nested[g.plan.edge_unit[h]]
                    self.frame = _Frame(h, xgr.GrammarMatcher(g.unit_of(h).grammar),
                                        [(0, False, False)] if nested else None)
                continue
            m = frame.matcher
            if m.accept_string(data[pos:]):
                steps.append((frame, 1))
                frame.stepped(data[pos:])
                pos = len(data)
                if m.is_completed():
                    self._exit(frame)
                continue
            for i in range(pos, len(data)):
                if not m.accept_string(data[i:i + 1]):
                    return False
                steps.append((frame, 1))
                frame.stepped(data[i:i + 1])
                if m.is_completed():
                    self._exit(frame)
                    pos = i + 1
                    break
            else:
                return False
        return True

    def _exit(self, frame: _Frame) -> None:
        if not _finished(frame.matcher, self.g.index):
            raise Ambiguous("a unit completes where it could also go on")
        self.frame = None
        self.sid = self.g.after(frame.edge)

    def _undo_one(self, record: tuple[int, _Frame | None, list[tuple[_Frame, int]], bool]) -> None:
        sid, frame, steps, stopped = record
        for f, n in reversed(steps):
            f.matcher.rollback(n)
            if f.lex is not None:
                del f.lex[-n:]
        self.sid, self.frame = sid, frame
        if stopped:
            self.terminated = False

    def rollback(self, num_tokens: int = 1) -> None:
        """Undo the last num_tokens accepted tokens (or strings)."""
        if num_tokens > len(self._inputs):
            raise ValueError(f"cannot roll back {num_tokens} steps, only {len(self._inputs)} taken")
        if num_tokens <= 0:
            return
        del self._inputs[-num_tokens:]
        if self._delegate is not None:
            self._delegate.rollback(num_tokens)
            return
        for _ in range(num_tokens):
            self._undo_one(self._undo.pop())

    def _switch_to_full(self) -> None:
        full = xgr.GrammarMatcher(self.g.full_grammar(), override_stop_tokens=self.stop_ids)
        for item in self._inputs:
            ok = full.accept_token(item) if isinstance(item, int) else full.accept_string(item)
            assert ok, "the full grammar refused text the composite accepted"
        self._delegate = full

    def _delegated(self, item: int | bytes) -> bool:
        d = self._delegate
        assert d is not None
        ok = d.accept_token(item) if isinstance(item, int) else d.accept_string(item)
        if ok:
            self._inputs.append(item)
        return ok

    # -- state -----------------------------------------------------------------------------
    @property
    def delegated(self) -> bool:
        """Whether an ambiguous split handed this request over to the whole tag's grammar."""
        return self._delegate is not None

    def is_terminated(self) -> bool:
        """Whether a stop token ended the output."""
        if self._delegate is not None:
            return self._delegate.is_terminated()
        return self.terminated

    def is_completed(self) -> bool:
        """Whether the text so far is complete (a stop token may come next)."""
        if self._delegate is not None:
            return self._delegate.is_completed()
        return self.terminated or (self.frame is None and self.g.is_final(self.sid))

    # -- masks -----------------------------------------------------------------------------
    def fill_next_token_bitmask(self, bitmask: torch.Tensor, index: int = 0) -> None:
        """Write the allowed-token bitmask (bit set = allowed) into row index."""
        if self._delegate is None:
            try:
                self._fill(bitmask, index)
                return
            except Ambiguous:
                self._switch_to_full()
        assert self._delegate is not None
        self._delegate.fill_next_token_bitmask(bitmask, index)

    def _fill(self, bitmask: torch.Tensor, index: int) -> None:
        row = bitmask[index].numpy().view(np.uint32)
        if self.terminated:
            row[:] = 0
            return
        if self.frame is None:
            words, vals = self.g.outer_mask(self.sid)
            row[:] = 0
            row[words] = vals
            if self.g.is_final(self.sid):
                _set(row, self.stop_ids)
            return
        self.frame.matcher.fill_next_token_bitmask(bitmask, index)
        _clear(row, self.g.index.stop_ids)
        _clear(row, self.stop_ids)
        exits = self._exit_tokens(row)
        if exits:
            _set(row, exits)

    def _exit_tokens(self, row: np.ndarray) -> list[int]:
        """Tokens that complete the current unit part-way and go on in the outer text."""
        g, frame = self.g, self.frame
        assert frame is not None
        u = g.plan.edge_unit[frame.edge]
        tids, splits, pids, effects = g.index.exit_table(g.plan.unit_last[u], g.follow(frame.edge))
        if tids.size == 0:
            return []
        if frame.lex is not None:
            # A bare JSON object/array completes where its nesting first returns to zero.
            depth, in_str, esc = frame.lex[-1]
            cls = _LEX_CLASSES.index((in_str, esc if in_str else False))
            sel_key = (u, frame.edge, cls, depth)
            sel = g._exit_sel.get(sel_key)
            if sel is None:
                eff = effects[:, cls]
                sel = g._exit_sel[sel_key] = np.nonzero((depth + eff[:, 0] == 0) & (depth + eff[:, 1] > 0)
                                                        & (eff[:, 2] == 1))[0]
            if sel.size == 0:
                return []
            tids, splits, pids = tids[sel], splits[sel], pids[sel]
        keep = ((row[pids >> 5] >> (pids & 31).astype(np.uint32)) & 1).astype(bool)
        keep &= ~(((row[tids >> 5] >> (tids & 31).astype(np.uint32)) & 1).astype(bool))
        if not keep.any():
            return []
        m, after, out = frame.matcher, g.after(frame.edge), []
        vocab = g.index
        done: dict[bytes, bool] = {}
        for t, k in zip(tids[keep].tolist(), splits[keep].tolist()):
            data = vocab.bytes_of(t)
            left = data[:k]
            ok = done.get(left)
            if ok is None:
                ok = m.accept_string(left)
                if ok:
                    ok = m.is_completed()
                    m.rollback(1)
                done[left] = ok
            if ok and g.accepts_outer(after, data[k:]):
                out.append(t)
        return out


def _finished(m: xgr.GrammarMatcher, index: VocabIndex) -> bool:
    """Whether a completed unit can take no further text."""
    mask = xgr.allocate_token_bitmask(1, index.vocab_size)
    m.fill_next_token_bitmask(mask, 0)
    row = mask[0].numpy().view(np.uint32)
    _clear(row, index.stop_ids)
    _clear(row, m.stop_token_ids)
    return not row.any()


def _set(row: np.ndarray, ids: Sequence[int]) -> None:
    for t in ids:
        row[t >> 5] |= np.uint32(1 << (t & 31))


def _clear(row: np.ndarray, ids: Sequence[int]) -> None:
    for t in ids:
        if t < row.size * 32:
            row[t >> 5] &= ~np.uint32(1 << (t & 31))



__all__ = ["Plan", "plan", "VocabIndex", "vocab_index", "Unit", "make_unit", "CompositeGrammar",
           "CompositeMatcher", "Ambiguous"]
