"""Compiled composites: units, the composite grammar, and the matcher that runs literals and units in turn."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
import xgrammar as xgr
from tagjit.compile.composite.plan import Ambiguous, FINAL, Plan
from tagjit.compile.composite.vocab import LEX_CLASSES, VocabIndex, lex
from tagjit.errors import CompileLimitError

_MISSING = object()
PENDING_UNIT_BYTES = 64 * 1024  # memory estimate of a unit not compiled yet (a BFCL tool's unit: tens of KiB)



# -- compiled parts ------------------------------------------------------------------------------

@dataclass
class Unit:
    """One compiled tag content (maybe with its end literal), shared by every combination that uses it."""

    grammar: xgr.CompiledGrammar
    key: str
    first: frozenset[int]  # bytes a fresh unit accepts first
    nbytes: int


class PendingUnit:
    """A unit still to compile: on the pool in turn, or at once in the first thread whose mask or token reaches it."""

    def __init__(self, compile_: Callable[[], Unit], limit_s: float) -> None:
        self._compile = compile_
        self._limit_s = limit_s
        self._lock = threading.Lock()
        self._started: float | None = None
        self._done = threading.Event()
        self._value: Unit | None = None
        self._error: BaseException | None = None

    def run(self) -> None:
        """Compile the unit here unless another thread has begun it."""
        with self._lock:
            if self._started is not None:
                return
            self._started = _now()
        try:
            self._value = self._compile()
        except BaseException as e:  # raised again to every thread that needs the unit
            self._error = e
        finally:
            self._done.set()

    @property
    def done(self) -> bool:
        """Whether the unit is compiled (or failed)."""
        return self._done.is_set()

    def get(self) -> Unit:
        """The unit, compiled here if nobody has begun it; CompileLimitError once its compile runs past the limit."""
        self.run()
        # The limit counts from the compile's start, not from the request's: a part queued behind other combinations'
        # parts is not late, and the thread that reaches it would compile it at once anyway.
        assert self._started is not None
        if not self._done.wait(timeout=max(0.0, self._started + self._limit_s - _now())):
            raise CompileLimitError(f"structural_tag: a tool's part did not compile within {self._limit_s:g} s "
                                    "(TAGJIT_COMPILE_TIMEOUT_S)")
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value


_now = time.perf_counter  # PendingUnit's clock


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

    def __init__(self, p: Plan, units: Sequence[Unit | PendingUnit], index: VocabIndex,
                 full: Callable[[], xgr.CompiledGrammar]) -> None:
        self.plan = p
        # A pending unit is resolved where a mask or a token first reaches it: the first masks of a new combination
        # wait only for the units within a token of the outer text, not for every tool's arguments.
        self.units: list[Unit | PendingUnit] = list(units)
        self.index = index
        self._full = full
        self._full_grammar: xgr.CompiledGrammar | None = None
        self._lock = threading.RLock()
        self._closure: dict[int, frozenset] = {}
        self._state_ids: dict[frozenset, int] = {}
        self._states: list[frozenset] = []
        self._trans: list[dict[int, int]] = []
        # (hole edge or -1, final, next bytes, bare hole edge or -1: a unit its first byte enters, beside the literals)
        self._meta: list[tuple[int, bool, bytes, int]] = []
        self._masks: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._hole_sims: dict[tuple[int, bytes], bool] = {}
        self._outer_sims: dict[tuple[int, bytes], bool] = {}
        self._scratch: dict[int, xgr.GrammarMatcher] = {}
        self._follow: dict[int, frozenset[int]] = {}
        self._exit_sel: dict[tuple[int, ...], tuple[np.ndarray, ...] | None] = {}
        self.full_future: Future[xgr.CompiledGrammar] | None = None
        self._swap: ThreadPoolExecutor | None = None  # where the whole tag compiles once worth it (swap_later)
        self.swap_after_tokens = 0
        self._matchers = 0
        self.start = self._state(self._close(0))
        self.nbytes = sum(u.nbytes if isinstance(u, Unit) else PENDING_UNIT_BYTES for u in self.units) \
            + 200 * len(p.edge_lit) + 4096

    # -- the outer automaton ------------------------------------------------------------------
    def _close(self, node: int) -> frozenset:
        hit = self._closure.get(node)
        if hit is not None:
            return hit
        p, out, seen, todo = self.plan, set(), {node}, [node]
        while todo:
            n = todo.pop()
            if n == p.final:
                out.add(FINAL)
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
        nxt = bytes(sorted({p.edge_lit[e][k] for e, k in positions if e >= 0 and p.edge_lit[e] is not None}))
        bare = -1
        if len(holes) == 1 and p.edge_bare[holes[0]]:
            if self.unit_of(holes[0]).first & set(nxt):
                raise Ambiguous("a bare unit may begin with a byte that a literal beside it begins with")
            bare, holes = holes[0], []
        elif holes and len(positions) > 1:
            raise Ambiguous("a begin literal completes where the outer text could also go on")
        sid = len(self._states)
        self._state_ids[positions] = sid
        self._states.append(positions)
        self._trans.append({})
        self._meta.append((holes[0] if holes else -1, FINAL in positions, nxt, bare))
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

    def bare(self, sid: int) -> int:
        """The bare hole edge beside a state's literals (entered by its unit's first byte), or -1."""
        return self._meta[sid][3]

    def entered(self, sid: int, byte: int) -> int:
        """The bare hole edge that ``byte`` enters from state sid, or -1 (the byte stays in the outer text)."""
        b = self._meta[sid][3]
        return b if b >= 0 and byte in self.unit_of(b).first else -1

    def is_final(self, sid: int) -> bool:
        """Whether the outer text may end here."""
        return self._meta[sid][1]

    def after(self, edge: int) -> int:
        """The outer state right after a unit."""
        with self._lock:
            return self._state(self._close(self.plan.edge_dst[edge]))

    def unit(self, u: int) -> Unit:
        """Unit u, compiled first if it is still pending (CompileLimitError, ConstraintError if it cannot be)."""
        x = self.units[u]
        if isinstance(x, PendingUnit):
            x = self.units[u] = x.get()
        return x

    def unit_of(self, edge: int) -> Unit:
        """The unit a hole edge stands for."""
        return self.unit(self.plan.edge_unit[edge])

    def resolve_units(self) -> None:
        """Compile every pending unit now (in this thread where the pool has not begun it)."""
        for u in range(len(self.units)):
            self.unit(u)

    @property
    def units_ready(self) -> bool:
        """Whether every unit is compiled (none pending)."""
        return all(not isinstance(u, PendingUnit) or u.done for u in self.units)

    def follow(self, edge: int) -> frozenset[int]:
        """Bytes that may come right after the unit of a hole edge."""
        hit = self._follow.get(edge)
        if hit is None:
            sid = self.after(edge)
            nxt = set(self._meta[sid][2])
            for h in (self.hole(sid), self.bare(sid)):
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
            if h < 0:
                h = self.entered(sid, byte)
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
            trigger = self.plan.unit_trigger[u]
            m = self._scratch.pop(u, None) or xgr.GrammarMatcher(self.unit(u).grammar)
            m.reset()
            ok = False
            if m.accept_string(data):
                ok = True
            else:
                for i in range(len(data)):
                    if not m.accept_string(data[i:i + 1]):
                        break
                    if data[:i + 1].endswith(trigger) if trigger is not None else m.is_completed():
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
        b = self.bare(sid)
        if b >= 0 and not self._meta[sid][2] and self.plan.unit_trigger[self.plan.edge_unit[b]] is not None:
            packed = (np.arange(index.words), self._fresh_text_row(b))  # free text alone: its own dense row
            with self._lock:
                self._masks[sid] = packed
            return packed

        def enter(path: bytes, h: int) -> None:  # tokens that go on from path into a fresh unit at hole h
            for c in sorted(self.unit_of(h).first):
                for tb in index.with_prefix(path + bytes([c])):
                    if self.accepts_hole(h, tb[len(path):]):
                        allowed.extend(index.by_bytes[tb])

        stack = [(b"", sid)]
        while stack:
            path, s = stack.pop()
            b = self.bare(s)
            if b >= 0 and not path and self.plan.unit_trigger[self.plan.edge_unit[b]] is not None:
                row = self._fresh_text_row(b)
                allowed.extend(np.flatnonzero(np.unpackbits(row.view(np.uint8), bitorder="little")).tolist())
            elif b >= 0:
                enter(path, b)
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
                enter(p2, h)
        packed = _pack(np.array(allowed, dtype=np.int64))
        if len(packed[0]) > index.words // 4:  # dense: kept as the whole row
            row = np.zeros(index.words, dtype=np.uint32)
            row[packed[0]] = packed[1]
            packed = (np.arange(index.words), row)
        with self._lock:
            self._masks[sid] = packed
        return packed

    def _fresh_text_row(self, edge: int) -> np.ndarray:
        """The packed row of a fresh free-text unit at edge (stop tokens aside), with the tokens that finish it part-way
        and go on in the outer text: every token would otherwise be simulated, the text allowing nearly all of them.
        The row's bits past the vocabulary are xgrammar's own (it sets them where it allows every token)."""
        frame = self.new_frame(edge)
        mask = xgr.allocate_token_bitmask(1, self.index.vocab_size)
        frame.matcher.fill_next_token_bitmask(mask, 0)
        row = mask[0].numpy().view(np.uint32)[: self.index.words].copy()
        _clear(row, self.index.stop_ids)
        _set(row, text_exits(self, frame))
        return row

    def new_frame(self, edge: int) -> "_Frame":
        """A fresh unit at a hole edge, with the bookkeeping its kind needs."""
        u = self.plan.edge_unit[edge]
        return _Frame(edge, xgr.GrammarMatcher(self.unit(u).grammar),
                      [(0, False, False)] if self.plan.unit_nested[u] else None,
                      self.plan.unit_trigger[u], [b""] if self.plan.unit_trigger[u] is not None else None)

    def full_grammar(self) -> xgr.CompiledGrammar:
        """The whole tag compiled by xgrammar (where a split is ambiguous, or ahead of time by ``prefetch_full``)."""
        with self._lock:
            if self._full_grammar is None:
                self._full_grammar = self._full()
            return self._full_grammar

    def prefetch_full(self, pool: ThreadPoolExecutor) -> "Future[xgr.CompiledGrammar]":
        """Compile the whole tag on pool (once); matchers switch to it at their next mask once it is done."""
        with self._lock:
            if self.full_future is None:
                self.full_future = pool.submit(self.full_grammar)
            return self.full_future

    def swap_later(self, pool: ThreadPoolExecutor, after_tokens: int) -> None:
        """Compile the whole tag on pool once a second matcher opens or one takes after_tokens tokens (0: now)."""
        self._swap, self.swap_after_tokens = pool, after_tokens
        if after_tokens <= 0:
            self.prefetch_full(pool)

    def swap_now(self) -> None:
        """Start the whole tag's compile for the switch, if ``swap_later`` asked for one (idempotent)."""
        if self._swap is not None and self.full_future is None:
            self.prefetch_full(self._swap)

    @property
    def full_ready(self) -> bool:
        """Whether the whole tag's grammar is compiled."""
        return self._full_grammar is not None

    def new_matcher(self, stop_token_ids: Sequence[int] | None = None) -> "CompositeMatcher":
        """A fresh matcher over this grammar."""
        # A combination that recurs (an agent sends the same tools every turn) is worth its whole compile; one
        # request's short call is not: ~0.5 s of CPU for 200 tools against a few us saved per token.
        with self._lock:
            self._matchers += 1
            again = self._matchers > 1
        if again:
            self.swap_now()
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
    trigger: bytes | None = None  # a free-text unit: done where this completes
    tails: list[bytes] | None = None  # its text's last len(trigger) bytes after each step

    def stepped(self, data: bytes) -> None:
        if self.lex is not None:
            self.lex.append(lex(self.lex[-1], data))
        if self.tails is not None:
            self.tails.append((self.tails[-1] + data)[-len(self.trigger):])

    def undo(self, n: int) -> None:
        if self.lex is not None:
            del self.lex[-n:]
        if self.tails is not None:
            del self.tails[-n:]

    def done(self) -> bool:
        """Whether the unit is complete: for free text, its trigger just completed."""
        if self.tails is not None:
            return self.tails[-1] == self.trigger
        return self.matcher.is_completed()

    def may_end(self) -> bool:
        """Whether the output may end inside this unit (free text, which the whole tag may end in)."""
        return self.tails is not None and self.tails[-1] != self.trigger and self.matcher.is_completed()


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
            if self.frame is None and self.g.is_final(self.sid) or self.frame is not None and self.frame.may_end():
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
        if len(self._inputs) == self.g.swap_after_tokens:  # a long output: its remaining masks at xgrammar's speed
            self.g.swap_now()
        return True

    def _feed(self, data: bytes, steps: list[tuple[_Frame, int]]) -> bool:
        g, pos = self.g, 0
        while pos < len(data):
            frame = self.frame
            if frame is None:
                bare = g.entered(self.sid, data[pos])
                if bare >= 0:
                    self.frame = g.new_frame(bare)
                    continue
                sid = g.step(self.sid, data[pos])
                if sid < 0:
                    return False
                self.sid = sid
                pos += 1
                h = g.hole(sid)
                if h >= 0:
                    self.frame = g.new_frame(h)
                continue
            m = frame.matcher
            if m.accept_string(data[pos:]):
                steps.append((frame, 1))
                frame.stepped(data[pos:])
                pos = len(data)
                if frame.done():
                    self._exit(frame)
                continue
            for i in range(pos, len(data)):
                if not m.accept_string(data[i:i + 1]):
                    return False
                steps.append((frame, 1))
                frame.stepped(data[i:i + 1])
                if frame.done():
                    self._exit(frame)
                    pos = i + 1
                    break
            else:
                return False
        return True

    def _exit(self, frame: _Frame) -> None:
        if frame.trigger is None and not _finished(frame.matcher, self.g.index):
            raise Ambiguous("a unit completes where it could also go on")
        self.frame = None
        self.sid = self.g.after(frame.edge)

    def _undo_one(self, record: tuple[int, _Frame | None, list[tuple[_Frame, int]], bool]) -> None:
        sid, frame, steps, stopped = record
        for f, n in reversed(steps):
            f.matcher.rollback(n)
            f.undo(n)
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

    def plain_matcher(self) -> xgr.GrammarMatcher | None:
        """xgrammar's matcher over the whole tag, in this matcher's state, once that grammar is compiled (the
        switch replays what was accepted); None until then. Its masks are this matcher's, bit for bit."""
        if self._delegate is None:
            if not self.g.full_ready or self.terminated:
                return None
            self._switch_to_full()
        return self._delegate

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
        return self.terminated or (self.g.is_final(self.sid) if self.frame is None else self.frame.may_end())

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
            if len(words) == len(row):  # a dense mask (free text allows nearly every token): one copy
                row[:] = vals
            else:
                row[:] = 0
                row[words] = vals
            if self.g.is_final(self.sid):
                _set(row, self.stop_ids)
            return
        self.frame.matcher.fill_next_token_bitmask(bitmask, index)
        _clear(row, self.g.index.stop_ids)  # a unit's matcher stops on the tokenizer's own stop tokens
        if self.frame.trigger is not None:
            exits = text_exits(self.g, self.frame)
            if self.frame.may_end():
                _set(row, self.stop_ids)
        else:
            _clear(row, self.stop_ids)
            exits = self._exit_tokens(row)
        if exits:
            _set(row, exits)

    def _exit_candidates(self) -> tuple[np.ndarray, ...] | None:
        """The exit table rows possible at this unit edge and lexer state, with their bit positions (memoised)."""
        g, frame = self.g, self.frame
        assert frame is not None
        u = g.plan.edge_unit[frame.edge]
        if frame.lex is not None:
            # A bare JSON object/array completes where its nesting first returns to zero.
            depth, in_str, esc = frame.lex[-1]
            cls = LEX_CLASSES.index((in_str, esc if in_str else False))
            key: tuple[int, ...] = (u, frame.edge, cls, depth)
        else:
            key = (u, frame.edge)
        hit = g._exit_sel.get(key, _MISSING)
        if hit is not _MISSING:
            return hit
        tids, splits, pids, effects = g.index.exit_table(g.plan.unit_last[u], g.follow(frame.edge))
        if tids.size and frame.lex is not None:
            eff = effects[:, cls]
            sel = np.nonzero((depth + eff[:, 0] == 0) & (depth + eff[:, 1] > 0) & (eff[:, 2] == 1))[0]
            tids, splits, pids = tids[sel], splits[sel], pids[sel]
        hit = None if tids.size == 0 else (tids, splits, pids >> 5, (pids & 31).astype(np.uint32), tids >> 5,
                                           (tids & 31).astype(np.uint32))
        g._exit_sel[key] = hit
        return hit

    def _exit_tokens(self, row: np.ndarray) -> list[int]:
        """Tokens that complete the current unit part-way and go on in the outer text."""
        g, frame = self.g, self.frame
        assert frame is not None
        cand = self._exit_candidates()
        if cand is None:
            return []
        tids, splits, pid_words, pid_bits, tid_words, tid_bits = cand
        keep = ((row[pid_words] >> pid_bits) & 1).astype(bool)
        keep &= ~(((row[tid_words] >> tid_bits) & 1).astype(bool))
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


def text_exits(g: CompositeGrammar, frame: _Frame) -> list[int]:
    """Tokens that complete a free-text unit's trigger part-way (its first occurrence) and go on in the outer text."""
    splits = g.index.trigger_splits(frame.trigger, frame.tails[-1])
    if not splits:
        return []
    after, out = g.after(frame.edge), []
    for t, k in splits:
        left, data = g.index.bytes_of(t)[:k], g.index.bytes_of(t)
        if frame.matcher.accept_string(left):
            frame.matcher.rollback(1)
            if g.accepts_outer(after, data[k:]):
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
