"""The relaxations a request is served with, counted on /metrics and collected for its response header.

The log line is written once per schema, by the caller that computed the relaxations; the list collected per
request is what an engine adapter turns into the ``x-tagjit-relaxed`` response header."""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator, Sequence

from tagjit import metrics
from tagjit.schema.relax import Relaxation

HEADER = "x-tagjit-relaxed"
# Longest header value sent; the full list is in the log.
MAX_HEADER_CHARS = 2000

# The list of the request being handled: a list object, so that work in a task or thread that copied the context
# still appends where the adapter reads.
_collected: ContextVar[list[str] | None] = ContextVar("tagjit_relaxations", default=None)


@contextmanager
def collecting() -> Iterator[list[str]]:
    """Collect the relaxations recorded while the block runs (one request), in order."""
    box: list[str] = []
    token = _collected.set(box)
    try:
        yield box
    finally:
        _collected.reset(token)


def record(subject: str, kind: str, steps: Sequence[Relaxation]) -> None:
    """Count one request's relaxations of one subject (``tool 'f'``, ``response_format``) and collect them."""
    for step in steps:
        metrics.RELAXATIONS.labels(step.name, kind).inc()
    box = _collected.get()
    if box is not None:
        box.extend(f"{subject}: {step.name} at {step.where}" for step in steps)


def header_value(items: Sequence[str]) -> str:
    """The header text of a request's relaxations: distinct items joined by '; ', ASCII only, bounded."""
    text = "; ".join(dict.fromkeys(items)).encode("ascii", "backslashreplace").decode("ascii")
    return text if len(text) <= MAX_HEADER_CHARS else text[:MAX_HEADER_CHARS - 3] + "..."


__all__ = ["HEADER", "collecting", "record", "header_value"]
