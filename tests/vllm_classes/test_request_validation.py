"""Requests are validated by tagjit through vLLM's own SamplingParams.verify, as the API server does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from vllm_support import vllm_config

pytest.importorskip("vllm")

GOOD = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"]}


@pytest.fixture(scope="module")
def config(model_dir: Path) -> Any:
    """A VllmConfig of the tiny model with tagjit as its structured-output backend."""
    return vllm_config(model_dir, backend="tagjit")


@pytest.fixture(scope="module")
def tokenizer(config: Any) -> Any:
    """vLLM's own tokenizer for the model, as the API server holds it."""
    from vllm.tokenizers import cached_tokenizer_from_config

    return cached_tokenizer_from_config(model_config=config.model_config)


def verified(config: Any, tokenizer: Any, schema: dict) -> Any:
    """SamplingParams for a JSON-schema request after vLLM's own verify."""
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    params = SamplingParams(max_tokens=16, structured_outputs=StructuredOutputsParams(json=schema))
    params.verify(config.model_config, config.speculative_config, config.structured_outputs_config, tokenizer)
    return params


def test_a_good_schema_passes_and_the_request_resolves_to_tagjit(config, tokenizer):
    params = verified(config, tokenizer, GOOD)
    assert params.structured_outputs._backend == "tagjit"


@pytest.mark.parametrize("schema, reason", [
    ({"type": "object", "properties": {"x": {"type": "array", "not": {"items": {"type": "string"}}}}},
     "unsupported JSON Schema feature 'not: {items}' at #/properties/x"),
    ({"type": "nonsense"}, "invalid JSON schema at '/type'"),
    ({"type": "string", "pattern": "(["}, "invalid JSON schema at '/pattern'"),
], ids=["unenforceable-not", "unknown-type", "bad-regex-pattern"])
def test_a_bad_schema_is_vllms_validation_error_naming_the_problem(config, tokenizer, schema, reason):
    from vllm.exceptions import VLLMValidationError

    with pytest.raises(VLLMValidationError) as caught:
        verified(config, tokenizer, schema)
    assert reason in str(caught.value)


def test_a_request_asking_for_another_backend_is_refused(config, tokenizer):
    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import StructuredOutputsParams

    so = StructuredOutputsParams(json=GOOD)
    so._backend = "xgrammar"
    params = SamplingParams(max_tokens=16, structured_outputs=so)
    with pytest.raises(VLLMValidationError, match="'xgrammar'.*'tagjit'"):
        params.verify(config.model_config, config.speculative_config, config.structured_outputs_config, tokenizer)
