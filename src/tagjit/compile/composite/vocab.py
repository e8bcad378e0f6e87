"""The vocabulary index of composites: literal masks from a sorted index of token bytes."""

from __future__ import annotations

import re
import threading
from bisect import bisect_left

import numpy as np
import xgrammar as xgr

from tagjit.runtime.vocab import per_tokenizer, token_bytes


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
        self._triggers: dict[tuple[bytes, frozenset[int]], list[tuple[int, int]]] = {}
        self._contains: dict[bytes, list[bytes]] = {}
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

    def trigger_splits(self, trigger: bytes, tail: bytes) -> list[tuple[int, int]]:
        """(token, split) where text ending in ``tail`` followed by the token's first ``split`` bytes first completes
        ``trigger``, with bytes of the token left over: where free text hands over to a tag's begin (memoised)."""
        # Only which prefixes of the trigger the text ends with matters, so the memo stays small; text without the
        # trigger's first byte near its end (the common case) ends with none of them.
        starts = frozenset(j for j in range(1, len(trigger)) if tail.endswith(trigger[:j])) \
            if trigger[:1] in tail else frozenset()
        key = (trigger, starts)
        with self._lock:
            hit = self._triggers.get(key)
        if hit is not None:
            return hit
        found: dict[int, int] = {}
        for tb in [tb for j in sorted(starts | {0}) for tb in self.with_prefix(trigger[j:])] + self._containing(trigger):
            ends = [len(trigger) - j for j in starts if tb.startswith(trigger[j:])]
            inside = tb.find(trigger)
            if inside >= 0:
                ends.append(inside + len(trigger))
            k = min(ends, default=-1)
            if 0 < k < len(tb):
                for t in self.by_bytes[tb]:
                    found[t] = k
        hit = sorted(found.items())
        with self._lock:
            self._triggers[key] = hit
        return hit

    def _containing(self, trigger: bytes) -> list[bytes]:
        with self._lock:
            hit = self._contains.get(trigger)
        if hit is None:
            hit = [tb for tb in self.keys if trigger in tb[1:]]
            with self._lock:
                self._contains[trigger] = hit
        return hit

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
LEX_CLASSES = ((False, False), (True, False), (True, True))


def lex(state: tuple[int, bool, bool], data: bytes) -> tuple[int, bool, bool]:
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
    for in_str, esc in LEX_CLASSES:
        state, low = (0, in_str, esc), 1 << 20
        for i in range(len(data) - 1):
            state = lex(state, data[i:i + 1])
            low = min(low, state[0])
        state = lex(state, data[-1:])
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
