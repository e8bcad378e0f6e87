"""Objects whose properties may come in any order (opt-in with ``x-any-order``)."""

from __future__ import annotations

from typing import Any

from .errors import UnsupportedFeatureError
from .settings import Settings

KEYWORD = "x-any-order"


def wants_any_order(schema: Any, default: bool) -> bool:
    """Whether any object in the schema opts into any property order."""
    if isinstance(schema, dict):
        if schema.get(KEYWORD) is True or (default and "properties" in schema and schema.get(KEYWORD) is not False):
            return True
        return any(wants_any_order(v, default) for v in schema.values())
    if isinstance(schema, list):
        return any(wants_any_order(v, default) for v in schema)
    return False


def build(schema: dict, settings: Settings):  # noqa: ANN201 - returns grammars.Built
    """The grammar and token filter of a schema with any-order objects."""
    raise UnsupportedFeatureError(KEYWORD)
