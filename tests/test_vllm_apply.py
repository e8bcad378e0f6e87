"""tagjit_vllm.apply, V1 runner: vLLM's own bitmask call site, patched, gives xgrammar's results (Model Runner V2:
tests/vllm_classes/test_mrv2_kernel.py, on both vLLM releases)."""

from __future__ import annotations


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
