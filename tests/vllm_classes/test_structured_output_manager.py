"""vLLM's real StructuredOutputManager, built from a real VllmConfig with tagjit as backend, serves tagjit grammars."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vllm_support import VOCAB_SIZE, requires_vllm_033, vllm_config

pytest.importorskip("vllm")

latch = requires_vllm_033("StructuredOutputManager.backend_name")
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
           "required": ["city", "days"]}


@pytest.fixture(scope="module")
def config(model_dir: Path) -> Any:
    """A VllmConfig of the tiny model with tagjit as its structured-output backend."""
    return vllm_config(model_dir, backend="tagjit")


@pytest.fixture(scope="module")
def reference(config: Any) -> Iterator[Any]:
    """tagjit's own compile service for the model's tokenizer, separate from the backend's."""
    import tagjit
    from vllm.tokenizers import cached_tokenizer_from_config

    tokenizer = cached_tokenizer_from_config(model_config=config.model_config)
    service = tagjit.CompileService(tagjit.from_huggingface(tokenizer, vocab_size=VOCAB_SIZE), tagjit.get_settings())
    yield service
    service.close()


def request(config: Any, manager: Any, request_id: str, backend: str | None = None, **constraint: Any) -> Any:
    """An engine-core Request whose structured outputs went through vLLM's own verify; ``backend`` overrides
    the backend it resolved to, as a frontend configured for another backend would have set it."""
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams
    from vllm.v1.request import Request

    params = SamplingParams(max_tokens=16, structured_outputs=StructuredOutputsParams(**constraint))
    if backend is None:
        params.verify(config.model_config, config.speculative_config, config.structured_outputs_config,
                      manager.tokenizer)
    else:
        params.structured_outputs._backend = backend
    prompt = manager.tokenizer.encode("What is the weather like?")
    return Request(request_id, prompt_token_ids=prompt, sampling_params=params, pooling_params=None)


def reference_mask(reference: Any, **constraint: Any) -> np.ndarray:
    """The first token bitmask row tagjit computes for a constraint, as vLLM's numpy int32 row."""
    import tagjit
    from tagjit.constraint import Constraint

    kind, source = next(iter(constraint.items()))
    bitmask = tagjit.allocate_token_bitmask(1, VOCAB_SIZE)
    reference.grammar(Constraint.of(kind, source)).fill_bitmask(bitmask, 0)
    return bitmask[0].numpy()


def test_grammar_init_gives_the_request_a_tagjit_grammar(config, manager):
    from vllm.v1.structured_output.backend_types import StructuredOutputGrammar

    from tagjit_vllm.backend import TagjitBackend, TagjitGrammar

    req = request(config, manager, "r-init", json=WEATHER)
    manager.grammar_init(req)
    assert isinstance(manager.backend, TagjitBackend)
    grammar = req.structured_output_request.grammar
    assert isinstance(grammar, TagjitGrammar) and isinstance(grammar, StructuredOutputGrammar)


def test_an_engine_configured_for_tagjit_has_its_backend_prepared_before_any_request(manager):
    from tagjit_vllm.backend import TagjitBackend

    assert isinstance(manager.backend, TagjitBackend)
    assert list(manager.backend.service.prepared) == ["tables", "json", "tool_tag"]


def test_an_engine_on_another_backend_still_builds_it_at_its_first_request(model_dir):
    from vllm.v1.structured_output import StructuredOutputManager

    manager = StructuredOutputManager(vllm_config(model_dir, backend="xgrammar"))
    assert manager.backend is None


def test_grammar_init_without_jit_hands_the_scheduler_a_future_of_the_grammar(config, monkeypatch):
    import tagjit
    from vllm.v1.structured_output import StructuredOutputManager

    from tagjit_vllm.backend import TagjitGrammar

    monkeypatch.setattr(tagjit.settings, "_current", tagjit.get_settings().replace(jit="never"))
    manager = StructuredOutputManager(config)
    try:
        req = request(config, manager, "r-wait", json=WEATHER)
        manager.grammar_init(req)
        pending = req.structured_output_request._grammar
        assert isinstance(pending, Future)
        assert isinstance(pending.result(), TagjitGrammar)
        assert req.structured_output_request.grammar is pending.result()
    finally:
        manager.clear_backend()


def test_grammar_bitmask_rows_equal_the_masks_tagjit_computes(config, manager, reference):
    constraints = {"r-json": {"json": WEATHER}, "r-regex": {"regex": r"(yes|no) because [a-z ]{1,40}\."},
                   "r-choice": {"choice": ["sunny", "cloudy", "rain"]}}
    requests = {rid: request(config, manager, rid, **c) for rid, c in constraints.items()}
    for req in requests.values():
        manager.grammar_init(req)
    order = ["r-regex", "r-json", "r-choice"]
    bitmask = manager.grammar_bitmask(requests, order, {})
    assert bitmask.shape[0] == len(order)
    for row, rid in enumerate(order):
        expected = reference_mask(reference, **constraints[rid])
        assert np.array_equal(bitmask[row], expected), rid
        assert (expected != -1).any()  # the constraint does restrict the first token


def test_grammar_bitmask_fills_a_steps_tagjit_rows_in_one_core_call(config, manager, monkeypatch):
    import tagjit.engine

    calls = []
    original = tagjit.engine.fill_bitmasks

    def counting(matchers, bitmask, rows):
        calls.append(list(rows))
        return original(matchers, bitmask, rows)

    monkeypatch.setattr(tagjit.engine, "fill_bitmasks", counting)
    requests = {f"r-{i}": request(config, manager, f"r-{i}", json=WEATHER) for i in range(5)}
    for req in requests.values():
        manager.grammar_init(req)
    bitmask = manager.grammar_bitmask(requests, list(requests), {})
    assert calls == [[0, 1, 2, 3, 4]]
    assert all(np.array_equal(bitmask[0], row) for row in bitmask)


@latch
def test_a_tagjit_engine_latches_backend_name_from_construction(manager):
    assert manager.backend_name == "tagjit"


@latch
def test_backend_name_is_tagjit_after_the_first_tagjit_request(config, manager):
    manager.grammar_init(request(config, manager, "r-first", json=WEATHER))
    assert manager.backend_name == "tagjit"


@latch
def test_an_xgrammar_request_after_a_tagjit_one_gets_vllms_one_backend_error(config, manager):
    from vllm.exceptions import VLLMValidationError

    from tagjit_vllm.backend import TagjitBackend, TagjitGrammar

    manager.grammar_init(request(config, manager, "r-tagjit", json=WEATHER))
    with pytest.raises(VLLMValidationError, match="only supports one backend per engine"):
        manager.grammar_init(request(config, manager, "r-xgrammar", backend="xgrammar", json=WEATHER))
    assert isinstance(manager.backend, TagjitBackend)
    later = request(config, manager, "r-later", json=WEATHER)
    manager.grammar_init(later)
    assert isinstance(later.structured_output_request.grammar, TagjitGrammar)


@latch
def test_an_xgrammar_request_first_on_a_tagjit_engine_gets_vllms_one_backend_error(config, manager):
    from vllm.exceptions import VLLMValidationError

    with pytest.raises(VLLMValidationError, match="only supports one backend per engine"):
        manager.grammar_init(request(config, manager, "r-xgrammar", backend="xgrammar", json=WEATHER))
    from tagjit_vllm.backend import TagjitBackend

    assert isinstance(manager.backend, TagjitBackend) and manager.backend_name == "tagjit"
