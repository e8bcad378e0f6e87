"""The compile service: one per tokenizer, shared by every request, with caches and a JIT pool."""

from __future__ import annotations

import importlib.metadata
import logging
import os
import threading
import time
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from typing import Sequence

import xgrammar as xgr

from tagjit import anyorder as any_order
from tagjit.compile import composite
from tagjit import metrics
from tagjit.compile.cache import DiskCache, LRUCache
from tagjit.errors import CompileLimitError, ConstraintError
from tagjit.runtime.matcher import Compiled, Matcher
from tagjit.build.grammars import build_grammar, legacy_to_format
from tagjit.settings import Settings, get_settings
from tagjit.constraint import Constraint, Kind
from tagjit.runtime.vocab import fingerprint

log = logging.getLogger("tagjit")
FORMAT_VERSION = "1"
XGRAMMAR_VERSION = importlib.metadata.version("xgrammar")


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
        # Tag contents compiled on their own (composite tool-call tags), reused across combinations.
        self.units: LRUCache[composite.Unit] = LRUCache(s.cache_bytes, lambda u: u.nbytes)
        self.composite_enabled = True
        self._unit_pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tagjit-unit",
                                             initializer=_pool_thread_init, initargs=(s.compile_nice, s.compile_cpus))
        # Per-tokenizer tables that composite tags and any-order filters need (~0.5 s each, once per tokenizer), built
        # off the request path on a pool the interpreter joins at exit (a daemon thread still reading the vocabulary
        # through xgrammar's FFI at exit aborts the process).
        self._unit_pool.submit(composite.vocab_index, tokenizer_info)
        self._unit_pool.submit(any_order.vocab_tables, tokenizer_info)
        self.disk = DiskCache(s.disk_cache_dir, self._salt) if s.disk_cache_dir else None
        self._pool = ThreadPoolExecutor(max_workers=max(1, s.compile_threads), thread_name_prefix="tagjit-compile",
                                        initializer=_pool_thread_init, initargs=(s.compile_nice, s.compile_cpus))
        self._inflight: dict[str, Future[Compiled]] = {}
        self._lock = threading.Lock()
        self._ms_per_kb = 2.0  # running estimate of compile cost, updated on every miss

    # -- keys and validation -----------------------------------------------------------------
    def key(self, constraint: Constraint) -> str:
        """The content address of a constraint under this tokenizer and these settings."""
        return constraint.key(self._salt)

    def validate(self, constraint: Constraint) -> None:
        """``validate`` under this service's settings; a constraint already compiled here is valid."""
        if constraint.keyed_cheaply() and self.key(constraint) in self.memory:
            return
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
        if not constraint.keyed_cheaply():
            out: Future[Compiled] = Future()
            self._pool.submit(self._key_then_compile, constraint, out)
            return out
        key = self.key(constraint)
        with self._lock:
            fut = self._found(key)
            new = fut is None
            if new:
                fut = self._inflight[key] = self._pool.submit(self._compile, constraint, key)
        if new:
            fut.add_done_callback(lambda _f, k=key: self._forget(k))
        return fut

    def _key_then_compile(self, constraint: Constraint, out: "Future[Compiled]") -> None:
        try:
            key = self.key(constraint)
            with self._lock:
                found = self._found(key)
                if found is None:
                    self._inflight[key] = out
            if found is not None:
                found.add_done_callback(lambda f: _settle(out, f))
                return
            out.add_done_callback(lambda _f, k=key: self._forget(k))
            result = self._compile(constraint, key)
        except BaseException as e:
            _settle_error(out, e)
            return
        _settle_result(out, result)

    def _found(self, key: str) -> "Future[Compiled] | None":
        """A future for a memory hit or an in-flight compile of key, or None (a miss); call under the lock."""
        hit = self.memory.get(key)
        if hit is not None:
            metrics.CACHE.labels("memory", "hit").inc()
            done: Future[Compiled] = Future()
            done.set_result(hit)
            return done
        fut = self._inflight.get(key)
        if fut is not None:
            metrics.CACHE.labels("inflight", "hit").inc()
            return fut
        metrics.CACHE.labels("memory", "miss").inc()
        return None

    def _forget(self, key: str) -> None:
        with self._lock:
            self._inflight.pop(key, None)

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
            payload = self.disk.get(key)
            if payload is not None:
                try:
                    cg = xgr.CompiledGrammar.deserialize_json(payload, self.tokenizer_info)
                    compiled = Compiled(cg, key, (time.perf_counter() - start) * 1000)
                    self.memory.put(key, compiled)
                    metrics.CACHE.labels("disk", "hit").inc()
                    return compiled
                except Exception as e:  # version skew or corruption: rebuild
                    log.warning("tagjit: unusable grammar cache entry %s (%s); rebuilding", key[:12], e)
                    self.disk.corrupt += 1
                    self.disk.discard(key)
            metrics.CACHE.labels("disk", "miss").inc()
        if constraint.kind is Kind.STRUCTURAL_TAG and self.composite_enabled:
            parts = self._compile_composite(constraint, key, start)
            if parts is not None:
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
        ms = (time.perf_counter() - start) * 1000
        compiled = Compiled(cg, key, ms, filter_spec=filter_spec, tokenizer_info=self.tokenizer_info)
        metrics.COMPILE_MS.labels(constraint.kind.value).observe(ms)
        kb = max(1.0, len(constraint.source) / 1024)
        self._ms_per_kb = 0.8 * self._ms_per_kb + 0.2 * (ms / kb)
        self.memory.put(key, compiled)
        if self.disk is not None and filter_spec is None:
            self.disk.put(key, cg.serialize_json())
        return compiled

    def _compile_composite(self, constraint: Constraint, key: str, start: float) -> Compiled | None:
        """Compile a tool-call-shaped structural tag in parts (cached per content), or None if it has another shape."""
        tag = constraint.parsed()
        if not isinstance(tag, dict):
            return None
        if "structures" in tag:
            tag = legacy_to_format(tag)
        if tag.get("format") is None:
            return None
        plan = composite.plan(tag["format"])
        if plan is None:
            return None
        try:
            units = self._units(plan.units)
        except ConstraintError:
            metrics.ERRORS.labels(constraint.kind.value).inc()
            raise
        cg = composite.CompositeGrammar(plan, units, composite.vocab_index(self.tokenizer_info),
                                        full=lambda: self.compiler.compile_grammar(
                                            build_grammar(constraint, self.settings).grammar))
        ms = (time.perf_counter() - start) * 1000
        compiled = Compiled(None, key, ms, composite=cg)
        metrics.COMPILE_MS.labels(constraint.kind.value).observe(ms)
        self.memory.put(key, compiled)
        return compiled

    def _units(self, contents: Sequence[str]) -> list[composite.Unit]:
        """The units of a plan: cache hits at once, the rest compiled side by side."""
        found = [self._unit(c, cached_only=True) for c in contents]
        missing = [i for i, u in enumerate(found) if u is None]
        if len(missing) > 1:
            for i, unit in zip(missing, self._unit_pool.map(self._unit, [contents[i] for i in missing])):
                found[i] = unit
        elif missing:
            found[missing[0]] = self._unit(contents[missing[0]])
        return found  # type: ignore[return-value]

    def _unit(self, content: str, cached_only: bool = False) -> composite.Unit | None:
        """One tag content (JSON text) compiled on its own, from the unit cache if any combination compiled it."""
        c = Constraint(Kind.STRUCTURAL_TAG, '{"type":"structural_tag","format":' + content + "}")
        key = c.key(self._salt + "|unit")
        hit = self.units.get(key)
        if hit is not None or cached_only:
            return hit
        grammar, _ = build_grammar(c, self.settings)
        unit = composite.make_unit(self.compiler.compile_grammar(grammar), key,
                                   composite.vocab_index(self.tokenizer_info))
        self.units.put(key, unit)
        return unit

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

    def warmup(self, constraints: Sequence[Constraint]) -> int:
        """Compile constraints ahead of traffic; returns how many compiled (bad ones are logged)."""
        ok = 0
        for c in constraints:
            try:
                self.compile(c)
                ok += 1
            except ConstraintError as e:
                log.warning("tagjit: warm-up constraint skipped: %s", e)
        return ok

    def close(self) -> None:
        """Stop the compile pools."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._unit_pool.shutdown(wait=False, cancel_futures=True)


def _settle(out: Future, source: Future) -> None:
    """Give out the outcome of source (unless out was cancelled meanwhile)."""
    error = source.exception()
    if error is not None:
        _settle_error(out, error)
    else:
        _settle_result(out, source.result())


def _settle_result(out: Future, value: object) -> None:
    if not out.done():
        try:
            out.set_result(value)
        except InvalidStateError:  # cancelled between the check and the set
            pass


def _settle_error(out: Future, error: BaseException) -> None:
    if not out.done():
        try:
            out.set_exception(error)
        except InvalidStateError:
            pass


def _pool_thread_init(nice: int, cpus: str | None) -> None:
    """Set this pool thread's niceness and CPUs; the xgrammar threads it starts inherit both."""
    tid = threading.get_native_id()
    if nice > 0 and hasattr(os, "setpriority"):
        try:
            os.setpriority(os.PRIO_PROCESS, tid, max(os.getpriority(os.PRIO_PROCESS, tid), min(nice, 19)))
        except OSError as e:  # a sandbox that forbids it: compiles still run, at normal priority
            log.debug("tagjit: cannot lower compile thread priority: %s", e)
    if cpus and hasattr(os, "sched_setaffinity"):
        try:
            allowed = parse_cpus(cpus) & os.sched_getaffinity(0)
            if allowed:  # on Linux, pid 0 is the calling thread
                os.sched_setaffinity(0, allowed)
        except (OSError, ValueError) as e:
            log.warning("tagjit: compile threads keep their CPUs (TAGJIT_COMPILE_CPUS=%r): %s", cpus, e)


def parse_cpus(text: str) -> set[int]:
    """The CPUs of a Linux CPU list such as ``0-3,8``."""
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


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
    """An engine's compile service, warmed up from ``TAGJIT_WARMUP`` (already compiled entries are cache hits)."""
    service = service_for(tokenizer_info, settings)
    if settings.warmup_file:
        from tagjit.compile.warmup import load_warmup

        n = service.warmup(load_warmup(settings.warmup_file, settings))
        log.info("tagjit: warmed up %d constraints from %s", n, settings.warmup_file)
    return service


def grammar_salt(settings: Settings) -> str:
    """What besides the constraint decides its grammar: tagjit's and xgrammar's versions and the grammar settings."""
    return "|".join([FORMAT_VERSION, XGRAMMAR_VERSION, str(settings.max_whitespace), str(settings.strict_mode),
                     str(settings.any_order_default)])


_validated: LRUCache[bool] = LRUCache(64 * 1024, lambda _: 1)


def _validation_key(constraint: Constraint, settings: Settings) -> str:
    return constraint.key(grammar_salt(settings))


def trust(constraint: Constraint, settings: Settings | None = None) -> None:
    """Record as valid a constraint tagjit assembled from parts it checked (a tool-call tag), so that
    ``validate`` does not build the whole grammar again on the request path."""
    _validated.put(_validation_key(constraint, settings or get_settings()), True)


def validate(constraint: Constraint, settings: Settings | None = None) -> None:
    """Check a constraint without a tokenizer, the one validation path of both engines: lint findings and refusals
    are logged and counted here, once per constraint and settings; raises ConstraintError with the reason."""
    settings = settings or get_settings()
    key = _validation_key(constraint, settings)
    if _validated.get(key):
        return
    if settings.lint:
        lint_constraint(constraint)
    try:
        build_grammar(constraint, settings)
    except ConstraintError:
        metrics.ERRORS.labels(constraint.kind.value).inc()
        raise
    _validated.put(key, True)


def lint_constraint(constraint: Constraint) -> list:
    """Log and count property-order findings of a JSON-schema constraint (never raises)."""
    if constraint.kind is not Kind.JSON:
        return []
    from tagjit.schema.lint import lint_schema

    try:
        findings = lint_schema(constraint.parsed())
    except Exception:  # an invalid schema is reported by validation, not by the lint
        return []
    for f in findings:
        metrics.LINT.labels(f.rule).inc()
        log.warning("tagjit lint: %s: [%s] %s", f.path, f.rule, f.message)
    return findings
