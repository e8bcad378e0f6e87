"""Holding a compile service's pool, so a compile submitted meanwhile cannot finish whatever the machine's speed."""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

from tagjit import CompileService


@contextlib.contextmanager
def compile_pool_held(svc: CompileService) -> Iterator[None]:
    """Occupy the only thread of ``svc``'s compile pool (build it with ``compile_threads=1``) until the block ends."""
    assert svc.settings.compile_threads == 1, "a held pool needs a service with one compile thread"
    gate = threading.Event()
    svc._pool.submit(gate.wait)
    try:
        yield
    finally:
        gate.set()
