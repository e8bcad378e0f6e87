"""xgrammar's EBNF printer still writes what ``tagjit.build.printed`` repairs: a printer change fails here, loudly.

Each repair edits text xgrammar prints. If an upgrade spells a rule differently, the repair would quietly
find nothing to do (strings would count bytes, XML numbers would be unbounded); these tests pin both the
spelling each repair looks for and that the repair changes the grammar.
"""

from __future__ import annotations

import json

import pytest
import xgrammar as xgr

from tagjit.build.printed import (PrinterChanged, bound_numbers, ebnf_admits, fix_string_lengths, json_string_shape,
                                  regex_patterns, reroot_any_of, split_root, string_body, string_literals,
                                  tighten_separators, without_lt)


def printed(schema: dict) -> str:
    return str(xgr.Grammar.from_json_schema(json.dumps(schema)))


def accepts(grammar: xgr.Grammar, text: str) -> bool:
    info = xgr.TokenizerInfo([])
    matcher = xgr.GrammarMatcher(xgr.GrammarCompiler(info).compile_grammar(grammar))
    return matcher.accept_string(text) and matcher.is_completed()


@pytest.mark.parametrize("bounds", [{"maxLength": 1}, {"minLength": 1, "maxLength": 1}, {"maxLength": 3},
                                    {"minLength": 2}])
def test_a_length_bounded_string_is_printed_with_the_character_class_the_repair_replaces(bounds):
    assert r'[^\"\\\r\n]' in printed({"type": "string", **bounds})


@pytest.mark.parametrize("bound", [1, 3])
def test_the_repaired_length_bound_refuses_a_raw_tab_and_stays_one_character_class(bound):
    grammar = xgr.Grammar.from_json_schema(json.dumps({"type": "string", "maxLength": bound}))
    assert accepts(grammar, '"\t"')
    fixed = fix_string_lengths(grammar)
    assert not accepts(fixed, '"\t"') and accepts(fixed, '"é"')
    # One class in the repeated rule (no escape alternatives): what keeps its masks precomputable.
    assert not accepts(fixed, r'"\n"') and r'"\\u"' not in str(fixed)


def test_the_root_of_a_choice_is_printed_as_one_parenthesised_alternation():
    alts, others = split_root(printed({"anyOf": [{"const": 1}, {"type": "string"}]}))
    assert alts == ["(root_case_0)", "(basic_string)"]
    assert any(line.startswith("root_case_0 ::= ") for line in others)


def test_a_root_of_an_unknown_shape_is_a_printer_change():
    with pytest.raises(PrinterChanged):
        split_root('root ::= "a" | "b"')


def test_a_pattern_is_printed_as_a_regex_call_the_repair_can_read():
    assert regex_patterns(printed({"type": "string", "pattern": "a+<b"})) == ["a+<b"]


def test_a_string_format_is_printed_as_rules_between_two_quotes():
    shape = json_string_shape(printed({"type": "string", "format": "date"}))
    assert shape is not None and shape[1] is None
    shape = json_string_shape(printed({"type": "string", "pattern": "[a-z]+"}))
    assert shape is not None and shape[1] == "[a-z]+"


def test_json_numbers_are_printed_with_unbounded_digit_runs_that_the_repair_bounds():
    text = printed({"type": "number"})
    assert "[0-9]*" in text and "basic_number_digits{1, -1}" in text
    bounded = bound_numbers(text, 100, 2)
    assert "[0-9]*" not in bounded and "{1, -1}" not in bounded.split("basic_array")[0]
    assert "basic_number_digits{1, 2}" in bounded and "[0-9]{0, 100}" in bounded


def test_a_json_string_admits_less_than_until_the_repair_takes_it_out():
    text = printed({"type": "string"})
    assert ebnf_admits(text, "<")
    assert not ebnf_admits(without_lt(text), "<")


def test_string_literals_are_read_back_decoded():
    assert string_literals('root ::= "a\\"b" | "<x>"') == ['a"b', "<x>"]


ANY_OF = {"anyOf": [{"const": "__probe__"}, {"type": "object", "properties": {"a": {"const": "__slot__"}},
                                            "required": ["a"]}]}


def test_rerooting_an_any_of_roots_the_chosen_branch_and_makes_each_placeholder_const_its_rule():
    alts, lines = reroot_any_of(printed(ANY_OF), 2, 1, "__probe__", {"__slot__": "slot_rule"})
    assert lines[-1] == "root ::= " + alts[1] and sum(line.startswith("root ::= ") for line in lines) == 1
    text = "\n".join(lines)
    assert "__slot__" not in text and "slot_rule" in text
    grammar = xgr.Grammar.from_ebnf("\n".join([*lines, 'slot_rule ::= "7"']), root_rule_name="root")
    assert accepts(grammar, '{"a": 7}') and not accepts(grammar, '"__probe__"')


def test_rerooting_an_any_of_whose_probe_const_is_not_printed_as_one_literal_is_a_printer_change():
    with pytest.raises(PrinterChanged):
        reroot_any_of(printed(ANY_OF), 2, 1, "__elsewhere__", {"__slot__": "slot_rule"})


def test_rerooting_an_any_of_printed_with_another_number_of_branches_is_a_printer_change():
    with pytest.raises(PrinterChanged):
        reroot_any_of(printed(ANY_OF), 3, 1, "__probe__", {"__slot__": "slot_rule"})


def test_a_string_format_body_is_rooted_inside_the_quotes_and_its_own_rules_leave_out_the_basic_ones():
    inner, _, others = json_string_shape(printed({"type": "string", "format": "date"}))
    assert any(line.startswith("basic_string ::= ") for line in others)  # the spelling the repair leaves out
    body, own = string_body(inner, others)
    assert "basic_" not in own and not ebnf_admits(own, '"\\')
    grammar = xgr.Grammar.from_ebnf(body, root_rule_name="root")
    assert accepts(grammar, "2024-01-31") and not accepts(grammar, '"2024-01-31"')


def test_a_string_body_whose_own_rules_reach_a_basic_rule_is_a_printer_change():
    inner, _, others = json_string_shape(printed({"type": "string", "format": "date"}))
    reaching = [f"{inner} ::= ((basic_string))" if line.startswith(f"{inner} ::= ") else line for line in others]
    with pytest.raises(PrinterChanged):
        string_body(inner, reaching)


def test_a_string_body_without_a_rule_for_the_inside_of_the_quotes_is_a_printer_change():
    inner, _, others = json_string_shape(printed({"type": "string", "format": "date"}))
    with pytest.raises(PrinterChanged):
        string_body(inner, [line for line in others if not line.startswith(f"{inner} ::= ")])


# -- numbers tagjit writes itself (build.numbers) ----------------------------------------------------

def test_xgrammar_prints_a_float_enum_value_as_its_17_digit_decimal_which_tagjit_replaces():
    assert '"0.40000000000000002"' in printed({"type": "number", "enum": [0.4]})
    assert 'root ::= (("9"))' in printed({"enum": [9.0]})  # 9.0, also valid, has no spelling


def test_xgrammar_writes_a_number_range_with_at_most_six_fraction_digits_which_tagjit_replaces():
    info = xgr.TokenizerInfo([])
    m = xgr.GrammarMatcher(xgr.GrammarCompiler(info).compile_json_schema(json.dumps({"type": "number", "minimum": 0})))
    assert m.accept_string("0.123456") and not m.accept_string("7")  # "0.1234567" is valid and rejected


@pytest.mark.parametrize("bound", [1.5, 2 ** 63, -(2 ** 63) - 1])
def test_xgrammar_refuses_an_integer_bound_that_is_not_whole_or_outside_int64_which_tagjit_writes(bound):
    with pytest.raises(RuntimeError):
        printed({"type": "integer", "minimum": bound})


def test_xgrammar_keeps_every_digit_of_a_whole_int64_integer_bound():
    assert '"9" "2" "2" "3" "3" "7" "2" "0" "3" "6" "8" "5" "4" "7" "7" "5" "8" "0" [0-7]' in printed(
        {"type": "integer", "maximum": 2 ** 63 - 1})


def test_a_digit_loop_of_tagjit_is_printed_as_the_class_repetition_the_bound_repair_finds():
    grammar = xgr.Grammar.from_ebnf('root ::= "-" tagjit_range_x_0\ntagjit_range_x_0 ::= [0]* ([1-9] [0-9]*)')
    text = str(grammar)
    assert "[0]*" in text and "[0-9]*" in text
    assert "[0]{0, 9}" in bound_numbers(text, 9, 2)


# -- patternProperties keys tagjit writes itself (build.keys) ----------------------------------------

KEYED = {"type": "object", "properties": {"a": {"type": "integer"}},
         "patternProperties": {"__tagjit_own_k_0__": {"type": "string"}, "__tagjit_own_k_1__": {"type": "integer"}},
         "additionalProperties": False}


def test_xgrammar_prints_each_pattern_properties_key_as_one_json_string_regex_call_which_tagjit_replaces():
    text = printed(KEYED)
    for key in KEYED["patternProperties"]:
        assert text.count(f'Regex("{key}", json_string=true)') == 1 == text.count(key)


def test_a_swapped_key_regex_takes_the_names_of_its_rule():
    from tagjit.build.printed import swap_key_regexes

    text, swapped = swap_key_regexes(printed(KEYED), {"__tagjit_own_k_0__": "k"})
    assert swapped == ["__tagjit_own_k_0__"]
    grammar = xgr.Grammar.from_ebnf(text + '\nk ::= "b" | "c" k\n', root_rule_name="root")
    assert accepts(grammar, '{"a": 1, "ccb": "s"}') and not accepts(grammar, '{"a": 1, "x": "s"}')


def test_a_key_regex_printed_another_way_is_a_printer_change():
    from tagjit.build.printed import swap_key_regexes

    with pytest.raises(PrinterChanged):
        swap_key_regexes('r ::= Regex("__tagjit_own_k_0__")', {"__tagjit_own_k_0__": "k"})


@pytest.mark.parametrize("bound", [1, 2])
def test_bounded_whitespace_before_separators_is_printed_as_slots_the_tightening_takes_out(bound):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "array", "items": {}}},
              "required": ["a", "b"]}
    loose = xgr.Grammar.from_json_schema(json.dumps(schema), any_whitespace=True, max_whitespace_cnt=bound)
    tight = tighten_separators(loose)
    for text in ('{"a" : 1, "b": []}', '{"a": 1 , "b": []}', '{"a": 1, "b": [1 , 2]}', '{"a": 1, "b": [{"c" : 1}]}'):
        assert accepts(loose, text) and not accepts(tight, text)
    pad = " " * bound
    spelled = ['{"a":1,"b":[1,2]}', '{"a": 1, "b": [1, 2]}', f'{{{pad}"a":{pad}1,{pad}"b":{pad}[{pad}1,{pad}2{pad}]{pad}}}',
               '{\n"a": 1,\n"b": [{"c": "x"}]\n}']
    assert all(accepts(tight, text) for text in spelled)


def test_the_tightening_takes_out_only_a_slot_right_before_a_separator():
    grammar = xgr.Grammar.from_ebnf('root ::= "a" ws{0, 2} x{1, 3} "," ws "b" ws ":" "c" ws{0, 2} ","\n'
                                    'ws ::= ("" | ([ \\n\\r\\t]))\nx ::= [0-9]\n')
    tight = tighten_separators(grammar)
    assert accepts(tight, "a  1, b:c,") and not accepts(tight, "a  1, b :c,") and not accepts(tight, "a  1, b:c ,")
