"""Composite assembly: a tool-call structural tag built from units compiled once per tag content and cached.

Not imported by the package itself: it compiles with a service's compiler and settings, which the composite
parts (plan, vocabulary index, matcher) know nothing of.
"""

from __future__ import annotations

import functools
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import xgrammar as xgr

from tagjit import metrics
from tagjit.build.grammars import build_grammar, legacy_to_format
from tagjit.compile.cache import LRUCache
from tagjit.compile.composite.matcher import CompositeGrammar, PendingUnit, Unit, make_unit
from tagjit.compile.composite.plan import Ambiguous, plan
from tagjit.compile.composite.vocab import vocab_index
from tagjit.constraint import Constraint, Kind
from tagjit.errors import ConstraintError
from tagjit.runtime.matcher import Compiled
from tagjit.settings import Settings


class CompositeAssembler:
    """Compiles tool-call-shaped structural tags in parts: one unit per tag content, reused across combinations."""

    def __init__(self, compiler: xgr.GrammarCompiler, tokenizer_info: xgr.TokenizerInfo, settings: Settings,
                 salt: str, pool: ThreadPoolExecutor, background: ThreadPoolExecutor | None = None) -> None:
        self.compiler = compiler  # whole tags (the switch, ambiguous plans)
        # Units compile side by side on ``pool``, so each compile runs on one thread: a pool of n workers each
        # asking xgrammar for n threads puts n*n threads on n cores (200 BFCL units: 282-296 ms against 301-335).
        self.unit_compiler = xgr.GrammarCompiler(tokenizer_info, max_threads=1, cache_enabled=True,
                                                 cache_limit_bytes=settings.cache_bytes)
        self.tokenizer_info = tokenizer_info
        self.settings = settings
        self._salt = salt
        self._pool = pool
        self._background = background  # whole-tag compiles for the switch (settings.composite_swap)
        self.units: LRUCache[Unit] = LRUCache(settings.cache_bytes, lambda u: u.nbytes)
        self._pending: dict[str, PendingUnit] = {}  # unit key -> its compile, until it is in ``units``
        self._lock = threading.Lock()

    def assemble(self, constraint: Constraint, key: str, start: float) -> Compiled | None:
        """The composite of a tool-call-shaped tag whose compile began at ``start``, or None for another shape."""
        tag = constraint.parsed()
        if not isinstance(tag, dict):
            return None
        if "structures" in tag:
            tag = legacy_to_format(tag)
        if tag.get("format") is None:
            return None
        p = plan(tag["format"])
        if p is None:
            return None
        units, queued = self._units(p.units)
        try:
            cg = CompositeGrammar(p, units, vocab_index(self.tokenizer_info),
                                  full=lambda: self.compiler.compile_grammar(
                                      build_grammar(constraint, self.settings).grammar))
        except Ambiguous:  # the first byte cannot tell a bare answer from a call (llama3_json): the whole tag
            return None
        finally:
            # Queued only now: their compiles would hold the interpreter while this request's first mask is built.
            for unit in queued:
                self._pool.submit(unit.run)
        ms = (time.perf_counter() - start) * 1000
        metrics.COMPILE_MS.labels(constraint.kind.value).observe(ms)
        if self._background is not None:
            cg.swap_later(self._background, self.settings.composite_swap_after_tokens)
            cg.nbytes += cg.nbytes  # the whole tag's grammar holds about what its units hold
        return Compiled(None, key, ms, composite=cg)

    def _units(self, contents: Sequence[str]) -> tuple[list[Unit | PendingUnit], list[PendingUnit]]:
        """The units of a plan (cache hits at once, the rest pending) and the new pending ones, which the caller
        queues on the pool in plan order (the first mask or token that reaches one compiles it at once). A content
        two combinations need at the same time is compiled once."""
        out: list[Unit | PendingUnit] = []
        queued: list[PendingUnit] = []
        with self._lock:
            for content in contents:
                key = self._unit_key(content)
                hit = self.units.get(key) or self._pending.get(key)
                if hit is None:
                    hit = self._pending[key] = PendingUnit(functools.partial(self._compile_unit, content, key),
                                                           self.settings.compile_timeout_s)
                    metrics.PARTS.labels("queued").inc()
                    queued.append(hit)
                out.append(hit)
        return out, queued

    def _unit_key(self, content: str) -> str:
        return self._constraint(content).key(self._salt + "|unit")

    @staticmethod
    def _constraint(content: str) -> Constraint:
        # The plan's contents are canonical JSON already: keying them costs no parse and dump.
        return Constraint.of_canonical(Kind.STRUCTURAL_TAG, '{"type":"structural_tag","format":' + content + "}")

    def _compile_unit(self, content: str, key: str) -> Unit:
        """One tag content (JSON text) compiled on its own, then cached for every combination that uses it."""
        try:
            grammar, _ = build_grammar(self._constraint(content), self.settings)
            unit = make_unit(self.unit_compiler.compile_grammar(grammar), key, vocab_index(self.tokenizer_info))
        except ConstraintError:
            metrics.ERRORS.labels(Kind.STRUCTURAL_TAG.value).inc()
            raise
        finally:
            with self._lock:
                self._pending.pop(key, None)
            metrics.PARTS.labels("finished").inc()
        self.units.put(key, unit)
        return unit
