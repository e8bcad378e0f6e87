"""Tool-call tags compiled in parts: masks and verdicts equal the whole tag's, parts are reused across combinations.

Every comparison runs the composite matcher beside xgrammar's matcher over the whole structural tag
(compiled the usual way) on real BFCL tools and the qwen2 / llama3 vocabularies.
"""

from __future__ import annotations

import random
import threading
from contextlib import contextmanager
from typing import Iterator

import numpy as np
import pytest
import torch
import xgrammar as xgr

from pools import UNHURRIED
from tagjit.tools import bfcl
from tagjit import CompileService, Settings
from tagjit.runtime.matcher import Matcher, allocate_token_bitmask, allowed_tokens
from tagjit.compile.composite.plan import plan
from tagjit.build.grammars import build_grammar
from tagjit.constraint import Constraint
from tagjit.errors import ConstraintError
from tagjit.runtime.vocab import token_bytes
from tagjit.tools import build_tool_tag
from tagjit.tools import load_format

from shared_data import DATA
from walk import Walker, WalkError

TOOLS = bfcl.load_tools(str(DATA / "bfcl"), 40)
CLOSERS = ('"', "}", "]", "</tool_call>", "[/TOOL_CALLS]")


@pytest.fixture(scope="module", params=["qwen2", "llama3"])
def info(request, qwen2_info, llama3_info):
    return qwen2_info if request.param == "qwen2" else llama3_info


@pytest.fixture(scope="module")
def svc(info):
    service = CompileService(info, UNHURRIED)
    yield service
    service.close()


def tool_tag(fmt: str, tools: list[dict], choice: object = "required", parallel: bool = True) -> Constraint:
    return Constraint.of("structural_tag", build_tool_tag(load_format(fmt), tools, choice, parallel))


def full_matcher(svc: CompileService, c: Constraint) -> xgr.GrammarMatcher:
    """xgrammar's matcher over the whole tag, compiled as one grammar."""
    return xgr.GrammarMatcher(svc.compiler.compile_grammar(build_grammar(c, svc.settings).grammar))


class Twin:
    """The composite grammar and the whole-tag matcher driven together; every mask must match bit for bit."""

    def __init__(self, svc: CompileService, c: Constraint) -> None:
        compiled = svc.compile(c)
        assert compiled.composite is not None, "expected the tag to compile in parts"
        self.info = svc.tokenizer_info
        self.grammar = Matcher(compiled, vocab_size=self.info.vocab_size)
        self.ref = full_matcher(svc, c)
        self._ref_mask = allocate_token_bitmask(1, self.info.vocab_size)
        self.masks = 0

    def fill_bitmask(self, bitmask: torch.Tensor, index: int) -> None:
        self.grammar.fill_bitmask(bitmask, index)
        self.ref.fill_next_token_bitmask(self._ref_mask, 0)
        if not torch.equal(bitmask[index], self._ref_mask[0]):
            ours = set(allowed_tokens(bitmask, index, self.info.vocab_size))
            theirs = set(allowed_tokens(self._ref_mask, 0, self.info.vocab_size))
            vocab = token_bytes(self.info)
            raise AssertionError(f"mask differs: extra {[vocab[t] for t in sorted(ours - theirs)[:8]]}, "
                                 f"missing {[vocab[t] for t in sorted(theirs - ours)[:8]]}")
        self.masks += 1

    def accept_token(self, token: int) -> bool:
        ours, theirs = self.grammar.accept_token(token), self.ref.accept_token(token)
        assert ours == theirs, f"token {token}: composite {ours}, whole tag {theirs}"
        return ours

    def accept_string(self, text: str | bytes) -> bool:
        ours, theirs = self.grammar.accept_string(text), self.ref.accept_string(text)
        assert ours == theirs
        return ours

    def rollback(self, n: int) -> None:
        self.grammar.rollback(n)
        self.ref.rollback(n)

    def is_completed(self) -> bool:
        ours, theirs = self.grammar.is_completed(), self.ref.is_completed()
        assert ours == theirs
        return ours

    def check_mask(self) -> np.ndarray:
        mask = allocate_token_bitmask(1, self.info.vocab_size)
        self.fill_bitmask(mask, 0)
        return mask[0].numpy().copy()


def greedy_tokens(info: xgr.TokenizerInfo, text: str) -> list[int]:
    """Longest-match tokenization over the vocabulary's non-special tokens."""
    vocab: dict[bytes, int] = {}
    special = set(info.special_token_ids)
    for i, tok in enumerate(token_bytes(info)[: info.vocab_size]):
        if tok and i not in special:
            vocab.setdefault(tok, i)
    longest = max(len(t) for t in vocab)
    data, out, i = text.encode(), [], 0
    while i < len(data):
        for j in range(min(len(data), i + longest), i, -1):
            if data[i:j] in vocab:
                out.append(vocab[data[i:j]])
                i = j
                break
        else:
            raise ValueError(f"cannot tokenize {text!r}")
    return out


def straddles(info: xgr.TokenizerInfo, tokens: list[int], text: str, offset: int) -> bool:
    """Whether some token covers bytes on both sides of byte offset."""
    vocab, pos = token_bytes(info), 0
    for t in tokens:
        end = pos + len(vocab[t])
        if pos < offset < end:
            return True
        pos = end
    assert pos == len(text.encode())
    return False


def call(fmt: str, tool: dict, args: str, variant: int = 0) -> tuple[str, int, int]:
    """One call's text and the byte offsets where its arguments start and end."""
    f = load_format(fmt)
    begin = f.render_begin(tool["function"]["name"], variant)
    end = f.call[variant].end
    assert isinstance(end, str)
    text = begin + args + end
    return text, len(begin.encode()), len((begin + args).encode())


def assert_equal_masks_along(twin: Twin, tokens: list[int]) -> None:
    """Walk tokens through both grammars, checking equal masks at every step and completion at the end."""
    for t in tokens:
        twin.check_mask()
        assert twin.accept_token(t)
    twin.check_mask()
    assert twin.is_completed()


# -- what compiles in parts ----------------------------------------------------------------------

def test_forced_tool_tag_compiles_in_parts(svc):
    compiled = svc.compile(tool_tag("hermes", TOOLS[:5]))
    assert compiled.composite is not None and compiled.grammar is None


def strict(tools: list[dict]) -> list[dict]:
    return [{**t, "function": {**t["function"], "strict": True}} for t in tools]


def test_auto_tool_choice_with_xml_arguments_keeps_the_whole_tag_compile(svc):
    compiled = svc.compile(tool_tag("deepseek_v3_2", strict(TOOLS[:5]), "auto", parallel=False))
    assert compiled.composite is None and compiled.grammar is not None


@pytest.mark.parametrize("fmt", ["hermes", "deepseek_v31", "kimi_k2", "mistral"])  # the last three wrap their calls
def test_auto_tool_choice_compiles_in_parts(svc, fmt):
    for parallel in (True, False):
        assert svc.compile(tool_tag(fmt, strict(TOOLS[:5]), "auto", parallel=parallel)).composite is not None


def test_xml_argument_styles_keep_the_whole_tag_compile():
    tag = build_tool_tag(load_format("qwen3_coder"), TOOLS[:3], "required", True)
    assert plan(tag["format"]) is None


def test_json_schema_constraints_are_untouched(svc):
    compiled = svc.compile(Constraint.of("json", {"type": "object"}))
    assert compiled.composite is None


# -- masks equal the whole tag's -----------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["hermes", "qwen25", "llama3_json", "mistral", "deepseek_v3"])
@pytest.mark.parametrize("choice,parallel", [("required", True), ("required", False), ("named", True)])
def test_masks_equal_the_whole_tag_on_a_walk(svc, info, fmt, choice, parallel):
    tools = TOOLS[:8]
    if choice == "named":
        choice = {"type": "function", "function": {"name": tools[5]["function"]["name"]}}
    twin = Twin(svc, tool_tag(fmt, tools, choice, parallel))
    try:
        Walker(info).walk(twin, closers=CLOSERS, max_tokens=300)
    except WalkError as e:  # an endless number is a valid walk too: every mask so far was compared
        assert "did not finish" in str(e)
    assert twin.masks > 5


def walk_with_rollbacks(twin: "Twin", info: xgr.TokenizerInfo, rng: random.Random, favoured: np.ndarray,
                        favour_p: float = 0.6, steps: int = 60, whole: np.ndarray | None = None) -> None:
    """Random tokens through the twin, ``favoured`` ones (a bool per token id) with probability ``favour_p`` and
    ``whole`` ones with 0.2, rolling back two now and then: every mask and verdict on the way is compared."""
    stops = np.array(sorted(info.stop_token_ids))
    accepted = 0
    for _ in range(steps):
        bits = np.unpackbits(twin.check_mask().view(np.uint8), bitorder="little")[: info.vocab_size]
        allowed = np.setdiff1d(np.flatnonzero(bits), stops)
        if not allowed.size:
            break
        first = allowed[whole[allowed]] if whole is not None else allowed[:0]
        liked = allowed[favoured[allowed]]
        pick = first if first.size and rng.random() < 0.2 else liked if liked.size and rng.random() < favour_p \
            else allowed
        assert twin.accept_token(int(pick[rng.randrange(pick.size)]))
        accepted += 1
        if accepted >= 3 and rng.random() < 0.2:
            twin.rollback(2)
            accepted -= 2
        twin.is_completed()


_KINDS: dict[tuple[int, tuple[bytes, ...]], np.ndarray] = {}


def holding(info: xgr.TokenizerInfo, *pieces: bytes) -> np.ndarray:
    """Per token id: whether its bytes (two or more) hold one of the pieces (memoised per vocabulary)."""
    key = (id(info), pieces)
    if key not in _KINDS:
        _KINDS[key] = np.array([len(b) > 1 and any(c in b for c in pieces) for b in token_bytes(info)])
    return _KINDS[key]


@pytest.mark.parametrize("fmt", ["hermes", "llama3_json"])
@pytest.mark.parametrize("seed", range(4))
def test_masks_equal_the_whole_tag_on_random_walks_with_rollbacks(svc, info, fmt, seed):
    # Tokens with braces, '>' or newlines often cross a boundary: favoured.
    walk_with_rollbacks(Twin(svc, tool_tag(fmt, TOOLS[:10])), info, random.Random(seed),
                        holding(info, b"}", b"{", b">", b"\n"))


def test_straddling_tokens_at_both_boundaries_get_equal_masks(svc, info):
    tool = TOOLS[0]  # calculate_triangle_area(base, height, unit)
    text, args_start, args_end = call("hermes", tool, '{"base": 10, "height": 5}')
    tokens = greedy_tokens(info, text)
    assert straddles(info, tokens, text, args_start), "no token crosses the begin/arguments boundary"
    assert straddles(info, tokens, text, args_end), "no token crosses the arguments/end boundary"
    twin = Twin(svc, tool_tag("hermes", TOOLS[:6]))
    assert_equal_masks_along(twin, tokens)


def test_braces_and_escapes_inside_strings_do_not_end_the_arguments(svc, info):
    text, _, _ = call("hermes", TOOLS[0], '{"base": 1, "height": 2, "unit": "a}}\\"}}\\\\"}')
    twin = Twin(svc, tool_tag("hermes", TOOLS[:6]))
    assert_equal_masks_along(twin, greedy_tokens(info, text))


def test_parallel_calls_with_straddling_separators_get_equal_masks(svc, info):
    a, _, _ = call("hermes", TOOLS[1], '{"number": 5}', variant=1)
    b, _, _ = call("hermes", TOOLS[0], '{"base": 1, "height": 2, "unit": "cm"}')
    text = a + "\n" + b
    twin = Twin(svc, tool_tag("hermes", TOOLS[:6]))
    assert_equal_masks_along(twin, greedy_tokens(info, text))


# -- verdicts on whole texts ---------------------------------------------------------------------

def texts_for(fmt: str) -> list[str]:
    good, _, _ = call(fmt, TOOLS[0], '{"base": 10, "height": 5}')
    other, _, _ = call(fmt, TOOLS[1], '{"number": 3}')
    f = load_format(fmt)
    sep, head = f.separator, f.forced_prefix + (f.wrapper[0] if f.wrapper else "")
    tail = f.wrapper[1] if f.wrapper else ""
    return [head + t + tail for t in (
        good,
        good + sep + other,
        good[:-3],  # truncated end literal
        good.replace('"base"', '"bass"'),  # unknown property
        good.replace(", \"height\": 5", ""),  # missing required property
        good.replace(TOOLS[0]["function"]["name"], "no_such_tool"),
        good + good,  # no separator
        good + sep,  # separator without a call
    )] + [head + good + tail + " trailing text", head + good]


@pytest.mark.parametrize("fmt", ["hermes", "llama3_json", "mistral"])
def test_texts_are_accepted_and_rejected_like_the_whole_tag(svc, fmt):
    c = tool_tag(fmt, TOOLS[:6])
    compiled = svc.compile(c)
    verdicts = []
    for text in texts_for(fmt):
        ours = compiled.new_matcher()
        ref = full_matcher(svc, c)
        mine = (ours.accept_string(text), ours.is_completed())
        theirs = (ref.accept_string(text), ref.is_completed())
        assert mine == theirs, text
        verdicts.append(mine)
    assert (True, True) in verdicts and any(not ok for ok, _ in verdicts)


# -- rollback, stop tokens -----------------------------------------------------------------------

def test_rollback_across_boundaries_restores_exact_masks(svc, info):
    a, _, _ = call("hermes", TOOLS[1], '{"number": 5}')
    b, _, _ = call("hermes", TOOLS[0], '{"base": 1, "height": 2}')
    tokens = greedy_tokens(info, a + "\n" + b)
    compiled = svc.compile(tool_tag("hermes", TOOLS[:6]))
    g = Matcher(compiled, vocab_size=info.vocab_size)
    mask = allocate_token_bitmask(1, info.vocab_size)
    before = []
    for t in tokens:
        g.fill_bitmask(mask, 0)
        before.append(mask.clone())
        assert g.accept_token(t)
    g.fill_bitmask(mask, 0)
    before.append(mask.clone())
    for back in (3, 5, len(tokens) - 8):
        g.rollback(back)
        g.fill_bitmask(mask, 0)
        assert torch.equal(mask, before[g.num_processed_tokens])
    assert g.accept_tokens(tokens[g.num_processed_tokens:]) and g.is_completed()


def test_stop_token_is_allowed_only_where_the_calls_may_end(svc, info):
    text, _, _ = call("hermes", TOOLS[0], '{"base": 10, "height": 5}')
    stop = info.stop_token_ids[0]
    g = Matcher(svc.compile(tool_tag("hermes", TOOLS[:6])), vocab_size=info.vocab_size, stop_token_ids=[stop])
    mask = allocate_token_bitmask(1, info.vocab_size)
    for t in greedy_tokens(info, text):
        g.fill_bitmask(mask, 0)
        assert stop not in allowed_tokens(mask, 0, info.vocab_size)
        assert not g.accept_token(stop)
        assert g.accept_token(t)
    g.fill_bitmask(mask, 0)
    assert stop in allowed_tokens(mask, 0, info.vocab_size)
    assert g.accept_token(stop) and g.is_terminated()


# -- reuse across combinations -------------------------------------------------------------------

def test_a_new_combination_of_known_tools_reuses_every_compiled_part(info):
    svc = CompileService(info, UNHURRIED)
    try:
        svc.compile_ready(tool_tag("hermes", TOOLS[:12]))
        compiled_units, hits = len(svc.units), svc.units.hits
        combination = list(reversed(TOOLS[1:12]))
        svc.compile_ready(tool_tag("hermes", combination))
        assert len(svc.units) == compiled_units
        assert svc.units.hits - hits == len(combination)  # one unit per tool: both call syntaxes share it
    finally:
        svc.close()


def test_property_order_is_part_of_a_units_key(info):
    tool = TOOLS[0]
    props = tool["function"]["parameters"]["properties"]
    reordered = {"type": "function", "function": {**tool["function"], "parameters": {
        **tool["function"]["parameters"], "properties": dict(reversed(list(props.items())))}}}
    svc = CompileService(info, UNHURRIED)
    try:
        svc.compile_ready(tool_tag("hermes", [tool]))
        svc.compile_ready(tool_tag("hermes", [reordered]))
        assert len(svc.units) == 2
    finally:
        svc.close()


def test_half_new_tools_compile_only_the_new_parts(info):
    svc = CompileService(info, UNHURRIED)
    try:
        svc.compile_ready(tool_tag("hermes", TOOLS[:10]))
        before = len(svc.units)
        svc.compile_ready(tool_tag("hermes", TOOLS[5:15]))
        assert len(svc.units) == before + 5
    finally:
        svc.close()


def test_unit_cache_is_bounded_in_bytes(info):
    tag = tool_tag("hermes", TOOLS[:8])
    roomy = CompileService(info, UNHURRIED)
    try:
        roomy.compile_ready(tag)
        bound = roomy.units.bytes // 2  # room for about half of the tag's units
    finally:
        roomy.close()
    svc = CompileService(info, UNHURRIED.replace(cache_bytes=bound))
    try:
        svc.compile_ready(tag)
        assert svc.units.bytes <= bound and svc.units.evictions > 0
    finally:
        svc.close()


# -- parts compiled where they are reached --------------------------------------------------------

@contextmanager
def busy_unit_pool(svc: CompileService) -> Iterator[None]:
    """The service's one unit-pool thread held by other work for the block: no part compiles in the background."""
    svc.wait_tables()
    started, release = threading.Event(), threading.Event()
    svc._unit_pool.submit(lambda: (started.set(), release.wait(600)))
    assert started.wait(600)
    try:
        yield
    finally:
        release.set()


def one_thread(info) -> CompileService:
    return CompileService(info, UNHURRIED.replace(xgrammar_threads=1))


def test_the_first_mask_of_a_new_combination_waits_for_no_part_it_cannot_reach(info):
    svc = one_thread(info)
    try:
        with busy_unit_pool(svc):
            g = svc.grammar(tool_tag("hermes", TOOLS[20:26]))
            mask = allocate_token_bitmask(1, info.vocab_size)
            g.fill_bitmask(mask, 0)
            assert allowed_tokens(mask, 0, info.vocab_size)
            assert len(svc.units) == 0 and not g.compiled.composite.units_ready
    finally:
        svc.close()


def test_the_part_a_call_reaches_compiles_at_once_with_exact_masks_while_the_pool_is_busy(info):
    svc = one_thread(info)
    try:
        with busy_unit_pool(svc):
            text, _, _ = call("hermes", TOOLS[0], '{"base": 10, "height": 5}')
            twin = Twin(svc, tool_tag("hermes", [TOOLS[27], TOOLS[0], TOOLS[28]]))
            for t in greedy_tokens(info, text):
                twin.check_mask()
                assert twin.accept_token(t)
            assert len(svc.units) == 1  # the called tool's arguments only
    finally:
        svc.close()


def test_the_parts_metric_counts_each_new_part_queued_and_then_finished(info):
    from tagjit import metrics

    def parts(state: str) -> float:
        return metrics.PARTS.labels(state)._value.get()

    svc = one_thread(info)
    try:
        queued, finished = parts("queued"), parts("finished")
        with busy_unit_pool(svc):
            compiled = svc.compile(tool_tag("hermes", TOOLS[35:38]))
            assert parts("queued") - queued == 3 and parts("finished") == finished
        compiled.composite.resolve_units()
        assert parts("finished") - finished == 3
    finally:
        svc.close()


def test_a_part_queued_past_the_compile_time_limit_still_serves_the_call_that_reaches_it(info, monkeypatch):
    from tagjit.compile.composite import matcher as composite_matcher

    clock = [0.0]
    monkeypatch.setattr(composite_matcher, "_now", lambda: clock[0])
    svc = CompileService(info, UNHURRIED.replace(xgrammar_threads=1, compile_timeout_s=5.0))
    try:
        with busy_unit_pool(svc):
            text, _, _ = call("hermes", TOOLS[0], '{"base": 10, "height": 5}')
            g = svc.grammar(tool_tag("hermes", [TOOLS[38], TOOLS[0]]))
            clock[0] += 60.0  # every part has waited in the queue 12 times the limit
            mask = allocate_token_bitmask(1, info.vocab_size)
            for t in greedy_tokens(info, text):
                g.fill_bitmask(mask, 0)
                assert g.accept_token(t) and g.error is None
    finally:
        svc.close()


def test_a_part_that_cannot_compile_leaves_its_request_only_able_to_stop(info, monkeypatch):
    svc = one_thread(info)
    try:
        with busy_unit_pool(svc):
            def broken(content: str, key: str):
                raise ConstraintError("invalid structural_tag: this part does not compile")
            monkeypatch.setattr(svc._composites, "_compile_unit", broken)
            g = svc.grammar(tool_tag("hermes", TOOLS[30:33]), stop_token_ids=[info.stop_token_ids[0]])
            text, _, _ = call("hermes", TOOLS[31], "{}")
            mask = allocate_token_bitmask(1, info.vocab_size)
            taken = 0
            for t in greedy_tokens(info, text):
                g.fill_bitmask(mask, 0)
                if not g.accept_token(t):
                    break
                taken += 1
            assert 0 < taken and g.error is not None
            g.fill_bitmask(mask, 0)
            assert allowed_tokens(mask, 0, info.vocab_size) == [info.stop_token_ids[0]]
            monkeypatch.undo()
            other = svc.grammar(tool_tag("hermes", TOOLS[33:35]))
            other.fill_bitmask(mask, 0)
            assert other.error is None
    finally:
        svc.close()


# -- the exact fallback --------------------------------------------------------------------------

def test_an_ambiguous_split_hands_over_to_the_whole_tag_grammar(svc, info):
    # Two tags share a begin literal: which content follows is not known when the begin completes.
    def tag(schema: dict) -> dict:
        return {"type": "tag", "begin": "<call>", "content": {"type": "json_schema", "json_schema": schema},
                "end": "</call>"}
    fmt = {"type": "tags_with_separator", "separator": "\n", "at_least_one": True, "stop_after_first": False,
           "tags": [tag({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}),
                    tag({"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"]})]}
    twin = Twin(svc, Constraint.of("structural_tag", {"type": "structural_tag", "format": fmt}))
    for t in greedy_tokens(info, '<call>{"b": "x"}</call>'):
        twin.check_mask()
        assert twin.accept_token(t)
    assert twin.is_completed()
    assert twin.grammar._matcher.delegated


# -- the switch to the whole tag ------------------------------------------------------------------

def test_a_matcher_switches_to_the_whole_tag_once_it_is_compiled_and_its_masks_stay_exact(svc, info):
    text, _, _ = call("hermes", TOOLS[0], '{"base": 10, "height": 5, "unit": "cm"}')
    tokens = greedy_tokens(info, text)
    twin = Twin(svc, tool_tag("hermes", TOOLS[:8]))
    half = len(tokens) // 2
    for t in tokens[:half]:
        twin.check_mask()
        assert twin.accept_token(t)
    assert not twin.grammar._matcher.delegated
    twin.grammar.compiled.composite.full_grammar()  # what the background compile does
    assert_equal_masks_along_from(twin, tokens, half)
    assert twin.grammar._matcher.delegated and twin.grammar._plain is not None
    twin.rollback(len(tokens) - half + 2)  # back across the switch point
    assert_equal_masks_along_from(twin, tokens, half - 2)


def assert_equal_masks_along_from(twin: Twin, tokens: list[int], start: int) -> None:
    for t in tokens[start:]:
        twin.check_mask()
        assert twin.accept_token(t)
    twin.check_mask()
    assert twin.is_completed()


def test_with_composite_swap_at_once_the_whole_tag_compiles_in_the_background(info):
    svc = CompileService(info, UNHURRIED.replace(composite_swap=True, composite_swap_after_tokens=0))
    try:
        compiled = svc.compile(tool_tag("hermes", TOOLS[10:14]))
        assert compiled.composite is not None
        compiled.composite.full_future.result(timeout=600)
        twin = Twin(svc, tool_tag("hermes", TOOLS[10:14]))  # the same tag: the cached composite, compiled whole
        twin.check_mask()
        assert twin.grammar._matcher.delegated
    finally:
        svc.close()


def swap_service(info, after: int) -> CompileService:
    return CompileService(info, UNHURRIED.replace(composite_swap=True, composite_swap_after_tokens=after))


def test_a_new_combination_compiles_whole_only_once_its_request_has_taken_the_swap_tokens(info):
    svc = swap_service(info, 8)
    try:
        text, _, _ = call("hermes", TOOLS[0], '{"base": 10, "height": 5}')
        tokens = greedy_tokens(info, text)
        assert len(tokens) > 8
        g = svc.grammar(tool_tag("hermes", TOOLS[:3]))
        mask = allocate_token_bitmask(1, info.vocab_size)
        for t in tokens[:7]:
            g.fill_bitmask(mask, 0)
            assert g.accept_token(t)
        assert g.compiled.composite.full_future is None
        g.fill_bitmask(mask, 0)
        assert g.accept_token(tokens[7])
        g.compiled.composite.full_future.result(timeout=600)
    finally:
        svc.close()


def test_a_combination_that_comes_again_compiles_whole_at_its_second_request(info):
    svc = swap_service(info, 1000)
    try:
        first = svc.grammar(tool_tag("hermes", TOOLS[4:7]))
        first.fill_bitmask(allocate_token_bitmask(1, info.vocab_size), 0)
        assert first.compiled.composite.full_future is None
        second = svc.grammar(tool_tag("hermes", TOOLS[4:7]))
        second.fill_bitmask(allocate_token_bitmask(1, info.vocab_size), 0)
        assert second.compiled is first.compiled
        first.compiled.composite.full_future.result(timeout=600)
    finally:
        svc.close()


def test_the_masks_stay_the_same_across_the_switch_to_the_whole_tag(info):
    svc = swap_service(info, 6)
    try:
        text, _, _ = call("hermes", TOOLS[0], '{"base": 10, "height": 5}')
        twin = Twin(svc, tool_tag("hermes", TOOLS[:3]))
        for i, t in enumerate(greedy_tokens(info, text)):
            if i == 6:
                twin.grammar.compiled.composite.full_future.result(timeout=600)
            twin.check_mask()
            assert twin.accept_token(t)
        assert twin.grammar._matcher.delegated
    finally:
        svc.close()


def test_without_composite_swap_nothing_compiles_the_whole_tag(svc, info):
    text, _, _ = call("hermes", TOOLS[1], "{}")
    g = svc.grammar(tool_tag("hermes", TOOLS[:3]))
    mask = allocate_token_bitmask(1, info.vocab_size)
    for t in greedy_tokens(info, text)[:6]:
        g.fill_bitmask(mask, 0)
        assert g.accept_token(t)
    assert g.compiled.composite.full_future is None and not g.compiled.composite.full_ready


def test_grammar_copy_and_reset_work_on_a_composite(svc, info):
    text, _, _ = call("hermes", TOOLS[0], '{"base": 10, "height": 5}')
    tokens = greedy_tokens(info, text)
    g = svc.grammar(tool_tag("hermes", TOOLS[:6]))
    assert g.validate_tokens(tokens) == tokens and g.num_processed_tokens == 0
    assert g.accept_tokens(tokens[:7])
    fresh = g.copy()
    g.reset()
    assert g.accept_tokens(tokens) and fresh.accept_tokens(tokens)
    assert g.is_completed() and fresh.is_completed()


# -- agent requests: calls or a bare JSON answer ---------------------------------------------------

ANSWER = {"type": "object", "properties": {"verdict": {"type": "string", "enum": ["resolved", "escalate"]},
                                           "notes": {"type": "array", "items": {"type": "string"}}},
          "required": ["verdict"]}


def agent_tag(fmt: str, tools: list[dict], parallel: bool = True, answer: dict = ANSWER) -> Constraint:
    return Constraint.of("structural_tag", build_tool_tag(load_format(fmt), tools, "auto", parallel, Settings(),
                                                          answer=answer))


@pytest.mark.parametrize("fmt", ["hermes", "qwen25", "deepseek_v31", "mistral", "gpt_oss"])
@pytest.mark.parametrize("prefix", ["", '{"verdict": "resolved", "notes": ["a}', "call"])
def test_calls_or_an_answer_compile_in_parts_with_the_whole_tags_masks(svc, info, fmt, prefix):
    tools = TOOLS[:8]
    twin = Twin(svc, agent_tag(fmt, tools))
    f = load_format(fmt)
    if prefix == "call":
        prefix = (f.forced_prefix + (f.wrapper[0] if f.wrapper else "") if f.layout == "triggered" else "") + \
            f.render_begin(tools[3]["function"]["name"])
    elif prefix and f.layout == "messages":
        prefix = f.messages[0].begin + prefix
    try:
        Walker(info).walk(twin, prefix=prefix, closers=CLOSERS + ("<|return|>", "<|call|>"), max_tokens=200)
    except WalkError as e:
        assert "did not finish" in str(e)
    assert twin.masks > 3


@pytest.mark.parametrize("seed", range(4))
def test_calls_or_an_answer_keep_the_whole_tags_masks_on_random_walks_with_rollbacks(svc, info, seed):
    twin = Twin(svc, agent_tag("hermes", TOOLS[:10], parallel=seed % 2 == 0))
    walk_with_rollbacks(twin, info, random.Random(seed), holding(info, b"}", b"{", b"<", b'"'))


def test_an_answer_the_first_byte_cannot_tell_from_a_call_keeps_the_whole_tag(svc):
    # llama3_json calls are bare JSON objects too: '{' may begin either.
    assert svc.compile(agent_tag("llama3_json", TOOLS[:4])).composite is None


@pytest.mark.parametrize("make", ["agent", "auto"])
def test_the_answer_or_the_text_is_one_unit_reused_across_tool_combinations(info, make):
    tag = {"agent": agent_tag, "auto": auto_tag}[make]
    svc = CompileService(info, UNHURRIED)
    try:
        assert svc.compile_ready(tag("hermes", TOOLS[:6])).composite is not None
        before = len(svc.units)
        assert svc.compile_ready(tag("hermes", list(reversed(TOOLS[:6]))[:-1])).composite is not None
        assert len(svc.units) == before == 7  # six argument units and the answer (or the text)
    finally:
        svc.close()


def verdicts_like_the_whole_tag(svc: CompileService, c: Constraint, texts: list[str]) -> list[tuple[bool, bool]]:
    """(accepted, completed) per text, asserted equal to the whole tag's."""
    compiled = svc.compile(c)
    assert compiled.composite is not None
    verdicts = []
    for text in texts:
        ours, ref = compiled.new_matcher(), full_matcher(svc, c)
        mine = (ours.accept_string(text), ours.is_completed())
        assert mine == (ref.accept_string(text), ref.is_completed()), text
        verdicts.append(mine)
    return verdicts


def test_answer_texts_are_accepted_and_rejected_like_the_whole_tag(svc):
    good, _, _ = call("hermes", TOOLS[0], '{"base": 10, "height": 5}')
    texts = ['{"verdict": "resolved"}', '{"verdict": "resolved", "notes": ["x}"]}', '{"verdict": "maybe"}',
             'Text {"verdict": "resolved"}', '{"verdict": "resolved"} ', good, good + '{"verdict": "resolved"}',
             '{"verdict": "resolved"}' + good, '{"verdict": "resolved"']
    assert verdicts_like_the_whole_tag(svc, agent_tag("hermes", TOOLS[:6]), texts).count((True, True)) == 3


# -- tool_choice=auto: free text, and calls where the trigger appears ---------------------------------

def auto_tag(fmt: str, tools: list[dict], parallel: bool = True) -> Constraint:
    return tool_tag(fmt, strict(tools), "auto", parallel)


@pytest.mark.parametrize("fmt", ["hermes", "qwen25", "llama3_json", "deepseek_v31", "kimi_k2", "mistral"])
@pytest.mark.parametrize("parallel", [True, False])
@pytest.mark.parametrize("lead", ["", "Let me check that. ", "Use <tool_call", "Say {\"name\" plainly. "])
def test_auto_text_then_calls_keep_the_whole_tags_masks(svc, info, fmt, parallel, lead):
    tools = TOOLS[:8]
    twin = Twin(svc, auto_tag(fmt, tools, parallel))
    f = load_format(fmt)
    if not twin.accept_string(lead):
        return  # the lead itself holds the trigger: both grammars refused it alike
    prefix = (f.wrapper[0] if f.wrapper else "") + f.render_begin(tools[2]["function"]["name"]).split("{index}")[0]
    try:
        Walker(info).walk(twin, prefix=prefix, closers=CLOSERS, max_tokens=200)
    except WalkError as e:
        assert "did not finish" in str(e)
    assert twin.masks > 3


@pytest.mark.parametrize("fmt", ["hermes", "qwen25", "mistral", "kimi_k2"])
@pytest.mark.parametrize("seed", range(3))
def test_auto_keeps_the_whole_tags_masks_on_random_walks_with_rollbacks(svc, info, fmt, seed):
    # The trigger and the call syntax's pieces are favoured, so that walks go into calls and out again.
    twin = Twin(svc, auto_tag(fmt, TOOLS[:10], parallel=seed % 2 == 0))
    trigger = load_format(fmt).trigger.encode()
    walk_with_rollbacks(twin, info, random.Random(seed), holding(info, b"<", b">", b"}", b"{", b'"', b"_call", b"[", b"|"),
                        steps=80, whole=np.array([trigger in b for b in token_bytes(info)]))


def test_auto_text_may_end_the_output_anywhere_as_in_the_whole_tag(svc, info):
    twin = Twin(svc, auto_tag("hermes", TOOLS[:4]))
    stop = info.stop_token_ids[0]
    assert twin.is_completed()  # no text at all
    assert twin.accept_string("The answer is 4.")
    assert twin.is_completed()
    twin.check_mask()
    assert twin.accept_token(stop)


def test_auto_text_and_calls_are_accepted_and_rejected_like_the_whole_tag(svc):
    good, _, _ = call("qwen25", TOOLS[0], '{"base": 10, "height": 5}')
    texts = ["Plain text.", "Text " + good, good + "\nMore text.", good + "\n" + good, "<think>no</think>",
             "Text <tool_call>{\"name\": \"no_such_tool\"", "<tool_call>", "a <tool_cal b", good[:-4],
             "x" + good + "y" + good]
    verdicts = verdicts_like_the_whole_tag(svc, auto_tag("qwen25", TOOLS[:6]), texts)
    assert (True, True) in verdicts and any(not ok for ok, _ in verdicts)
