"""Caches of compiled grammars: a byte-bounded LRU in memory, an optional shared directory on disk, the keys' salt."""

from __future__ import annotations

import functools
import importlib.metadata
import json
import logging
import os
import tempfile
import threading
from collections import OrderedDict
from typing import Any, Callable, Generic, Hashable, TypeVar

from tagjit import metrics
from tagjit.settings import Settings

V = TypeVar("V")
log = logging.getLogger("tagjit")
# Raised whenever tagjit writes a constraint's grammar differently, so that a shared disk cache never serves the old one.
FORMAT_VERSION = "3"
XGRAMMAR_VERSION = importlib.metadata.version("xgrammar")


def grammar_salt(settings: Settings) -> str:
    """What besides the constraint decides its grammar: tagjit's and xgrammar's versions and the grammar settings."""
    return "|".join([FORMAT_VERSION, XGRAMMAR_VERSION, str(settings.max_whitespace), settings.style,
                     str(settings.strict_mode), str(settings.any_order_default), settings.relax])


class LRUCache(Generic[V]):
    """A thread-safe LRU cache bounded by the total byte size of its values."""

    def __init__(self, max_bytes: int, size_of: Callable[[V], int]) -> None:
        self.max_bytes = max_bytes
        self._size_of = size_of
        self._items: OrderedDict[str, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def get(self, key: Hashable) -> V | None:
        """The value for key (marking it recently used), or None."""
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return item[0]

    def put(self, key: Hashable, value: V) -> None:
        """Store a value, evicting the least recently used ones past the byte bound."""
        size = max(1, self._size_of(value))
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            if size > self.max_bytes:
                return
            self._items[key] = (value, size)
            self._bytes += size
            while self._bytes > self.max_bytes and self._items:
                _, (_, evicted) = self._items.popitem(last=False)
                self._bytes -= evicted
                self.evictions += 1

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    @property
    def bytes(self) -> int:
        """Total size of the values held."""
        return self._bytes

    def clear(self) -> None:
        """Drop everything."""
        with self._lock:
            self._items.clear()
            self._bytes = 0


def bounded_memo(max_bytes: int | Callable[[], int], size_of: Callable[[tuple, Any], int],
                 keyed_by: int | None = None) -> Callable[[Callable[..., V]], Callable[..., V]]:
    """Memoise a function in a byte-bounded LRU; ``size_of(key, result)`` estimates bytes.

    ``max_bytes`` may be a function, read at the first call (settings are not read at import time).
    The key is the arguments, or their first ``keyed_by`` when the rest only carry what those determine
    (a parsed form of a JSON text the key holds), which need not be hashable and is never kept.
    Unlike ``functools.lru_cache(maxsize=N)`` the bound holds whatever the size of each entry:
    a server that sees a stream of distinct large schemas keeps a flat memory footprint.
    Exceptions are not memoised; results are shared, so callers must not mutate them.
    """
    def wrap(fn: Callable[..., V]) -> Callable[..., V]:
        caches: list[LRUCache[tuple[tuple, V]]] = []
        lock = threading.Lock()

        def cache() -> LRUCache[tuple[tuple, V]]:
            if not caches:
                with lock:
                    if not caches:
                        bound = max_bytes() if callable(max_bytes) else max_bytes
                        caches.append(LRUCache(bound, lambda item: size_of(*item)))
            return caches[0]

        @functools.wraps(fn)
        def memo(*args: Any) -> V:
            key = args if keyed_by is None else args[:keyed_by]
            hit = cache().get(key)
            if hit is not None:
                return hit[1]
            value = fn(*args)
            cache().put(key, (key, value))
            return value

        def remember(value: V, *key: Any) -> None:
            cache().put(key, (key, value))

        memo.cache = cache  # type: ignore[attr-defined]  # the LRU (made at first use)
        memo.remember = remember  # type: ignore[attr-defined]  # record a result known without calling fn
        return memo
    return wrap


class DiskCache:
    """Serialized grammars in a directory that several processes and replicas share.

    Writes are atomic (temp file + rename); a file from another format version, or a corrupt
    one, reads as a miss and is replaced by the next write.
    """

    def __init__(self, directory: str, version: str) -> None:
        self.directory = directory
        self.version = version
        os.makedirs(directory, exist_ok=True)
        self.hits = 0
        self.misses = 0
        self.corrupt = 0

    def _path(self, key: str) -> str:
        return os.path.join(self.directory, key[:2], key + ".json")

    def get(self, key: str) -> str | None:
        """The payload stored under key, or None if absent, stale or corrupt."""
        path = self._path(key)
        try:
            with open(path, encoding="utf-8") as f:
                record = json.load(f)
            if record.get("version") != self.version or record.get("key") != key:
                self.misses += 1
                return None
            payload = record["payload"]
            if not isinstance(payload, str):
                raise ValueError("payload is not a string")
        except FileNotFoundError:
            self.misses += 1
            return None
        except (OSError, ValueError, KeyError, AttributeError) as e:
            self.corrupt += 1
            log.warning("tagjit: corrupt grammar cache file %s (%s); rebuilding it", path, e)
            self.discard(key)
            return None
        self.hits += 1
        return payload

    def load(self, key: str, decode: Callable[[str], V]) -> V | None:
        """The payload under key decoded, or None (a miss: absent, stale, or not decodable and then discarded)."""
        payload = self.get(key)
        if payload is not None:
            try:
                value = decode(payload)
            except Exception as e:  # version skew or corruption: rebuild
                log.warning("tagjit: unusable grammar cache entry %s (%s); rebuilding", key[:12], e)
                self.corrupt += 1
                self.discard(key)
            else:
                metrics.CACHE.labels("disk", "hit").inc()
                return value
        metrics.CACHE.labels("disk", "miss").inc()
        return None

    def put(self, key: str, payload: str) -> None:
        """Store a payload atomically; errors (full disk, permissions) are logged, never raised."""
        path = self._path(key)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"version": self.version, "key": key, "payload": payload}, f)
            os.replace(tmp, path)
        except OSError as e:
            log.warning("tagjit: cannot write grammar cache file %s: %s", path, e)

    def discard(self, key: str) -> None:
        """Remove a stored entry if present."""
        try:
            os.unlink(self._path(key))
        except OSError:
            pass
