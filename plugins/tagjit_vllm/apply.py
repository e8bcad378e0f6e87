"""Route vLLM's token-bitmask application through ``tagjit.kernels``, keeping vLLM's own as fallback.

Two patch points, both module attributes looked up at call time, so nothing else changes:

* V1 runner: ``vllm/v1/structured_output/utils.py: apply_grammar_bitmask`` calls
  ``xgr.apply_token_bitmask_inplace`` through its module global ``xgr``. That global becomes a
  view of xgrammar whose ``apply_token_bitmask_inplace`` is tagjit's (numba on CPU, Triton on GPU);
  every other attribute is xgrammar's.
* Model Runner V2: ``vllm/v1/worker/gpu/structured_outputs.py`` launches its module global
  ``_apply_grammar_bitmask_kernel[grid](...)``. That global becomes a launcher that resolves the
  (request, position) mapping to logits rows on the device and calls tagjit's Triton kernel.

Each worker compiles the kernel for its device and logits dtypes when vLLM warms the model up
(``compile_or_warm_up_model``, before the engine reports ready), not at the first constrained step.

Both do nothing unless tagjit is the server's structured-outputs backend (``patches.active()``): a
server on another backend with tagjit merely installed applies bitmasks as vLLM does. Calls tagjit
does not cover (an explicit ``vocab_size`` or ``backend``, a bitmask narrower than the logits for
MRV2, an unknown launch option) and any exception go to the original, and the first fallback of
each kind is logged. Masking is idempotent, so a retry after a partial write is
still exact.
"""

from __future__ import annotations

import logging
import types
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

from tagjit.engine import apply_token_bitmask_inplace as tagjit_apply
from tagjit.engine import apply_token_bitmask_rows_inplace as tagjit_apply_rows

from . import patches
from .patches import replace_attr

log = logging.getLogger("tagjit")

# How often each patch point fell back to vLLM's own path ("v1", "mrv2"), for metrics and tests.
FALLBACKS: Counter[str] = Counter()


def install() -> None:
    """Make vLLM's V1 runner and Model Runner V2 apply bitmasks with tagjit, both or neither (idempotent)."""
    from .patches import transaction

    with transaction():
        _patch_v1_runner()
        try:
            _patch_model_runner_v2()
        except ImportError as exc:  # a vLLM build without Model Runner V2
            log.debug("tagjit: Model Runner V2 bitmask path not patched: %s", exc)
        _patch_worker_warmup()


def selected() -> bool:
    """Whether tagjit is this server's backend: a server on another backend keeps vLLM's own application."""
    return patches.active()


_APPLIED: set[str] = set()


def _applied(site: str) -> None:
    """Log once per process and site that tagjit's kernel applies the bitmasks."""
    if site not in _APPLIED:
        _APPLIED.add(site)
        log.info("tagjit: token bitmasks applied by tagjit's kernel (%s, %s)", site,
                 "cuda" if torch.cuda.is_available() else "cpu")


def _fell_back(site: str, reason: object) -> None:
    if not FALLBACKS[site]:
        log.warning("tagjit: %s bitmask application fell back to vLLM's own (%s); further "
                    "fallbacks are counted, not logged", site, reason)
    FALLBACKS[site] += 1


class _Xgrammar(types.ModuleType):
    """xgrammar as ``vllm.v1.structured_output.utils`` sees it, with tagjit's bitmask application."""

    def __init__(self, original: Any) -> None:
        super().__init__("xgrammar", "xgrammar with tagjit's apply_token_bitmask_inplace")
        self.tagjit_original = original

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tagjit_original, name)

    def apply_token_bitmask_inplace(self, logits: torch.Tensor, bitmask: torch.Tensor, *,
                                    vocab_size: int | None = None, indices: Any = None,
                                    backend: str = "auto") -> None:
        """tagjit's kernel for xgrammar's default call; xgrammar's for anything else, on error, or when tagjit is
        not the server's backend."""
        if selected():
            if vocab_size is None and backend == "auto":
                try:
                    tagjit_apply(logits, bitmask, indices)
                    _applied("v1")
                    return
                except Exception as exc:
                    _fell_back("v1", exc)
            else:
                _fell_back("v1", f"vocab_size={vocab_size}, backend={backend}")
        self.tagjit_original.apply_token_bitmask_inplace(
            logits, bitmask, vocab_size=vocab_size, indices=indices, backend=backend)


def _patch_v1_runner() -> None:
    from vllm.v1.structured_output import utils

    if not isinstance(utils.xgr, _Xgrammar):
        replace_attr(utils, "xgr", _Xgrammar(utils.xgr))


class _ModelRunnerV2Kernel:
    """Stands in for MRV2's ``_apply_grammar_bitmask_kernel``: ``kernel[grid](...)`` runs tagjit's."""

    def __init__(self, original: Any) -> None:
        self.original = original

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        if not selected():
            return self.original[grid]

        def launch(*args: Any, **kwargs: Any) -> None:
            try:
                self._apply(grid, *args, **kwargs)
                _applied("mrv2")
                return
            except Exception as exc:
                _fell_back("mrv2", exc)
            self.original[grid](*args, **kwargs)

        return launch

    @staticmethod
    def _apply(grid: Any, logits: torch.Tensor, logits_stride: int, logits_indices: torch.Tensor,
               cu_num_logits: torch.Tensor, bitmask: torch.Tensor, bitmask_stride: int, vocab_size: int,
               *, MASK_STRIDE: int, BLOCK_SIZE: int, **launch: Any) -> None:  # noqa: N803 (vLLM's names)
        if launch or not isinstance(grid, tuple):
            raise ValueError(f"unexpected launch: grid={grid!r}, options={sorted(launch)}")
        num_masks = grid[0]
        if logits.dim() != 2 or logits.stride(0) != logits_stride or bitmask.stride(0) != bitmask_stride:
            raise ValueError("logits or bitmask strides differ from the ones passed")
        if vocab_size != logits.shape[1] or 32 * bitmask.shape[1] < vocab_size:
            # vLLM's kernel masks logits past the bitmask's width; xgrammar's semantics keep them.
            raise ValueError(f"bitmask width {bitmask.shape[1]} does not cover {vocab_size} logits")
        # vLLM's kernel, vectorised: mapping = request * MASK_STRIDE + position; the logits row is
        # cu_num_logits[request] + position, skipped past the request's own logits.
        mapping = logits_indices[:num_masks].long()
        request, position = mapping // MASK_STRIDE, mapping % MASK_STRIDE
        start = cu_num_logits[request].long()
        count = cu_num_logits[request + 1].long() - start
        rows = torch.where(position < count, start + position, -1)
        tagjit_apply_rows(logits, bitmask[:num_masks], rows)


def _patch_model_runner_v2() -> None:
    from vllm.v1.worker.gpu import structured_outputs

    kernel = structured_outputs._apply_grammar_bitmask_kernel
    if not isinstance(kernel, _ModelRunnerV2Kernel):
        replace_attr(structured_outputs, "_apply_grammar_bitmask_kernel", _ModelRunnerV2Kernel(kernel))


def _patch_worker_warmup() -> None:
    """Make each worker's ``compile_or_warm_up_model`` also compile tagjit's kernel. The executor calls it on the
    worker's ``WorkerWrapperBase``, which passes what it lacks on to the worker (whose class is resolved only after
    plugins load), so the wrapper gets the method."""
    from vllm.v1.worker.worker_base import WorkerWrapperBase

    if getattr(WorkerWrapperBase.__dict__.get("compile_or_warm_up_model"), "_tagjit", False):
        return

    def compile_or_warm_up_model(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = self.worker.compile_or_warm_up_model(*args, **kwargs)
        if selected():
            prepare_worker_kernels(self.worker)
        return result

    compile_or_warm_up_model._tagjit = True  # type: ignore[attr-defined]
    replace_attr(WorkerWrapperBase, "compile_or_warm_up_model", compile_or_warm_up_model)


def prepare_worker_kernels(worker: Any) -> None:
    """Compile tagjit's kernel for a worker's device, vocabulary and logits dtypes (a failure is logged: the first
    constrained step then compiles it, or falls back to vLLM's own)."""
    from tagjit.engine import metrics, prepare_kernels

    try:
        model_config = worker.vllm_config.model_config
        device = getattr(worker, "device", None) or torch.device("cpu")
        dtypes = list(dict.fromkeys((torch.float32, model_config.dtype)))
        ms = prepare_kernels(device, model_config.get_vocab_size(), dtypes)
    except Exception:
        log.exception("tagjit: could not compile the bitmask kernel at start-up")
        return
    metrics.WARMUP_MS.labels("kernel").observe(ms)
    log.info("tagjit: bitmask kernel compiled for %s in %.0f ms", device, ms)
