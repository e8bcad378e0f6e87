"""Per-request any-order state: the FilterSpec requests share and the TokenFilter each request owns.

The filter runs a byte automaton over the generated text that follows the JSON structure and the keys each
any-order object already has. Where a value may be one of several any-order objects (an ``anyOf``/``oneOf`` of
them), it follows each on a path of its own, and the text stands while one path does; the plan admits only unions
where that is exact (``AnyOrderPlan._followable``).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import xgrammar as xgr
import json
import re
from tagjit.anyorder.plan import Obj, Val, scalar_key
from tagjit.anyorder.vocab import VocabTables, vocab_tables


# Lexical modes.
_N, _S, _SE, _L, _K, _KE = range(6)
# Frame kinds: root, tracked object, tracked array, untracked (opaque) object or array; a value that opens one of
# several objects (a fork, resolved by step_state into one state per object); a scalar being checked.
_R, _O, _A, _X, _F, _C = range(6)
# Phases of root/object/array frames.
_VALUE, _AFTER, _KEY_OR_END, _KEY, _AFTER_KEY, _VALUE_OR_END = range(6)
_WS = frozenset(b" \t\r\n")
_STR_STOP = re.compile(rb'["\\]')
_LIT_STOP = re.compile(rb"[ \t\r\n,}\]]")
_REJECT = -1

Path = tuple  # (mode, stack): stack is a tuple of frame tuples, the root frame first
State = tuple  # the paths the text may be on (several below a union of tracked objects), deduplicated


def _slack(obj: Obj, used: int, count: int) -> tuple[int, bool]:
    """Keys that may still be chosen (bitmask over declared names) and whether other names may."""
    missing = obj.req & ~used
    slack = obj.max - count - bin(missing).count("1")
    if slack > 0:
        return obj.all & ~used, obj.extra_ok
    return missing, False


def _step(mode: int, stack: list, data: bytes, i: int = 0) -> tuple[int, int]:
    """Advance (mode, stack) by data[i:] in place; returns the new mode (or _REJECT) and where it stopped: the end,
    or just after a fork's opening brace."""
    n = len(data)
    while i < n:
        if mode == _S:
            m = _STR_STOP.search(data, i)
            checking = stack[-1][0] == _C
            if m is None:
                if checking:
                    _grow(stack, data[i:])
                return mode, n
            end = m.end()
            mode = _N if data[end - 1] == 0x22 else _SE
            if checking:
                _grow(stack, data[i:end - 1] if mode == _N else data[i:end])
                if mode == _N and not _checked(stack, True):
                    return _REJECT, end
            i = end
            continue
        if mode == _SE:
            if stack[-1][0] == _C:
                _grow(stack, data[i:i + 1])
            i += 1
            mode = _S
            continue
        if mode == _L:
            m = _LIT_STOP.search(data, i)
            if m is None:
                if stack[-1][0] == _C:
                    _grow(stack, data[i:])
                return mode, n
            if stack[-1][0] == _C:
                _grow(stack, data[i:m.start()])
                if not _checked(stack, False):
                    return _REJECT, i
            i = m.start()
            mode = _N
            continue
        top = stack[-1]
        if mode == _K or mode == _KE:
            i, mode = _key_run(mode, stack, top, data, i)
            if mode == _REJECT:
                return _REJECT, i
            continue
        b = data[i]
        i += 1
        if b in _WS:
            # Bounded whitespace has none before "," (tighten_separators): after a value, whitespace leads only to
            # the "}", which an object that cannot close yet refuses.
            if _ws_breaks(stack):
                return _REJECT, i
            continue
        kind = top[0]
        if kind == _X:
            if b == 0x7B or b == 0x5B:  # { [
                stack[-1] = (_X, top[1] + 1)
            elif b == 0x7D or b == 0x5D:  # } ]
                if top[1] == 1:
                    stack.pop()
                else:
                    stack[-1] = (_X, top[1] - 1)
            elif b == 0x22:
                mode = _S
            continue
        phase = top[2]
        if kind == _R:
            if phase == _AFTER:
                return mode, n  # after the value only stop tokens (or whitespace) remain: the grammar decides
            mode = _start_value(stack, top, top[1], b)
        elif kind == _O:
            if phase == _AFTER:
                if b == 0x2C:  # ,
                    if top[1].ao:
                        ok, extra = _slack(top[1], top[3], top[5])
                        if not ok and not extra:
                            return _REJECT, i
                    stack[-1] = top[:2] + (_KEY,) + top[3:6] + (None,)
                elif b == 0x7D:
                    if not _can_close(top):
                        return _REJECT, i
                    stack.pop()
                else:
                    return _REJECT, i
            elif phase == _KEY_OR_END or phase == _KEY:
                if b == 0x22:
                    obj = top[1]
                    if obj.ao:
                        ok, extra = _slack(obj, top[3], top[5])
                        if not ok and not extra:
                            return _REJECT, i
                    stack[-1] = top[:6] + ((0 if obj.ao else -1, b""),)
                    mode = _K
                elif b == 0x7D and phase == _KEY_OR_END:
                    if not _can_close(top):
                        return _REJECT, i
                    stack.pop()
                else:
                    return _REJECT, i
            elif phase == _AFTER_KEY:
                if b != 0x3A:  # :
                    return _REJECT, i
                stack[-1] = top[:2] + (_VALUE,) + top[3:]
            else:  # _VALUE
                mode = _start_value(stack, top, top[6], b)
        else:  # _A
            if phase == _AFTER:
                if b == 0x2C:
                    stack[-1] = (_A, top[1], _VALUE, top[3] + 1)
                elif b == 0x5D:
                    stack.pop()
                else:
                    return _REJECT, i
            elif b == 0x5D and phase == _VALUE_OR_END:
                stack.pop()
            else:
                arr = top[1]
                child = arr.prefix[top[3]] if top[3] < len(arr.prefix) else arr.items
                mode = _start_value(stack, top, child, b)
        if mode == _REJECT:
            return _REJECT, i
        if stack[-1][0] == _F:
            return mode, i
    return mode, n


# The token classes that matter where whitespace breaks a rule (see vocab.VocabTables).
_COUNTING_WS = {"S": "Sw", "SE": "SEw", "L": "Lw", "Nall": "Nw"}


def _ws_breaks(stack: Sequence[tuple]) -> bool:
    """Whether whitespace now breaks a rule: bounded whitespace (none before ","), after a value of an object
    that cannot close yet."""
    top = stack[-1]
    return stack[0][3] and top[0] == _O and top[2] == _AFTER and not _can_close(top)


def _can_close(top: tuple) -> bool:
    obj = top[1]
    return not obj.ao or (not (obj.req & ~top[3]) and top[5] >= obj.min)


def _start_value(stack: list, top: tuple, child: Val | None, b: int) -> int:
    if b in b"}],:":
        return _REJECT
    if top[0] == _O:
        stack[-1] = top[:2] + (_AFTER,) + top[3:6] + (None,)
    else:
        stack[-1] = top[:2] + (_AFTER,) + top[3:]
    if child is not None and child.check is not None:
        if b == 0x7B or b == 0x5B:
            return _REJECT
        stack.append((_C, child.check, b"" if b == 0x22 else bytes((b,))))
        return _S if b == 0x22 else _L
    if b == 0x7B:
        if child is not None and child.obj is not None:
            stack.append((_O, child.obj, _KEY_OR_END, 0, frozenset(), 0, None))
        elif child is not None and child.alts:
            stack.append((_F, child.alts))
        else:
            stack.append((_X, 1))
        return _N
    if b == 0x5B:
        if child is not None and child.arr is not None:
            stack.append((_A, child.arr, _VALUE_OR_END, 0))
        else:
            stack.append((_X, 1))
        return _N
    if b == 0x22:
        return _S
    return _L


def _grow(stack: list, data: bytes) -> None:
    top = stack[-1]
    stack[-1] = (_C, top[1], top[2] + data)


def _checked(stack: list, string: bool) -> bool:
    """Whether the scalar just ended is one its position allows (the check frame is popped)."""
    _, allowed, raw = stack.pop()
    try:
        value = json.loads(b'"' + raw + b'"' if string else raw)
    except ValueError:
        return False
    return not isinstance(value, (dict, list)) and scalar_key(value) in allowed


def _key_run(mode: int, stack: list, top: tuple, data: bytes, i: int) -> tuple[int, int]:
    """Consume key bytes up to the closing quote (or the end of data); returns (index, mode)."""
    obj: Obj = top[1]
    t, raw = top[6]
    n = len(data)
    start = i
    while i < n:
        b = data[i]
        if mode == _KE:
            mode = _K
        elif b == 0x22:
            break
        elif b == 0x5C:
            mode = _KE
        if t >= 0 and obj.ao:
            t = obj.next[t].get(b, -1)
        i += 1
    raw = raw + data[start:i]
    if obj.ao:
        # Keys below a trie node only shrink as the key grows, so checking the end of the run suffices.
        ok, extra = _slack(obj, top[3], top[5])
        if not extra and (t < 0 or not obj.below[t] & ok):
            return i, _REJECT
    if i < n:  # the closing quote
        return i + 1, _close_key(stack, top, obj, t, raw)
    stack[-1] = top[:6] + ((t, raw),)
    return i, mode


def _close_key(stack: list, top: tuple, obj: Obj, t: int, raw: bytes) -> int:
    used, extras, count = top[3], top[4], top[5]
    if obj.ao and t >= 0 and obj.term[t] >= 0:
        k = obj.term[t]
        ok, _ = _slack(obj, used, count)
        if not (ok >> k) & 1:
            return _REJECT
        stack[-1] = (_O, obj, _AFTER_KEY, used | (1 << k), extras, count + 1, obj.children[k])
        return _N
    try:
        name = json.loads(b'"' + raw + b'"')
    except ValueError:
        return _REJECT
    if not obj.ao:
        k = obj.index.get(name, -1)
        child = obj.children[k] if k >= 0 else obj.extra
        stack[-1] = top[:2] + (_AFTER_KEY,) + top[3:6] + (child,)
        return _N
    _, extra_ok = _slack(obj, used, count)
    # A declared name spelled differently (escapes) must use its own spelling; no name twice.
    # A union's branch refuses the names another branch's grammar writes and its own does not (plan._followable).
    if not extra_ok or name in obj.index or name in extras or name in obj.forbidden:
        return _REJECT
    stack[-1] = (_O, obj, _AFTER_KEY, used, extras | {name}, count + 1, obj.extra)
    return _N


def _initial(root: Val | None, tight: bool) -> State:
    return ((_N, ((_R, root, _VALUE, tight),)),)  # tight: bounded whitespace, none before "," or ":"


def step_state(state: State, data: bytes) -> State | None:
    """The filter state after data, or None if the text breaks an any-order rule on every path."""
    out: list[Path] = []
    for mode, stack in state:
        _follow(mode, list(stack), data, 0, out)
    if not out:
        return None
    return tuple(dict.fromkeys(out)) if len(out) > 1 else (out[0],)


def _follow(mode: int, stack: list, data: bytes, i: int, out: list[Path]) -> None:
    mode, i = _step(mode, stack, data, i)
    if mode == _REJECT:
        return
    top = stack[-1]
    if top[0] == _F:  # one path per object the value may be
        stack.pop()
        for obj in top[1]:
            _follow(_N, stack + [(_O, obj, _KEY_OR_END, 0, frozenset(), 0, None)], data, i, out)
        return
    out.append((mode, tuple(stack)))


class AnyOrderSpec:
    """FilterSpec of a schema with any-order objects (vocabulary-independent, shared by requests)."""

    def __init__(self, root: Val | None, tight: bool = False) -> None:
        self.root = root
        self.tight = tight

    def new(self, tokenizer_info: xgr.TokenizerInfo) -> "AnyOrderFilter":
        """A filter in its initial state for this vocabulary."""
        return AnyOrderFilter(self.root, vocab_tables(tokenizer_info), self.tight)


class AnyOrderFilter:
    """Per-request key bookkeeping of any-order objects (a TokenFilter)."""

    def __init__(self, root: Val | None, vocab: VocabTables, tight: bool = False) -> None:
        self._vocab = vocab
        self._initial = _initial(root, tight)
        self._history: list[State] = [self._initial]
        self._verdicts: dict[State, dict[int, bool]] = {}
        self._clears: dict[tuple, list[tuple[int, int]]] = {}

    @property
    def state(self) -> State:
        """The current state (tests, debugging)."""
        return self._history[-1]

    def accept(self, token_id: int) -> bool:
        """Advance by one token; False (state unchanged) if it breaks an any-order rule."""
        state = self._history[-1]
        tokens = self._vocab.tokens
        if not 0 <= token_id < len(tokens):
            return False
        new = step_state(state, tokens[token_id])
        if new is None:
            return False
        self._history.append(new)
        return True

    def accept_bytes(self, data: bytes) -> bool:
        """Advance by raw text; False (state unchanged) if it breaks an any-order rule."""
        new = step_state(self._history[-1], bytes(data))
        if new is None:
            return False
        self._history[-1] = new
        return True

    def rollback(self, num_tokens: int) -> None:
        """Undo the last num_tokens accepted tokens."""
        if num_tokens <= 0:
            return
        if num_tokens >= len(self._history):
            raise ValueError(f"cannot roll back {num_tokens} tokens, only {len(self._history) - 1} accepted")
        del self._history[-num_tokens:]

    def reset(self) -> None:
        """Return to the initial state."""
        self._history = [self._initial]

    def restrict(self, bitmask: Any, index: int) -> None:
        """Clear the bits of tokens that break an any-order rule in row index."""
        state = self._history[-1]
        rel = None
        for mode, stack in state:
            top = stack[-1]
            if top[0] == _R and top[2] == _AFTER and mode != _L:
                return  # a path that has written the whole value takes whatever the grammar allows
            relevance = self._relevance(mode, top)
            if _ws_breaks(stack):
                relevance = _COUNTING_WS.get(relevance, relevance)
            rel = self._vocab.relevant[relevance] if rel is None else rel | self._vocab.relevant[relevance]
        row = bitmask[index].numpy() if hasattr(bitmask, "numpy") else bitmask[index]
        width = min(len(row), len(rel))
        hit = row[:width] & rel[:width]
        words = np.flatnonzero(hit)
        if words.size == 0:
            return
        bits = hit[words]
        key = (state, words.tobytes(), bits.tobytes())
        clear = self._clears.get(key)
        if clear is None:
            clear = self._compute(state, words, bits)
            if len(self._clears) > 4096:
                self._clears.clear()
            self._clears[key] = clear
        for w, keep in clear:
            row[w] &= keep

    def _relevance(self, mode: int, top: tuple) -> str:
        if top[0] == _C:  # the scalar is checked where it ends
            return "Kq" if mode != _L else "Lw"
        if mode == _S:
            return "S"
        if mode == _SE:
            return "SE"
        if mode == _L:
            return "L"
        if mode == _K or mode == _KE:
            obj = top[1]
            if obj.ao and not _slack(obj, top[3], top[5])[1]:
                return "Nall"
            return "Kq"
        if top[0] == _X or top[2] in (_VALUE, _VALUE_OR_END):
            return "Nopen"
        if top[0] == _O and top[2] in (_KEY, _KEY_OR_END):
            obj = top[1]
            if not obj.ao or _slack(obj, top[3], top[5])[1]:
                return "Nopen"
        return "Nall"

    def _compute(self, state: State, words: np.ndarray, bits: np.ndarray) -> list[tuple[int, int]]:
        verdicts = self._verdicts.get(state)
        if verdicts is None:
            if len(self._verdicts) > 4096:
                self._verdicts.clear()
            verdicts = self._verdicts[state] = {}
        tokens = self._vocab.tokens
        ntok = len(tokens)
        clears = []
        for w, word in zip(words.tolist(), bits.tolist()):
            word &= 0xFFFFFFFF
            bad = 0
            while word:
                low = word & -word
                word ^= low
                tid = w * 32 + low.bit_length() - 1
                ok = verdicts.get(tid)
                if ok is None:
                    ok = verdicts[tid] = tid >= ntok or step_state(state, tokens[tid]) is not None
                if not ok:
                    bad |= low
            if bad:
                keep = ~bad & 0xFFFFFFFF
                clears.append((w, keep - (1 << 32) if keep >= 1 << 31 else keep))
        return clears
