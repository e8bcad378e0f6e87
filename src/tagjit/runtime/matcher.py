"""The per-request grammar state: accept, validate, rollback, fill the token bitmask."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

import torch
import xgrammar as xgr

from tagjit import metrics
from tagjit.errors import ConstraintError

log = logging.getLogger("tagjit")


class TokenFilter(Protocol):
    """State kept beside the grammar that removes tokens a context-free grammar cannot exclude."""

    def accept(self, token_id: int) -> bool:
        """Advance by one token; False if the token is not allowed."""

    def rollback(self, num_tokens: int) -> None:
        """Undo the last num_tokens accepted tokens."""

    def restrict(self, bitmask: torch.Tensor, index: int) -> None:
        """Clear the bits of tokens this filter forbids in row index."""

    def reset(self) -> None:
        """Return to the initial state."""

    def accept_bytes(self, data: bytes) -> bool:
        """Advance by raw text (CLI checks); False if the text is not allowed."""


class FilterSpec(Protocol):
    """Makes a fresh TokenFilter for each request using a compiled grammar."""

    def new(self, tokenizer_info: xgr.TokenizerInfo) -> TokenFilter:
        """A filter in its initial state for this vocabulary."""

    def warm(self, grammar: xgr.CompiledGrammar, tokenizer_info: xgr.TokenizerInfo) -> None:
        """Do the filter's part of a request's first mask now, where the grammar is compiled, not at its first token."""


class MatcherLike(Protocol):
    """What ``Matcher`` drives: an ``xgr.GrammarMatcher`` or a composite matcher (``composite.py``)."""

    def accept_token(self, token_id: int) -> bool: ...

    def accept_string(self, data: str | bytes) -> bool: ...

    def rollback(self, num_tokens: int = 1) -> None: ...

    def fill_next_token_bitmask(self, bitmask: torch.Tensor, index: int = 0) -> Any: ...

    def is_terminated(self) -> bool: ...

    def is_completed(self) -> bool: ...

    def reset(self) -> None: ...


@dataclass
class Compiled:
    """A compiled constraint, shared (read-only) by every request that uses it.

    ``grammar`` is xgrammar's compiled grammar, or None when the constraint was compiled in parts
    (``composite``, a ``tagjit.compile.composite.CompositeGrammar``): always make matchers with ``new_matcher``.
    """

    grammar: xgr.CompiledGrammar | None
    key: str
    compile_ms: float
    filter_spec: FilterSpec | None = None
    nbytes: int = field(default=0)
    composite: Any = None
    tokenizer_info: xgr.TokenizerInfo | None = None
    """The tokenizer it was compiled for (its per-tokenizer tables are kept by that object's identity)."""

    def __post_init__(self) -> None:
        if self.filter_spec is not None and self.tokenizer_info is None:
            raise ValueError("a Compiled with a token filter needs the tokenizer_info it was compiled for")
        if not self.nbytes:
            source = self.grammar if self.grammar is not None else self.composite
            self.nbytes = int(source.memory_size_bytes if self.grammar is not None else source.nbytes)

    def new_matcher(self, stop_token_ids: Sequence[int] | None = None) -> MatcherLike:
        """A fresh matcher for one request (stop tokens override the tokenizer's)."""
        if self.composite is not None:
            return self.composite.new_matcher(stop_token_ids)
        return xgr.GrammarMatcher(self.grammar, override_stop_tokens=stop_token_ids)


class Matcher:
    """A request's position in its constraint.

    Built from a finished ``Compiled`` or from a ``Future`` of one (JIT): then nothing blocks
    until the first call that needs the grammar, and a token mask is only ever computed from
    the finished grammar. If the compile failed, the grammar allows only stop tokens, so the
    request ends at once instead of generating unconstrained text.
    """

    def __init__(self, compiled: Compiled | "Future[Compiled]", *, stop_token_ids: Sequence[int] | None = None,
                 vocab_size: int, wait_timeout_s: float | None = None,
                 reasoning_end_ids: Sequence[int] | None = None) -> None:
        self._source = compiled
        self._stop_token_ids = list(stop_token_ids) if stop_token_ids else None
        self.vocab_size = vocab_size
        self._wait_timeout_s = wait_timeout_s
        self._reasoning_end = list(reasoning_end_ids) if reasoning_end_ids else None
        self._matcher: MatcherLike | None = None
        self._filter: TokenFilter | None = None
        # The xgrammar matcher whose mask is this request's whole mask (no filter, not composite), once known:
        # the batch fill's fast path.
        self._plain: xgr.GrammarMatcher | None = None
        # _plain while the output is constrained (not in its reasoning section): all a step's fill reads per row.
        self._fast: xgr.GrammarMatcher | None = None
        self.error: BaseException | None = None
        self.waited_ms = 0.0
        self._reset_state()

    def _reset_state(self) -> None:
        self._terminated = False
        self.num_processed_tokens = 0
        # One entry per accepted token: (fed to the matcher?, reasoning progress before it).
        self._history: list[tuple[bool, int]] = []
        self._reasoning_progress = 0 if self._reasoning_end else -1  # -1: constrained
        self._fast = None if self._reasoning_end else self._plain

    # -- lifecycle ---------------------------------------------------------------------------
    def ready(self) -> bool:
        """Whether the grammar is compiled (never blocks)."""
        return self._matcher is not None or self.error is not None or not isinstance(self._source, Future) \
            or self._source.done()

    def _ensure(self) -> MatcherLike | None:
        if self._matcher is not None or self.error is not None:
            return self._matcher
        compiled = self._source
        if isinstance(compiled, Future):
            start = time.perf_counter()
            done = compiled.done()
            try:
                compiled = compiled.result(timeout=self._wait_timeout_s)
            except BaseException as e:  # compile error, limit, cancellation
                self.error = e
                log.error("tagjit: grammar unavailable (%s); the request may only stop", e)
                return None
            finally:
                if not done:
                    self.waited_ms = (time.perf_counter() - start) * 1000
                metrics.JIT_WAIT_MS.observe(self.waited_ms)
        self.compiled = compiled
        self._matcher = compiled.new_matcher(self._stop_token_ids)
        spec = compiled.filter_spec
        self._filter = spec.new(compiled.tokenizer_info) if spec is not None else None
        if self._filter is None and type(self._matcher) is xgr.GrammarMatcher:
            self._plain = self._matcher
            self._sync_fast()
        return self._matcher

    def _sync_fast(self) -> None:
        self._fast = self._plain if self._reasoning_progress < 0 else None

    def _lose(self, e: ConstraintError) -> None:
        # As a compile that failed before the first mask: from here the request may only stop.
        log.error("tagjit: grammar unavailable (%s); the request may only stop", e)
        self.error = e
        self._matcher = self._plain = self._fast = self._filter = None

    def copy(self) -> "Matcher":
        """A fresh, un-advanced grammar over the same compiled constraint."""
        return Matcher(self._source, stop_token_ids=self._stop_token_ids, vocab_size=self.vocab_size,
                       wait_timeout_s=self._wait_timeout_s, reasoning_end_ids=self._reasoning_end)

    # -- advancing ---------------------------------------------------------------------------
    def accept_token(self, token: int) -> bool:
        """Advance by one token; False (state unchanged) if the grammar forbids it."""
        if self._terminated:
            return False
        if self._reasoning_progress >= 0:
            before = self._reasoning_progress
            end = self._reasoning_end
            assert end is not None
            if token == end[before]:
                progress = before + 1
            else:
                progress = 1 if token == end[0] else 0
            self._reasoning_progress = -1 if progress == len(end) else progress
            self._sync_fast()
            self._history.append((False, before))
            self.num_processed_tokens += 1
            return True
        matcher = self._ensure()
        if matcher is None:
            ok = self._stop_token_ids is not None and token in self._stop_token_ids
            if ok:
                self._terminated = True
            return ok
        if self._filter is not None and not self._filter.accept(token):
            return False
        try:
            ok = matcher.accept_token(token)
        except ConstraintError as e:  # a composite's part that the token reached could not compile
            self._lose(e)
            return self.accept_token(token)
        if not ok:
            if self._filter is not None:
                self._filter.rollback(1)
            return False
        self._history.append((True, -1))
        self.num_processed_tokens += 1
        self._terminated = matcher.is_terminated()
        return True

    def accept_tokens(self, tokens: Sequence[int]) -> bool:
        """Advance by each token in turn; tokens after termination are ignored."""
        for token in tokens:
            if self._terminated:
                return True
            if not self.accept_token(token):
                return False
        return True

    def validate_tokens(self, tokens: Sequence[int]) -> list[int]:
        """The longest accepted prefix of tokens, without advancing."""
        accepted: list[int] = []
        for token in tokens:
            if self._terminated or not self.accept_token(token):
                break
            accepted.append(token)
        if accepted:
            self.rollback(len(accepted))
        return accepted

    def accept_string(self, text: str | bytes) -> bool:
        """Advance by raw text (CLI and tests); False if the grammar forbids it."""
        matcher = self._ensure()
        if matcher is None:
            return False
        data = text.encode() if isinstance(text, str) else text
        if self._filter is not None and not self._filter.accept_bytes(data):
            return False
        return matcher.accept_string(data)

    def rollback(self, num_tokens: int) -> None:
        """Undo the last num_tokens accepted tokens."""
        if num_tokens <= 0:
            return
        if num_tokens > len(self._history):
            raise ValueError(f"cannot roll back {num_tokens} tokens, only {len(self._history)} accepted")
        fed = 0
        for _ in range(num_tokens):
            was_fed, progress = self._history.pop()
            if was_fed:
                fed += 1
            else:
                self._reasoning_progress = progress
        if fed and self._matcher is not None:
            self._matcher.rollback(fed)
            if self._filter is not None:
                self._filter.rollback(fed)
        self.num_processed_tokens -= num_tokens
        self._terminated = self._matcher.is_terminated() if self._matcher is not None else False
        self._sync_fast()

    def reset(self) -> None:
        """Return to the initial state."""
        if self._matcher is not None:
            self._matcher.reset()
        if self._filter is not None:
            self._filter.reset()
        self._reset_state()

    # -- masks -------------------------------------------------------------------------------
    def fill_bitmask(self, bitmask: torch.Tensor, index: int) -> None:
        """Write the allowed-token bitmask (bit set = allowed) into row index."""
        fill_bitmasks((self,), bitmask, (index,))

    def _plain_or_fill(self, bitmask: torch.Tensor, index: int) -> xgr.GrammarMatcher | None:
        """The xgrammar matcher whose own mask is this row's (for a batched fill), or None after filling the row."""
        if self._reasoning_progress >= 0:
            bitmask[index].fill_(-1)
            return None
        matcher = self._ensure()
        if matcher is None:
            bitmask[index].fill_(0)
            for t in self._stop_token_ids or ():
                bitmask[index, t // 32] |= _bit(t % 32)
            return None
        if self._filter is None:
            if type(matcher) is xgr.GrammarMatcher:
                return matcher
            switch = getattr(matcher, "plain_matcher", None)  # a composite whose whole grammar is compiled
            inner = switch() if switch is not None else None
            if inner is not None:
                self._plain = inner
                self._sync_fast()
                return inner
        try:
            matcher.fill_next_token_bitmask(bitmask, index)
        except ConstraintError as e:  # a composite's part that this mask reached could not compile
            self._lose(e)
            return self._plain_or_fill(bitmask, index)
        if self._filter is not None:
            self._filter.restrict(bitmask, index)
        return None

    def is_terminated(self) -> bool:
        """Whether a stop token ended the constrained output."""
        return self._terminated

    def is_completed(self) -> bool:
        """Whether the text so far is a complete match (a stop token may come next)."""
        matcher = self._ensure()
        return matcher is not None and (self._terminated or matcher.is_completed())

    @property
    def in_reasoning(self) -> bool:
        """Whether the output is still inside the free reasoning section."""
        return self._reasoning_progress >= 0


# One batch matcher per filling thread: xgrammar's owns a thread pool and is not meant to be shared.
_per_thread = threading.local()


# The fill metric samples one call in this many: a Prometheus observe costs about a microsecond, more than
# xgrammar's own fill at a precomputed state.
FILL_SAMPLE_EVERY = 64
_fill_calls = 0


def fill_bitmasks(matchers: Sequence[Matcher], bitmask: torch.Tensor, indices: Sequence[int]) -> None:
    """Fill row ``indices[i]`` for ``matchers[i]``, every plain grammar in one xgrammar batch call (its threads).

    Composite and any-order matchers, reasoning sections and failed compiles fill their rows one by one; a JIT
    matcher waits for its compile first. The fill metric (mean time per row) is timed on one call in
    ``FILL_SAMPLE_EVERY``.
    """
    global _fill_calls
    _fill_calls += 1
    timed = _fill_calls % FILL_SAMPLE_EVERY == 0
    start = time.perf_counter() if timed else 0.0
    # The hot path (every row a plain, constrained xgrammar matcher) reads one attribute per row.
    if len(matchers) == 1:
        inner = matchers[0]._fast
        if inner is None:
            inner = matchers[0]._plain_or_fill(bitmask, indices[0])
        if inner is not None:
            inner.fill_next_token_bitmask(bitmask, indices[0])
    elif matchers:
        plain = [m._fast for m in matchers]
        if all(plain):
            rows = indices if type(indices) is list else list(indices)
        else:
            plain, rows = _plain_rows(matchers, bitmask, indices)
        if plain:
            _batch_matcher().batch_fill_next_token_bitmask(plain, bitmask, rows)
    if timed and matchers:
        metrics.MASK_FILL_US.observe((time.perf_counter() - start) * 1e6 / len(matchers))


def _plain_rows(matchers: Sequence[Matcher], bitmask: torch.Tensor, indices: Sequence[int]
                ) -> tuple[list[xgr.GrammarMatcher], list[int]]:
    """Fill the rows no plain xgrammar matcher can (waiting for a JIT compile first); the others' matchers and rows."""
    plain: list[xgr.GrammarMatcher] = []
    rows: list[int] = []
    for m, index in zip(matchers, indices):
        inner = m._fast
        if inner is None:
            inner = m._plain_or_fill(bitmask, index)
        if inner is not None:
            plain.append(inner)
            rows.append(index)
    return plain, rows


def _batch_matcher() -> xgr.BatchGrammarMatcher:
    try:
        return _per_thread.batch
    except AttributeError:
        _per_thread.batch = xgr.BatchGrammarMatcher()
        return _per_thread.batch


def _bit(i: int) -> int:
    return (1 << i) if i < 31 else -(1 << 31)


def allocate_token_bitmask(rows: int, vocab_size: int) -> torch.Tensor:
    """A CPU int32 bitmask of rows x ceil(vocab/32), all tokens allowed."""
    return xgr.allocate_token_bitmask(rows, vocab_size)


def allowed_tokens(bitmask: torch.Tensor, index: int, vocab_size: int) -> list[int]:
    """Token ids whose bit is set in row index (tests, debugging)."""
    row = bitmask[index].numpy().view("uint32")
    import numpy as np

    bits = np.unpackbits(row.view(np.uint8), bitorder="little")[:vocab_size]
    return np.nonzero(bits)[0].tolist()


__all__ = ["Compiled", "Matcher", "fill_bitmasks", "MatcherLike", "TokenFilter", "FilterSpec", "allocate_token_bitmask", "allowed_tokens"]
