"""One engine step's masks in one call: ``fill_bitmasks`` writes exactly the rows one fill per request writes."""

from __future__ import annotations

from concurrent.futures import Future

import pytest
import torch
import xgrammar as xgr

from shared_data import DATA
from tagjit import Matcher, allocate_token_bitmask
from tagjit.constraint import Constraint, Kind
from tagjit.runtime import matcher as matcher_mod
from tagjit.runtime.matcher import fill_bitmasks
from tagjit.tools import bfcl, build_tool_tag, load_format

OBJECT = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
          "required": ["city", "days"]}
ANY_ORDER = {**OBJECT, "x-any-order": True}
STOP = 128009


def plain(service, info, schema=OBJECT, prefix: str = "") -> Matcher:
    m = Matcher(service.compile(Constraint.of(Kind.JSON, schema)), vocab_size=info.vocab_size, stop_token_ids=[STOP])
    assert m.accept_string(prefix)
    return m


def mixed_batch(service, info) -> list[Matcher]:
    """Plain grammars at different states, an any-order object, a composite tool tag, a reasoning request and a
    request whose compile failed."""
    tools = bfcl.load_tools(str(DATA / "bfcl"), 6)
    tag = build_tool_tag(load_format("hermes"), tools, "required", True)
    failed: Future = Future()
    failed.set_exception(RuntimeError("compile failed"))
    return [
        plain(service, info),
        plain(service, info, prefix='{"city": "Os'),
        Matcher(service.compile(Constraint.of(Kind.REGEX, r"[a-z]+@[a-z]+\.(com|org)")), vocab_size=info.vocab_size),
        plain(service, info, ANY_ORDER, '{"days": 3, '),
        Matcher(service.compile(Constraint.of(Kind.STRUCTURAL_TAG, tag)), vocab_size=info.vocab_size),
        Matcher(service.compile(Constraint.of(Kind.JSON, OBJECT)), vocab_size=info.vocab_size,
                reasoning_end_ids=[STOP - 1]),
        Matcher(failed, vocab_size=info.vocab_size, stop_token_ids=[STOP]),
        plain(service, info, prefix='{"city": "Oslo", "days": 1'),
    ]


def test_a_batched_fill_writes_the_rows_one_fill_per_request_writes(service, llama3_info):
    batch = mixed_batch(service, llama3_info)
    rows = [9, 0, 4, 2, 7, 1, 5, 3]  # the engine's rows, in any order
    batched = allocate_token_bitmask(10, llama3_info.vocab_size)
    fill_bitmasks(batch, batched, rows)
    single = allocate_token_bitmask(10, llama3_info.vocab_size)
    for m, row in zip(mixed_batch(service, llama3_info), rows):
        m.fill_bitmask(single, row)
    assert torch.equal(batched, single)
    assert (batched[6] == -1).all() and (batched[8] == -1).all()  # rows not listed are untouched
    assert (batched[0] != -1).any() and (batched[1] == -1).all()  # constrained; reasoning is free
    assert batched[5].count_nonzero() == 1  # a failed compile allows only its stop token


def test_the_plain_grammars_of_a_step_are_filled_in_one_xgrammar_batch_call(service, llama3_info, monkeypatch):
    calls = []

    class Recording(xgr.BatchGrammarMatcher):
        def batch_fill_next_token_bitmask(self, matchers, bitmask, indices=None, debug_print=False):
            calls.append(list(indices))
            return super().batch_fill_next_token_bitmask(matchers, bitmask, indices, debug_print)

    recorder = Recording()
    monkeypatch.setattr(matcher_mod, "_batch_matcher", lambda: recorder)
    batch = mixed_batch(service, llama3_info)
    fill_bitmasks(batch, allocate_token_bitmask(8, llama3_info.vocab_size), list(range(8)))
    assert calls == [[0, 1, 2, 7]]  # the JSON and regex grammars; the others fill their own rows


def test_a_batch_of_one_fills_without_the_batch_matcher(service, llama3_info, monkeypatch):
    monkeypatch.setattr(matcher_mod, "_batch_matcher", lambda: pytest.fail("batch matcher used for one row"))
    bitmask = allocate_token_bitmask(1, llama3_info.vocab_size)
    fill_bitmasks([plain(service, llama3_info)], bitmask, [0])
    assert (bitmask[0] != -1).any()


def test_the_fill_metric_times_one_call_in_its_sampling_period(service, llama3_info):
    from tagjit.metrics import REGISTRY

    def samples() -> float:
        return REGISTRY.get_sample_value("tagjit_mask_fill_microseconds_count") or 0.0

    batch = [plain(service, llama3_info), plain(service, llama3_info, prefix='{"city": "Os')]
    bitmask = allocate_token_bitmask(2, llama3_info.vocab_size)
    before = samples()
    for _ in range(3 * matcher_mod.FILL_SAMPLE_EVERY):
        fill_bitmasks(batch, bitmask, [0, 1])
    assert samples() - before == 3


def test_a_request_is_free_exactly_while_it_reasons(service, llama3_info):
    m = Matcher(service.compile(Constraint.of(Kind.JSON, OBJECT)), vocab_size=llama3_info.vocab_size,
                reasoning_end_ids=[STOP - 1])
    bitmask = allocate_token_bitmask(1, llama3_info.vocab_size)
    fill_bitmasks([m], bitmask, [0])
    assert (bitmask[0] == -1).all()
    assert m.accept_token(STOP - 1) and not m.in_reasoning
    fill_bitmasks([m], bitmask, [0])
    assert (bitmask[0] != -1).any()
    m.reset()  # reasoning again, with its grammar already built
    fill_bitmasks([m], bitmask, [0])
    assert (bitmask[0] == -1).all()


def test_a_rollback_across_the_reasoning_end_frees_the_row_again(service, llama3_info):
    m = Matcher(service.compile(Constraint.of(Kind.JSON, OBJECT)), vocab_size=llama3_info.vocab_size,
                reasoning_end_ids=[STOP - 1])
    batch = [m, plain(service, llama3_info)]  # two rows: the batched path
    bitmask = allocate_token_bitmask(2, llama3_info.vocab_size)
    assert m.accept_token(STOP - 1)
    fill_bitmasks(batch, bitmask, [0, 1])
    assert (bitmask[0] != -1).any()
    m.rollback(1)
    fill_bitmasks(batch, bitmask, [0, 1])
    assert (bitmask[0] == -1).all() and (bitmask[1] != -1).any()
