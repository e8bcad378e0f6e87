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
import logging
import threading
from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch

logger = logging.getLogger(__name__)

Backend = Literal["auto", "triton", "cpu", "torch"]
Indices = Sequence[int] | torch.Tensor | None

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# -inf as the integer the kernels store through an integer view of the logits.
_NEG_INF_BITS = {
    torch.float32: (torch.int32, np.int32(-0x00800000)),  # 0xFF800000
    torch.bfloat16: (torch.int16, np.int16(-0x0080)),  # 0xFF80
    torch.float16: (torch.int16, np.int16(-0x0400)),  # 0xFC00
}


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


def cpu_backend() -> str:
    """The CPU kernel in use: "numba" or "xgrammar" (compiles the numba kernel if not done yet)."""
    return "numba" if _numba_kernel() is not None else "xgrammar"


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
        _apply_cpu(logits, bitmask, rows, rows_select_bitmask, vocab)
    elif backend == "torch":
        _apply_torch(logits, bitmask, rows, rows_select_bitmask, vocab)
    else:
        raise ValueError(f"unknown backend {backend!r}: expected auto, triton, cpu or torch")


@functools.cache
def _has_triton() -> bool:
    return importlib.util.find_spec("triton") is not None


def _apply_triton(logits: torch.Tensor, bitmask: torch.Tensor, rows: Sequence[int] | torch.Tensor | None,
                  rows_select_bitmask: bool, vocab: int, **launch: int) -> None:
    from . import _triton_bitmask

    if rows is not None and not isinstance(rows, torch.Tensor):
        rows = torch.tensor(rows, dtype=torch.int32).to(logits.device, non_blocking=True)
    elif rows is not None and rows.device != logits.device:
        rows = rows.to(logits.device, non_blocking=True)
    _triton_bitmask.apply_rows(logits, bitmask, rows, rows_select_bitmask, vocab, **launch)


# ---- CPU: numba ---------------------------------------------------------------------------------

def _numba_body(logits, bitmask, logits_rows, bitmask_rows, vocab, neg_inf):  # pragma: no cover - jitted
    num_words = (vocab + 31) // 32
    for i in range(logits_rows.shape[0]):
        row = logits_rows[i]
        if row < 0:
            continue
        out = logits[row]
        words = bitmask[bitmask_rows[i]]
        for w in range(num_words):
            word = words[w]
            if word == -1:
                continue
            base = w * 32
            end = min(32, vocab - base)
            if word == 0:
                for b in range(end):
                    out[base + b] = neg_inf
            else:
                for b in range(end):
                    if (word >> b) & 1 == 0:
                        out[base + b] = neg_inf


_numba_lock = threading.Lock()
_numba_state: dict[str, object] = {}  # "kernel": the dispatcher, or None once numba proved unusable


def _numba_kernel():
    if "kernel" in _numba_state:
        return _numba_state["kernel"]
    with _numba_lock:
        if "kernel" not in _numba_state:
            _numba_state["kernel"] = _build_numba_kernel()
    return _numba_state["kernel"]


def _build_numba_kernel():
    try:
        import numba
    except Exception as exc:  # not installed (SGLang's images), or a broken install
        logger.info("numba unavailable (%s): CPU bitmasks use xgrammar's kernel", exc)
        return None
    # Serial on purpose: thread-safe under any numba threading layer, and no threads competing
    # with torch's. Compile both integer widths now so a failure shows here, not mid-step.
    probe_rows = np.zeros(1, np.int64)
    probe_mask = np.zeros((1, 1), np.int32)
    for cache in (True, False):  # the disk cache needs a writable location
        try:
            kernel = numba.njit(nogil=True, cache=cache)(_numba_body)
            for int_dtype, neg_inf in _NEG_INF_BITS.values():
                probe = torch.zeros((1, 8), dtype=int_dtype).numpy()
                kernel(probe, probe_mask, probe_rows, probe_rows, 8, neg_inf)
                if probe[0, 0] != neg_inf:
                    raise RuntimeError("numba bitmask kernel self-check failed")
            return kernel
        except Exception as exc:
            last = exc
    logger.warning("numba bitmask kernel unusable (%s): CPU bitmasks use xgrammar's kernel", last)
    return None


def _apply_cpu(logits: torch.Tensor, bitmask: torch.Tensor, rows: Sequence[int] | torch.Tensor | None,
               rows_select_bitmask: bool, vocab: int) -> None:
    kernel = _numba_kernel()
    if kernel is None:
        _apply_cpu_fallback(logits, bitmask, rows, rows_select_bitmask, vocab)
        return
    int_dtype, neg_inf = _NEG_INF_BITS[logits.dtype]
    if rows is None:
        logits_rows = np.arange(logits.shape[0], dtype=np.int64)
        bitmask_rows = logits_rows
    else:
        logits_rows = np.asarray(rows.tolist() if isinstance(rows, torch.Tensor) else rows, dtype=np.int64)
        bitmask_rows = logits_rows if rows_select_bitmask else np.arange(len(logits_rows), dtype=np.int64)
    try:
        kernel(logits.detach().view(int_dtype).numpy(), bitmask.numpy(), logits_rows, bitmask_rows, vocab, neg_inf)
    except Exception as exc:  # e.g. a layout numba cannot compile; masking twice is harmless
        logger.warning("numba bitmask kernel failed (%s): CPU bitmasks use xgrammar's kernel from now on", exc)
        _numba_state["kernel"] = None
        _apply_cpu_fallback(logits, bitmask, rows, rows_select_bitmask, vocab)


def _apply_cpu_fallback(logits: torch.Tensor, bitmask: torch.Tensor, rows: Sequence[int] | torch.Tensor | None,
                        rows_select_bitmask: bool, vocab: int) -> None:
    # xgrammar's API cannot express the rows mapping, and its 0.2.7 CPU kernel ignores column strides.
    if not rows_select_bitmask or logits.stride(1) != 1 or bitmask.stride(1) != 1:
        _apply_torch(logits, bitmask, rows, rows_select_bitmask, vocab)
        return
    import xgrammar as xgr

    indices = None if rows is None else (rows.tolist() if isinstance(rows, torch.Tensor) else list(rows))
    # An explicit vocab_size keeps xgrammar from warning about a narrow bitmask; semantics match.
    xgr.apply_token_bitmask_inplace(logits, bitmask, vocab_size=vocab, indices=indices, backend="cpu")


# ---- any device: torch ---------------------------------------------------------------------------

def _apply_torch(logits: torch.Tensor, bitmask: torch.Tensor, rows: Sequence[int] | torch.Tensor | None,
                 rows_select_bitmask: bool, vocab: int) -> None:
    device = logits.device
    words = (vocab + 31) // 32
    if rows is None:
        logits_rows = torch.arange(logits.shape[0], device=device)
        bitmask_rows = logits_rows
    else:
        logits_rows = torch.as_tensor(rows, dtype=torch.int64).to(device)
        bitmask_rows = logits_rows if rows_select_bitmask else torch.arange(len(logits_rows), device=device)
        keep = logits_rows >= 0
        logits_rows, bitmask_rows = logits_rows[keep], bitmask_rows[keep]
    shifts = torch.arange(32, device=device, dtype=torch.int32)
    packed = bitmask[bitmask_rows, :words]
    disallowed = ((packed.unsqueeze(-1) >> shifts) & 1).eq(0).flatten(-2)[:, :vocab]
    selected = logits[logits_rows, :vocab].masked_fill_(disallowed, float("-inf"))
    logits[logits_rows, :vocab] = selected
