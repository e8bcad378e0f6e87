"""A deterministic walk through a grammar: generate a text by choosing only allowed tokens.

The walk stands in for a model that obeys the mask. At each step it:
1. stops (returns the text) once the grammar is complete and a stop token is allowed;
2. else emits the first *closer* (``"``, ``}``, ``]``, then the caller's end strings such as
   ``</parameter>`` or ``</tool_call>``) that the grammar accepts in full from here, token by token
   (longest token first; the tokens are tried and rolled back if the closer cannot be finished),
   unless the text already ends with that closer repeated ``MAX_REPEAT`` times, so free text
   does not loop on it;
3. else takes the longest allowed token without whitespace (forced names and constants advance
   fast), or, where only whitespace is allowed, the shortest whitespace (a newline first).
Closing whenever possible keeps strings short and skips optional properties, so walks terminate.
"""

from __future__ import annotations

import random
from typing import Sequence

import numpy as np
import xgrammar as xgr

from tagjit.runtime.matcher import Matcher, allocate_token_bitmask

DEFAULT_CLOSERS = ('"', "}", "]")
MAX_REPEAT = 6  # deeper than any nesting in the test schemas; ends loops in free text


class WalkError(AssertionError):
    """The walk could not finish (no token allowed, or the step budget ran out)."""


class Walker:
    """Walks for one vocabulary (decoded tokens, stop tokens, one bitmask row)."""

    def __init__(self, info: xgr.TokenizerInfo) -> None:
        self.info = info
        self.vocab = [bytes(t) for t in info.decoded_vocab]
        self.stops = set(info.stop_token_ids)
        self.special = set(info.special_token_ids)
        self.bitmask = allocate_token_bitmask(1, info.vocab_size)
        self._by_bytes: dict[bytes, list[int]] = {}
        for i, b in enumerate(self.vocab):
            if b and i not in self.special and i < info.vocab_size:
                self._by_bytes.setdefault(b, []).append(i)
        self._longest = max(len(b) for b in self._by_bytes)

    def allowed(self, grammar: Matcher) -> np.ndarray:
        """Token ids the grammar allows next."""
        grammar.fill_bitmask(self.bitmask, 0)
        row = self.bitmask[0].numpy().view(np.uint8)
        bits = np.unpackbits(row, bitorder="little")[: self.info.vocab_size]
        return np.nonzero(bits)[0]

    def _accept_text(self, grammar: Matcher, text: bytes) -> int:
        """Accept all of ``text`` as tokens (longest first); on failure roll back and return 0."""
        taken = 0
        pos = 0
        while pos < len(text):
            for n in range(min(len(text) - pos, self._longest), 0, -1):
                ids = self._by_bytes.get(text[pos:pos + n])
                if ids and grammar.accept_token(ids[0]):
                    taken += 1
                    pos += n
                    break
            else:
                grammar.rollback(taken)
                return 0
        return taken

    def _rank(self, t: int) -> tuple:
        b = self.vocab[t]
        if not b.strip():  # whitespace only: as little as the grammar needs
            return (0, b == b"\n", -len(b), -t)
        return (1, b.strip() == b, len(b), -t)

    def walk(self, grammar: Matcher, prefix: str = "", closers: Sequence[str] = DEFAULT_CLOSERS,
             max_tokens: int = 3000) -> str:
        """Advance ``grammar`` from ``prefix`` to completion; return the whole generated text."""
        out = bytearray()
        if prefix:
            if not grammar.accept_string(prefix):
                raise WalkError(f"grammar rejects the prefix {prefix!r}")
            out += prefix.encode()
        encoded = list(dict.fromkeys(c.encode() for c in closers if c))
        steps = 0
        while steps < max_tokens:
            ids = self.allowed(grammar)
            if len(ids) == 0:
                raise WalkError(f"no token allowed after {out.decode(errors='replace')!r}")
            has_stop = any(t in self.stops for t in ids)
            if has_stop and grammar.is_completed():
                return out.decode("utf-8")
            closed = False
            for c in encoded:
                if out.endswith(c * MAX_REPEAT):
                    continue
                n = self._accept_text(grammar, c)
                if n:
                    out += c
                    steps += n
                    closed = True
                    break
            if closed:
                continue
            candidates = [t for t in ids.tolist() if t not in self.special and t not in self.stops and self.vocab[t]]
            if not candidates:
                if has_stop:
                    return out.decode("utf-8")
                raise WalkError(f"only special tokens allowed after {out.decode(errors='replace')!r}")
            choice = max(candidates, key=self._rank)
            if not grammar.accept_token(choice):
                raise WalkError(f"grammar refused token {choice} it allowed")
            out += self.vocab[choice]
            steps += 1
        raise WalkError(f"walk did not finish in {max_tokens} tokens: {out[-200:].decode(errors='replace')!r}")


    def random_walk(self, grammar: Matcher, rng: random.Random, prefix: str = "",
                    closers: Sequence[str] = DEFAULT_CLOSERS, close_p: float = 0.3, stop_p: float = 0.5,
                    max_tokens: int = 1500) -> str:
        """A weak model: each step picks uniformly among allowed tokens, but with probability ``close_p``
        first tries a closer, and stops with probability ``stop_p`` once the grammar is complete."""
        out = bytearray()
        if prefix:
            if not grammar.accept_string(prefix):
                raise WalkError(f"grammar rejects the prefix {prefix!r}")
            out += prefix.encode()
        encoded = list(dict.fromkeys(c.encode() for c in closers if c))
        for _ in range(max_tokens):
            ids = self.allowed(grammar)
            if len(ids) == 0:
                raise WalkError(f"no token allowed after {out.decode(errors='replace')!r}")
            has_stop = any(t in self.stops for t in ids)
            if has_stop and grammar.is_completed() and rng.random() < stop_p:
                return out.decode("utf-8")
            if rng.random() < close_p:
                c = rng.choice(encoded)
                if self._accept_text(grammar, c):
                    out += c
                    continue
            candidates = [t for t in ids.tolist() if t not in self.special and t not in self.stops and self.vocab[t]]
            if not candidates:
                if has_stop:
                    return out.decode("utf-8")
                raise WalkError(f"only special tokens allowed after {out.decode(errors='replace')!r}")
            choice = rng.choice(candidates)
            if not grammar.accept_token(choice):
                raise WalkError(f"grammar refused token {choice} it allowed")
            out += self.vocab[choice]
        raise WalkError(f"walk did not finish in {max_tokens} tokens: {out[-200:].decode(errors='replace')!r}")


def walk(grammar: Matcher, info: xgr.TokenizerInfo, prefix: str = "", closers: Sequence[str] = DEFAULT_CLOSERS,
         max_tokens: int = 3000) -> str:
    """Generate a text from a grammar by a deterministic walk (see the module docstring)."""
    return Walker(info).walk(grammar, prefix, closers, max_tokens)


STYLE_CLOSERS = {"qwen_xml": ["</parameter>"], "glm_xml": ["</arg_value>"],
                 "deepseek_xml": ["</｜DSML｜parameter>"], "json": []}


def format_closers(fmt) -> list[str]:
    """What a walk may use to finish the structures of a tool-call format (a ``tagjit.tools.ToolFormat``)."""
    out = ['"', "}", "]", *STYLE_CLOSERS[fmt.arguments]]
    for c in fmt.call:
        if "{index}" in c.begin:
            out.append(c.begin.split("{index}", 1)[1])
        out.extend([c.end] if isinstance(c.end, str) else list(c.end))
    if fmt.wrapper:
        out.append(fmt.wrapper[1])
    return out
