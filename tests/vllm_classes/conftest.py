"""Fixtures for tests that drive tagjit through vLLM's real classes (vLLM 0.32 in .venv, 0.33 in .venv-vllm033)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pools import UNHURRIED
from vllm_support import build_tiny_model, use_cpu_platform

use_cpu_platform()  # before vLLM resolves its platform


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny local Qwen2-architecture model directory (config and tokenizer, no weights)."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen"))


@pytest.fixture(scope="module", autouse=True)
def tagjit_in_vllm() -> Iterator[None]:
    """tagjit registered as vLLM's plugin would do it, with one compile thread and every compile JIT (so a test
    can hold the compile pool and knows a grammar's shape) and no compile limit the machine's load could reach;
    tagjit's process state is restored afterwards."""
    pytest.importorskip("vllm")
    import tagjit
    import tagjit_vllm
    from tagjit_vllm import patches

    tagjit_vllm.register()
    saved = dict(patches._state)  # the one selection state every patch reads: restored in place, not replaced
    with pytest.MonkeyPatch.context() as mp:
        for name in (patches.ACTIVE_ENV, patches.COMPACT_ENV):  # a config selecting tagjit exports the choice
            mp.setenv(name, os.environ.get(name, "0"))
        mp.setattr(tagjit.settings, "_current", UNHURRIED.replace(compile_threads=1, jit="always"))
        try:
            yield
        finally:
            patches._state.clear()
            patches._state.update(saved)


@pytest.fixture
def manager(config: Any) -> Iterator[Any]:
    """A fresh engine-core StructuredOutputManager for the module's ``config``, shut down as vLLM does."""
    from vllm.v1.structured_output import StructuredOutputManager

    manager = StructuredOutputManager(config)
    yield manager
    manager.clear_backend()
