"""Validation without a tokenizer: the one check both engines run, with its lint and the LRU of constraints checked."""

from __future__ import annotations

import logging

from tagjit import metrics
from tagjit.build.grammars import build_grammar
from tagjit.compile.cache import LRUCache, grammar_salt
from tagjit.constraint import Constraint, Kind
from tagjit.errors import ConstraintError
from tagjit.settings import Settings, get_settings

log = logging.getLogger("tagjit")

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
