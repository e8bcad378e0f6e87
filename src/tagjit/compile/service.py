"""The compile service: one per tokenizer, shared by every request, with caches and a JIT pool."""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from concurrent.futures import Future
from typing import Callable, Sequence

import xgrammar as xgr

from tagjit import anyorder as any_order
from tagjit import metrics
from tagjit.build.grammars import build_grammar
from tagjit.compile.cache import FORMAT_VERSION, XGRAMMAR_VERSION, DiskCache, LRUCache, grammar_salt
from tagjit.compile.composite import vocab_index
from tagjit.compile.composite.assemble import CompositeAssembler
from tagjit.compile.pools import SingleFlight, compile_pool, parse_cpus
from tagjit.compile.validation import lint_constraint, trust, validate
from tagjit.compile.warmup import PREPARE_FORMAT, PREPARE_SCHEMA, PREPARE_TOOL, load_warmup, warm_up
from tagjit.constraint import Constraint, Kind
from tagjit.errors import CompileLimitError, ConstraintError
from tagjit.runtime.matcher import Compiled, Matcher
from tagjit.runtime.vocab import fingerprint
from tagjit.settings import Settings, get_settings

__all__ = ["CompileService", "service_for", "start_service", "validate", "trust", "lint_constraint", "grammar_salt",
           "parse_cpus", "FORMAT_VERSION", "XGRAMMAR_VERSION"]
log = logging.getLogger("tagjit")


class CompileService:
    """Compiles constraints for one tokenizer: validation, caches, a compile pool, JIT grammars."""

    def __init__(self, tokenizer_info: xgr.TokenizerInfo, settings: Settings | None = None,
                 tokenizer_fingerprint: str | None = None) -> None:
        self.settings = settings or get_settings()
        self.tokenizer_info = tokenizer_info
        self.vocab_size = tokenizer_info.vocab_size
        self.fingerprint = tokenizer_fingerprint or fingerprint(tokenizer_info)
        s = self.settings
        threads = s.xgrammar_threads or max(1, min(8, os.cpu_count() or 1))
        self.compiler = xgr.GrammarCompiler(tokenizer_info, max_threads=threads, cache_enabled=True,
                                            cache_limit_bytes=s.cache_bytes)
        # Settings that change the grammar are part of every key; key order is never touched.
        self._salt = f"{grammar_salt(s)}|{self.fingerprint}"
        self.memory: LRUCache[Compiled] = LRUCache(s.cache_bytes, lambda c: c.nbytes)
        self._unit_pool = compile_pool(threads, "tagjit-unit", s)
        # Tag contents compiled on their own (composite tool-call tags), reused across combinations.
        # One thread, so whole-tag compiles for the switch never hold up a request's own compile.
        self._swap_pool = compile_pool(1, "tagjit-swap", s) if s.composite_swap else None
        self._composites = CompositeAssembler(self.compiler, tokenizer_info, s, self._salt, self._unit_pool,
                                              self._swap_pool)
        self.units = self._composites.units
        self.composite_enabled = True
        # Per-tokenizer tables that composite tags and any-order filters need (~0.5 s each, once per tokenizer), built
        # off the request path on a pool the interpreter joins at exit (a daemon thread still reading the vocabulary
        # through xgrammar's FFI at exit aborts the process).
        self._tables = [self._unit_pool.submit(vocab_index, tokenizer_info),
                        self._unit_pool.submit(any_order.count_tables, tokenizer_info)]  # with vocab_tables
        self.disk = DiskCache(s.disk_cache_dir, self._salt) if s.disk_cache_dir else None
        self._pool = compile_pool(max(1, s.compile_threads), "tagjit-compile", s)
        self._flight = SingleFlight(self._pool, self.memory)
        self._ms_per_kb = 2.0  # running estimate of compile cost, updated on every miss
        self.prepared: dict[str, float] | None = None  # ms per step of ``warmup.prepare``, once run

    # -- keys and validation -----------------------------------------------------------------
    def key(self, constraint: Constraint) -> str:
        """The content address of a constraint under this tokenizer and these settings."""
        return constraint.key(self._salt)

    def validate(self, constraint: Constraint) -> None:
        """``validate`` under this service's settings, whatever the caches hold (a compiled one is linted too)."""
        validate(constraint, self.settings)

    # -- compiling ---------------------------------------------------------------------------
    def cached(self, constraint: Constraint) -> Compiled | None:
        """The compiled constraint if it is in memory (no work, no waiting: a large text never keyed is a miss)."""
        if not constraint.keyed_cheaply():
            return None
        return self.memory.get(self.key(constraint))

    def submit(self, constraint: Constraint) -> "Future[Compiled]":
        """Start compiling on the pool (or return the finished/in-flight result).

        A large constraint never keyed before is keyed on the pool too: its key parses and re-serialises
        the text (~5 ms for a 200-tool tag), which the engine's scheduling thread must not spend.
        """
        run = functools.partial(self._compile, constraint)
        if not constraint.keyed_cheaply():
            return self._flight.submit_unkeyed(functools.partial(self.key, constraint), run)
        return self._flight.submit(self.key(constraint), run)

    def compile(self, constraint: Constraint) -> Compiled:
        """Compile (or fetch) a constraint, waiting at most the configured compile time limit."""
        fut = self.submit(constraint)
        try:
            return fut.result(timeout=self.settings.compile_timeout_s)
        except TimeoutError:
            raise CompileLimitError(
                f"{constraint.kind.value}: grammar did not compile within "
                f"{self.settings.compile_timeout_s:g} s (TAGJIT_COMPILE_TIMEOUT_S)") from None

    def _compile(self, constraint: Constraint, key: str) -> Compiled:
        start = time.perf_counter()
        if self.disk is not None:
            compiled = self.disk.load(key, lambda payload: Compiled(
                xgr.CompiledGrammar.deserialize_json(payload, self.tokenizer_info), key,
                (time.perf_counter() - start) * 1000))
            if compiled is not None:
                self.memory.put(key, compiled)
                return compiled
        if constraint.kind is Kind.STRUCTURAL_TAG and self.composite_enabled:
            parts = self._composites.assemble(constraint, key, start)
            if parts is not None:
                self.memory.put(key, parts)
                return parts
        try:
            grammar, filter_spec = build_grammar(constraint, self.settings)
            try:
                cg = self.compiler.compile_grammar(grammar)
            except (RuntimeError, ValueError) as e:  # xgrammar's own errors name the problem
                raise ConstraintError(f"invalid {constraint.kind.value}: {str(e).strip().splitlines()[0][:500]}") \
                    from None
        except ConstraintError:
            metrics.ERRORS.labels(constraint.kind.value).inc()
            raise
        if filter_spec is not None:
            filter_spec.warm(cg, self.tokenizer_info)
        ms = (time.perf_counter() - start) * 1000
        compiled = Compiled(cg, key, ms, filter_spec=filter_spec, tokenizer_info=self.tokenizer_info)
        metrics.COMPILE_MS.labels(constraint.kind.value).observe(ms)
        kb = max(1.0, len(constraint.source) / 1024)
        self._ms_per_kb = 0.8 * self._ms_per_kb + 0.2 * (ms / kb)
        self.memory.put(key, compiled)
        if self.disk is not None and filter_spec is None:
            self.disk.put(key, cg.serialize_json())
        return compiled

    def compile_ready(self, constraint: Constraint) -> Compiled:
        """``compile``, and every part of a composite too, so that no mask of it waits (warm-up, benchmarks)."""
        compiled = self.compile(constraint)
        if compiled.composite is not None:
            compiled.composite.resolve_units()
        return compiled

    def estimate_ms(self, constraint: Constraint) -> float:
        """Expected compile time of a constraint not yet cached (from recent compiles)."""
        return self._ms_per_kb * max(1.0, len(constraint.source) / 1024)

    # -- grammars for requests ---------------------------------------------------------------
    def grammar(self, constraint: Constraint, stop_token_ids: Sequence[int] | None = None,
                reasoning_end_ids: Sequence[int] | None = None) -> Matcher:
        """A ready grammar for one request (blocks until compiled; raises ConstraintError)."""
        return Matcher(self.compile(constraint), stop_token_ids=stop_token_ids, vocab_size=self.vocab_size,
                       reasoning_end_ids=reasoning_end_ids)

    def jit_grammar(self, constraint: Constraint, stop_token_ids: Sequence[int] | None = None,
                    reasoning_end_ids: Sequence[int] | None = None) -> Matcher:
        """A grammar that compiles in the background; its first mask waits for what is missing."""
        return Matcher(self.submit(constraint), stop_token_ids=stop_token_ids, vocab_size=self.vocab_size,
                       wait_timeout_s=self.settings.compile_timeout_s, reasoning_end_ids=reasoning_end_ids)

    def wait_tables(self) -> None:
        """Wait until the per-tokenizer tables (composite tags, any-order filters) are built."""
        for table in self._tables:
            table.result()

    def prepare(self) -> dict[str, float]:
        """Do the once-per-process work now (tables, first compiles and fills): milliseconds per step."""
        from tagjit import tools
        from tagjit.runtime.matcher import allocate_token_bitmask, fill_bitmasks

        steps: dict[str, float] = {}
        bitmask = allocate_token_bitmask(1, self.vocab_size)

        def step(name: str, work: Callable[[], object]) -> None:
            start = time.perf_counter()
            work()
            steps[name] = (time.perf_counter() - start) * 1000
            metrics.WARMUP_MS.labels(name).observe(steps[name])

        def first_fill(constraint: Constraint) -> None:
            self.compile_ready(constraint)
            fill_bitmasks([self.grammar(constraint)], bitmask, [0])

        step("tables", self.wait_tables)
        step("json", lambda: first_fill(Constraint.of(Kind.JSON, PREPARE_SCHEMA)))
        tag = tools.build_tool_tag(tools.load_format(PREPARE_FORMAT), [PREPARE_TOOL], "required", True, self.settings)
        step("tool_tag", lambda: first_fill(Constraint.of(Kind.STRUCTURAL_TAG, tag)))
        return steps

    def warmup(self, constraints: Sequence[Constraint]) -> int:
        """Compile constraints ahead of traffic; returns how many compiled (bad ones are logged)."""
        return warm_up(self.compile_ready, constraints)

    def close(self) -> None:
        """Stop the compile pools."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._unit_pool.shutdown(wait=False, cancel_futures=True)
        if self._swap_pool is not None:
            self._swap_pool.shutdown(wait=False, cancel_futures=True)


_services: dict[tuple[str, Settings], CompileService] = {}
_services_lock = threading.Lock()


def service_for(tokenizer_info: xgr.TokenizerInfo, settings: Settings | None = None) -> CompileService:
    """The process-wide compile service for a tokenizer (one compiler per tokenizer)."""
    settings = settings or get_settings()
    fp = fingerprint(tokenizer_info)
    with _services_lock:
        svc = _services.get((fp, settings))
        if svc is None:
            svc = _services[(fp, settings)] = CompileService(tokenizer_info, settings, fp)
        return svc


def start_service(tokenizer_info: xgr.TokenizerInfo, settings: Settings) -> CompileService:
    """An engine's compile service, prepared (``CompileService.prepare``, once per service) and warmed up from
    ``TAGJIT_WARMUP_FILE`` (already compiled entries are cache hits)."""
    service = service_for(tokenizer_info, settings)
    with _services_lock:
        first = service.prepared is None
        if first:
            service.prepared = {}
    if first:
        try:
            service.prepared = service.prepare()
            log.info("tagjit: prepared in %.0f ms before the first request (%s)", sum(service.prepared.values()),
                     ", ".join(f"{k} {v:.0f} ms" for k, v in service.prepared.items()))
        except Exception:  # a request that needs what failed here fails on its own; the engine starts
            log.exception("tagjit: start-up preparation failed; the first requests pay for it")
    if settings.warmup_file:
        n = service.warmup(load_warmup(settings.warmup_file, settings))
        log.info("tagjit: warmed up %d constraints from %s", n, settings.warmup_file)
    return service
