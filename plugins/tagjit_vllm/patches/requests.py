"""The API server, per request: tagjit's validation (HTTP 400 with the reason) and its request options."""

from __future__ import annotations

import functools
from typing import Any

from .state import NAME, active, replace_attr, server_settings



def patch_validation() -> None:
    """Validate tagjit requests in the API server so bad input is an HTTP 400."""
    from vllm.sampling_params import SamplingParams

    original = SamplingParams._validate_structured_outputs
    if getattr(original, "_tagjit", False):
        return

    @functools.wraps(original)
    def _validate_structured_outputs(self: SamplingParams, model_config: Any, so_config: Any,
                                     tokenizer: Any) -> None:
        if so_config is None or so_config.backend != NAME or self.structured_outputs is None:
            return original(self, model_config, so_config, tokenizer)
        validate_request(self, model_config, tokenizer)

    _validate_structured_outputs._tagjit = True  # type: ignore[attr-defined]
    replace_attr(SamplingParams, "_validate_structured_outputs", _validate_structured_outputs)


def validate_request(params: Any, model_config: Any, tokenizer: Any) -> None:
    """tagjit's check of a request's structured-output parameters (raises VLLMValidationError)."""
    from vllm.exceptions import VLLMValidationError

    from tagjit import engine
    from tagjit.engine import validate

    so = params.structured_outputs
    if getattr(model_config, "is_diffusion", False):
        raise VLLMValidationError("Structured outputs are not supported for diffusion language models.")
    if tokenizer is None:
        raise VLLMValidationError("Structured outputs need a tokenizer; they cannot be used with skip_tokenizer_init")
    backend = so._backend
    if backend and backend != NAME:
        raise VLLMValidationError(
            f"Request-level structured output backend selection is not supported: the request asked for "
            f"'{backend}' but the server uses '{NAME}'.")
    so._backend = NAME
    try:
        apply_request_options(params)
        constraint = request_constraint(so)
        validate(constraint, server_settings())
    except engine.ConstraintError as e:
        raise VLLMValidationError(str(e)) from None


ANY_ORDER_ARG = "tagjit_any_order"


def apply_request_options(params: Any) -> None:
    """Per-request tagjit options from ``vllm_xargs`` (``{"tagjit_any_order": 1}``: properties in any order)."""
    extra = params.extra_args or {}
    if ANY_ORDER_ARG not in extra or params.structured_outputs.json is None:
        return
    import json

    from tagjit.engine import with_any_order
    from tagjit.engine import parse_schema

    value = extra[ANY_ORDER_ARG]
    enabled = value is True or str(value).lower() in ("1", "true", "yes", "on")
    so = params.structured_outputs
    so.json = json.dumps(with_any_order(parse_schema(so.json), enabled))


def request_constraint(so: Any) -> "Any":
    """The core Constraint for vLLM's StructuredOutputsParams."""
    from tagjit import engine
    from tagjit.engine import Constraint, Kind

    if so.json is not None:
        if isinstance(so.json, str) and not so.json.strip():
            raise engine.ConstraintError("structured_outputs.json cannot be an empty string")
        return Constraint.of(Kind.JSON, so.json)
    if so.json_object is not None:
        if so.json_object is False:
            raise engine.ConstraintError("structured_outputs.json_object must be true if set")
        return Constraint.of(Kind.JSON_OBJECT, "")
    if so.regex is not None:
        return Constraint.of(Kind.REGEX, so.regex)
    if so.choice is not None:
        if isinstance(so.choice, list) and not so.choice:
            raise engine.ConstraintError("structured_outputs.choice cannot be an empty list")
        return Constraint.of(Kind.CHOICE, so.choice)
    if so.grammar is not None:
        if not so.grammar.strip():
            raise engine.ConstraintError("structured_outputs.grammar cannot be an empty string")
        return Constraint.of(Kind.GRAMMAR, so.grammar)
    if so.structural_tag is not None:
        if isinstance(so.structural_tag, str) and not so.structural_tag.strip():
            raise engine.ConstraintError("structured_outputs.structural_tag cannot be an empty string")
        return Constraint.of(Kind.STRUCTURAL_TAG, so.structural_tag)
    raise engine.ConstraintError("no structured output constraint given")


def patch_structural_tag_validation() -> None:
    """The OpenAI layer checks structural tags with xgrammar whatever the backend, with a generic
    message; under tagjit, tagjit checks them and the 400 names the problem."""
    from vllm.entrypoints.generate.base import protocol

    original = protocol.validate_structural_tag_payload
    if getattr(original, "_tagjit", False):
        return

    @functools.wraps(original)
    def validate_structural_tag_payload(payload: Any, *, parameter: str) -> None:
        if not active():
            return original(payload, parameter=parameter)
        from tagjit import engine
        from tagjit.engine import validate
        from tagjit.engine import Constraint, Kind
        from vllm.exceptions import VLLMValidationError

        try:
            if isinstance(payload, str) and not payload.strip():
                raise engine.ConstraintError("empty structural tag")
            validate(Constraint.of(Kind.STRUCTURAL_TAG, payload), server_settings())
        except engine.ConstraintError as e:
            raise VLLMValidationError(f"Invalid {parameter} structural_tag specification: {e}",
                                      parameter=parameter) from None

    validate_structural_tag_payload._tagjit = True  # type: ignore[attr-defined]
    replace_attr(protocol, "validate_structural_tag_payload", validate_structural_tag_payload)
