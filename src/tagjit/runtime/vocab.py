"""Tokenizer loading, fingerprints and the tables tagjit derives from a vocabulary (``per_tokenizer``)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import threading
from functools import lru_cache
from typing import Any, Callable, TypeVar

import xgrammar as xgr

# Llama-3's tiktoken file holds 128,000 ranks; the 256 special slots that follow are in code.
_LLAMA3_SPECIALS = {
    128000: "<|begin_of_text|>",
    128001: "<|end_of_text|>",
    128006: "<|start_header_id|>",
    128007: "<|end_header_id|>",
    128008: "<|eom_id|>",
    128009: "<|eot_id|>",
    128010: "<|python_tag|>",
}


def from_huggingface(tokenizer: Any, vocab_size: int | None = None,
                     stop_token_ids: list[int] | None = None) -> xgr.TokenizerInfo:
    """TokenizerInfo for a Hugging Face (or vLLM) tokenizer object."""
    return xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=stop_token_ids)


def load_tokenizer_info(path: str, vocab_size: int | None = None) -> xgr.TokenizerInfo:
    """Load a tokenizer from a HF directory, a ``tokenizer.model`` (SentencePiece or tiktoken), or vocab.json+merges.txt."""
    return _load_cached(os.path.abspath(path), vocab_size)


@lru_cache(maxsize=8)
def _load_cached(path: str, vocab_size: int | None) -> xgr.TokenizerInfo:
    if os.path.isdir(path):
        model = os.path.join(path, "tokenizer.model")
        hf_files = ("tokenizer.json", "tokenizer_config.json", "vocab.json")
        if not any(os.path.exists(os.path.join(path, f)) for f in hf_files) and os.path.exists(model):
            return _load_model_file(model, vocab_size)
        if os.path.exists(os.path.join(path, "tokenizer.json")) or os.path.exists(
            os.path.join(path, "tokenizer_config.json")
        ):
            try:
                return _load_hf_dir(path, vocab_size)
            except Exception:
                if not os.path.exists(os.path.join(path, "vocab.json")):
                    raise
        if os.path.exists(os.path.join(path, "vocab.json")):
            return _load_byte_level_bpe(path, vocab_size)
        raise ValueError(f"no tokenizer found in directory {path}")
    if os.path.isfile(path):
        return _load_model_file(path, vocab_size)
    raise FileNotFoundError(path)


def _load_hf_dir(path: str, vocab_size: int | None) -> xgr.TokenizerInfo:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    return xgr.TokenizerInfo.from_huggingface(tok, vocab_size=vocab_size)


def _load_byte_level_bpe(path: str, vocab_size: int | None) -> xgr.TokenizerInfo:
    with open(os.path.join(path, "vocab.json"), encoding="utf-8") as f:
        vocab: dict[str, int] = json.load(f)
    added_path = os.path.join(path, "added_tokens.json")
    if os.path.exists(added_path):
        with open(added_path, encoding="utf-8") as f:
            vocab.update(json.load(f))
    size = max(vocab.values()) + 1
    encoded = [""] * size
    for text, idx in vocab.items():
        encoded[idx] = text
    stops = [vocab[t] for t in ("<|im_end|>", "<|endoftext|>", "</s>") if t in vocab]
    return xgr.TokenizerInfo(encoded, xgr.VocabType.BYTE_LEVEL, vocab_size=vocab_size or size,
                             stop_token_ids=stops or None)


def _load_model_file(path: str, vocab_size: int | None) -> xgr.TokenizerInfo:
    with open(path, "rb") as f:
        head = f.read(256)
    first = head.split(b"\n", 1)[0].split(b" ")
    if len(first) == 2 and first[1].strip().isdigit():
        return _load_tiktoken(path, vocab_size)
    return _load_sentencepiece(path, vocab_size)


def _load_tiktoken(path: str, vocab_size: int | None) -> xgr.TokenizerInfo:
    ranks: dict[int, bytes] = {}
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                tok, rank = line.split()
                ranks[int(rank)] = base64.b64decode(tok)
    n = max(ranks) + 1
    specials = dict(_LLAMA3_SPECIALS) if n == 128000 else {}
    total = n + 256 if n == 128000 else n
    encoded: list[bytes] = [ranks.get(i, b"") for i in range(n)]
    for i in range(n, total):
        encoded.append(specials.get(i, f"<|reserved_special_token_{i - n}|>").encode())
    stops = [i for i, t in specials.items() if t in ("<|end_of_text|>", "<|eot_id|>", "<|eom_id|>")]
    return xgr.TokenizerInfo(encoded, xgr.VocabType.RAW, vocab_size=vocab_size or total,
                             stop_token_ids=stops or None)


def _load_sentencepiece(path: str, vocab_size: int | None) -> xgr.TokenizerInfo:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=path)
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    stops = [sp.eos_id()] if sp.eos_id() >= 0 else None
    return xgr.TokenizerInfo(pieces, xgr.VocabType.BYTE_FALLBACK, vocab_size=vocab_size or len(pieces),
                             stop_token_ids=stops, add_prefix_space=True)


_tables: dict[tuple[int, str], tuple[xgr.TokenizerInfo, Any]] = {}
_tables_lock = threading.Lock()
_building: dict[tuple[int, str], threading.Lock] = {}

T = TypeVar("T")


def per_tokenizer(info: xgr.TokenizerInfo, name: str, build: Callable[[xgr.TokenizerInfo], T]) -> T:
    """``build(info)``, once per tokenizer object and table name: the one home of every table tagjit derives from
    a vocabulary (thread-safe; a table being built is waited for, not built twice)."""
    key = (id(info), name)
    with _tables_lock:
        hit = _tables.get(key)
        if hit is not None and hit[0] is info:
            return hit[1]
        key_lock = _building.setdefault(key, threading.Lock())
    with key_lock:
        with _tables_lock:
            hit = _tables.get(key)
            if hit is not None and hit[0] is info:
                return hit[1]
        value = build(info)
        with _tables_lock:
            _tables[key] = (info, value)
    return value


def token_bytes(info: xgr.TokenizerInfo) -> list[bytes]:
    """Each token's bytes, computed once per tokenizer (``decoded_vocab`` rebuilds the list on every access)."""
    return per_tokenizer(info, "token_bytes", lambda i: list(i.decoded_vocab))


def fingerprint(info: xgr.TokenizerInfo) -> str:
    """A stable hash of the vocabulary, its type, size and stop tokens (part of every cache key)."""
    return per_tokenizer(info, "fingerprint", _fingerprint)


def _fingerprint(info: xgr.TokenizerInfo) -> str:
    h = hashlib.sha256()
    h.update(f"{info.vocab_type}|{info.vocab_size}|{info.add_prefix_space}|{sorted(info.stop_token_ids)}".encode())
    for token in token_bytes(info):
        h.update(len(token).to_bytes(4, "little"))
        h.update(token)
    return h.hexdigest()[:32]
