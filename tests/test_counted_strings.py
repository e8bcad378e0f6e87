"""String lengths that tagjit's token filter counts, where the grammar cannot count them exactly: ``minLength``/
``maxLength`` above ``MAX_COUNTED`` characters (the grammar's count rules would compile too slowly there, and
xgrammar's bounded repetition takes no escape), and a ``maxLength`` beside a ``pattern`` whose automaton with it is
too large to build or to precompute, where no prefix the pattern reads can be stranded by the count. The grammar writes the string without its lengths;
the filter counts decoded characters as JSON Schema does (an escape is one, a surrogate pair one), in every mask and
every accepted token.

Checked on hand-picked strings, against the ``jsonschema`` package on generated ones, mask for mask against the
grammar's own count rules along random walks, and on real MaskBench schemas."""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pools import UNHURRIED
from shared_data import maskbench
from tagjit import CompileService, Constraint, UnsupportedFeatureError, report
from tagjit.build import bounded_strings, patterns
from tagjit.build.bounded_strings import MAX_COUNTED
from tagjit.build.grammars import json_schema_grammar
from tagjit.constraint import Kind
from tagjit.runtime.matcher import allocate_token_bitmask
from tagjit.tools import build_tool_tag
from tagjit.tools.tag import answer_content
from test_pattern_lengths import _spell, valid
from test_string_lengths import accepts, plain  # noqa: F401 (plain: a compile service without a vocabulary)

UNTIMED = settings(deadline=None, max_examples=60)
LONG = MAX_COUNTED + 44  # 300: above the count rules


def note(lo: int, hi: int | None) -> dict:
    bounds = {"minLength": lo} if hi is None else {"minLength": lo, "maxLength": hi}
    return {"type": "object", "properties": {"note": {"type": "string", **bounds}, "n": {"type": "integer"}},
            "required": ["note"]}


def test_a_long_string_is_written_unbounded_and_counted_by_the_filter():
    built = json_schema_grammar({"type": "string", "maxLength": LONG}, UNHURRIED)
    assert built.filter_spec is not None
    assert "tagjit_len_" not in str(built.grammar) and f"{LONG}" not in str(built.grammar)


def test_a_short_string_keeps_the_grammars_count_rules():
    built = json_schema_grammar({"type": "string", "maxLength": MAX_COUNTED}, UNHURRIED)
    assert built.filter_spec is None and "tagjit_len_" in str(built.grammar)


def test_each_escape_counts_as_one_character_at_both_bounds(plain):
    schema = note(LONG - 2, LONG)
    for ch in ["\n", '"', "\\", "é", "\u2028"]:
        assert accepts(plain, schema, json.dumps({"note": ch * LONG})), repr(ch)
        assert accepts(plain, schema, json.dumps({"note": ch * (LONG - 2)})), repr(ch)
        assert not accepts(plain, schema, json.dumps({"note": ch * (LONG + 1)})), repr(ch)
        assert not accepts(plain, schema, json.dumps({"note": ch * (LONG - 3)})), repr(ch)


def test_a_surrogate_pair_is_one_character(plain):
    schema = note(0, LONG)
    pair = "\\ud83d\\ude00"
    assert json.loads(f'"{pair}"') == "😀"
    assert accepts(plain, schema, '{"note": "' + "a" * (LONG - 1) + pair + '"}')
    assert not accepts(plain, schema, '{"note": "' + "a" * LONG + pair + '"}')
    assert accepts(plain, schema, '{"note": "' + "a" * (LONG - 1) + "😀" + '"}')


def test_a_lone_surrogate_escape_counts_as_one_character_as_python_decodes_it(plain):
    schema = note(0, LONG)
    assert accepts(plain, schema, '{"note": "' + "a" * (LONG - 1) + '\\ud83d"}')
    assert not accepts(plain, schema, '{"note": "' + "a" * (LONG - 1) + '\\ud83d\\u0041"}')
    assert accepts(plain, schema, '{"note": "' + "a" * (LONG - 2) + '\\ud83d\\u0041"}')


def test_a_minimum_length_alone_counts_escapes(plain):
    schema = note(LONG, None)
    assert accepts(plain, schema, json.dumps({"note": "\n" * LONG}))
    assert not accepts(plain, schema, json.dumps({"note": "\n" * (LONG - 1)}))
    assert accepts(plain, schema, json.dumps({"note": "x" * (5 * LONG)}))


def test_the_other_members_and_values_after_the_string_are_still_the_grammars(plain):
    schema = note(0, LONG)
    assert accepts(plain, schema, json.dumps({"note": "\n" * LONG, "n": 3}))
    assert not accepts(plain, schema, json.dumps({"note": "x", "n": "3"}))
    assert not accepts(plain, schema, json.dumps({"n": 3}))


def test_each_item_of_an_array_is_counted_apart(plain):
    schema = {"type": "array", "items": {"type": "string", "maxLength": LONG}}
    assert accepts(plain, schema, json.dumps(["\t" * LONG, "\t" * LONG, ""]))
    assert not accepts(plain, schema, json.dumps(["\t" * LONG, "\t" * (LONG + 1)]))


def test_a_counted_string_beside_null_takes_null_too(plain):
    schema = {"type": ["string", "null"], "maxLength": LONG}
    assert accepts(plain, schema, "null") and accepts(plain, schema, json.dumps("\n" * LONG))
    assert not accepts(plain, schema, json.dumps("\n" * (LONG + 1)))


def test_a_counted_string_in_an_any_order_object(plain):
    schema = {**note(0, LONG), "x-any-order": True}
    assert accepts(plain, schema, json.dumps({"n": 1, "note": "\n" * LONG}))
    assert not accepts(plain, schema, json.dumps({"n": 1, "note": "\n" * (LONG + 1)}))


CHARS = st.sampled_from(["a", "é", '"', "\\", "\n", "\t", "/", "😀", "\u2028", " ", "中"])


@UNTIMED
@given(data=st.data(), tail=st.lists(CHARS, max_size=14).map("".join), lo=st.integers(0, 6), span=st.integers(0, 6))
def test_generated_strings_are_judged_as_json_schema_judges_them(plain, data, tail, lo, span):
    schema = {"type": "string", "minLength": LONG - 3 + lo, "maxLength": LONG - 3 + lo + span}
    value = "x" * (LONG - 6) + tail
    assert accepts(plain, schema, _spell(value, data)) is valid(schema, value), (len(value), schema)


def test_a_pattern_every_prefix_of_which_can_close_is_counted_apart_and_takes_escapes(plain):
    # 4000 states with the lengths (not precomputed: 10-60 ms a mask); alone, one state tagjit writes itself
    schema = {"type": "string", "pattern": "^[a-zA-Z0-9 ()._/\\\\-]*$", "maxLength": 4000}
    built = json_schema_grammar(schema, UNHURRIED)
    assert built.filter_spec is not None
    assert accepts(plain, schema, json.dumps("a\\" * 2000)) and accepts(plain, schema, '""')
    assert not accepts(plain, schema, json.dumps("a\\" * 2000 + "b")) and not accepts(plain, schema, '"a!"')


def test_a_pattern_with_a_fixed_prefix_is_counted_apart(plain):
    # Github_medium---o9906's image: every state of the prefix has its few characters left at any count
    schema = {"type": "string", "maxLength": 32767,
              "pattern": "^data:image/(jpg|jpeg|png|svg\\+xml);base64,[0-9a-zA-Z+/=]*$"}
    assert json_schema_grammar(schema, UNHURRIED).filter_spec is not None
    head = "data:image/png;base64,"
    assert accepts(plain, schema, json.dumps(head + "A" * (32767 - len(head))))
    assert not accepts(plain, schema, json.dumps(head + "A" * (32768 - len(head))))
    assert not accepts(plain, schema, json.dumps("data:image/gif;base64,AAAA"))


def test_format_email_with_a_length_of_1024_is_enforced_exactly(plain):
    schema = {"type": "string", "format": "email", "maxLength": 1024}
    assert json_schema_grammar(schema, UNHURRIED).filter_spec is not None
    longest = "a" * 1016 + "@b.co.uk"
    assert len(longest) == 1024
    assert accepts(plain, schema, json.dumps(longest)) and accepts(plain, schema, json.dumps("a@b.co"))
    assert not accepts(plain, schema, json.dumps("a" + longest))
    assert not accepts(plain, schema, json.dumps("not an email"))


@pytest.mark.parametrize("node,prefix,endings", [
    ({"type": "string", "format": "email", "maxLength": 1024}, "a", ["@b", "@b.c", "@b.co"]),
    ({"type": "string", "pattern": "^(ab)+$", "maxLength": 5001}, "ab", ["", "ab"]),
], ids=["email", "pairs"])
def test_the_count_never_lets_a_pattern_pass_the_point_where_it_can_still_end(plain, node, prefix, endings):
    # The filter runs the pattern's automaton beside the count: a prefix stands only while the pattern can still end
    # within maxLength, so a mask never leaves the text without a token (1020 characters of local part and no "@").
    hi = node["maxLength"]
    g = plain.grammar(Constraint.of(Kind.JSON, node))
    for n in range(hi // len(prefix) - 4, hi // len(prefix) + 2):
        start = g.copy() if hasattr(g, "copy") else plain.grammar(Constraint.of(Kind.JSON, node))
        text = prefix * n + (prefix[0] if len(prefix) > 1 else "")
        standing = start.accept_string('"' + text)
        finishable = any(accepts(plain, node, '"' + text + e + '"') for e in [*endings, prefix[1:]])
        assert standing is finishable, (len(text), standing, finishable)


def test_a_minimum_length_beside_a_pattern_stays_in_one_automaton(plain):
    node = {"type": "string", "pattern": "^[a-z]+$", "minLength": 2, "maxLength": 5000}
    with pytest.raises(UnsupportedFeatureError, match="4096 states"):
        json_schema_grammar(node, UNHURRIED)


# Two objects of a oneOf in declared order, told apart by their "kind": the filter cannot follow both at once.
UNION = {"type": "object", "properties": {
    "top": {"type": "string", "maxLength": LONG},
    "item": {"oneOf": [
        {"type": "object", "properties": {"kind": {"const": "a"}, "text": {"type": "string", "maxLength": LONG}},
         "required": ["kind", "text"], "additionalProperties": False},
        {"type": "object", "properties": {"kind": {"const": "b"}, "size": {"type": "integer"}},
         "required": ["kind", "size"], "additionalProperties": False}]}},
    "required": ["top", "item"], "additionalProperties": False}


def test_strings_below_a_union_the_filter_cannot_follow_keep_the_grammars_lengths(plain):
    item = {"kind": "a", "text": "t" * LONG}
    assert accepts(plain, UNION, json.dumps({"top": "\n" * LONG, "item": item}))  # counted by the filter
    assert not accepts(plain, UNION, json.dumps({"top": "\n" * (LONG + 1), "item": item}))
    assert not accepts(plain, UNION, json.dumps({"top": "x", "item": {**item, "text": "t" * (LONG + 1)}}))
    assert accepts(plain, UNION, json.dumps({"top": "x", "item": {"kind": "b", "size": 2}}))


def test_a_pattern_too_large_with_its_lengths_below_such_a_union_stays_refused_by_name(plain):
    branch = UNION["properties"]["item"]["oneOf"][0]
    text = {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5000}
    assert json_schema_grammar(text, UNHURRIED).filter_spec is not None  # counted apart on its own
    schema = json.loads(json.dumps(UNION))
    schema["properties"]["item"]["oneOf"][0] = {**branch, "properties": {**branch["properties"], "text": text}}
    with pytest.raises(UnsupportedFeatureError, match="4096 states"):
        plain.validate(Constraint.of(Kind.JSON, schema))


@pytest.mark.parametrize("name", ["Github_medium---o9906.json", "Github_medium---o24621.json",
                                  "Github_medium---o9878.json", "Github_medium---o9770.json"])
def test_real_schemas_with_long_strings_judge_their_instances(plain, name):
    case = maskbench(name)
    assert case["tests"]
    for t in case["tests"]:
        assert accepts(plain, case["schema"], json.dumps(t["data"])) is t["valid"], t["description"]


NOTES = {"type": "function", "function": {"name": "save_notes", "parameters": {
    "type": "object", "properties": {"notes": {"type": "array", "items": {"type": "string", "maxLength": LONG}}},
    "required": ["notes"]}}}


@pytest.mark.parametrize("fmt", ["hermes", "qwen3_coder"])
def test_tool_call_arguments_keep_the_grammars_lengths_where_no_filter_follows_them(plain, fmt):
    # Tool calls compile inside a structural tag, per tool: their lengths are the grammar's (the count rules up to
    # MAX_COUNTED, xgrammar's repetition above), never a filter's that the tag would drop.
    with report.collecting() as relaxed:
        tag = build_tool_tag(fmt, [NOTES], "required", True, UNHURRIED)
    assert relaxed == []
    plain.validate(Constraint.of(Kind.STRUCTURAL_TAG, tag))


def test_an_agents_answer_keeps_the_grammars_lengths_and_its_refusals(plain):
    long_pattern = {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5000}
    with pytest.raises(UnsupportedFeatureError, match="4096 states"):
        answer_content(long_pattern, UNHURRIED)


def _allowed(grammar, bitmask, vocab_size: int) -> np.ndarray:
    grammar.fill_bitmask(bitmask, 0)
    return np.flatnonzero(np.unpackbits(bitmask[0].numpy().view(np.uint8), bitorder="little")[:vocab_size])


_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


@pytest.mark.parametrize("lo,hi", [(3, 9), (0, 4), (5, None)])
def test_masks_equal_the_grammars_count_rules_along_random_walks(qwen2_info, monkeypatch, lo, hi):
    # The same bounds twice: as the grammar's count rules (exact), and counted by the filter (MAX_COUNTED lowered
    # for this compile only). The count rules refuse a lone surrogate, which the filter's plain string takes: a
    # token that writes a surrogate escape is left out of the comparison and of the walk.
    _walk_against_one_grammar(qwen2_info, monkeypatch, note(lo, hi), bounded_strings, "MAX_COUNTED", 1)


def emailish(local: str) -> dict:
    return {"type": "object", "properties": {
        "to": {"type": "string", "pattern": f"^[{local}]+@[a-z]+\\.[a-z]{{2,3}}$", "maxLength": 12},
        "n": {"type": "integer"}}, "required": ["to"]}


@pytest.mark.parametrize("local", ["a-z\\\\", "a-zé中😀"], ids=["backslash", "multibyte"])
def test_masks_of_a_pattern_counted_apart_equal_its_automaton_with_the_lengths(qwen2_info, monkeypatch, local):
    # The pattern with its maxLength as one automaton (exact), and the pattern alone beside the filter's count and
    # Track (PRECOMPUTED_STATES lowered so that the automaton with the lengths counts as too large to precompute).
    _walk_against_one_grammar(qwen2_info, monkeypatch, emailish(local), patterns, "PRECOMPUTED_STATES", 10)


def _walk_against_one_grammar(info, monkeypatch, schema, module, name: str, value: int) -> None:
    exact = CompileService(info, UNHURRIED).grammar(Constraint.of(Kind.JSON, schema))
    assert json_schema_grammar(schema, UNHURRIED).filter_spec is None
    monkeypatch.setattr(module, name, value)
    assert json_schema_grammar(schema, UNHURRIED).filter_spec is not None
    ours = CompileService(info, UNHURRIED).grammar(Constraint.of(Kind.JSON, schema))
    monkeypatch.undo()
    vocab = [bytes(t) for t in info.decoded_vocab]
    bitmask = allocate_token_bitmask(1, info.vocab_size)
    stops = set(info.stop_token_ids)
    rng = random.Random(json.dumps(schema))
    steps = escapes = 0
    for _ in range(20):
        ours.reset()
        exact.reset()
        text = b""
        for _ in range(40):
            def surrogate(t: int) -> bool:
                return _SURROGATE.search((text + vocab[t])[-(len(vocab[t]) + 6):]) is not None
            a, b = _allowed(ours, bitmask, info.vocab_size), _allowed(exact, bitmask, info.vocab_size)
            differ = {t for t in set(a.tolist()) ^ set(b.tolist()) if not surrogate(t)}
            assert not differ, (text, [vocab[t] for t in sorted(differ)[:8]])
            steps += 1
            choices = [t for t in a.tolist() if t not in stops and not surrogate(t)]
            if not choices:
                break
            escaping = [t for t in choices if b"\\" in vocab[t]]
            structural = [t for t in choices if any(c in vocab[t] for c in b'",}:{@.')]
            r = rng.random()
            t = rng.choice(escaping if escaping and r < 0.3 else structural if structural and r < 0.7 else choices)
            escapes += b"\\" in vocab[t]
            assert ours.accept_token(t) and exact.accept_token(t)
            text += vocab[t]
            if rng.random() < 0.1 and len(text) > 2:  # a rollback restores the count too
                ours.rollback(1)
                exact.rollback(1)
                text = text[:-len(vocab[t])]
    assert steps > 200 and escapes > 10
