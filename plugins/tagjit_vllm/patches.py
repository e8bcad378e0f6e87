"""The vLLM patch points (config, frontend validation, engine-core grammar init), for 0.32 and 0.33.

0.33 adds two engine-core details that these patches follow: ``StructuredOutputManager.backend_name``
latches the engine's one backend (a request resolved to another gets vLLM's own per-request error), and
``_masked_reasoning_ends`` probes the grammar while a request is still reasoning.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import typing
from typing import Any, Callable, Iterator

log = logging.getLogger("tagjit")
NAME = "tagjit"


# Set when this process builds a config that selects tagjit, with that config's whitespace choice. vLLM hands
# its config to the processes it starts (API servers, engine cores, workers) without validating it again, so
# the choice also travels in the environment those processes inherit.
ACTIVE_ENV = "TAGJIT_VLLM_SELECTED"
COMPACT_ENV = "TAGJIT_VLLM_COMPACT"
_state = {"active": os.environ.get(ACTIVE_ENV) == "1", "compact": os.environ.get(COMPACT_ENV) == "1"}


def active() -> bool:
    """Whether this process's vLLM config selected tagjit as its structured-output backend."""
    return _state["active"]


def select(compact: bool) -> None:
    """Record that this process's vLLM config selected tagjit, for it and the processes it starts."""
    _state["active"], _state["compact"] = True, compact
    os.environ[ACTIVE_ENV] = "1"
    os.environ[COMPACT_ENV] = "1" if compact else "0"


def server_settings() -> Any:
    """tagjit's settings as this server's vLLM config refines them: ``disable_any_whitespace`` means compact
    JSON in every grammar the API server builds or checks, as it does in the engine core."""
    import tagjit

    settings = tagjit.get_settings()
    return settings.replace(max_whitespace=0) if _state["compact"] else settings


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


def install() -> None:
    """Apply every backend patch, all or none (each one is idempotent)."""
    with transaction():
        patch_config()
        patch_validation()
        patch_structural_tag_validation()
        patch_grammar_init()
        patch_manager_latch()
        patch_masked_reasoning_ends()
        patch_scheduler_requests()


def patch_config() -> None:
    """Let ``StructuredOutputsConfig.backend`` take "tagjit" (CLI, ``LLM(...)``, direct construction)."""
    from pydantic.dataclasses import rebuild_dataclass
    from vllm.config.structured_outputs import StructuredOutputsConfig as cls

    field = cls.__dataclass_fields__["backend"]
    choices = typing.get_args(field.type)
    if NAME in choices:
        return
    new_type = typing.Literal[(*choices, NAME)]  # type: ignore[valid-type]
    old_type, old_annotation = field.type, cls.__annotations__["backend"]
    field.type = new_type
    cls.__annotations__["backend"] = new_type
    old_funcs = {name: dec.func for name, dec in cls.__pydantic_decorators__.model_validators.items()}

    def undo() -> None:
        field.type = old_type
        cls.__annotations__["backend"] = old_annotation
        for name, dec in cls.__pydantic_decorators__.model_validators.items():
            dec.func = old_funcs.get(name, dec.func)
        rebuild_dataclass(cls, force=True)

    on_undo(undo)

    # Its validator allows disable_any_whitespace only for xgrammar/guidance; tagjit honours it too.
    decorators = cls.__pydantic_decorators__.model_validators
    for name, dec in decorators.items():
        if getattr(dec.func, "_tagjit", False):
            continue
        original = dec.func

        @functools.wraps(original)
        def validate(self: Any, _original: Any = original) -> Any:
            if self.backend == NAME:
                select(compact=bool(self.disable_any_whitespace))
            if self.backend == NAME and self.disable_any_whitespace:
                self.disable_any_whitespace = False
                try:
                    return _original(self)
                finally:
                    self.disable_any_whitespace = True
            return _original(self)

        validate._tagjit = True  # type: ignore[attr-defined]
        dec.func = validate
    rebuild_dataclass(cls, force=True)


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

    import tagjit
    from tagjit.compiler import validate

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
    except tagjit.ConstraintError as e:
        raise VLLMValidationError(str(e)) from None


ANY_ORDER_ARG = "tagjit_any_order"


def apply_request_options(params: Any) -> None:
    """Per-request tagjit options from ``vllm_xargs`` (``{"tagjit_any_order": 1}``: properties in any order)."""
    extra = params.extra_args or {}
    if ANY_ORDER_ARG not in extra or params.structured_outputs.json is None:
        return
    import json

    from tagjit.any_order import with_any_order
    from tagjit.schema import parse_schema

    value = extra[ANY_ORDER_ARG]
    enabled = value is True or str(value).lower() in ("1", "true", "yes", "on")
    so = params.structured_outputs
    so.json = json.dumps(with_any_order(parse_schema(so.json), enabled))


def request_constraint(so: Any) -> "Any":
    """The core Constraint for vLLM's StructuredOutputsParams."""
    import tagjit
    from tagjit.spec import Constraint, Kind

    if so.json is not None:
        if isinstance(so.json, str) and not so.json.strip():
            raise tagjit.ConstraintError("structured_outputs.json cannot be an empty string")
        return Constraint.of(Kind.JSON, so.json)
    if so.json_object is not None:
        if so.json_object is False:
            raise tagjit.ConstraintError("structured_outputs.json_object must be true if set")
        return Constraint.of(Kind.JSON_OBJECT, "")
    if so.regex is not None:
        return Constraint.of(Kind.REGEX, so.regex)
    if so.choice is not None:
        if isinstance(so.choice, list) and not so.choice:
            raise tagjit.ConstraintError("structured_outputs.choice cannot be an empty list")
        return Constraint.of(Kind.CHOICE, so.choice)
    if so.grammar is not None:
        if not so.grammar.strip():
            raise tagjit.ConstraintError("structured_outputs.grammar cannot be an empty string")
        return Constraint.of(Kind.GRAMMAR, so.grammar)
    if so.structural_tag is not None:
        if isinstance(so.structural_tag, str) and not so.structural_tag.strip():
            raise tagjit.ConstraintError("structured_outputs.structural_tag cannot be an empty string")
        return Constraint.of(Kind.STRUCTURAL_TAG, so.structural_tag)
    raise tagjit.ConstraintError("no structured output constraint given")


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
        import tagjit
        from tagjit.compiler import validate
        from tagjit.spec import Constraint, Kind
        from vllm.exceptions import VLLMValidationError

        try:
            if isinstance(payload, str) and not payload.strip():
                raise tagjit.ConstraintError("empty structural tag")
            validate(Constraint.of(Kind.STRUCTURAL_TAG, payload), server_settings())
        except tagjit.ConstraintError as e:
            raise VLLMValidationError(f"Invalid {parameter} structural_tag specification: {e}",
                                      parameter=parameter) from None

    validate_structural_tag_payload._tagjit = True  # type: ignore[attr-defined]
    replace_attr(protocol, "validate_structural_tag_payload", validate_structural_tag_payload)


LIVE_ATTR = "_tagjit_live_requests"


def patch_scheduler_requests() -> None:
    """Give the structured-output manager a view of the scheduler's live requests, so the JIT policy
    knows whether a wait at a first mask would stall anyone else."""
    from vllm.v1.core.sched.scheduler import Scheduler

    original = Scheduler.__init__
    if getattr(original, "_tagjit", False):
        return

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        manager = getattr(self, "structured_output_manager", None)
        if manager is not None and isinstance(getattr(self, "requests", None), dict):
            setattr(manager, LIVE_ATTR, self.requests)  # the scheduler's own dict: always current

    __init__._tagjit = True  # type: ignore[attr-defined]
    replace_attr(Scheduler, "__init__", __init__)


def patch_grammar_init() -> None:
    """Create tagjit's backend in the engine core and start compiles under the JIT policy."""
    from vllm.v1.structured_output import StructuredOutputManager

    original = StructuredOutputManager.grammar_init
    if getattr(original, "_tagjit", False):
        return

    @functools.wraps(original)
    def grammar_init(self: StructuredOutputManager, request: Any) -> None:
        struct = request.structured_output_request
        if struct is None or request.sampling_params is None \
                or request.sampling_params.structured_outputs._backend != NAME:
            return original(self, request)
        from concurrent.futures import Future

        from .backend import TagjitBackend

        if self.backend is None:
            self.backend = TagjitBackend(self.vllm_config, tokenizer=self.tokenizer,
                                         vocab_size=self.vllm_config.model_config.get_vocab_size())
        if hasattr(self, "backend_name"):  # vLLM 0.33: the engine's one backend
            self.backend_name = NAME
        live = getattr(self, LIVE_ATTR, None)
        try:
            struct.grammar = self.backend.start(request, others_live=len(live) if live is not None else None)
        except Exception as e:  # reaches the scheduler as this request's compile error
            log.error("tagjit: request %s: %s", request.request_id, e)
            failed: Future = Future()
            failed.set_exception(e)
            struct.grammar = failed

    grammar_init._tagjit = True  # type: ignore[attr-defined]
    replace_attr(StructuredOutputManager, "grammar_init", grammar_init)


def patch_manager_latch() -> None:
    """vLLM 0.33: an engine configured for tagjit latches ``backend_name`` to tagjit from the start, so a
    request that resolved to another backend gets vLLM's own "one backend per engine" error."""
    from vllm.v1.structured_output import StructuredOutputManager

    original = StructuredOutputManager.__init__
    if getattr(original, "_tagjit", False):
        return

    @functools.wraps(original)
    def __init__(self: Any, vllm_config: Any, *args: Any, **kwargs: Any) -> None:
        original(self, vllm_config, *args, **kwargs)
        so_config = getattr(vllm_config, "structured_outputs_config", None)
        if hasattr(self, "backend_name") and getattr(so_config, "backend", None) == NAME:
            self.backend_name = NAME

    __init__._tagjit = True  # type: ignore[attr-defined]
    replace_attr(StructuredOutputManager, "__init__", __init__)


def patch_masked_reasoning_ends() -> None:
    """vLLM 0.33 asks a reasoning request's grammar, inside the scheduler's bitmask step, which implicit
    reasoning-end tokens it cannot start with, and caches the answer. A tagjit grammar still compiling (JIT)
    must not stall that step: until it is compiled, every implicit end token is masked (so none that the
    grammar may reject gets through) and nothing is cached; the first step after the compile asks again
    and caches the exact answer."""
    from vllm.v1.structured_output import StructuredOutputManager

    original = getattr(StructuredOutputManager, "_masked_reasoning_ends", None)
    if original is None or getattr(original, "_tagjit", False):
        return  # vLLM 0.32 has no such probe

    @functools.wraps(original)
    def _masked_reasoning_ends(self: Any, request: Any) -> tuple[int, ...]:
        struct = request.structured_output_request
        if struct is None or struct.masked_reasoning_end_ids is not None:  # every step after the first: cached
            return original(self, request)
        from tagjit import metrics

        from .backend import TagjitGrammar

        grammar = struct.grammar
        if not isinstance(grammar, TagjitGrammar):
            return original(self, request)
        if grammar.grammar.ready():
            metrics.REASONING_PROBES.labels("exact").inc()
            return original(self, request)
        with grammar.provisional():
            masked = original(self, request)
        struct.masked_reasoning_end_ids = None  # ask again once the grammar is compiled
        metrics.REASONING_PROBES.labels("provisional").inc()
        return masked

    _masked_reasoning_ends._tagjit = True  # type: ignore[attr-defined]
    replace_attr(StructuredOutputManager, "_masked_reasoning_ends", _masked_reasoning_ends)
