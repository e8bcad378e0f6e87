"""vLLM's config: ``StructuredOutputsConfig.backend`` accepts "tagjit" and records the selection."""

from __future__ import annotations

import functools
import typing
from typing import Any

from .state import NAME, on_undo, select



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
        from vllm.config.vllm import VllmConfig

        rebuild_dataclass(VllmConfig, force=True)

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
    # VllmConfig's validator holds its own copy of the nested config's validators: without a rebuild,
    # `vllm serve` with disable_any_whitespace still ran the original check and refused tagjit.
    from vllm.config.vllm import VllmConfig

    rebuild_dataclass(VllmConfig, force=True)
