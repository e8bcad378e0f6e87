"""vLLM 0.33's masked reasoning ends with tagjit grammars: never waiting for a JIT compile, exact once compiled.

While a request reasons under an engine-based reasoning parser (qwen3 here), vLLM masks the implicit reasoning-end
tokens (``<tool_call>``) the grammar cannot start with, asking the grammar once per request inside the scheduler's
bitmask step. A compile is held unfinished by occupying the backend's only compile thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pools import compile_pool_held
from vllm_support import VOCAB_SIZE, masked_tokens, requires_vllm_033, vllm_config

pytest.importorskip("vllm")
pytestmark = requires_vllm_033("StructuredOutputManager._masked_reasoning_ends")


@pytest.fixture(scope="module", autouse=True)
def bounded_wait() -> Iterator[None]:
    """A compile limit (60 s, far above any compile here): nothing here waits for a compile that is not finished, so a probe that did wait for
    the held compile would end at this limit with an error (and fail the test) instead of hanging."""
    import tagjit

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tagjit.settings, "_current", tagjit.get_settings().replace(compile_timeout_s=60.0))
        yield


@pytest.fixture(scope="module")
def config(model_dir: Path) -> Any:
    """A VllmConfig of the tiny model with tagjit as backend and vLLM's engine-based qwen3 reasoning parser."""
    return vllm_config(model_dir, backend="tagjit", reasoning_parser="qwen3")


@pytest.fixture(scope="module")
def service(config: Any) -> Any:
    """The compile service tagjit's backend uses for this model (one per tokenizer and settings)."""
    import tagjit
    from vllm.tokenizers import cached_tokenizer_from_config

    tokenizer = cached_tokenizer_from_config(model_config=config.model_config)
    return tagjit.service_for(tagjit.from_huggingface(tokenizer, vocab_size=VOCAB_SIZE), tagjit.get_settings())


@pytest.fixture(scope="module")
def implicit_ends(config: Any) -> tuple[int, ...]:
    """The reasoning parser's implicit reasoning-end token ids (qwen3: ``<tool_call>``)."""
    from vllm.parser.engine.adapters import ParserEngineReasoningAdapter
    from vllm.reasoning import ReasoningParserManager
    from vllm.tokenizers import cached_tokenizer_from_config

    reasoner = ReasoningParserManager.get_reasoning_parser("qwen3")(
        cached_tokenizer_from_config(model_config=config.model_config))
    assert isinstance(reasoner, ParserEngineReasoningAdapter)
    ends = tuple(sorted(reasoner.implicit_reasoning_end_token_ids))
    assert ends == (reasoner.vocab["<tool_call>"],)
    return ends


def reasoning_request(config: Any, manager: Any, request_id: str, **constraint: Any) -> Any:
    """An engine-core Request, verified by vLLM, whose prompt leaves the model reasoning."""
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams
    from vllm.v1.request import Request

    params = SamplingParams(max_tokens=16, structured_outputs=StructuredOutputsParams(**constraint))
    params.verify(config.model_config, config.speculative_config, config.structured_outputs_config, manager.tokenizer)
    prompt = manager.tokenizer.encode("<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n<think>\n")
    return Request(request_id, prompt_token_ids=prompt, sampling_params=params, pooling_params=None)


def compiled(manager: Any, req: Any) -> None:
    """Wait, without a time limit, until the request's grammar is compiled."""
    key = req.structured_output_request.structured_output_key
    manager.backend.service.submit(manager.backend.constraint(*key)).result()


def reasoning_row(manager: Any, req: Any) -> list[int]:
    """Token ids masked in the request's bitmask row, from vLLM's own scheduler-step bitmask."""
    bitmask = manager.grammar_bitmask({req.request_id: req}, [req.request_id], {})
    return masked_tokens(np.asarray(bitmask[0]), VOCAB_SIZE)


def starts_with(manager: Any, req: Any, token: int) -> bool:
    """Whether the request's grammar accepts ``token`` first, as tagjit's own grammar says."""
    return bool(manager.backend.service.grammar(
        manager.backend.constraint(*req.structured_output_request.structured_output_key)).validate_tokens([token]))


def test_a_grammar_still_compiling_masks_every_implicit_end_and_caches_nothing(config, manager, service,
                                                                                 implicit_ends):
    from tagjit_vllm.backend import TagjitGrammar

    # The grammar may start with <tool_call>, so the provisional answer is stricter than the exact one.
    req = reasoning_request(config, manager, "r-held", regex=r"<tool_call>held-[a-z]{1,8}</tool_call>")
    with compile_pool_held(service):
        manager.grammar_init(req)
        grammar = req.structured_output_request.grammar
        assert isinstance(grammar, TagjitGrammar) and manager.backend.service is service
        assert manager._masked_reasoning_ends(req) == implicit_ends
        assert reasoning_row(manager, req) == list(implicit_ends)
        assert req.structured_output_request.masked_reasoning_end_ids is None
        # Neither call waited: the compile cannot have finished, nor its limit expired (bounded_wait).
        assert not grammar.grammar.ready() and grammar.grammar.error is None


def test_once_compiled_the_exact_answer_is_asked_and_cached(config, manager, service, implicit_ends):
    req = reasoning_request(config, manager, "r-later", regex=r"<tool_call>later-[a-z]{1,8}</tool_call>")
    with compile_pool_held(service):
        manager.grammar_init(req)
        assert reasoning_row(manager, req) == list(implicit_ends)
    compiled(manager, req)
    assert reasoning_row(manager, req) == []
    assert req.structured_output_request.masked_reasoning_end_ids == ()


@pytest.mark.parametrize("constraint, masked", [
    ({"json": {"type": "object", "properties": {"exact_city": {"type": "string"}}, "required": ["exact_city"]}},
     True),
    ({"regex": r"<tool_call>exact-[a-z]{1,8}</tool_call>"}, False),
], ids=["json-cannot-start-with-tool-call", "tool-call-regex-starts-with-it"])
def test_a_compiled_grammar_masks_exactly_the_ends_it_cannot_start_with(config, manager, implicit_ends,
                                                                         constraint, masked):
    req = reasoning_request(config, manager, "r-exact", **constraint)
    manager.grammar_init(req)
    compiled(manager, req)
    expected = [t for t in implicit_ends if not starts_with(manager, req, t)]
    assert expected == (list(implicit_ends) if masked else [])
    assert reasoning_row(manager, req) == expected
    assert req.structured_output_request.masked_reasoning_end_ids == tuple(expected)
