"""benchmarks/bfcl.py scores answers with BFCL's own AST checker, on BFCL's own questions and answers."""

from __future__ import annotations

import os

import pytest

from shared_data import DATA
from benchmark_modules import load_benchmark

pytestmark = pytest.mark.skipif(not os.path.isdir(os.path.join(DATA, "bfcl")), reason="needs ../shared/data/bfcl")


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bfcl")


@pytest.fixture(scope="module")
def check(bench):
    return bench.load_ast_checker()


def first_possible(ground_truth: list[dict]) -> list[dict]:
    """The calls a perfect model would make: each parameter's first possible value, optional ones left out."""
    return [{name: {k: v[0] for k, v in params.items() if v and v[0] != ""}} for call in ground_truth
            for name, params in call.items()]


@pytest.mark.parametrize("category", ["simple_python", "multiple", "parallel", "parallel_multiple"])
def test_the_possible_answer_scores_correct(bench, check, category):
    q = bench.load_questions(category, 1)[0]
    assert check(q["function"], first_possible(q["answer"]), q["answer"], category)["valid"]


def test_a_wrong_value_scores_wrong(bench, check):
    q = bench.load_questions("simple_python", 1)[0]
    output = first_possible(q["answer"])
    name = next(iter(output[0]))
    param = next(iter(output[0][name]))
    output[0][name][param] = "certainly not this"
    assert not check(q["function"], output, q["answer"], "simple_python")["valid"]


def test_a_missing_call_scores_wrong_in_a_parallel_question(bench, check):
    q = bench.load_questions("parallel", 1)[0]
    assert not check(q["function"], first_possible(q["answer"])[:1], q["answer"], "parallel")["valid"]
