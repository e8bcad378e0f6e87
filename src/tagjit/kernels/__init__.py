"""Apply packed int32 token bitmasks to logits in place: a Triton kernel on GPUs, numba on CPUs.

Semantics (xgrammar's ``apply_token_bitmask_inplace``, exactly):

* ``logits`` is ``(rows, V)`` or ``(V,)``, float32 / bfloat16 / float16, any strides.
  ``bitmask`` is ``(rows', W)`` or ``(W,)``, int32, on the same device. Bit ``j % 32`` of word
  ``j // 32`` is token ``j``: 1 = allowed, 0 = masked.
* Only columns ``j < min(V, 32 * W)`` are masked. Logits columns from ``32 * W`` on (a vocabulary
  padding the bitmask does not cover) are left untouched; bits past ``V`` are ignored.
* ``indices=None``: ``rows == rows'`` and bitmask row ``i`` masks logits row ``i``. With indices,
  only the listed rows are masked, each with its own bitmask row; every index must lie in
  ``[0, min(rows, rows'))`` (checked for lists and CPU tensors; a device tensor is trusted, as
  checking it would synchronise). Duplicates are harmless.
* A masked logit becomes exactly ``-inf``; allowed logits are never written (NaN, ``-0.0`` and
  ``inf`` stay bit-for-bit).

Backends: "triton" (CUDA tensors; needs Triton, imported lazily), "cpu" (a numba kernel compiled
on first use and cached on disk; without numba, or if it fails, xgrammar's own C++ CPU kernel),
"torch" (plain torch ops, any device). "auto" picks by device.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Sequence
from typing import Literal

import torch
from tagjit.kernels.cpu import apply_cpu, apply_torch, numba_kernel



Backend = Literal["auto", "triton", "cpu", "torch"]
Indices = Sequence[int] | torch.Tensor | None

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def apply_token_bitmask_inplace(logits: torch.Tensor, bitmask: torch.Tensor, indices: Indices = None,
                                *, backend: Backend = "auto") -> None:
    """Set ``logits[i, j] = -inf`` where bit ``j`` of ``bitmask[i]`` is 0, for rows ``indices`` (all if None)."""
    logits2d, bitmask2d, vocab = _check(logits, bitmask)
    rows = None
    if indices is None:
        if logits2d.shape[0] != bitmask2d.shape[0]:
            raise ValueError(
                f"without indices, logits and bitmask need the same number of rows, got "
                f"{logits2d.shape[0]} and {bitmask2d.shape[0]}")
    else:
        rows = _check_indices(indices, min(logits2d.shape[0], bitmask2d.shape[0]))
    _dispatch(logits2d, bitmask2d, rows, True, vocab, backend)


def apply_token_bitmask_rows_inplace(logits: torch.Tensor, bitmask: torch.Tensor, rows: torch.Tensor,
                                     *, backend: Backend = "auto") -> None:
    """Mask logits row ``rows[i]`` with bitmask row ``i``; negative ``rows[i]`` are skipped, others must be unique."""
    logits2d, bitmask2d, vocab = _check(logits, bitmask)
    if not isinstance(rows, torch.Tensor) or rows.dim() != 1 or rows.dtype not in (torch.int32, torch.int64):
        raise ValueError("rows must be a 1D int32 or int64 tensor")
    if rows.shape[0] > bitmask2d.shape[0]:
        raise ValueError(f"{rows.shape[0]} rows but only {bitmask2d.shape[0]} bitmask rows")
    if rows.device != logits.device:
        raise ValueError(f"rows must be on {logits.device}, got {rows.device}")
    if rows.device.type == "cpu" and rows.numel() and int(rows.max()) >= logits2d.shape[0]:
        raise ValueError(f"row {int(rows.max())} is out of range for {logits2d.shape[0]} logits rows")
    _dispatch(logits2d, bitmask2d, rows, False, vocab, backend)


def prepare_kernels(device: torch.device | str = "cpu", vocab_size: int = 1024,
                    dtypes: Sequence[torch.dtype] = _DTYPES) -> float:
    """Compile every launch shape of the kernels for a device and logits dtypes now; returns milliseconds."""
    import time

    start = time.perf_counter()
    words = (vocab_size + 31) // 32
    for dtype in dtypes:
        logits = torch.zeros((2, vocab_size), dtype=dtype, device=device)
        bitmask = torch.zeros((2, words), dtype=torch.int32, device=device)
        apply_token_bitmask_inplace(logits, bitmask)
        apply_token_bitmask_inplace(logits, bitmask, [1])
        apply_token_bitmask_rows_inplace(logits, bitmask, torch.tensor([1, -1], dtype=torch.int32, device=device))
        if not bool(torch.isneginf(logits).all()):
            raise RuntimeError(f"bitmask kernel self-check failed on {device} for {dtype}")
    return (time.perf_counter() - start) * 1000


def cpu_backend() -> str:
    """The CPU kernel in use: "numba" or "xgrammar" (compiles the numba kernel if not done yet)."""
    return "numba" if numba_kernel() is not None else "xgrammar"


def _check(logits: torch.Tensor, bitmask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    if not isinstance(logits, torch.Tensor) or not isinstance(bitmask, torch.Tensor):
        raise TypeError("logits and bitmask must be torch tensors")
    if logits.dtype not in _DTYPES:
        raise ValueError(f"logits must be float32, bfloat16 or float16, got {logits.dtype}")
    if bitmask.dtype != torch.int32:
        raise ValueError(f"bitmask must be int32, got {bitmask.dtype}")
    if logits.dim() not in (1, 2) or bitmask.dim() not in (1, 2):
        raise ValueError(f"logits and bitmask must be 1D or 2D, got {logits.dim()}D and {bitmask.dim()}D")
    if logits.device != bitmask.device:
        raise ValueError(f"logits and bitmask must be on the same device, got {logits.device} and {bitmask.device}")
    logits2d = logits.unsqueeze(0) if logits.dim() == 1 else logits
    bitmask2d = bitmask.unsqueeze(0) if bitmask.dim() == 1 else bitmask
    return logits2d, bitmask2d, min(logits2d.shape[1], 32 * bitmask2d.shape[1])


def _check_indices(indices: Sequence[int] | torch.Tensor, bound: int) -> Sequence[int] | torch.Tensor:
    if isinstance(indices, torch.Tensor):
        if indices.dim() != 1 or indices.dtype not in (torch.int32, torch.int64):
            raise ValueError("indices must be a 1D int32 or int64 tensor or a list of ints")
        if indices.device.type != "cpu":
            return indices
        values = indices.tolist()
    else:
        values = [int(i) for i in indices]
    bad = [i for i in values if not 0 <= i < bound]
    if bad:
        raise ValueError(f"index {bad[0]} is out of range: indices must lie in [0, {bound})")
    return values


def _dispatch(logits: torch.Tensor, bitmask: torch.Tensor, rows: Sequence[int] | torch.Tensor | None,
              rows_select_bitmask: bool, vocab: int, backend: Backend) -> None:
    if vocab <= 0 or (rows is not None and len(rows) == 0) or logits.shape[0] == 0:
        return
    if backend == "auto":
        backend = {"cpu": "cpu", "cuda": "triton" if _has_triton() else "torch"}.get(logits.device.type, "torch")
    if backend == "triton":
        _apply_triton(logits, bitmask, rows, rows_select_bitmask, vocab)
    elif backend == "cpu":
        if logits.device.type != "cpu":
            raise ValueError(f"the cpu backend needs CPU tensors, got {logits.device}")
        apply_cpu(logits, bitmask, rows, rows_select_bitmask, vocab)
    elif backend == "torch":
        apply_torch(logits, bitmask, rows, rows_select_bitmask, vocab)
    else:
        raise ValueError(f"unknown backend {backend!r}: expected auto, triton, cpu or torch")


@functools.cache
def _has_triton() -> bool:
    return importlib.util.find_spec("triton") is not None


def _apply_triton(logits: torch.Tensor, bitmask: torch.Tensor, rows: Sequence[int] | torch.Tensor | None,
                  rows_select_bitmask: bool, vocab: int, **launch: int) -> None:
    from tagjit.kernels import triton as _triton_bitmask

    if rows is not None and not isinstance(rows, torch.Tensor):
        rows = torch.tensor(rows, dtype=torch.int32).to(logits.device, non_blocking=True)
    elif rows is not None and rows.device != logits.device:
        rows = rows.to(logits.device, non_blocking=True)
    _triton_bitmask.apply_rows(logits, bitmask, rows, rows_select_bitmask, vocab, **launch)
