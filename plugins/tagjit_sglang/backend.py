"""tagjit as an SGLang grammar backend: SGLang's grammar objects over the core ``engine.Matcher``.

Timing. SGLang parks a request whose grammar is not cached in its grammar queue until the
grammar is ready, so the compile adds to time-to-first-token. This backend answers
``get_cached_or_future_value`` itself: a compiled constraint in tagjit's cache is a hit (no
queue); otherwise ``JitPolicy`` decides. Overlap: the queued future resolves as soon as the
constraint is validated (vocabulary-independent, milliseconds) with a JIT grammar whose first
mask waits for the compile, so the request's prefill runs while it compiles and a bad constraint
still takes SGLang's invalid-grammar path. Wait: the future resolves with the compiled grammar,
as SGLang's own backends do (short prompts, whose prefill cannot hide a compile).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from concurrent.futures import Future
from typing import Any, List, Optional, Sequence, Tuple

import torch
import xgrammar as xgr
from sglang.srt.constrained.base_grammar_backend import (
    BaseGrammarBackend,
    BaseGrammarObject,
    GrammarStats,
    InvalidGrammarObject,
    _grammar_key_contains_nul,
)

from tagjit import engine
from tagjit.engine import Constraint, ConstraintError, Kind, Settings
from tagjit.engine import JitPolicy

from tagjit.engine import apply_token_bitmask_inplace as _apply_bitmask

log = logging.getLogger("tagjit.sglang")

# SGLang's key types -> tagjit kinds ("$$ANY$$" is SGLang's json_object).
_KINDS = {"json": Kind.JSON, "regex": Kind.REGEX, "ebnf": Kind.GRAMMAR,
          "full_assistant_ebnf": Kind.GRAMMAR, "structural_tag": Kind.STRUCTURAL_TAG}
ANY_JSON = "$$ANY$$"


class RequestKey(tuple):
    """SGLang's ``(key_type, key_string)`` that also carries the prompt length for the JIT policy.

    Equal to and hashed like the plain tuple, so SGLang's own cache and logs see the same key.
    """

    prompt_tokens: int = 0

    def __new__(cls, key: Tuple[str, str], prompt_tokens: int) -> "RequestKey":
        self = super().__new__(cls, key)
        self.prompt_tokens = prompt_tokens
        return self


def _pin() -> bool:
    from sglang.srt.utils.common import is_pin_memory_available

    return is_pin_memory_available()


def allocate_bitmask(vocab_size: int, batch_size: int) -> torch.Tensor:
    """xgrammar's packed int32 bitmask, all tokens allowed, pinned where pinning exists."""
    return torch.full(xgr.get_bitmask_shape(batch_size, vocab_size), -1, dtype=xgr.bitmask_dtype,
                      pin_memory=_pin())


class TagjitGrammar(BaseGrammarObject):
    """One request's grammar as SGLang's scheduler sees it; the state lives in ``engine.Matcher``."""

    def __init__(self, source: "engine.Compiled | Future[engine.Compiled]", backend: "TagjitGrammarBackend",
                 reasoning: bool, key: Tuple[str, str], *, prompt_tokens: int = 0, jit: bool = False,
                 cache_hit: bool = False) -> None:
        super().__init__()
        self._source = source
        self._backend = backend
        self.key = (key[0], key[1])
        self.reasoning = reasoning
        self.prompt_tokens = prompt_tokens
        self.jit = jit
        self._arrived = time.perf_counter()
        self._first_fill = True
        self.grammar = engine.Matcher(
            source, vocab_size=backend.vocab_size, wait_timeout_s=backend.settings.compile_timeout_s,
            reasoning_end_ids=backend.think_end_ids if reasoning else None)
        self.grammar_stats = GrammarStats(dispatch_type=key[0], is_cache_hit=cache_hit)

    def maybe_init_reasoning(self, reasoning: bool) -> None:
        """Gate on the think-end tokens only for requests that reason (SGLang's per-request flag)."""
        if reasoning != self.reasoning:
            self.reasoning = reasoning
            self.grammar = engine.Matcher(
                self._source, vocab_size=self._backend.vocab_size,
                wait_timeout_s=self._backend.settings.compile_timeout_s,
                reasoning_end_ids=self._backend.think_end_ids if reasoning else None)

    def accept_token(self, token: int) -> None:
        """Advance by one token; raise ValueError (SGLang aborts the request) if it is rejected."""
        if self.grammar.is_terminated():
            return
        self.current_token = token
        if not self.grammar.accept_token(token):
            error = self.grammar.error
            reason = f"grammar unavailable: {error}" if error is not None else "not allowed by the grammar"
            raise ValueError(f"tagjit: token {token} rejected ({reason}); {self.key[0]} constraint")

    def rollback(self, k: int) -> None:
        """Undo the last k accepted tokens."""
        self.grammar.rollback(k)

    def is_terminated(self) -> bool:
        """Whether a stop token ended the constrained output."""
        return self.grammar.is_terminated()

    def allocate_vocab_mask(self, vocab_size: int, batch_size: int, device: Any) -> torch.Tensor:
        """A CPU bitmask for the batch (xgrammar layout, all allowed)."""
        return allocate_bitmask(vocab_size, batch_size)

    def fill_vocab_mask(self, vocab_mask: torch.Tensor, idx: int) -> None:
        """Write this request's allowed tokens into row idx (waits for a JIT compile)."""
        self.matcher_for_fill().fill_bitmask(vocab_mask, idx)

    @staticmethod
    def fill_vocab_mask_batched(entries: List[Any], vocab_mask: torch.Tensor) -> None:
        """Fill every listed row in one call (SGLang's mask step): xgrammar's batch matcher for plain grammars."""
        matchers, rows = [], []
        for e in entries:
            if isinstance(e.grammar, TagjitGrammar):
                matchers.append(e.grammar.matcher_for_fill())
                rows.append(e.row)
            else:
                e.grammar.fill_vocab_mask(vocab_mask, e.row)
        engine.fill_bitmasks(matchers, vocab_mask, rows)

    def matcher_for_fill(self) -> engine.Matcher:
        """The core matcher about to fill this request's row (its first fill teaches the JIT policy)."""
        if self._first_fill:
            self._first_fill = False
            if self.jit:
                self._backend.policy.observe_first_mask(self.grammar, self.prompt_tokens, self._arrived)
        return self.grammar

    @staticmethod
    def reset_vocab_mask(vocab_mask: torch.Tensor) -> None:
        """Make every token allowed again."""
        vocab_mask.fill_(-1)

    @staticmethod
    def move_vocab_mask(vocab_mask: torch.Tensor, device: Any) -> torch.Tensor:
        """Copy the mask to the logits' device."""
        return vocab_mask.to(device, non_blocking=True)

    @staticmethod
    def apply_vocab_mask(logits: torch.Tensor, vocab_mask: torch.Tensor) -> None:
        """Set disallowed logits to -inf in place (tagjit's kernels)."""
        _apply_bitmask(logits, vocab_mask)

    def copy(self) -> "TagjitGrammar":
        """A fresh, un-advanced grammar over the same compiled constraint."""
        return TagjitGrammar(self._source, self._backend, self.reasoning, self.key,
                             prompt_tokens=self.prompt_tokens, cache_hit=True)

    def try_jump_forward(self, tokenizer: Any) -> None:
        """No jump-forward (SGLang 0.5.23's scheduler does not call it)."""
        return None

    def __repr__(self) -> str:
        return f"TagjitGrammar(kind={self.key[0]!r}, jit={self.jit}, tokens={self.grammar.num_processed_tokens})"


class TagjitGrammarBackend(BaseGrammarBackend):
    """SGLang backend: one tagjit compile service per tokenizer, a JIT decision per request."""

    def __init__(self, tokenizer_info: xgr.TokenizerInfo, vocab_size: int, settings: Settings,
                 think_end_ids: Optional[Sequence[int]] = None) -> None:
        super().__init__()
        self.settings = settings
        self.vocab_size = vocab_size
        self.service = engine.start_service(tokenizer_info, settings)
        self.policy = JitPolicy(settings)
        self.think_end_ids = list(think_end_ids) if think_end_ids else None
        self.prepared_ms: dict[str, float] = dict(self.service.prepared or {})  # start-up work, ms per step

    @classmethod
    def from_server_args(cls, server_args: Any, tokenizer: Any, vocab_size: int,
                         eos_token_ids: Any = None) -> "TagjitGrammarBackend":
        """Build the backend as SGLang's registry calls it."""
        if hasattr(tokenizer, "init_xgrammar"):  # SGLang's special tokenizers, as its xgrammar backend
            info, _ = tokenizer.init_xgrammar()
            if info is None:
                raise ValueError(f"tagjit: tokenizer {type(tokenizer).__name__} is not supported by xgrammar")
        else:
            stops = sorted(eos_token_ids) if eos_token_ids else None
            info = engine.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=stops)
        backend = cls(info, vocab_size, settings_for(server_args), think_end_ids_for(server_args, tokenizer))
        backend.prepare_kernels(_serving(server_args, "device", None) or "cpu")
        return backend

    def prepare_kernels(self, device: str) -> None:
        """Compile the bitmask kernel for the scheduler's device now: SGLang builds this backend before the
        scheduler takes requests (a failure is logged; the first mask step then compiles it)."""
        try:
            ms = engine.prepare_kernels(device, self.vocab_size, (torch.float32, torch.bfloat16))
        except Exception:
            log.exception("tagjit: could not compile the bitmask kernel at start-up")
            return
        self.prepared_ms = {**(self.service.prepared or {}), "kernel": ms}
        engine.metrics.WARMUP_MS.labels("kernel").observe(ms)

    # -- SGLang's grammar-manager protocol -------------------------------------------------------
    def get_request_grammar_key(self, key: Tuple[str, str], *, input_ids: Sequence[int],
                                thinking_budget: Optional[int]) -> Tuple[str, str]:
        """The key unchanged, carrying the prompt length to ``get_cached_or_future_value``."""
        return RequestKey(key, len(input_ids) if input_ids is not None else 0)

    def get_cached_or_future_value(self, key: Tuple[str, str], require_reasoning: bool
                                   ) -> Tuple["BaseGrammarObject | Future[BaseGrammarObject]", bool]:
        """A ready grammar (hit: no grammar queue) or a future SGLang's grammar queue polls."""
        prompt_tokens = getattr(key, "prompt_tokens", 0)
        c = self.constraint(key)
        if isinstance(c, InvalidGrammarObject):
            return c, True  # SGLang aborts the request with the reason at once
        compiled = self.service.cached(c)
        if compiled is not None:
            return TagjitGrammar(compiled, self, require_reasoning, key, cache_hit=True), True
        if self.policy.overlap(cached=False, estimate_ms=self.service.estimate_ms(c), prompt_tokens=prompt_tokens):
            return self.executor.submit(self._jit, c, key, require_reasoning, prompt_tokens), False
        return self.executor.submit(self._compiled, c, key, require_reasoning), False

    def set_cache(self, key: Tuple[str, str], value: BaseGrammarObject) -> None:
        """Nothing: tagjit's compile service caches compiled grammars (bounded, by content)."""

    def reset(self) -> None:
        """SGLang's flush_cache: forget SGLang-side entries (tagjit's caches stay bounded)."""
        super().reset()

    # -- SGLang's dispatch protocol (used by wrappers that call _init_value_dispatch) -------------
    def dispatch_json(self, key_string: str) -> BaseGrammarObject:
        """Compile a JSON schema ("$$ANY$$": any JSON object)."""
        return self._dispatch(("json", key_string))

    def dispatch_regex(self, key_string: str) -> BaseGrammarObject:
        """Compile a regex."""
        return self._dispatch(("regex", key_string))

    def dispatch_ebnf(self, key_string: str) -> BaseGrammarObject:
        """Compile an EBNF (or Lark) grammar."""
        return self._dispatch(("ebnf", key_string))

    def dispatch_structural_tag(self, key_string: str) -> BaseGrammarObject:
        """Compile a structural tag (``format`` or legacy ``structures``/``triggers``)."""
        return self._dispatch(("structural_tag", key_string))

    def allocate_vocab_mask(self, vocab_size: int, batch_size: int, device: Any) -> torch.Tensor:
        """A CPU bitmask for the batch (xgrammar layout, all allowed)."""
        return allocate_bitmask(vocab_size, batch_size)

    move_vocab_mask = staticmethod(TagjitGrammar.move_vocab_mask)
    apply_vocab_mask = staticmethod(TagjitGrammar.apply_vocab_mask)
    reset_vocab_mask = staticmethod(TagjitGrammar.reset_vocab_mask)

    # -- internals ---------------------------------------------------------------------------
    def constraint(self, key: Tuple[str, str]) -> "Constraint | InvalidGrammarObject":
        """The core constraint for SGLang's key, or SGLang's invalid-grammar object."""
        key_type, key_string = key[0], key[1]
        kind = _KINDS.get(key_type)
        if kind is None:
            return InvalidGrammarObject(f"tagjit: unsupported grammar type {key_type!r}")
        if _grammar_key_contains_nul(key_type, key_string):  # xgrammar 0.2.7 crashes on NUL
            return InvalidGrammarObject(f"Invalid {key_type}: NUL bytes (\\u0000) are not allowed")
        if kind is Kind.JSON and key_string == ANY_JSON:
            return Constraint.of(Kind.JSON_OBJECT, "")
        return Constraint.of(kind, key_string)

    def _jit(self, c: Constraint, key: Tuple[str, str], reasoning: bool, prompt_tokens: int) -> BaseGrammarObject:
        try:
            self.service.validate(c)
        except ConstraintError as e:
            return _invalid(key, e)
        return TagjitGrammar(self.service.submit(c), self, reasoning, key, prompt_tokens=prompt_tokens, jit=True)

    def _compiled(self, c: Constraint, key: Tuple[str, str], reasoning: bool) -> BaseGrammarObject:
        start = time.perf_counter()
        try:
            self.service.validate(c)
            compiled = self.service.compile(c)
        except ConstraintError as e:
            return _invalid(key, e)
        grammar = TagjitGrammar(compiled, self, reasoning, key)
        grammar.grammar_stats = dataclasses.replace(grammar.grammar_stats,
                                                    compilation_time=time.perf_counter() - start)
        return grammar

    def _dispatch(self, key: Tuple[str, str]) -> BaseGrammarObject:
        c = self.constraint(key)
        return c if isinstance(c, InvalidGrammarObject) else self._compiled(c, key, False)


def _invalid(key: Tuple[str, str], error: Exception) -> InvalidGrammarObject:
    log.warning("tagjit: invalid %s constraint: %s", key[0], error)
    return InvalidGrammarObject(str(error))


def _serving(server_args: Any, name: str, default: Any = None) -> Any:
    """A serving option as resolved in this process (SGLang's runtime context), else the raw field."""
    try:
        from sglang.srt.runtime_context import get_serving

        return getattr(get_serving(), name)
    except Exception:  # context not published (offline construction)
        return getattr(server_args, name, default)


def settings_for(server_args: Any) -> Settings:
    """tagjit settings from the environment, with SGLang's JSON whitespace options honoured."""
    return engine.get_settings().for_engine(
        compact_json=bool(_serving(server_args, "constrained_json_disable_any_whitespace", False)),
        max_whitespace=_serving(server_args, "constrained_json_max_whitespace_cnt", None))


def think_end_ids_for(server_args: Any, tokenizer: Any) -> Optional[List[int]]:
    """The reasoning parser's think-end token ids, found as SGLang's ReasonerGrammarBackend does."""
    name = _serving(server_args, "reasoning_parser", None)
    if not name or tokenizer is None:
        return None
    from sglang.srt.parser.reasoning_parser import ReasoningParser

    detector = ReasoningParser(model_type=name, stream_reasoning=False, tokenizer=tokenizer).detector
    ids = detector.get_think_end_token_ids(tokenizer)
    if not ids:
        raise ValueError(f"tagjit: think_end_token {detector.think_end_token!r} could not be encoded by the tokenizer")
    if detector.get_answer_frame() is not None:
        log.warning("tagjit: reasoning parser %r frames answers; tagjit gates on %r only", name,
                    detector.think_end_token)
    return list(ids)

