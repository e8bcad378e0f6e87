"""Paths and loaders for the real data in ../shared/data (imported by tests and conftest)."""

from __future__ import annotations

import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("TAGJIT_SHARED_DATA", ROOT.parent / "shared" / "data"))
TOKENIZERS = DATA / "tokenizers"
SCHEMAS = DATA / "jsonschemabench"


def mistral_tokenizer_model() -> str:
    """The 32k SentencePiece model inside the mistral_common package."""
    import mistral_common

    return os.path.join(os.path.dirname(mistral_common.__file__), "data", "tokenizer.model.v1")


def maskbench(name: str) -> dict:
    """One MaskBench file: a schema with valid and invalid instances."""
    return json.loads((SCHEMAS / "maskbench" / name).read_text())


def schema_file(split: str, name: str) -> dict:
    """One JSONSchemaBench schema."""
    return json.loads((SCHEMAS / split / name).read_text())
