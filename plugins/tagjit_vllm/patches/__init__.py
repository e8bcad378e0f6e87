"""The vLLM patch points (config, frontend validation, engine-core grammar init), for 0.32 and 0.33.

0.33 adds two engine-core details that these patches follow: ``StructuredOutputManager.backend_name``
latches the engine's one backend (a request resolved to another gets vLLM's own per-request error), and
``_masked_reasoning_ends`` probes the grammar while a request is still reasoning.
"""

from __future__ import annotations

from .config import patch_config
from .engine_core import (LIVE_ATTR, patch_batch_fill, patch_grammar_init, patch_manager_latch, patch_masked_reasoning_ends,
                          patch_scheduler_requests)
from .requests import (ANY_ORDER_ARG, apply_request_options, patch_structural_tag_validation, patch_validation,
                       request_constraint, validate_request)
from .server import RelaxationHeader, patch_response_headers
from .state import (ACTIVE_ENV, COMPACT_ENV, NAME, _state, active, on_undo, replace_attr, select, server_settings,
                    transaction, when_selected)

__all__ = ["NAME", "ACTIVE_ENV", "COMPACT_ENV", "active", "select", "server_settings", "transaction", "replace_attr",
           "on_undo", "install", "patch_config", "patch_validation", "patch_structural_tag_validation",
           "patch_grammar_init", "patch_batch_fill", "patch_manager_latch", "patch_masked_reasoning_ends", "patch_scheduler_requests",
           "validate_request", "apply_request_options", "request_constraint", "ANY_ORDER_ARG", "LIVE_ATTR", "_state",
           "when_selected", "patch_response_headers", "RelaxationHeader"]


def install() -> None:
    """Apply every backend patch, all or none (each one is idempotent)."""
    with transaction():
        patch_config()
        patch_validation()
        patch_structural_tag_validation()
        patch_grammar_init()
        patch_batch_fill()
        patch_manager_latch()
        patch_masked_reasoning_ends()
        patch_scheduler_requests()
        patch_response_headers()
