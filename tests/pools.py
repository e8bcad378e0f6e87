"""Compile services in tests: none depends on the machine's speed.

``UNHURRIED`` is the default settings with a compile limit no test reaches (a shared, loaded machine can take
many seconds for a large tag); the limit's own tests hold the compile pool instead (``compile_pool_held``).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

from tagjit import CompileService, Settings

# No background whole-tag compile either: a composite matcher switches to it when it is ready, which would make
# the tests of the composite path depend on timing; the switch's own tests turn it on.
UNHURRIED = Settings(compile_timeout_s=3600.0, composite_swap=False)
UNHURRIED_ENV = {"TAGJIT_COMPILE_TIMEOUT_S": "3600"}  # the same for the processes tests start


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
