"""The engine core: the scheduler's live requests, ``grammar_init``, 0.33's backend latch and reasoning probe."""

from __future__ import annotations

import functools
import logging
from typing import Any

from .state import NAME, replace_attr

log = logging.getLogger("tagjit")


LIVE_ATTR = "_tagjit_live_requests"


def patch_scheduler_requests() -> None:
    """Give the structured-output manager a view of the scheduler's live requests, so the JIT policy
    knows whether a wait at a first mask would stall anyone else."""
    from vllm.v1.core.sched.scheduler import Scheduler

    original = Scheduler.__init__
    if getattr(original, "_tagjit", False):
        return

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        manager = getattr(self, "structured_output_manager", None)
        if manager is not None and isinstance(getattr(self, "requests", None), dict):
            setattr(manager, LIVE_ATTR, self.requests)  # the scheduler's own dict: always current

    __init__._tagjit = True  # type: ignore[attr-defined]
    replace_attr(Scheduler, "__init__", __init__)


def patch_grammar_init() -> None:
    """Create tagjit's backend in the engine core and start compiles under the JIT policy."""
    from vllm.v1.structured_output import StructuredOutputManager

    original = StructuredOutputManager.grammar_init
    if getattr(original, "_tagjit", False):
        return

    @functools.wraps(original)
    def grammar_init(self: StructuredOutputManager, request: Any) -> None:
        struct = request.structured_output_request
        if struct is None or request.sampling_params is None \
                or request.sampling_params.structured_outputs._backend != NAME:
            return original(self, request)
        from concurrent.futures import Future

        if self.backend is None:  # an engine whose start-up did not build it (see patch_manager_latch)
            create_backend(self)
        if hasattr(self, "backend_name"):  # vLLM 0.33: the engine's one backend
            self.backend_name = NAME
        live = getattr(self, LIVE_ATTR, None)
        try:
            struct.grammar = self.backend.start(request, others_live=len(live) if live is not None else None)
        except Exception as e:  # reaches the scheduler as this request's compile error
            log.error("tagjit: request %s: %s", request.request_id, e)
            failed: Future = Future()
            failed.set_exception(e)
            struct.grammar = failed

    grammar_init._tagjit = True  # type: ignore[attr-defined]
    replace_attr(StructuredOutputManager, "grammar_init", grammar_init)


def create_backend(manager: Any) -> None:
    """Make tagjit the manager's backend: its compile service prepared, every step's masks filled in one batch."""
    from ..backend import TagjitBackend

    manager.backend = TagjitBackend(manager.vllm_config, tokenizer=manager.tokenizer,
                                    vocab_size=manager.vllm_config.model_config.get_vocab_size())
    # Every step's masks in one batch (see patch_batch_fill): vLLM's batched branch, at any batch size.
    manager.fill_bitmask_parallel_threshold = 0
    manager.fill_bitmask_parallel_batch_size = 1 << 30
    if not hasattr(manager, "executor_for_fillmask"):  # clear_backend shuts it down below the threshold
        from concurrent.futures import ThreadPoolExecutor

        manager.executor_for_fillmask = ThreadPoolExecutor(max_workers=1)
    if hasattr(manager, "backend_name"):  # vLLM 0.33: the engine's one backend
        manager.backend_name = NAME


def patch_manager_latch() -> None:
    """An engine configured for tagjit builds tagjit's backend while it starts (the engine core makes its manager
    before it reports ready), so the first request pays nothing once per process; vLLM's own backends are built
    by the first request that needs one. On vLLM 0.33 this also latches ``backend_name`` to tagjit, so a request
    resolved to another backend gets vLLM's own "one backend per engine" error."""
    from vllm.v1.structured_output import StructuredOutputManager

    original = StructuredOutputManager.__init__
    if getattr(original, "_tagjit", False):
        return

    @functools.wraps(original)
    def __init__(self: Any, vllm_config: Any, *args: Any, **kwargs: Any) -> None:
        original(self, vllm_config, *args, **kwargs)
        so_config = getattr(vllm_config, "structured_outputs_config", None)
        if getattr(so_config, "backend", None) != NAME:
            return
        if hasattr(self, "backend_name"):
            self.backend_name = NAME
        if getattr(self, "tokenizer", None) is None:  # skip_tokenizer_init: no structured outputs at all
            return
        try:
            create_backend(self)
        except Exception:  # the first request builds it again and reports what fails as its own error
            log.exception("tagjit: could not build the backend at start-up")
            self.backend = None

    __init__._tagjit = True  # type: ignore[attr-defined]
    replace_attr(StructuredOutputManager, "__init__", __init__)


def patch_masked_reasoning_ends() -> None:
    """vLLM 0.33 asks a reasoning request's grammar, inside the scheduler's bitmask step, which implicit
    reasoning-end tokens it cannot start with, and caches the answer. A tagjit grammar still compiling (JIT)
    must not stall that step: until it is compiled, every implicit end token is masked (so none that the
    grammar may reject gets through) and nothing is cached; the first step after the compile asks again
    and caches the exact answer."""
    from vllm.v1.structured_output import StructuredOutputManager

    original = getattr(StructuredOutputManager, "_masked_reasoning_ends", None)
    if original is None or getattr(original, "_tagjit", False):
        return  # vLLM 0.32 has no such probe

    @functools.wraps(original)
    def _masked_reasoning_ends(self: Any, request: Any) -> tuple[int, ...]:
        struct = request.structured_output_request
        if struct is None or struct.masked_reasoning_end_ids is not None:  # every step after the first: cached
            return original(self, request)
        from tagjit.engine import metrics

        from ..backend import TagjitGrammar

        grammar = struct.grammar
        if not isinstance(grammar, TagjitGrammar):
            return original(self, request)
        if grammar.grammar.ready():
            metrics.REASONING_PROBES.labels("exact").inc()
            return original(self, request)
        with grammar.provisional():
            masked = original(self, request)
        struct.masked_reasoning_end_ids = None  # ask again once the grammar is compiled
        metrics.REASONING_PROBES.labels("provisional").inc()
        return masked

    _masked_reasoning_ends._tagjit = True  # type: ignore[attr-defined]
    replace_attr(StructuredOutputManager, "_masked_reasoning_ends", _masked_reasoning_ends)


def patch_batch_fill() -> None:
    """Fill a step's tagjit masks in one call (``tagjit.engine.fill_bitmasks``: xgrammar's batch matcher) instead of
    one call per request; rows of other grammars, and rows vLLM does not constrain, keep vLLM's own fill."""
    from vllm.v1.structured_output import StructuredOutputManager

    original_fill = StructuredOutputManager._fill_bitmasks
    if getattr(original_fill, "_tagjit", False):
        return
    original_submit = StructuredOutputManager._async_submit_fill_bitmask

    @functools.wraps(original_fill)
    def _fill_bitmasks(self: StructuredOutputManager, batch: Any) -> None:
        from tagjit.engine import fill_bitmasks

        from ..backend import TagjitGrammar

        matchers, rows, rest = [], [], []
        for item in batch:  # (grammar, index, apply) on 0.32; 0.33 adds the reasoning rows' masked ids
            grammar = item[0]
            if item[2] and isinstance(grammar, TagjitGrammar) and not grammar.is_terminated():
                matchers.append(grammar.matcher_for_fill())
                rows.append(item[1])
            else:
                rest.append(item)
        if rest:
            original_fill(self, rest)
        if matchers:
            fill_bitmasks(matchers, self._grammar_bitmask, rows)

    @functools.wraps(original_submit)
    def _async_submit_fill_bitmask(self: StructuredOutputManager, batch: Any) -> Any:
        from concurrent.futures import Future

        from ..backend import TagjitBackend

        if not isinstance(self.backend, TagjitBackend):
            return original_submit(self, batch)
        done: Future = Future()  # one batch per step, filled here: xgrammar's batch matcher has its own threads
        self._fill_bitmasks(batch)
        done.set_result(None)
        return done

    _fill_bitmasks._tagjit = True  # type: ignore[attr-defined]
    replace_attr(StructuredOutputManager, "_fill_bitmasks", _fill_bitmasks)
    replace_attr(StructuredOutputManager, "_async_submit_fill_bitmask", _async_submit_fill_bitmask)
