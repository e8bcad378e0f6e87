"""Shared fixtures: real tokenizers and real schemas from ../shared/data."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tagjit import CompileService, Settings, load_tokenizer_info

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("TAGJIT_SHARED_DATA", ROOT.parent / "shared" / "data"))
TOKENIZERS = DATA / "tokenizers"
SCHEMAS = DATA / "jsonschemabench"


def mistral_tokenizer_model() -> str:
    """The 32k SentencePiece model inside the mistral_common package."""
    import mistral_common

    return os.path.join(os.path.dirname(mistral_common.__file__), "data", "tokenizer.model.v1")


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
    return CompileService(llama3_info, Settings())


def maskbench(name: str) -> dict:
    """One MaskBench file: a schema with valid and invalid instances."""
    return json.loads((SCHEMAS / "maskbench" / name).read_text())


def schema_file(split: str, name: str) -> dict:
    """One JSONSchemaBench schema."""
    return json.loads((SCHEMAS / split / name).read_text())
