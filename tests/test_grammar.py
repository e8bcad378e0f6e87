"""The per-request grammar: accept, validate without advancing, rollback, masks, JIT, reasoning."""

from concurrent.futures import Future

import pytest
import torch
import xgrammar as xgr

from pools import UNHURRIED, compile_pool_held
from tagjit import CompileLimitError, CompileService, Matcher, Settings, allocate_token_bitmask
from tagjit.runtime.matcher import allowed_tokens
from tagjit.constraint import Constraint, Kind
from tagjit.runtime.vocab import token_bytes

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
          "additionalProperties": False}


def encode(info: xgr.TokenizerInfo, text: str) -> list[int]:
    """Greedy longest-match tokenization over the vocabulary (exact for these ASCII texts)."""
    vocab = _vocab(info)
    data, out, i = text.encode(), [], 0
    while i < len(data):
        for j in range(min(len(data), i + 16), i, -1):
            if data[i:j] in vocab:
                out.append(vocab[data[i:j]])
                i = j
                break
        else:
            raise ValueError(text)
    return out


_vocabs: dict[int, dict[bytes, int]] = {}


def _vocab(info: xgr.TokenizerInfo) -> dict[bytes, int]:
    if id(info) not in _vocabs:
        _vocabs[id(info)] = {tok: i for i, tok in enumerate(token_bytes(info)) if tok}
    return _vocabs[id(info)]


@pytest.fixture(scope="module")
def compiled(service):
    return service.compile(Constraint.of(Kind.JSON, SCHEMA))


@pytest.fixture
def grammar(compiled, llama3_info):
    return Matcher(compiled, vocab_size=llama3_info.vocab_size, stop_token_ids=[128009])


def test_accepts_a_valid_token_sequence(grammar, llama3_info):
    assert grammar.accept_tokens(encode(llama3_info, '{"ok": true}'))
    assert grammar.is_completed()


def test_rejects_an_invalid_token_and_keeps_its_state(grammar, llama3_info):
    prefix = encode(llama3_info, '{"ok": ')
    assert grammar.accept_tokens(prefix)
    assert not grammar.accept_token(encode(llama3_info, "1")[0])
    assert grammar.accept_tokens(encode(llama3_info, "false}"))


def test_terminates_on_stop_token(grammar, llama3_info):
    grammar.accept_tokens(encode(llama3_info, '{"ok": true}'))
    assert grammar.accept_token(128009)
    assert grammar.is_terminated()


def test_validate_tokens_returns_accepted_prefix_without_advancing(grammar, llama3_info):
    good = encode(llama3_info, '{"ok": ')
    bad = encode(llama3_info, "42")
    assert grammar.validate_tokens(good + bad) == good
    assert grammar.num_processed_tokens == 0
    assert grammar.accept_tokens(good)


def test_rollback_restores_the_earlier_state(grammar, llama3_info):
    tokens = encode(llama3_info, '{"ok": true')
    grammar.accept_tokens(tokens)
    grammar.rollback(2)
    assert grammar.num_processed_tokens == len(tokens) - 2
    assert grammar.accept_tokens(tokens[-2:])


def test_reset_returns_to_the_start(grammar, llama3_info):
    grammar.accept_tokens(encode(llama3_info, '{"ok"'))
    grammar.reset()
    assert grammar.accept_tokens(encode(llama3_info, '{"ok": false}'))


def test_copy_is_fresh_and_independent(grammar, llama3_info):
    grammar.accept_tokens(encode(llama3_info, '{"ok"'))
    fresh = grammar.copy()
    assert fresh.num_processed_tokens == 0
    assert fresh.accept_tokens(encode(llama3_info, '{"ok": true}'))


def test_mask_equals_xgrammar_matcher_mask(grammar, compiled, llama3_info):
    ref = xgr.GrammarMatcher(compiled.grammar, override_stop_tokens=[128009])
    ours, theirs = allocate_token_bitmask(1, llama3_info.vocab_size), allocate_token_bitmask(1, llama3_info.vocab_size)
    for token in encode(llama3_info, '{"ok": true}'):
        grammar.fill_bitmask(ours, 0)
        ref.fill_next_token_bitmask(theirs, 0)
        assert torch.equal(ours, theirs)
        grammar.accept_token(token)
        ref.accept_token(token)


def test_mask_allows_only_valid_next_tokens(grammar, llama3_info):
    grammar.accept_tokens(encode(llama3_info, '{"ok": '))
    mask = allocate_token_bitmask(1, llama3_info.vocab_size)
    grammar.fill_bitmask(mask, 0)
    vocab = token_bytes(llama3_info)
    texts = {vocab[t] for t in allowed_tokens(mask, 0, llama3_info.vocab_size)}
    assert texts and all(t.strip() == b"" or b"true".startswith(t.lstrip()) or b"false".startswith(t.lstrip())
                         for t in texts)


def test_jit_grammar_is_returned_before_its_compile_and_waits_for_it_at_its_first_mask(llama3_info):
    svc = CompileService(llama3_info, UNHURRIED.replace(compile_threads=1))
    c = Constraint.of(Kind.JSON, {"type": "object", "properties": {"jit": {"type": "integer"}}, "required": ["jit"]})
    with compile_pool_held(svc):
        g = svc.jit_grammar(c)
        assert not g.ready()
    mask = allocate_token_bitmask(1, llama3_info.vocab_size)
    g.fill_bitmask(mask, 0)
    assert g.ready()
    assert g.accept_tokens(encode(llama3_info, '{"jit": 1}'))
    svc.close()


def test_failed_jit_compile_allows_only_stop_tokens(llama3_info):
    failed: Future = Future()
    failed.set_exception(CompileLimitError("too slow"))
    g = Matcher(failed, vocab_size=llama3_info.vocab_size, stop_token_ids=[128009])
    mask = allocate_token_bitmask(1, llama3_info.vocab_size)
    g.fill_bitmask(mask, 0)
    assert allowed_tokens(mask, 0, llama3_info.vocab_size) == [128009]
    assert isinstance(g.error, CompileLimitError)


def test_reasoning_is_free_until_the_end_marker(compiled, llama3_info):
    think_end = encode(llama3_info, "</think>")
    g = Matcher(compiled, vocab_size=llama3_info.vocab_size, reasoning_end_ids=think_end)
    mask = allocate_token_bitmask(1, llama3_info.vocab_size)
    assert g.accept_tokens(encode(llama3_info, "let me think: 42 is"))
    g.fill_bitmask(mask, 0)
    assert len(allowed_tokens(mask, 0, llama3_info.vocab_size)) == llama3_info.vocab_size
    assert g.accept_tokens(think_end)
    assert not g.in_reasoning
    assert not g.accept_token(encode(llama3_info, "42")[0])
    assert g.accept_tokens(encode(llama3_info, '{"ok": true}'))


def test_rollback_across_the_reasoning_end_reenters_reasoning(compiled, llama3_info):
    think_end = encode(llama3_info, "</think>")
    g = Matcher(compiled, vocab_size=llama3_info.vocab_size, reasoning_end_ids=think_end)
    g.accept_tokens(think_end + encode(llama3_info, '{"ok"'))
    g.rollback(len(encode(llama3_info, '{"ok"')) + 1)
    assert g.in_reasoning
