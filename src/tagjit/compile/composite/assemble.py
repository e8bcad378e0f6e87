"""Composite assembly: a tool-call structural tag built from units compiled once per tag content and cached.

Not imported by the package itself: it compiles with a service's compiler and settings, which the composite
parts (plan, vocabulary index, matcher) know nothing of.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import xgrammar as xgr

from tagjit import metrics
from tagjit.build.grammars import build_grammar, legacy_to_format
from tagjit.compile.cache import LRUCache
from tagjit.compile.composite.matcher import CompositeGrammar, Unit, make_unit
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
        self.compiler = compiler
        self.tokenizer_info = tokenizer_info
        self.settings = settings
        self._salt = salt
        self._pool = pool
        self._background = background  # whole-tag compiles for the switch (settings.composite_swap)
        self.units: LRUCache[Unit] = LRUCache(settings.cache_bytes, lambda u: u.nbytes)

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
        try:
            units = self._units(p.units)
        except ConstraintError:
            metrics.ERRORS.labels(constraint.kind.value).inc()
            raise
        try:
            cg = CompositeGrammar(p, units, vocab_index(self.tokenizer_info),
                                  full=lambda: self.compiler.compile_grammar(
                                      build_grammar(constraint, self.settings).grammar))
        except Ambiguous:  # the first byte cannot tell a bare answer from a call (llama3_json): the whole tag
            return None
        ms = (time.perf_counter() - start) * 1000
        metrics.COMPILE_MS.labels(constraint.kind.value).observe(ms)
        if self._background is not None:
            cg.swap_later(self._background, self.settings.composite_swap_after_tokens)
            cg.nbytes += sum(u.nbytes for u in units)  # the whole tag's grammar holds about what its units hold
        return Compiled(None, key, ms, composite=cg)

    def _units(self, contents: Sequence[str]) -> list[Unit]:
        """The units of a plan: cache hits at once, the rest compiled side by side."""
        found = [self._unit(c, cached_only=True) for c in contents]
        missing = [i for i, u in enumerate(found) if u is None]
        if len(missing) > 1:
            for i, unit in zip(missing, self._pool.map(self._unit, [contents[i] for i in missing])):
                found[i] = unit
        elif missing:
            found[missing[0]] = self._unit(contents[missing[0]])
        return found  # type: ignore[return-value]

    def _unit(self, content: str, cached_only: bool = False) -> Unit | None:
        """One tag content (JSON text) compiled on its own, from the unit cache if any combination compiled it."""
        c = Constraint(Kind.STRUCTURAL_TAG, '{"type":"structural_tag","format":' + content + "}")
        key = c.key(self._salt + "|unit")
        hit = self.units.get(key)
        if hit is not None or cached_only:
            return hit
        grammar, _ = build_grammar(c, self.settings)
        unit = make_unit(self.compiler.compile_grammar(grammar), key, vocab_index(self.tokenizer_info))
        self.units.put(key, unit)
        return unit
