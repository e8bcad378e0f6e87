"""The JIT policy: overlap a request's compile with its prefill, or hold it back."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from tagjit import metrics
from tagjit.runtime.matcher import Matcher
from tagjit.settings import Settings


@dataclass
class JitPolicy:
    """Decides per request whether compilation may overlap prefill.

    A request overlaps when its grammar is cached, when no other request is live in the engine
    (a wait at its first mask then delays nobody else, and waiting outside the batch would only
    add the compile to its own TTFT), or when the compile is expected to finish within its
    prefill plus ``stall_budget_ms`` (the most a running batch may wait at that request's first
    mask). Otherwise it waits outside the batch, as the engines do today. Prefill speed is
    learned from the requests that overlapped.
    """

    settings: Settings
    ms_per_prompt_token: float = 0.05
    _observed: int = field(default=0, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def overlap(self, *, cached: bool, estimate_ms: float, prompt_tokens: int,
                others_live: int | None = None) -> bool:
        """True if the request should enter prefill now with a JIT grammar (``others_live``: requests
        the engine already holds, None if the adapter cannot tell)."""
        mode = self.settings.jit
        if mode == "never":
            decision = cached
        elif mode == "always" or cached or others_live == 0:
            decision = True
        else:
            prefill_ms = prompt_tokens * self.ms_per_prompt_token
            decision = estimate_ms <= prefill_ms + self.settings.stall_budget_ms
        metrics.JIT_DECISIONS.labels("overlap" if decision else "wait").inc()
        return decision

    def observe_first_mask(self, matcher: Matcher, prompt_tokens: int, arrived: float) -> None:
        """Learn from a request's first mask (``arrived``: its ``time.perf_counter()`` at arrival) if its grammar was ready."""
        if matcher.ready():
            self.observe_prefill(prompt_tokens, (time.perf_counter() - arrived) * 1000)

    def observe_prefill(self, prompt_tokens: int, elapsed_ms: float) -> None:
        """Learn prefill speed from the time between a request's arrival and its first mask."""
        if prompt_tokens < 16 or elapsed_ms <= 0:
            return
        with self._lock:
            sample = elapsed_ms / prompt_tokens
            # The first sample replaces the prior outright: a guess off by 10x would take many requests to fade.
            self.ms_per_prompt_token = sample if not self._observed else 0.8 * self.ms_per_prompt_token + 0.2 * sample
            self._observed += 1
