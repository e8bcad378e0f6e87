"""Model Runner V2's bitmask launch, patched by tagjit, masks the logits vLLM's own Triton kernel masks.

vLLM's kernel runs under the Triton interpreter on CPU tensors. The launch is reproduced as each vLLM release's
``StructuredOutputsWorker.apply_grammar_bitmask`` does it (that method needs CUDA streams): 0.32 maps bitmask rows
to (request, position) pairs per scheduled draft (``_build_grammar_mapping``); 0.33 gives every grammar request a
fixed block of ``mask_stride`` rows.
"""

from __future__ import annotations

import importlib.util
import inspect
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from vllm_support import import_or_skip

pytest.importorskip("vllm")

VOCAB = 1000
WORDS = (VOCAB + 31) // 32


@pytest.fixture(scope="module")
def mrv2() -> Any:
    """Model Runner V2's structured-outputs module with tagjit's launcher installed."""
    module = import_or_skip("vllm.v1.worker.gpu.structured_outputs")
    from tagjit_vllm import apply

    apply.install()
    return module


@pytest.fixture(autouse=True)
def tagjit_selected(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process whose vLLM config selected tagjit; each test counts its own fallbacks to vLLM's kernel."""
    from tagjit_vllm import apply, patches

    monkeypatch.setitem(patches._state, "active", True)
    apply.FALLBACKS.clear()


@pytest.fixture
def vllm_kernel(mrv2: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """vLLM's own MRV2 kernel, from its source, under the Triton interpreter (CPU tensors).

    Without a GPU vLLM replaces Triton with a placeholder, so the kernel's source is loaded again as a module
    that imports the real Triton (the interpreter re-reads a kernel's source from its file).
    """
    triton = pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    _fix_interpreter_scalar_comparisons(monkeypatch, triton)
    original = mrv2._apply_grammar_bitmask_kernel.original
    source = textwrap.dedent(inspect.getsource(getattr(original, "fn", original)))
    path = tmp_path / "vllm_mrv2_kernel.py"
    path.write_text("import triton\nimport triton.language as tl\n\n\n" + source)
    spec = importlib.util.spec_from_file_location("vllm_mrv2_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._apply_grammar_bitmask_kernel


def _fix_interpreter_scalar_comparisons(monkeypatch: pytest.MonkeyPatch, triton: Any) -> None:
    """Triton 3.9's interpreter types a comparison's result like its operands, so a scalar comparison splatted to
    a block (vLLM's ``position_is_active & bitmask``) becomes an int32 mask it then refuses. Type comparison
    results as int1, as compiled Triton does."""
    from triton.runtime import interpreter

    comparisons = {np.less, np.less_equal, np.greater, np.greater_equal, np.equal, np.not_equal}
    original = interpreter.InterpreterBuilder.binary_op

    def binary_op(self: Any, lhs: Any, rhs: Any, op: Any) -> Any:
        if op in comparisons:
            return interpreter.TensorHandle(op(lhs.data, rhs.data), triton.language.int1)
        return original(self, lhs, rhs, op)

    monkeypatch.setattr(interpreter.InterpreterBuilder, "binary_op", binary_op)


def random_bitmask(rows: int, words: int = WORDS, seed: int = 0) -> torch.Tensor:
    """Random packed bitmask rows with every fourth word all-masked."""
    g = np.random.default_rng(seed)
    mask = g.integers(-2**31, 2**31 - 1, size=(rows, words), dtype=np.int32)
    mask[:, 3::4] = 0
    return torch.from_numpy(mask)


def grammar_mapping(mrv2: Any, req_ids: list[str], grammar_req_ids: list[str], cu_num_logits: Sequence[int],
                    draft_tokens: Sequence[int] | None, mask_stride: int) -> list[int]:
    """Bitmask row -> request * mask_stride + position, as this vLLM's apply_grammar_bitmask builds it."""
    if hasattr(mrv2, "_build_grammar_mapping"):  # vLLM 0.32
        return mrv2._build_grammar_mapping(req_ids, grammar_req_ids, np.asarray(cu_num_logits),
                                           None if draft_tokens is None else np.asarray(draft_tokens), 1,
                                           mask_stride)
    index = {req_id: i for i, req_id in enumerate(req_ids)}
    return [index[r] * mask_stride + p for r in grammar_req_ids for p in range(mask_stride)]


def launch(mrv2: Any, kernel: Any, logits: torch.Tensor, bitmask: torch.Tensor, mapping: list[int],
           cu_num_logits: Sequence[int], mask_stride: int) -> None:
    """Launch ``kernel`` exactly as StructuredOutputsWorker.apply_grammar_bitmask does."""
    assert len(mapping) == bitmask.shape[0]
    vocab_size = logits.shape[-1]
    block = getattr(mrv2, "GRAMMAR_BITMASK_BLOCK_SIZE", 8192)
    kernel[(bitmask.shape[0], -(-vocab_size // block))](
        logits, logits.stride(0), torch.tensor(mapping, dtype=torch.int32, device=logits.device),
        torch.tensor(cu_num_logits, dtype=torch.int32, device=logits.device), bitmask, bitmask.stride(0),
        vocab_size, MASK_STRIDE=mask_stride, BLOCK_SIZE=block)


def both(mrv2: Any, vllm_kernel: Any, logits: torch.Tensor, bitmask: torch.Tensor, mapping: list[int],
         cu_num_logits: Sequence[int], mask_stride: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(vLLM's kernel's result, tagjit's launcher's result) on copies of logits."""
    expected, got = logits.clone(), logits.clone()
    launch(mrv2, vllm_kernel, expected, bitmask, mapping, cu_num_logits, mask_stride)
    launch(mrv2, mrv2._apply_grammar_bitmask_kernel, got, bitmask, mapping, cu_num_logits, mask_stride)
    return expected, got


def test_install_puts_tagjits_launcher_in_front_of_vllms_kernel(mrv2):
    from tagjit_vllm import apply

    launcher = mrv2._apply_grammar_bitmask_kernel
    apply.install()
    assert mrv2._apply_grammar_bitmask_kernel is launcher and isinstance(launcher, apply._ModelRunnerV2Kernel)
    assert not isinstance(launcher.original, apply._ModelRunnerV2Kernel)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_drafts_trimmed_on_device_mask_as_vllms_kernel(mrv2, vllm_kernel, dtype):
    from tagjit_vllm import apply

    # Three requests with 2, 0 and 1 scheduled drafts (mask stride 3); adaptive verification left request x
    # only 2 of its 3 logits, so its last mask row must be skipped.
    req_ids, grammar_req_ids = ["x", "y", "z"], ["z", "x"]
    cu_num_logits, draft_tokens = [0, 2, 3, 5], [2, 0, 1]
    mapping = grammar_mapping(mrv2, req_ids, grammar_req_ids, cu_num_logits, draft_tokens, 3)
    bitmask = random_bitmask(len(mapping))
    expected, got = both(mrv2, vllm_kernel, torch.randn(5, VOCAB).to(dtype), bitmask, mapping, cu_num_logits, 3)
    assert torch.equal(got, expected)
    assert torch.isneginf(got[1]).any() and not apply.FALLBACKS


def test_requests_without_drafts_mask_as_vllms_kernel(mrv2, vllm_kernel):
    from tagjit_vllm import apply

    req_ids, grammar_req_ids, cu_num_logits = ["x", "y", "z", "w"], ["w", "y"], [0, 1, 2, 3, 4]
    mapping = grammar_mapping(mrv2, req_ids, grammar_req_ids, cu_num_logits, None, 1)
    bitmask = random_bitmask(len(mapping), seed=3)
    expected, got = both(mrv2, vllm_kernel, torch.randn(4, VOCAB), bitmask, mapping, cu_num_logits, 1)
    assert torch.equal(got, expected)
    assert torch.isneginf(got[3]).any() and not torch.isneginf(got[0]).any() and not apply.FALLBACKS


def test_a_bitmask_narrower_than_the_logits_is_left_to_vllms_kernel(mrv2, vllm_kernel, monkeypatch):
    from tagjit_vllm import apply

    monkeypatch.setattr(mrv2._apply_grammar_bitmask_kernel, "original", vllm_kernel)
    mapping = grammar_mapping(mrv2, ["x", "y"], ["x", "y"], [0, 1, 2], None, 1)
    bitmask = random_bitmask(len(mapping), words=20)  # covers 640 of 1000 logits
    expected, got = both(mrv2, vllm_kernel, torch.randn(2, VOCAB), bitmask, mapping, [0, 1, 2], 1)
    assert torch.equal(got, expected) and apply.FALLBACKS["mrv2"] == 1


def test_a_server_on_another_backend_keeps_vllms_kernel(mrv2, vllm_kernel, monkeypatch):
    from tagjit_vllm import apply, patches

    def tagjits(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("tagjit's kernel ran on a server that did not select tagjit")

    monkeypatch.setitem(patches._state, "active", False)
    monkeypatch.setattr(apply, "tagjit_apply_rows", tagjits)
    monkeypatch.setattr(mrv2._apply_grammar_bitmask_kernel, "original", vllm_kernel)
    mapping = grammar_mapping(mrv2, ["x", "y"], ["x", "y"], [0, 1, 2], None, 1)
    bitmask = random_bitmask(len(mapping), seed=5)
    expected, got = both(mrv2, vllm_kernel, torch.randn(2, VOCAB), bitmask, mapping, [0, 1, 2], 1)
    assert torch.equal(got, expected) and torch.isneginf(got).any() and not apply.FALLBACKS


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_tagjits_launcher_masks_as_vllms_compiled_kernel(mrv2):
    from tagjit_vllm import apply

    original = mrv2._apply_grammar_bitmask_kernel.original
    req_ids, grammar_req_ids = ["x", "y", "z"], ["z", "x"]
    cu_num_logits, draft_tokens = [0, 2, 3, 5], [2, 0, 1]
    mapping = grammar_mapping(mrv2, req_ids, grammar_req_ids, cu_num_logits, draft_tokens, 3)
    bitmask = random_bitmask(len(mapping), words=(151936 + 31) // 32).cuda()
    logits = torch.randn(5, 151936, device="cuda", dtype=torch.bfloat16)
    expected, got = both(mrv2, original, logits, bitmask, mapping, cu_num_logits, 3)
    assert torch.equal(got, expected) and not apply.FALLBACKS
