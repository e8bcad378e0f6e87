"""The CPU kernel: numba (compiled on first use, cached on disk), xgrammar's C++ kernel as fallback, and plain torch."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import numpy as np
import torch

logger = logging.getLogger(__name__)

# -inf as the integer the kernels store through an integer view of the logits.
NEG_INF_BITS = {
    torch.float32: (torch.int32, np.int32(-0x00800000)),  # 0xFF800000
    torch.bfloat16: (torch.int16, np.int16(-0x0080)),  # 0xFF80
    torch.float16: (torch.int16, np.int16(-0x0400)),  # 0xFC00
}


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


def numba_kernel():
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
            for int_dtype, neg_inf in NEG_INF_BITS.values():
                probe = torch.zeros((1, 8), dtype=int_dtype).numpy()
                kernel(probe, probe_mask, probe_rows, probe_rows, 8, neg_inf)
                if probe[0, 0] != neg_inf:
                    raise RuntimeError("numba bitmask kernel self-check failed")
            return kernel
        except Exception as exc:
            last = exc
    logger.warning("numba bitmask kernel unusable (%s): CPU bitmasks use xgrammar's kernel", last)
    return None


def apply_cpu(logits: torch.Tensor, bitmask: torch.Tensor, rows: Sequence[int] | torch.Tensor | None,
               rows_select_bitmask: bool, vocab: int) -> None:
    kernel = numba_kernel()
    if kernel is None:
        _apply_cpu_fallback(logits, bitmask, rows, rows_select_bitmask, vocab)
        return
    int_dtype, neg_inf = NEG_INF_BITS[logits.dtype]
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
        apply_torch(logits, bitmask, rows, rows_select_bitmask, vocab)
        return
    import xgrammar as xgr

    indices = None if rows is None else (rows.tolist() if isinstance(rows, torch.Tensor) else list(rows))
    # An explicit vocab_size keeps xgrammar from warning about a narrow bitmask; semantics match.
    xgr.apply_token_bitmask_inplace(logits, bitmask, vocab_size=vocab, indices=indices, backend="cpu")


# ---- any device: torch ---------------------------------------------------------------------------

def apply_torch(logits: torch.Tensor, bitmask: torch.Tensor, rows: Sequence[int] | torch.Tensor | None,
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
