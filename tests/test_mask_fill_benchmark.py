"""benchmarks/mask_fill.py: the paired measurement of tagjit's wrapper over the xgrammar calls it makes."""

from __future__ import annotations

import pytest

from benchmark_modules import load_benchmark
from pools import UNHURRIED
from tagjit import UnsupportedFeatureError
from tagjit.build.grammars import json_schema_grammar


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("mask_fill")


@pytest.fixture(scope="module")
def encode(hf_tokenizer):
    return lambda text: hf_tokenizer.encode(text, add_special_tokens=False)


def test_wrapper_cost_gives_one_paired_sample_per_step_on_plain_grammars(bench, qwen2_info, encode):
    impl = bench.Tagjit(bench.DEFAULT, qwen2_info, 1)
    bitmask = bench.allocate_token_bitmask(4, qwen2_info.vocab_size)
    ready, refused = bench.prepare(impl, bench.tool_cases(2), encode, bitmask)
    assert len(ready) == 2 and refused == 0
    for batch in (1, 4):
        samples = bench.wrapper_cost(impl, ready, batch, 30, bitmask)
        assert len(samples) == 30 and all(isinstance(x, float) for x in samples)


def test_wrapper_cost_is_not_measured_where_a_row_has_no_plain_matcher(bench, qwen2_info, encode):
    impl = bench.Tagjit(bench.DEFAULT, qwen2_info, 1)
    bitmask = bench.allocate_token_bitmask(1, qwen2_info.vocab_size)
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
              "required": ["a", "b"], "x-any-order": True}  # any-order: a token filter beside xgrammar's matcher
    case = bench.Case("any-order", "json", schema, {"b": 1, "a": 2})
    ready, _ = bench.prepare(impl, [case], encode, bitmask)
    assert len(ready) == 1
    assert bench.wrapper_cost(impl, ready, 1, 10, bitmask) == []


def test_the_long_workload_walks_schemas_whose_long_strings_the_filter_counts(bench):
    cases = bench.long_cases(4)
    assert len(cases) == 4
    counted = 0
    for case in cases:
        assert case.workload == "long" and bench._long_bound(case.schema)
        try:
            counted += json_schema_grammar(case.schema, UNHURRIED).filter_spec is not None
        except UnsupportedFeatureError:
            pass  # a row's refused column
    assert counted >= 3
