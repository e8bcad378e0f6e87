"""Objects whose properties may come in any order (opt-in with ``x-any-order``), exactly.

The public face of the sub-package: which schemas opt in, and ``build`` (grammar + token filter).
See ``plan`` (which objects opt in, what the filter follows), ``ebnf`` (the grammar), ``filter`` (the
per-request byte automaton and token filter) and ``vocab`` (per-tokenizer tables).
"""

from __future__ import annotations

import xgrammar as xgr

from tagjit.anyorder.ebnf import AnyOrderEbnf, strip_keywords, xgr_json
from tagjit.anyorder.filter import AnyOrderFilter, AnyOrderSpec, count_tables, step_state
from tagjit.anyorder.plan import (KEYWORD, KEYWORD_DEFAULT, AnyOrderPlan, CountUnfollowable, key_spelling,
                                  wants_any_order, with_any_order)
from tagjit.anyorder.vocab import vocab_tables
from tagjit.build.ebnf import Built
from tagjit.build.splice import Lifted
from tagjit.settings import Settings

__all__ = ["KEYWORD", "KEYWORD_DEFAULT", "wants_any_order", "with_any_order", "key_spelling", "build", "count_filter",
           "CountUnfollowable", "AnyOrderSpec", "count_tables", "AnyOrderFilter", "step_state", "vocab_tables"]


def build(schema: dict, settings: Settings, lifted: Lifted | None = None) -> Built:
    """The grammar and token filter of a schema with any-order objects (``lifted``: what stands behind the schema's
    placeholders, ``build.splice.lift``)."""
    default = settings.any_order_default
    if isinstance(schema.get(KEYWORD_DEFAULT), bool):
        default = schema[KEYWORD_DEFAULT]
    plan = AnyOrderPlan(schema, default, settings.strict_mode, lifted)
    spec = AnyOrderSpec(plan.root_val, tight=settings.max_whitespace is not None, counts=bool(plan.counts))
    if not plan.ao:
        return Built(xgr_json(strip_keywords(schema), settings), spec if plan.counts else None)
    return Built(xgr.Grammar.from_ebnf(AnyOrderEbnf(plan, settings).text()), spec)


def count_filter(schema: dict, settings: Settings, lifted: Lifted) -> AnyOrderSpec:
    """The token filter that counts the lengths of a lifted schema's strings (``lifted.counts``) where no object
    takes any order (raises ``CountUnfollowable`` where the filter cannot follow the text to one)."""
    plan = AnyOrderPlan(schema, False, settings.strict_mode, lifted)
    return AnyOrderSpec(plan.root_val, tight=settings.max_whitespace is not None, counts=True)
