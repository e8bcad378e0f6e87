"""The JIT policy: overlap a request's compile with its prefill, or hold it back."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from . import metrics
from .settings import Settings


@dataclass
class JitPolicy:
    """Decides per request whether compilation may overlap prefill.

    A request overlaps when its grammar is cached, or when the compile is expected to finish
    within its prefill plus ``stall_budget_ms`` (the most a running batch may wait at that
    request's first mask). Otherwise it waits outside the batch, as the engines do today.
    Prefill speed is learned from the requests that overlapped.
    """

    settings: Settings
    ms_per_prompt_token: float = 0.05
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def overlap(self, *, cached: bool, estimate_ms: float, prompt_tokens: int) -> bool:
        """True if the request should enter prefill now with a JIT grammar."""
        mode = self.settings.jit
        if mode == "never":
            decision = cached
        elif mode == "always" or cached:
            decision = True
        else:
            prefill_ms = prompt_tokens * self.ms_per_prompt_token
            decision = estimate_ms <= prefill_ms + self.settings.stall_budget_ms
        metrics.JIT_DECISIONS.labels("overlap" if decision else "wait").inc()
        return decision

    def observe_prefill(self, prompt_tokens: int, elapsed_ms: float) -> None:
        """Learn prefill speed from the time between a request's arrival and its first mask."""
        if prompt_tokens < 16 or elapsed_ms <= 0:
            return
        with self._lock:
            self.ms_per_prompt_token = 0.8 * self.ms_per_prompt_token + 0.2 * (elapsed_ms / prompt_tokens)
