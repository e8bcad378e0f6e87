"""Prometheus metrics: compile time, cache hits per layer, JIT waits, mask-fill time, lint findings."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

_MS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)
_US_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000)

COMPILE_MS = Histogram("tagjit_compile_milliseconds", "Grammar compile time (cache misses)", ["kind"],
                       buckets=_MS_BUCKETS)
CACHE = Counter("tagjit_cache_lookups", "Grammar cache lookups by layer and result", ["layer", "result"])
JIT_DECISIONS = Counter("tagjit_jit_decisions", "JIT policy decisions", ["decision"])
JIT_WAIT_MS = Histogram("tagjit_jit_wait_milliseconds", "Time the first token mask waited for its grammar",
                        buckets=_MS_BUCKETS)
MASK_FILL_US = Histogram("tagjit_mask_fill_microseconds", "Token mask fill time per row", buckets=_US_BUCKETS)
ERRORS = Counter("tagjit_constraint_errors", "Constraints refused", ["kind"])
LINT = Counter("tagjit_lint_findings", "Schema lint findings", ["rule"])
