"""tagjit as a vLLM V1 structured-output backend: thin translation onto tagjit's core."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

import torch
from vllm.v1.structured_output.backend_types import (
    StructuredOutputBackend,
    StructuredOutputGrammar,
    StructuredOutputOptions,
)

from tagjit import engine
from tagjit.engine import allocate_token_bitmask
from tagjit.engine import JitPolicy
from tagjit.engine import SnapshotWriter
from tagjit.engine import Constraint, Kind

if TYPE_CHECKING:
    from vllm.v1.request import Request

log = logging.getLogger("tagjit")

KINDS: dict[StructuredOutputOptions, Kind] = {
    StructuredOutputOptions.JSON: Kind.JSON,
    StructuredOutputOptions.JSON_OBJECT: Kind.JSON_OBJECT,
    StructuredOutputOptions.REGEX: Kind.REGEX,
    StructuredOutputOptions.CHOICE: Kind.CHOICE,
    StructuredOutputOptions.GRAMMAR: Kind.GRAMMAR,
    StructuredOutputOptions.STRUCTURAL_TAG: Kind.STRUCTURAL_TAG,
}


def settings_for(vllm_config: Any) -> engine.Settings:
    """tagjit settings from the environment, with vLLM's disable_any_whitespace honoured."""
    so = getattr(vllm_config, "structured_outputs_config", None)
    return engine.get_settings().for_engine(compact_json=bool(getattr(so, "disable_any_whitespace", False)))


@dataclass
class TagjitGrammar(StructuredOutputGrammar):
    """A request's grammar as vLLM sees it; every call goes to the core ``engine.Matcher``."""

    grammar: engine.Matcher
    arrived: float = field(default_factory=time.perf_counter)
    prompt_tokens: int = 0
    policy: JitPolicy | None = None
    _first_fill: bool = field(default=True, repr=False)
    _provisional: bool = field(default=False, repr=False)

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        """Advance by tokens; False if the grammar rejects one."""
        if self.grammar.accept_tokens(tokens):
            return True
        log.error("tagjit: grammar rejected tokens %s for request %s", tokens, request_id)
        return False

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        """The accepted prefix of tokens, without advancing (none while ``provisional`` and still compiling)."""
        if self._provisional and not self.grammar.ready():
            return []
        return self.grammar.validate_tokens(tokens)

    @contextlib.contextmanager
    def provisional(self) -> Iterator[None]:
        """Within this block, ``validate_tokens`` rejects every token instead of waiting for a compile."""
        self._provisional = True
        try:
            yield
        finally:
            self._provisional = False

    def rollback(self, num_tokens: int) -> None:
        """Undo the last num_tokens tokens."""
        self.grammar.rollback(num_tokens)

    def fill_bitmask(self, bitmask: torch.Tensor, batch_index: int) -> None:
        """Fill row batch_index of vLLM's CPU int32 bitmask."""
        self.matcher_for_fill().fill_bitmask(bitmask, batch_index)

    def matcher_for_fill(self) -> engine.Matcher:
        """The core matcher about to fill this request's row (its first fill teaches the JIT policy)."""
        if self._first_fill:
            self._first_fill = False
            if self.policy is not None:
                self.policy.observe_first_mask(self.grammar, self.prompt_tokens, self.arrived)
        return self.grammar

    def is_terminated(self) -> bool:
        """Whether a stop token ended the constrained output."""
        return self.grammar.is_terminated()

    def reset(self) -> None:
        """Return to the initial state."""
        self.grammar.reset()


class LimitedFuture(Future):
    """A grammar future that fails with ``CompileLimitError`` once polled past its time limit.

    vLLM's scheduler polls ``done()`` of a waiting request's grammar on every step, so the limit is checked
    there: no timer thread per waiting request.
    """

    def __init__(self, limit_s: float) -> None:
        super().__init__()
        self.limit_s = limit_s
        self._deadline = time.monotonic() + limit_s

    def done(self) -> bool:
        """Whether the grammar (or its error) is there; past the limit, the limit error is."""
        if not super().done() and time.monotonic() >= self._deadline:
            self.settle(error=engine.CompileLimitError(
                f"grammar did not compile within {self.limit_s:g} s (TAGJIT_COMPILE_TIMEOUT_S)"))
        return super().done()

    def settle(self, result: Any = None, error: BaseException | None = None) -> None:
        """Set the result or error unless one is set already (the limit and the compile may race)."""
        try:
            if error is not None:
                self.set_exception(error)
            else:
                self.set_result(result)
        except InvalidStateError:
            pass


@dataclass
class TagjitBackend(StructuredOutputBackend):
    """Engine-level backend: one compile service per tokenizer, JIT decisions per request."""

    def __post_init__(self) -> None:
        self.settings = settings_for(self.vllm_config)
        info = engine.from_huggingface(self.tokenizer, vocab_size=self.vocab_size)
        self.service = engine.start_service(info, self.settings)
        self.policy = JitPolicy(self.settings)
        metrics_dir = os.environ.get("TAGJIT_METRICS_DIR")
        self._metrics = SnapshotWriter(metrics_dir) if metrics_dir and os.path.isdir(metrics_dir) else None
        if self._metrics is not None:
            self._metrics.write()  # the start-up's metrics are on /metrics from the moment the engine is ready
            self._metrics.start()

    def constraint(self, request_type: StructuredOutputOptions, grammar_spec: str) -> Constraint:
        """The core constraint for a vLLM request type and spec."""
        return Constraint.of(KINDS[request_type], grammar_spec)

    def compile_grammar(self, request_type: StructuredOutputOptions, grammar_spec: str,
                        stop_token_ids: set[int] | None = None) -> StructuredOutputGrammar:
        """Compile (or fetch) and return a ready grammar (vLLM's synchronous contract)."""
        grammar = self.service.grammar(self.constraint(request_type, grammar_spec),
                                       stop_token_ids=sorted(stop_token_ids) if stop_token_ids else None)
        return TagjitGrammar(grammar)

    def start(self, request: "Request", others_live: int | None = None
              ) -> "StructuredOutputGrammar | Future[StructuredOutputGrammar]":
        """Start compiling for a request: a JIT grammar now, or a future the scheduler waits on
        (``others_live``: requests the scheduler already holds, if known)."""
        struct = request.structured_output_request
        assert struct is not None
        request_type, spec = struct.structured_output_key
        c = self.constraint(request_type, spec)
        stops = sorted(request.sampling_params.all_stop_token_ids) if request.sampling_params else None
        prompt_tokens = request.num_prompt_tokens
        cached = self.service.cached(c) is not None
        if self.policy.overlap(cached=cached, estimate_ms=self.service.estimate_ms(c), prompt_tokens=prompt_tokens,
                               others_live=others_live):
            return TagjitGrammar(self.service.jit_grammar(c, stop_token_ids=stops),
                                 prompt_tokens=prompt_tokens, policy=self.policy)
        out = LimitedFuture(self.settings.compile_timeout_s)

        def done(f: Future) -> None:
            error = f.exception()
            if error is not None:
                out.settle(error=error)
            else:
                out.settle(TagjitGrammar(engine.Matcher(f.result(), stop_token_ids=stops,
                                                        vocab_size=self.service.vocab_size)))

        self.service.submit(c).add_done_callback(done)
        return out

    def allocate_token_bitmask(self, max_num_seqs: int) -> torch.Tensor:
        """CPU int32 bitmask [max_num_seqs, ceil(vocab/32)], all allowed."""
        return allocate_token_bitmask(max_num_seqs, self.vocab_size)

    def destroy(self) -> None:
        """Stop exporting metrics; the compile service itself is shared per tokenizer."""
        if self._metrics is not None:
            self._metrics.stop()
