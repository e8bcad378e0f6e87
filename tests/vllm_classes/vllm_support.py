"""Helpers for driving tagjit through vLLM's own classes, the same on vLLM 0.32 and 0.33."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shared_data import TOKENIZERS

# Reasoning and tool-call markers of Qwen3, added to the Qwen2 vocabulary as Qwen3 has them (non-special added
# tokens): vLLM's qwen3 reasoning parser needs them as single tokens, <tool_call> being its implicit reasoning end.
QWEN3_ADDED_TOKENS = ("<think>", "</think>", "<tool_call>", "</tool_call>")
VOCAB_SIZE = 151936  # Qwen2/3 checkpoints pad their 151,646-token vocabulary to this many logits


def vllm_version() -> tuple[int, int]:
    """(major, minor) of the installed vLLM, as tagjit's plugin reads it; (0, 0) without vLLM."""
    try:
        import vllm
    except ImportError:
        return (0, 0)
    major, minor = str(vllm.__version__).split(".")[:2]
    return int(major), int(minor)


def requires_vllm_033(feature: str) -> pytest.MarkDecorator:
    """Skip where the installed vLLM predates 0.33, which brought ``feature``."""
    major, minor = vllm_version()
    return pytest.mark.skipif((major, minor) < (0, 33), reason=f"{feature} is new in vLLM 0.33 ({major}.{minor} here)")


def import_or_skip(module: str) -> Any:
    """Import a vLLM module or skip the test, naming the module and its import error (some need a GPU build)."""
    import importlib

    try:
        return importlib.import_module(module)
    except (ImportError, OSError, RuntimeError) as e:  # a CUDA-only library, a missing optional package, ...
        pytest.skip(f"{module} does not import here: {type(e).__name__}: {e}")


def build_tiny_model(out_dir: Path) -> Path:
    """A model directory vLLM can build a ModelConfig from: Qwen2 config (no weights) and the Qwen2 tokenizer
    from ../shared/data with Qwen3's reasoning and tool-call tokens added."""
    from transformers import AutoTokenizer, Qwen2Config

    tokenizer = AutoTokenizer.from_pretrained(str(TOKENIZERS / "qwen2"))
    tokenizer.add_tokens(list(QWEN3_ADDED_TOKENS), special_tokens=False)
    tokenizer.save_pretrained(str(out_dir))
    config = Qwen2Config(vocab_size=VOCAB_SIZE, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4096,
                         tie_word_embeddings=True, dtype="float32")
    config.architectures = ["Qwen2ForCausalLM"]
    config.save_pretrained(str(out_dir))
    return out_dir


def vllm_config(model_dir: Path, **structured_outputs: Any) -> Any:
    """A real VllmConfig for the tiny model with these structured-output settings."""
    from vllm.config import ModelConfig, StructuredOutputsConfig, VllmConfig

    model = ModelConfig(model=str(model_dir), tokenizer=str(model_dir), dtype="float32", max_model_len=512, seed=0)
    return VllmConfig(model_config=model, structured_outputs_config=StructuredOutputsConfig(**structured_outputs))


def masked_tokens(row: np.ndarray, vocab_size: int) -> list[int]:
    """Token ids whose bit is 0 in a packed int32 bitmask row."""
    bits = np.unpackbits(np.ascontiguousarray(row).view(np.uint8), bitorder="little")[:vocab_size]
    return np.flatnonzero(bits == 0).tolist()


def use_cpu_platform() -> None:
    """vLLM 0.33 exists only as a CUDA build; without a GPU it infers no device unless told "cpu"."""
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
