"""Errors tagjit raises for a single request's constraint."""

from __future__ import annotations


class ConstraintError(ValueError):
    """The constraint of one request is invalid; engines turn it into HTTP 400."""


class EmptySchemaError(ConstraintError):
    """A (sub-)schema accepts no value: no JSON text satisfies it."""


class UnsupportedFeatureError(ConstraintError):
    """The constraint uses a feature tagjit cannot enforce exactly."""

    def __init__(self, feature: str, where: str = "") -> None:
        self.feature = feature
        self.where = where
        loc = f" at {where}" if where else ""
        super().__init__(f"unsupported JSON Schema feature {feature!r}{loc}: tagjit cannot enforce it")


class CompileLimitError(ConstraintError):
    """Compiling the constraint exceeded the configured time or memory bound."""
