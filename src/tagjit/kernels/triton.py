"""Triton kernel that applies packed int32 token bitmasks to logits in place.

Imported lazily by ``tagjit.kernels`` (Triton is optional). The kernel is jitted on first use and
again if ``TRITON_INTERPRET`` changes, so tests can run it on CPU tensors under the interpreter.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

# xgrammar's tuned choice: 4096 logits per program, 16 bytes of logits per thread.
DEFAULT_BLOCK_SIZE = 4096


def _apply_bitmask_kernel(
    logits_ptr,
    bitmask_ptr,
    rows_ptr,
    logits_row_stride,
    logits_col_stride,
    bitmask_row_stride,
    bitmask_col_stride,
    vocab_size,
    HAS_ROWS: tl.constexpr,
    ROWS_SELECT_BITMASK: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    # Program (i, j) masks columns [j * BLOCK_SIZE, (j + 1) * BLOCK_SIZE) of one logits row: row i,
    # or rows[i] when HAS_ROWS. The bitmask row is the logits row when ROWS_SELECT_BITMASK (the
    # xgrammar `indices` contract), else i. A negative rows[i] skips the program.
    pid = tl.program_id(0)
    block = tl.program_id(1)
    if HAS_ROWS:
        row = tl.load(rows_ptr + pid).to(tl.int64)
    else:
        row = pid.to(tl.int64)
    if ROWS_SELECT_BITMASK:
        mask_row = row
    else:
        mask_row = pid.to(tl.int64)
    # Inactive rows mask no column: a zero limit keeps every load and store off.
    limit = tl.where(row >= 0, vocab_size, 0)

    words = block * (BLOCK_SIZE // 32) + tl.arange(0, BLOCK_SIZE // 32)
    packed = tl.load(
        bitmask_ptr + mask_row * bitmask_row_stride + words * bitmask_col_stride,
        mask=words * 32 < limit,
        other=-1,
    )
    disallowed = ((packed[:, None] >> tl.arange(0, 32)[None, :]) & 1) == 0
    disallowed = tl.reshape(disallowed, (BLOCK_SIZE,))

    cols = block * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(
        logits_ptr + row * logits_row_stride + cols * logits_col_stride,
        -float("inf"),
        mask=disallowed & (cols < limit),
    )


_jitted: dict[bool, object] = {}


def _interpreting() -> bool:
    knobs = getattr(triton, "knobs", None)  # Triton >= 3.4; older ones read the variable directly
    if knobs is not None:
        return bool(knobs.runtime.interpret)
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def _kernel():
    interpret = _interpreting()
    kernel = _jitted.get(interpret)
    if kernel is None:
        kernel = _jitted[interpret] = triton.jit(_apply_bitmask_kernel)
    return kernel


def apply_rows(
    logits: torch.Tensor,
    bitmask: torch.Tensor,
    rows: torch.Tensor | None,
    rows_select_bitmask: bool,
    vocab_size: int,
    block_size: int | None = None,
    num_warps: int | None = None,
) -> None:
    """Launch the kernel on 2D `logits` and `bitmask`; `rows` is a device int tensor or None (all rows)."""
    num_programs = logits.shape[0] if rows is None else rows.shape[0]
    if num_programs == 0 or vocab_size <= 0:
        return
    block = block_size or DEFAULT_BLOCK_SIZE
    if block % 32 or block & (block - 1):
        raise ValueError(f"block_size must be a power of two and a multiple of 32, got {block}")
    if num_warps is None:
        num_warps = max(1, min(32, block // 32 // (16 // logits.element_size())))
    grid = (num_programs, triton.cdiv(vocab_size, block))
    _kernel()[grid](
        logits,
        bitmask,
        rows,
        logits.stride(0),
        logits.stride(1),
        bitmask.stride(0),
        bitmask.stride(1),
        vocab_size,
        HAS_ROWS=rows is not None,
        ROWS_SELECT_BITMASK=rows_select_bitmask,
        BLOCK_SIZE=block,
        num_warps=num_warps,
    )
