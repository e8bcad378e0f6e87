"""Validation without a tokenizer: the one check both engines run, with its lint and the LRU of constraints checked."""

from __future__ import annotations

import logging

from tagjit import metrics
from tagjit import report
from tagjit.build.grammars import build_with_relaxations
from tagjit.schema.relax import Relaxation
from tagjit.compile.cache import LRUCache, grammar_salt
from tagjit.constraint import Constraint, Kind
from tagjit.errors import ConstraintError
from tagjit.settings import Settings, get_settings

log = logging.getLogger("tagjit")

# Constraints checked, with the relaxations each took (empty: enforced exactly).
_validated: LRUCache[tuple[Relaxation, ...]] = LRUCache(64 * 1024, lambda steps: 1 + len(steps))


def _validation_key(constraint: Constraint, settings: Settings) -> str:
    return constraint.key(grammar_salt(settings))


def trust(constraint: Constraint, settings: Settings | None = None) -> None:
    """Record as valid a constraint tagjit assembled from parts it checked (a tool-call tag), so that
    ``validate`` does not build the whole grammar again on the request path."""
    _validated.put(_validation_key(constraint, settings or get_settings()), ())


def validate(constraint: Constraint, settings: Settings | None = None) -> None:
    """Check a constraint without a tokenizer, the one validation path of both engines: lint findings, refusals and
    relaxations are logged once per constraint and settings, relaxations counted and collected per request;
    raises ConstraintError with the reason."""
    settings = settings or get_settings()
    key = _validation_key(constraint, settings)
    steps = _validated.get(key)
    if steps is None:
        if settings.lint:
            lint_constraint(constraint)
        try:
            _, steps = build_with_relaxations(constraint, settings)
        except ConstraintError:
            metrics.ERRORS.labels(constraint.kind.value).inc()
            raise
        if steps:
            log.warning("tagjit: %s schema enforced loosely, as the server or the schema allowed: %s",
                        constraint.kind.value, "; ".join(map(str, steps)))
        _validated.put(key, steps)
    if steps:
        report.record("schema" if constraint.kind is Kind.JSON else constraint.kind.value, "schema", steps)


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
