"""The vLLM backend's grammar futures: a waiting request's time limit is checked when vLLM polls it."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")

from tagjit import CompileLimitError  # noqa: E402
from tagjit_vllm.backend import LimitedFuture  # noqa: E402


def test_a_waiting_grammar_polled_past_its_limit_fails_with_the_limit_error():
    future = LimitedFuture(0.0)
    assert future.done()
    assert isinstance(future.exception(), CompileLimitError)
    assert "TAGJIT_COMPILE_TIMEOUT_S" in str(future.exception())


def test_a_grammar_that_arrives_within_its_limit_is_the_result():
    future = LimitedFuture(3600.0)
    assert not future.done()
    future.settle("grammar")
    assert future.done() and future.result() == "grammar"


def test_a_grammar_arriving_after_the_limit_error_changes_nothing():
    future = LimitedFuture(0.0)
    assert future.done()
    future.settle("late grammar")
    assert isinstance(future.exception(), CompileLimitError)

