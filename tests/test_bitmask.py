"""tagjit.kernels: every backend masks logits exactly like xgrammar's definition.

The Triton kernel runs on CPU tensors under ``TRITON_INTERPRET=1`` with a 64-logit block, so the
small shapes here still span several blocks and a partial last block.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import xgrammar as xgr

from tagjit.kernels import cpu as bm_mod
from tagjit.kernels import apply_token_bitmask_inplace, apply_token_bitmask_rows_inplace, cpu_backend

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
# "cpu-without-numba" is the CPU backend as SGLang's images run it: xgrammar's kernel or torch.
BACKENDS = ["cpu", "cpu-without-numba", "triton", "torch"]
API = {"cpu": "cpu", "cpu-without-numba": "cpu", "triton": "triton", "torch": "torch"}
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
INT_VIEW = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


@pytest.fixture(autouse=True)
def backend_setup(request, monkeypatch):
    """Turn numba off for "cpu-without-numba"; run Triton in the interpreter with small blocks."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and callspec.params.get("backend") == "cpu-without-numba":
        monkeypatch.setitem(bm_mod._numba_state, "kernel", None)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    try:
        from tagjit.kernels import triton as _triton_bitmask
    except ImportError:
        return
    monkeypatch.setattr(_triton_bitmask, "DEFAULT_BLOCK_SIZE", 64)


def reference(logits: torch.Tensor, bitmask: torch.Tensor, indices=None) -> torch.Tensor:
    """The definition: logits[r, j] = -inf for j < min(V, 32 W) whose bit in bitmask[r] is 0."""
    out = logits.clone()
    out2 = out if out.dim() == 2 else out.unsqueeze(0)
    mask2 = bitmask if bitmask.dim() == 2 else bitmask.unsqueeze(0)
    vocab = min(out2.shape[1], 32 * mask2.shape[1])
    cols = torch.arange(vocab)
    for r in range(out2.shape[0]) if indices is None else [int(i) for i in indices]:
        bits = (mask2[r, cols // 32] >> (cols % 32).to(torch.int32)) & 1
        out2[r, :vocab][bits == 0] = float("-inf")
    return out


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a.view(INT_VIEW[a.dtype]), b.view(INT_VIEW[b.dtype]))


def make_logits(rows: int, cols: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Random logits with NaN, -0.0, +inf and -inf sprinkled in (they must survive where allowed)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, cols, generator=g)
    specials = torch.tensor([float("nan"), -0.0, float("inf"), float("-inf")])
    spots = torch.randint(0, rows * cols, (4 * rows,), generator=g)
    logits.view(-1)[spots] = specials.repeat(rows)
    return logits.to(dtype)


def make_bitmask(rows: int, words: int, seed: int = 1) -> torch.Tensor:
    """Random words, with whole-word 0 (all masked) and -1 (all allowed) runs mixed in."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.randint(-2**31, 2**31 - 1, (rows, words), generator=g, dtype=torch.int32)
    mask[:, 1::4] = 0
    mask[:, 2::5] = -1
    return mask


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_masks_every_row_exactly_like_the_reference(backend, dtype):
    logits, mask = make_logits(4, 200, dtype), make_bitmask(4, 7)
    expected = reference(logits, mask)
    apply_token_bitmask_inplace(logits, mask, backend=API[backend])
    assert same_bits(logits, expected)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_matches_xgrammar_cpu_kernel(backend, dtype):
    logits, mask = make_logits(4, 200, dtype), make_bitmask(4, 7)
    expected = logits.clone()
    xgr.apply_token_bitmask_inplace(expected, mask)
    apply_token_bitmask_inplace(logits, mask, backend=API[backend])
    assert same_bits(logits, expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_leaves_logits_beyond_the_bitmask_width_untouched(backend):
    logits, mask = make_logits(3, 250, torch.float32), torch.zeros(3, 7, dtype=torch.int32)
    before = logits.clone()
    apply_token_bitmask_inplace(logits, mask, backend=API[backend])
    assert torch.isneginf(logits[:, :224]).all()
    assert same_bits(logits[:, 224:], before[:, 224:])


@pytest.mark.parametrize("backend", BACKENDS)
def test_ignores_bitmask_words_past_the_logits_width(backend):
    logits, mask = make_logits(3, 100, torch.bfloat16), make_bitmask(3, 10)
    expected = reference(logits, mask)
    apply_token_bitmask_inplace(logits, mask, backend=API[backend])
    assert same_bits(logits, expected)


@pytest.mark.parametrize(
    "indices",
    [[2, 0], torch.tensor([3, 1], dtype=torch.int64), torch.tensor([1], dtype=torch.int32), [2, 2]],
    ids=["list", "int64-tensor", "int32-tensor", "duplicates"],
)
@pytest.mark.parametrize("backend", BACKENDS)
def test_masks_only_the_listed_rows(backend, indices):
    logits, mask = make_logits(4, 200, torch.float16), make_bitmask(4, 7)
    expected = reference(logits, mask, indices)
    apply_token_bitmask_inplace(logits, mask, indices, backend=API[backend])
    assert same_bits(logits, expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_indices_may_address_a_bitmask_with_fewer_rows_than_the_logits(backend):
    logits, mask = make_logits(6, 130, torch.float32), make_bitmask(2, 5)
    expected = reference(logits, mask, [1])
    apply_token_bitmask_inplace(logits, mask, [1], backend=API[backend])
    assert same_bits(logits, expected)


# Each layout: the shape of the storage, and the (4, 200) view of it that is masked.
LAYOUTS = {
    "row-gap": ((8, 200), (slice(None, None, 2), slice(None))),
    "row-padding": ((4, 256), (slice(None), slice(0, 200))),
    "column-stride": ((4, 400), (slice(None), slice(None, None, 2))),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_masks_a_strided_view_and_nothing_outside_it(backend, layout):
    shape, view = LAYOUTS[layout]
    storage = make_logits(*shape, torch.bfloat16)
    logits, mask = storage[view], make_bitmask(4, 7)
    expected = storage.clone()
    expected[view] = reference(logits, mask)
    apply_token_bitmask_inplace(logits, mask, backend=API[backend])
    assert same_bits(storage, expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_masks_column_major_logits(backend):
    logits, mask = make_logits(200, 4, torch.float16).t(), make_bitmask(4, 7)
    expected = reference(logits, mask)
    apply_token_bitmask_inplace(logits, mask, backend=API[backend])
    assert same_bits(logits, expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_reads_a_non_contiguous_bitmask(backend):
    logits, wide = make_logits(4, 200, torch.float32), make_bitmask(4, 12)
    mask = wide[:, 2:9]
    expected = reference(logits, mask)
    apply_token_bitmask_inplace(logits, mask, backend=API[backend])
    assert same_bits(logits, expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_accepts_one_dimensional_logits_and_bitmask(backend):
    logits, mask = make_logits(1, 150, torch.float32)[0], make_bitmask(1, 5)[0]
    expected = reference(logits, mask)
    apply_token_bitmask_inplace(logits, mask, backend=API[backend])
    assert same_bits(logits, expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_never_writes_allowed_logits(backend):
    specials = torch.tensor([float("nan"), -0.0, float("inf"), float("-inf")] * 8).reshape(1, 32)
    logits = specials.clone()
    apply_token_bitmask_inplace(logits, torch.tensor([[-1]], dtype=torch.int32), backend=API[backend])
    assert same_bits(logits, specials)
    apply_token_bitmask_inplace(logits, torch.tensor([[0]], dtype=torch.int32), backend=API[backend])
    assert same_bits(logits, torch.full((1, 32), float("-inf")))


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_indices_change_nothing(backend):
    logits, mask = make_logits(3, 64, torch.float32), torch.zeros(3, 2, dtype=torch.int32)
    before = logits.clone()
    apply_token_bitmask_inplace(logits, mask, [], backend=API[backend])
    assert same_bits(logits, before)


@pytest.mark.parametrize("backend", BACKENDS)
def test_rows_variant_maps_bitmask_row_i_to_logits_row_rows_i_and_skips_negatives(backend):
    logits, mask = make_logits(5, 200, torch.bfloat16), make_bitmask(3, 7)
    rows = torch.tensor([4, -1, 0], dtype=torch.int32)
    expected = logits.clone()
    expected[4] = reference(expected[4], mask[0])
    expected[0] = reference(expected[0], mask[2])
    apply_token_bitmask_rows_inplace(logits, mask, rows, backend=API[backend])
    assert same_bits(logits, expected)


@pytest.fixture(scope="module")
def real_bitmask() -> torch.Tensor:
    """Masks a real JSON Schema grammar produces with the Llama-3 vocabulary (128,256 tokens)."""
    from tagjit import Constraint, Kind, allocate_token_bitmask, load_tokenizer_info, service_for

    info = load_tokenizer_info(str(DATA / "tokenizers" / "llama3" / "tokenizer.model"))
    schema = json.loads((DATA / "jsonschemabench" / "Github_easy" / "o10008.json").read_text())
    grammar = service_for(info).grammar(Constraint.of(Kind.JSON, schema))
    mask = allocate_token_bitmask(3, info.vocab_size)
    grammar.fill_bitmask(mask, 0)
    grammar.accept_string("{")
    grammar.fill_bitmask(mask, 2)  # row 1 stays all-allowed, like an unconstrained request
    return mask


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_applies_real_grammar_masks_like_xgrammar(real_bitmask, backend, dtype, monkeypatch):
    if backend == "triton":
        from tagjit.kernels import triton as _triton_bitmask

        monkeypatch.setattr(_triton_bitmask, "DEFAULT_BLOCK_SIZE", 4096)  # the GPU default
    logits = make_logits(3, real_bitmask.shape[1] * 32, dtype)
    before, expected = logits.clone(), logits.clone()
    xgr.apply_token_bitmask_inplace(expected, real_bitmask, indices=[0, 2])
    apply_token_bitmask_inplace(logits, real_bitmask, [0, 2], backend=API[backend])
    assert same_bits(logits, expected)
    assert torch.isneginf(logits[0]).sum() > 100_000 and same_bits(logits[1], before[1])


@pytest.mark.parametrize(
    "logits, mask, indices, message",
    [
        (torch.zeros(4, 64), torch.zeros(3, 2, dtype=torch.int32), None, "same number of rows"),
        (torch.zeros(4, 64), torch.zeros(4, 2, dtype=torch.int32), [4], "out of range"),
        (torch.zeros(4, 64), torch.zeros(2, 2, dtype=torch.int32), [3], "out of range"),
        (torch.zeros(4, 64), torch.zeros(4, 2, dtype=torch.int32), [-1], "out of range"),
        (torch.zeros(4, 64), torch.zeros(4, 2, dtype=torch.int64), None, "int32"),
        (torch.zeros(4, 64, dtype=torch.float64), torch.zeros(4, 2, dtype=torch.int32), None, "float32"),
        (torch.zeros(1, 4, 64), torch.zeros(1, 4, 2, dtype=torch.int32), None, "1D or 2D"),
    ],
    ids=["row-count", "index-past-logits", "index-past-bitmask", "negative-index", "bitmask-dtype",
         "logits-dtype", "3d"],
)
def test_rejects_bad_input_with_the_reason(logits, mask, indices, message):
    with pytest.raises(ValueError, match=message):
        apply_token_bitmask_inplace(logits, mask, indices)


def test_auto_uses_the_numba_kernel_on_cpu_when_numba_is_installed():
    pytest.importorskip("numba")
    assert cpu_backend() == "numba"


FRESH_PROCESS = """
import sys, torch
{block}
from tagjit.kernels import apply_token_bitmask_inplace, cpu_backend
logits = torch.randn(3, 100)
mask = torch.randint(-2**31, 2**31 - 1, (3, 4), dtype=torch.int32)
cols = torch.arange(100)
expected = logits.clone()
for r in (0, 2):
    bits = (mask[r, cols // 32] >> (cols % 32).to(torch.int32)) & 1
    expected[r][bits == 0] = float("-inf")
apply_token_bitmask_inplace(logits, mask, [0, 2])
assert torch.equal(logits.view(torch.int32), expected.view(torch.int32)), "mismatch"
print(cpu_backend())
"""


def run_fresh(block: str) -> str:
    code = FRESH_PROCESS.format(block=block)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TRITON_INTERPRET": "0"})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_a_fresh_process_masks_on_cpu_with_numba():
    pytest.importorskip("numba")
    assert run_fresh("") == "numba"


def test_without_numba_cpu_masks_fall_back_to_xgrammar():
    assert run_fresh("sys.modules['numba'] = None") == "xgrammar"


def test_imports_and_masks_on_cpu_without_triton():
    assert run_fresh("sys.modules['triton'] = None") in ("numba", "xgrammar")


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@cuda
@pytest.mark.parametrize("indices", [None, [3, 0], "tensor"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_compiled_cuda_kernel_matches_xgrammar_triton(monkeypatch, dtype, indices):
    monkeypatch.delenv("TRITON_INTERPRET")
    storage = make_logits(4, 151936 + 64, dtype).cuda()
    logits, mask = storage[:, :151936], make_bitmask(4, 4748).cuda()
    if indices == "tensor":
        indices = torch.tensor([1, 2], dtype=torch.int32, device="cuda")
    expected = storage.clone()
    xgr.apply_token_bitmask_inplace(expected[:, :151936], mask, indices=indices, backend="triton")
    apply_token_bitmask_inplace(logits, mask, indices)
    assert same_bits(storage.cpu(), expected.cpu())


def test_prepare_kernels_compiles_the_cpu_kernel_for_every_dtype():
    from tagjit.kernels import cpu, prepare_kernels

    cpu._numba_state.pop("kernel", None)
    assert prepare_kernels("cpu", 1000) >= 0
    assert cpu._numba_state.get("kernel") is not None
