"""Speculative decoding: validate_tokens and rollback under random drafts, and n-gram speculation in vLLM.

A draft is a path through the grammar (found by the deterministic walk) with some tokens replaced
by random vocabulary ids. The oracle is a fresh grammar that accepts the draft one token at a time.
"""

from __future__ import annotations

import functools
import json
import os
import sys

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pools import UNHURRIED
from shared_data import TOKENIZERS, maskbench
from tagjit import CompileService, Matcher, allocate_token_bitmask, load_tokenizer_info
from tagjit.constraint import Constraint, Kind
from walk import Walker

# A real MaskBench schema (strings, integers, enums, an array), and the same with any-order
# properties, whose token filter must roll back together with the grammar.
SCHEMA = maskbench("Github_easy---o65440.json")["schema"]
ANY_ORDER = {"type": "object", "x-any-order": True,
             "properties": {"city": {"type": "string", "maxLength": 8}, "days": {"type": "integer"},
                            "unit": {"enum": ["C", "F"]}},
             "required": ["city", "days"], "additionalProperties": False}
CASES = {"maskbench": SCHEMA, "any_order": ANY_ORDER}


class Recorder:
    """A grammar proxy that records the tokens a walk accepts (and forgets rolled-back ones)."""

    def __init__(self, grammar: Matcher) -> None:
        self.grammar = grammar
        self.tokens: list[int] = []

    def accept_token(self, token: int) -> bool:
        ok = self.grammar.accept_token(token)
        if ok:
            self.tokens.append(token)
        return ok

    def rollback(self, n: int) -> None:
        self.grammar.rollback(n)
        del self.tokens[len(self.tokens) - n:]

    def __getattr__(self, name: str):
        return getattr(self.grammar, name)


@functools.lru_cache(maxsize=None)
def setup(case: str) -> tuple:
    """(info, compiled, a valid token path) for a case, built once."""
    info = load_tokenizer_info(str(TOKENIZERS / "llama3" / "tokenizer.model"))
    compiled = CompileService(info, UNHURRIED).compile(Constraint.of(Kind.JSON, CASES[case]))
    rec = Recorder(Matcher(compiled, vocab_size=info.vocab_size))
    Walker(info).walk(rec)
    return info, compiled, tuple(rec.tokens)


def fresh(case: str, advanced: int) -> Matcher:
    info, compiled, path = setup(case)
    g = Matcher(compiled, vocab_size=info.vocab_size, stop_token_ids=list(info.stop_token_ids))
    assert g.accept_tokens(path[:advanced])
    return g


def mask(g: Matcher) -> torch.Tensor:
    bm = allocate_token_bitmask(1, g.vocab_size)
    g.fill_bitmask(bm, 0)
    return bm[0].clone()


@st.composite
def drafts(draw, case: str) -> tuple[int, list[int]]:
    """A position on the valid path and a draft from there mixing path tokens and random ones."""
    info, _, path = setup(case)
    start = draw(st.integers(0, len(path) - 1))
    n = draw(st.integers(1, 6))
    draft = []
    for i in range(n):
        on_path = start + i < len(path) and draw(st.booleans() | st.just(True))
        draft.append(path[start + i] if on_path else draw(st.integers(0, info.vocab_size - 1)))
    return start, draft


def longest_accepted_prefix(case: str, start: int, draft: list[int]) -> list[int]:
    g = fresh(case, start)
    out = []
    for t in draft:
        if g.is_terminated() or not g.accept_token(t):
            break
        out.append(t)
    return out


SLOW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("case", sorted(CASES))
def test_walk_path_is_a_complete_output(case):
    _, _, path = setup(case)
    g = fresh(case, len(path))
    assert g.is_completed()


@pytest.mark.parametrize("case", sorted(CASES))
@SLOW
@given(data=st.data())
def test_validate_returns_exactly_the_longest_accepted_prefix(case, data):
    start, draft = data.draw(drafts(case))
    g = fresh(case, start)
    assert g.validate_tokens(draft) == longest_accepted_prefix(case, start, draft)


@pytest.mark.parametrize("case", sorted(CASES))
@SLOW
@given(data=st.data())
def test_validate_leaves_the_state_unchanged(case, data):
    start, draft = data.draw(drafts(case))
    g = fresh(case, start)
    before = mask(g)
    g.validate_tokens(draft)
    assert g.num_processed_tokens == start
    assert torch.equal(mask(g), before)
    _, _, path = setup(case)
    if start < len(path):  # the path still continues from here
        assert g.accept_token(path[start])


@pytest.mark.parametrize("case", sorted(CASES))
@SLOW
@given(data=st.data())
def test_accept_then_rollback_restores_the_exact_mask(case, data):
    start, draft = data.draw(drafts(case))
    g = fresh(case, start)
    before = mask(g)
    accepted = g.validate_tokens(draft)
    assert g.accept_tokens(accepted)
    g.rollback(len(accepted))
    assert torch.equal(mask(g), before)
    assert g.is_terminated() == fresh(case, start).is_terminated()


def test_rollback_past_the_accepted_tokens_is_an_error():
    g = fresh("maskbench", 2)
    with pytest.raises(ValueError, match="cannot roll back 3 tokens"):
        g.rollback(3)


# -- end to end: vLLM's n-gram speculation with tagjit -----------------------------------------

NGRAM = json.dumps({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3,
                    "prompt_lookup_min": 1})


# vLLM refuses logit_bias with speculative decoding, so the random model gets a schema whose every
# output is short: enums and booleans only (whitespace is bounded by tagjit).
BOUNDED = {"type": "object", "properties": {"unit": {"enum": ["C", "F"]}, "ok": {"type": "boolean"},
                                            "level": {"enum": [1, 2, 3]}},
           "required": ["unit", "ok", "level"], "additionalProperties": False}


@pytest.mark.integration
def test_vllm_ngram_speculation_keeps_outputs_valid():
    pytest.importorskip("vllm")
    import urllib.request

    import jsonschema
    from openai import OpenAI

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "integration"))
    from server import vllm_server

    with vllm_server("tagjit", "--speculative-config", NGRAM) as url:
        client = OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)
        # The prompt repeats JSON text so the n-gram proposer finds drafts in it.
        prompt = "Example: " + json.dumps({"unit": "C", "ok": True, "level": 2}) * 4
        for seed in range(4):
            r = client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": prompt}], max_tokens=200, seed=seed,
                temperature=1.0,
                response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": BOUNDED}})
            assert r.choices[0].finish_reason == "stop"
            jsonschema.validate(json.loads(r.choices[0].message.content), BOUNDED)
        with urllib.request.urlopen(url + "/metrics") as m:
            metrics = m.read().decode()
        drafted = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                      if line.startswith("vllm:spec_decode_num_draft_tokens"))
        assert drafted > 0, "no draft tokens were proposed: speculation did not run"
