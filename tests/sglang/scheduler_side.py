"""What an SGLang scheduler process does with a grammar backend, run in a spawned process.

SGLang spawns its scheduler and calls ``load_plugins()`` first thing there; this module does the
same in a ``spawn`` worker (``init``), publishes real ``ServerArgs`` with
``grammar_backend="tagjit"``, builds SGLang's own ``GrammarManager`` (which calls
``create_grammar_backend``, which finds tagjit in the registry the plugin filled) and feeds it
real ``Req`` objects. Each public function below runs one scenario and returns plain data.

The scheduler object handed to ``GrammarManager`` carries only the attributes its constructor
reads (tokenizer, model config numbers, single-rank groups): no model is loaded.
"""

from __future__ import annotations

import os
import sys
import types
from array import array
from pathlib import Path
from types import SimpleNamespace
from typing import Any

DATA = Path(os.environ.get("TAGJIT_SHARED_DATA", Path(__file__).resolve().parents[3] / "shared" / "data"))
QWEN2 = DATA / "tokenizers" / "qwen2"
MODEL_VOCAB = 151936  # Qwen2 models pad the 151,646-token vocabulary to this
EOS = 151643  # <|endoftext|>

_state: dict[str, Any] = {}


def _torchvision_for_configs() -> None:
    """SGLang's config package imports torchvision.transforms (InternVL image constants).

    PyPI only has CUDA builds of torchvision for Linux, which cannot load beside CPU torch, so on
    a CPU test machine without torchvision this registers an empty ``torchvision.transforms``
    (with ``InterpolationMode``), enough for those module-level imports; no image code runs here.
    """
    try:
        import torchvision  # noqa: F401
        return
    except Exception:
        pass
    import enum

    tv = types.ModuleType("torchvision")
    transforms = types.ModuleType("torchvision.transforms")
    functional = types.ModuleType("torchvision.transforms.functional")
    functional.InterpolationMode = enum.Enum("InterpolationMode", "NEAREST BILINEAR BICUBIC")
    transforms.functional = functional
    transforms.InterpolationMode = functional.InterpolationMode
    tv.transforms = transforms
    sys.modules.update({"torchvision": tv, "torchvision.transforms": transforms,
                        "torchvision.transforms.functional": functional})


def init(settings_env: dict[str, str] | None = None) -> None:
    """Process start-up as SGLang's scheduler does it: plugins first, then the tokenizer."""
    os.environ.update(settings_env or {})
    from sglang.srt.plugins import load_plugins  # imports transformers, which must see no torchvision
    from transformers import AutoTokenizer

    _torchvision_for_configs()
    load_plugins()
    _state["tokenizer"] = AutoTokenizer.from_pretrained(str(QWEN2))


def tokenizer():
    """The Hugging Face tokenizer SGLang passes to the backend."""
    return _state["tokenizer"]


def manager(reasoning_parser: str | None = None, grammar_backend: str = "tagjit", **server: Any):
    """SGLang's GrammarManager for freshly published ServerArgs (one per configuration)."""
    key = (reasoning_parser, grammar_backend, tuple(sorted(server.items())))
    if key in _state:
        return _state[key]
    from sglang.srt.constrained.grammar_manager import GrammarManager
    from sglang.srt.runtime_context import get_context, get_parallel
    from sglang.srt.server_args import ServerArgs

    args = ServerArgs(model_path=str(QWEN2), grammar_backend=grammar_backend, device="cpu",
                      reasoning_parser=reasoning_parser, **server)
    # The scheduler process publishes through the full resolution pipeline, which needs a model's
    # config.json; with no model here, the raw ServerArgs are published and rank 0 stated.
    get_context().set_server_args(args)
    tok = tokenizer()
    think_end = tok.encode("</think>", add_special_tokens=False) if reasoning_parser else None
    scheduler = SimpleNamespace(
        server_args=args, tokenizer=tok,
        model_config=SimpleNamespace(vocab_size=MODEL_VOCAB, hf_eos_token_id={EOS}, think_end_ids=think_end),
        dp_tp_cpu_group=None, dp_tp_group=SimpleNamespace(world_size=1, first_rank=0, is_first_rank=True),
        pp_group=None)
    get_parallel().override_permanently(tp_rank=0, pp_rank=0)
    _state[key] = mgr = GrammarManager(scheduler)
    return mgr


def request(rid: str, prompt_tokens: int = 8, require_reasoning: bool = False, **constraint: str):
    """A real scheduler Req with one constraint (json_schema=, regex=, ebnf= or structural_tag=)."""
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    params = SamplingParams(max_new_tokens=64, **constraint)
    return Req(rid, "", array("i", [100] * prompt_tokens), params, require_reasoning=require_reasoning)


def admit(mgr, reqs: list) -> dict[str, bool]:
    """Hand requests to the grammar manager as the scheduler does; rid -> parked in the grammar queue."""
    return {r.rid: mgr.process_req_with_grammar(r) for r in reqs}


def drain(mgr, max_passes: int = 4000) -> list:
    """Run scheduling passes until the grammar queue is empty; the requests it released."""
    released = []
    for _ in range(max_passes):
        if not mgr.has_waiting_grammars():
            return released
        released += mgr.get_ready_grammar_requests()
    raise AssertionError(f"grammar queue still holds {len(mgr.grammar_queue)} requests")


def ready(mgr, req):
    """The request's grammar object once the manager has released it."""
    if mgr.process_req_with_grammar(req):
        drain(mgr)
    return req.grammar


def encode(text: str) -> list[int]:
    """Token ids as SGLang's tokenizer produces them."""
    return tokenizer().encode(text, add_special_tokens=False)


def mask_rows(grammars: list, vocab_size: int = MODEL_VOCAB):
    """The batch mask SGLang's SamplingBatchInfo.update_regex_vocab_mask builds for these grammars."""
    from sglang.srt.constrained.base_grammar_backend import GrammarRow

    first = next(g for g in grammars if g)
    mask = first.allocate_vocab_mask(vocab_size=vocab_size, batch_size=len(grammars), device="cpu")
    rows = [GrammarRow(row=i, grammar=g) for i, g in enumerate(grammars)
            if g and not g.finished and not g.is_terminated()]
    first.fill_vocab_mask_batched(rows, mask)
    return first.move_vocab_mask(mask, "cpu")


def accept_all(grammar, tokens: list[int]) -> str | None:
    """Feed tokens as the result processor does; the ValueError text if one is rejected."""
    try:
        for t in tokens:
            grammar.accept_token(t)
    except ValueError as e:
        return str(e)
    return None


__all__ = ["init", "manager", "request", "admit", "drain", "ready", "encode", "mask_rows", "accept_all"]
