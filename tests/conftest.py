"""Shared fixtures: real tokenizers and real schemas from ../shared/data."""

from __future__ import annotations

import os

import pytest

from pools import UNHURRIED, UNHURRIED_ENV
from shared_data import TOKENIZERS
from tagjit import CompileService, load_tokenizer_info
from walk import Walker

# Processes the tests start (SGLang's harness, CLI runs) compile without a limit the machine's load could reach.
for _name, _value in UNHURRIED_ENV.items():
    os.environ.setdefault(_name, _value)

# Property-based tests draw the same examples on every machine and run: a verdict never depends on the draw or on
# examples a local database replays (a qwen3_coder walk failed here only after one run had stored its seed).
try:
    import hypothesis
except ImportError:  # the vLLM 0.33 venv runs no property-based test
    pass
else:
    hypothesis.settings.register_profile("tagjit", derandomize=True, database=None)
    hypothesis.settings.load_profile("tagjit")


@pytest.fixture(scope="session")
def llama3_info():
    """Llama-3 tiktoken tokenizer (128k + 256 specials)."""
    return load_tokenizer_info(str(TOKENIZERS / "llama3" / "tokenizer.model"))


@pytest.fixture(scope="session")
def qwen2_info():
    """Qwen2 byte-level BPE tokenizer (151k)."""
    return load_tokenizer_info(str(TOKENIZERS / "qwen2"))


@pytest.fixture(scope="session")
def service(llama3_info) -> CompileService:
    """A compile service with default settings over the Llama-3 vocabulary."""
    return CompileService(llama3_info, UNHURRIED)


@pytest.fixture(scope="module")
def svc(qwen2_info) -> CompileService:
    """A compile service with default settings over the Qwen2 vocabulary (one per test module)."""
    return CompileService(qwen2_info, UNHURRIED)


@pytest.fixture(scope="module")
def walker(qwen2_info) -> Walker:
    """A grammar walker over the Qwen2 vocabulary."""
    return Walker(qwen2_info)


@pytest.fixture(scope="module")
def hf_tokenizer():
    """The Qwen2 tokenizer as transformers loads it (for vLLM's tool parsers)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(TOKENIZERS / "qwen2"))
