"""Whether this process's vLLM selected tagjit, the settings it implies, and the all-or-none patch transaction."""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any, Callable, Iterator

log = logging.getLogger("tagjit")


NAME = "tagjit"


# Set when this process builds a config that selects tagjit, with that config's whitespace choice. vLLM hands
# its config to the processes it starts (API servers, engine cores, workers) without validating it again, so
# the choice also travels in the environment those processes inherit.
ACTIVE_ENV = "TAGJIT_VLLM_SELECTED"
COMPACT_ENV = "TAGJIT_VLLM_COMPACT"
_state: dict[str, bool] = {}  # read from the environment at first use, not at import
_on_select: list[Callable[[], None]] = []


def _read() -> dict[str, bool]:
    if len(_state) < 2:
        _state.setdefault("active", os.environ.get(ACTIVE_ENV) == "1")
        _state.setdefault("compact", os.environ.get(COMPACT_ENV) == "1")
    return _state


def active() -> bool:
    """Whether this process's vLLM config selected tagjit as its structured-output backend."""
    return _read()["active"]


def when_selected(fn: Callable[[], None]) -> None:
    """Run fn once tagjit is this process's backend: now if it is, else when a config selects it."""
    if active():
        fn()
    else:
        _on_select.append(fn)


def select(compact: bool) -> None:
    """Record that this process's vLLM config selected tagjit, for it and the processes it starts."""
    _read().update(active=True, compact=compact)
    os.environ[ACTIVE_ENV] = "1"
    os.environ[COMPACT_ENV] = "1" if compact else "0"
    while _on_select:
        _on_select.pop(0)()


def server_settings() -> Any:
    """tagjit's settings as this server's vLLM config refines them: ``disable_any_whitespace`` means compact
    JSON in every grammar the API server builds or checks, as it does in the engine core."""
    from tagjit import engine

    return engine.get_settings().for_engine(compact_json=_read()["compact"])


_undo: list[Callable[[], None]] | None = None  # the open transaction's undo steps, newest last


@contextlib.contextmanager
def transaction() -> Iterator[None]:
    """Patches made inside stay only if the block completes; on an exception every one is undone."""
    global _undo
    outer, _undo = _undo, []
    try:
        yield
    except BaseException:
        for undo in reversed(_undo):
            try:
                undo()
            except Exception:  # keep undoing the rest
                log.exception("tagjit: could not undo a patch")
        raise
    finally:
        _undo = outer


def replace_attr(owner: Any, name: str, value: Any) -> None:
    """``setattr(owner, name, value)``, undone if the enclosing transaction fails."""
    missing = object()
    old = owner.__dict__.get(name, missing) if isinstance(owner, type) else getattr(owner, name, missing)
    setattr(owner, name, value)
    on_undo(lambda: delattr(owner, name) if old is missing else setattr(owner, name, old))


def on_undo(step: Callable[[], None]) -> None:
    """Register a step that undoes a change if the enclosing transaction fails."""
    if _undo is not None:
        _undo.append(step)
