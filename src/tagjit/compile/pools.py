"""The compile service's thread pools: niced, CPU-pinned threads that run one compile per key at a time."""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from typing import Callable, Generic, TypeVar

from tagjit import metrics
from tagjit.compile.cache import LRUCache
from tagjit.settings import Settings

log = logging.getLogger("tagjit")
V = TypeVar("V")


def compile_pool(workers: int, name: str, settings: Settings) -> ThreadPoolExecutor:
    """A pool whose threads (and the xgrammar threads they start) run at ``compile_nice`` on ``compile_cpus``."""
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name, initializer=_pool_thread_init,
                              initargs=(settings.compile_nice, settings.compile_cpus))


class SingleFlight(Generic[V]):
    """Work on a pool, at most once per key at a time: a key cached or in flight is shared, not run again."""

    def __init__(self, pool: ThreadPoolExecutor, cache: LRUCache[V]) -> None:
        self.pool = pool
        self.cache = cache
        self._inflight: dict[str, Future[V]] = {}
        self._lock = threading.Lock()

    def submit(self, key: str, run: Callable[[str], V]) -> "Future[V]":
        """The future of ``run(key)``: a cache hit, the run in flight, or a new run on the pool."""
        with self._lock:
            fut = self._found(key)
            new = fut is None
            if new:
                fut = self._inflight[key] = self.pool.submit(run, key)
        if new:
            fut.add_done_callback(lambda _f: self._forget(key))
        return fut  # type: ignore[return-value]

    def submit_unkeyed(self, key_of: Callable[[], str], run: Callable[[str], V]) -> "Future[V]":
        """``submit`` with the key itself computed on the pool (the key of a large text takes milliseconds)."""
        out: Future[V] = Future()
        self.pool.submit(self._key_then_run, key_of, run, out)
        return out

    def _key_then_run(self, key_of: Callable[[], str], run: Callable[[str], V], out: "Future[V]") -> None:
        try:
            key = key_of()
            with self._lock:
                found = self._found(key)
                if found is None:
                    self._inflight[key] = out
            if found is not None:
                found.add_done_callback(lambda f: _settle(out, f))
                return
            out.add_done_callback(lambda _f: self._forget(key))
            result = run(key)
        except BaseException as e:
            _settle_error(out, e)
            return
        _settle_result(out, result)

    def _found(self, key: str) -> "Future[V] | None":
        """A future for a cache hit or a run in flight of key, or None (a miss); call under the lock."""
        # The cache is read under the lock: a run stores its result before it leaves the in-flight table.
        hit = self.cache.get(key)
        if hit is not None:
            metrics.CACHE.labels("memory", "hit").inc()
            done: Future[V] = Future()
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
