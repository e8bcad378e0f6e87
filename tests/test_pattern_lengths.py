"""``pattern`` together with ``minLength``/``maxLength``, enforced exactly by tagjit's own automaton (build.patterns):
hand-picked strings, generated strings against the ``jsonschema`` package, and real MaskBench schemas."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from shared_data import SCHEMAS, maskbench
from tagjit import CompileService, UnsupportedFeatureError
from tagjit.constraint import Constraint, Kind
from tagjit.errors import EmptySchemaError

UNTIMED = settings(deadline=None, max_examples=25)


def accepts(service: CompileService, schema, text: str) -> bool:
    g = service.grammar(Constraint.of(Kind.JSON, schema))
    return g.accept_string(text) and g.is_completed()


def valid(schema, value) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(value)


def judged(service: CompileService, schema, texts: list[str]) -> list[str]:
    """The texts the schema's grammar accepts, of those given."""
    return [t for t in texts if accepts(service, schema, t)]


def refused(service: CompileService, schema) -> str:
    with pytest.raises(UnsupportedFeatureError) as err:
        service.validate(Constraint.of(Kind.JSON, schema))
    return err.value.feature


def test_an_unanchored_pattern_is_searched_for_anywhere_within_the_length(service):
    schema = {"type": "string", "pattern": "ab", "minLength": 3, "maxLength": 5}
    assert judged(service, schema, ['"xab"', '"abxyz"', '"xaby"', '"ab"', '"xxxxab"', '"axbyz"']) \
        == ['"xab"', '"abxyz"', '"xaby"']


def test_an_anchored_pattern_must_match_the_whole_string(service):
    schema = {"type": "string", "pattern": "^[A-Z]{2,}$", "maxLength": 3}
    assert judged(service, schema, ['"AB"', '"ABC"', '"A"', '"ABCD"', '"ABc"', '"xAB"']) == ['"AB"', '"ABC"']


def test_an_anchor_inside_an_alternative_holds_only_for_that_alternative(service):
    # A real EDDN schema: names that start with Hpt_ or Int_, or contain _Armour_ anywhere.
    schema = {"type": "string", "pattern": "(^Hpt_|^Int_|_Armour_)", "minLength": 1}
    assert judged(service, schema, ['"Hpt_x"', '"Int_"', '"a_Armour_b"', '"xHpt_"', '"aInt_b"', '""']) \
        == ['"Hpt_x"', '"Int_"', '"a_Armour_b"']


def test_a_negated_class_never_stands_for_the_start_or_end_of_the_string(service):
    schema = {"type": "string", "pattern": "[^a-z]", "maxLength": 3}
    assert judged(service, schema, ['"A"', '"abA"', '""', '"abc"']) == ['"A"', '"abA"']


def test_a_string_too_short_or_too_long_for_the_lengths_is_rejected_though_it_matches(service):
    schema = {"type": "string", "pattern": "^[0-9]+$", "minLength": 2, "maxLength": 4}
    assert accepts(service, schema, '"12"') and accepts(service, schema, '"1234"')
    assert not accepts(service, schema, '"1"') and not accepts(service, schema, '"12345"')


def test_escaped_spellings_of_matching_characters_are_accepted(service):
    schema = {"type": "string", "pattern": "^[A-Z]+$", "minLength": 2}
    assert accepts(service, schema, '"\\u0041B"') and accepts(service, schema, '"\\u0041\\u0062"'.replace("62", "42"))
    assert not accepts(service, schema, '"\\u0061B"')  # a


def test_short_escapes_count_as_one_character(service):
    schema = {"type": "string", "pattern": "^[^a]*$", "minLength": 2, "maxLength": 2}
    for text in ['"\\"\\\\"', '"\\n\\t"', '"\\/b"']:
        assert accepts(service, schema, text), text
    assert not accepts(service, schema, '"\\n\\t\\r"') and not accepts(service, schema, '"b\\u0061"')


def test_a_character_above_the_basic_plane_counts_once_raw_or_as_a_surrogate_pair(service):
    schema = {"type": "string", "pattern": "^.+$", "maxLength": 1}
    assert accepts(service, schema, '"😀"') and accepts(service, schema, '"\\ud83d\\ude00"')
    assert accepts(service, schema, '"\\uD83D\\uDE00"')
    assert not accepts(service, schema, '"😀😀"') and not accepts(service, schema, '"\\ud83d"')


def test_a_negated_class_keeps_every_character_it_does_not_exclude(service):
    schema = {"type": "string", "pattern": "^[^,]+$", "maxLength": 3}
    assert accepts(service, schema, '"é中"') and accepts(service, schema, '"\\u00e9"')
    assert not accepts(service, schema, '"a,b"') and not accepts(service, schema, '"a\\u002c"')


def test_a_pattern_no_string_of_the_length_matches_accepts_no_value(service):
    with pytest.raises(EmptySchemaError, match="no string of its length"):
        service.validate(Constraint.of(Kind.JSON, {"type": "string", "pattern": "^a$", "minLength": 2}))


def test_an_optional_property_no_string_can_satisfy_is_forbidden(service):
    schema = {"type": "object", "properties": {"a": {"type": "integer"},
                                                "b": {"type": "string", "pattern": "^a$", "minLength": 2}}}
    assert accepts(service, schema, '{"a": 1}')
    assert not accepts(service, schema, '{"a": 1, "b": "a"}') and not accepts(service, schema, '{"b": "aa"}')


def test_an_empty_string_part_leaves_the_other_types(service):
    schema = {"type": ["string", "null"], "pattern": "^a$", "minLength": 2}
    assert accepts(service, schema, "null") and not accepts(service, schema, '"a"')


def test_other_types_beside_the_string_rule_stay_free(service):
    schema = {"type": ["string", "integer"], "pattern": "^x", "maxLength": 2}
    assert accepts(service, schema, "12345") and accepts(service, schema, '"xy"')
    assert not accepts(service, schema, '"xyz"') and not accepts(service, schema, '"yx"')


def test_the_rule_is_enforced_inside_a_property_and_property_order_is_kept(service):
    schema = {"type": "object", "properties": {"id": {"type": "string", "pattern": "^[a-f0-9]+$", "minLength": 4,
                                                      "maxLength": 4},
                                               "n": {"type": "integer"}}, "required": ["id", "n"]}
    assert accepts(service, schema, '{"id": "beef", "n": 1}')
    assert not accepts(service, schema, '{"n": 1, "id": "beef"}')
    assert not accepts(service, schema, '{"id": "bee", "n": 1}') and not accepts(service, schema, '{"id": "beeg", "n": 1}')


@pytest.mark.parametrize("pattern,feature", [
    ("^(?=a)ab$", "pattern with a lookahead or lookbehind"),
    ("^(a)\\1$", "pattern with \\1"),
    ("\\bword", "pattern with a word boundary"),
    ("^(?i:a)b$", "pattern with inline flags"),
])
def test_a_pattern_the_automaton_cannot_read_is_refused_naming_it(service, pattern, feature):
    feat = refused(service, {"type": "string", "pattern": pattern, "maxLength": 9})
    assert feat.startswith(feature) and feat.endswith("together with minLength/maxLength")


def test_a_too_large_automaton_is_refused_naming_its_size(service):
    schema = {"type": "string", "pattern": "^[ab]*a[ab]{11}$", "maxLength": 40}
    assert "more than 4096 states" in refused(service, schema)


def test_format_beside_a_length_is_refused_only_where_its_automaton_is_too_large(service):
    # format with lengths goes through the same automaton (tests/test_format_lengths.py); a maxLength alone beside a
    # too large one is counted apart (tests/test_counted_strings.py), a minimum is not
    service.validate(Constraint.of(Kind.JSON, {"type": "string", "format": "email", "maxLength": 9}))
    service.validate(Constraint.of(Kind.JSON, {"type": "string", "format": "uri", "maxLength": 2000}))
    assert refused(service, {"type": "string", "format": "uri", "minLength": 1, "maxLength": 2000}).startswith(
        "minLength/maxLength together with format: uri (an automaton of more than 4096 states")


PATTERNS = [
    ("ab", 2, 6),
    ("^[a-c]+x?$", 1, 4),
    ("^(?:foo|ba[rz])[0-9]*$", 3, 6),
    ("[^a-z]", 0, 3),
    ("^.*\\.$", 2, 5),
    ("^\\w+(?:-\\w+)*$", 1, 7),
]


def _spell(value: str, data) -> str:
    """One JSON spelling of a string, each character raw or escaped at random."""
    out = []
    for ch in value:
        if ch in '"\\' or ord(ch) < 0x20 or data.draw(st.booleans()):
            if ord(ch) > 0xFFFF:
                c = ord(ch) - 0x10000
                out.append(f"\\u{0xD800 + (c >> 10):04x}\\u{0xDC00 + (c & 0x3FF):04X}")
            else:
                out.append(f"\\u{ord(ch):04X}" if data.draw(st.booleans()) else f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


@pytest.mark.parametrize("pattern,lo,hi", PATTERNS, ids=lambda x: str(x))
@UNTIMED
@given(data=st.data())
def test_strings_matching_the_pattern_within_the_lengths_are_accepted_in_any_spelling(service, pattern, lo, hi,
                                                                                       data):
    schema = {"type": "string", "pattern": pattern, "minLength": lo, "maxLength": hi}
    # re.ASCII: \w, \d and \s are ASCII classes for tagjit (as for xgrammar); Python's re reads them as Unicode
    value = data.draw(st.from_regex(re.compile(pattern, re.ASCII), fullmatch=False).filter(
        lambda s: lo <= len(s) <= hi))
    assume(not value.endswith("\n"))  # Python's $ also matches before a final newline; ECMA's does not
    assert valid(schema, value)
    assert accepts(service, schema, _spell(value, data)), value


@pytest.mark.parametrize("pattern,lo,hi", PATTERNS, ids=lambda x: str(x))
@UNTIMED
@given(data=st.data())
def test_matching_strings_outside_the_lengths_are_rejected(service, pattern, lo, hi, data):
    schema = {"type": "string", "pattern": pattern, "minLength": lo, "maxLength": hi}
    value = data.draw(st.from_regex(re.compile(pattern, re.ASCII), fullmatch=False).filter(
        lambda s: not lo <= len(s) <= hi and len(s) < 40))
    assert not accepts(service, schema, json.dumps(value)), value


@pytest.mark.parametrize("pattern,lo,hi", PATTERNS, ids=lambda x: str(x))
@UNTIMED
@given(value=st.text(alphabet=st.sampled_from("abcxz09-._ \n\"\\é😀,foFO"), max_size=8), ascii_only=st.booleans())
def test_any_string_is_accepted_iff_jsonschema_validates_it(service, pattern, lo, hi, value, ascii_only):
    schema = {"type": "string", "pattern": pattern, "minLength": lo, "maxLength": hi}
    assume(not value.endswith("\n"))
    assume(value.isascii() or "\\w" not in pattern)  # Python's \w takes letters beyond ASCII; tagjit's does not
    assert accepts(service, schema, json.dumps(value, ensure_ascii=ascii_only)) == valid(schema, value), value


def _pattern_length_files() -> list[str]:
    names = []
    for path in sorted((SCHEMAS / "maskbench").glob("Github_*.json")):
        text = path.read_text()
        if '"pattern"' in text and ('"minLength"' in text or '"maxLength"' in text):
            names.append(path.name)
    return names


REAL = ["Github_easy---o10009.json", "Github_easy---o10012.json",
        "Github_easy---o44204.json", "Github_easy---o50679.json"]


@pytest.mark.parametrize("name", REAL)
def test_real_schemas_with_a_pattern_and_lengths_compile_and_judge_their_instances(service, name):
    case = maskbench(name)
    service.validate(Constraint.of(Kind.JSON, case["schema"]))
    for t in case["tests"]:
        text = json.dumps(t["data"])
        if valid(case["schema"], t["data"]):
            assert accepts(service, case["schema"], text), t["description"]
        elif t["valid"] is False:
            assert not accepts(service, case["schema"], text), t["description"]


def test_most_real_schemas_with_a_pattern_and_lengths_now_compile(service):
    names = _pattern_length_files()
    refusals = []
    for name in names:
        try:
            service.validate(Constraint.of(Kind.JSON, maskbench(name)["schema"]))
        except UnsupportedFeatureError as e:
            if "minLength/maxLength" in e.feature and "format" not in e.feature:
                refusals.append((name, e.feature))
        except Exception:
            pass
    assert len(names) > 20 and len(refusals) < len(names) // 4, refusals


def test_each_state_rule_holds_its_raw_characters_inline_so_xgrammar_precomputes_its_masks():
    # A class written as a rule of its own (or a choice nested after a literal) leaves every mask inside the string
    # to xgrammar's parser: 15-60 ms a token with a 151k vocabulary instead of ~0.02 ms.
    from tagjit.build.patterns import lengths_automaton, lengths_rules

    rules = lengths_rules(lengths_automaton("^[a-z0-9-]+$", 1, 63), "s")
    states = [r.split(" ::= ")[1] for r in rules if r.split(" ::= ")[0][2:].isdigit()]
    assert len(states) == 64
    alternative = re.compile(r'"\\""|\[[^\]]*\] s_\d+|s_u\d+ s_\d+')  # the quote, a raw class inline, the \u rule
    assert all(alternative.fullmatch(alt) for body in states for alt in body.split(" | "))
    assert all("(" not in r for r in rules)


def test_an_automaton_over_the_precomputed_states_keeps_one_rule_per_class():
    from tagjit.build.patterns import PRECOMPUTED_STATES, format_pattern, lengths_automaton, lengths_rules

    a = lengths_automaton(format_pattern("email"), 0, 64)
    assert len(a.edges) > PRECOMPUTED_STATES
    assert any(r.startswith("s_c") for r in lengths_rules(a, "s"))


def test_a_negated_shorthand_inside_a_class_admits_every_character_it_stands_for(service):
    # [\S ] is any character but whitespace, or a space: a tab or newline stays out.
    schema = {"type": "string", "pattern": "^[\\S ]+$", "maxLength": 5}
    assert judged(service, schema, ['"a b"', '"é-1"', '"a\\tb"', '"a\\nb"', '""']) == ['"a b"', '"é-1"']


def test_a_min_length_the_pattern_implies_does_not_refuse_the_schema(service):
    # A real schema: up to 100 words. Its {0,99} is too large for an automaton times a counter, and minLength 1 says
    # nothing the pattern does not (every match holds a character).
    schema = maskbench("Github_medium---o21061.json")["schema"]
    service.validate(Constraint.of(Kind.JSON, schema))
    word_list = {"type": "string", "pattern": "^(?:\\S+\\s+){0,99}\\S+$", "minLength": 1}
    assert judged(service, word_list, ['"two words"', '""', '" lead"']) == ['"two words"']


def test_a_max_length_an_anchored_pattern_implies_does_not_refuse_the_schema(service):
    # A real schema: ISO 3166 alpha-3 codes as a 250-way alternation, with maxLength 255.
    schema = maskbench("Github_medium---o37613.json")["schema"]
    service.validate(Constraint.of(Kind.JSON, schema))


def test_a_max_length_below_the_patterns_longest_match_is_still_enforced(service):
    schema = {"type": "string", "pattern": "^[a-z]{2,5}$", "maxLength": 4}
    assert judged(service, schema, ['"ab"', '"abcd"', '"abcde"']) == ['"ab"', '"abcd"']


def test_an_unanchored_pattern_never_implies_a_max_length(service):
    schema = {"type": "string", "pattern": "abc", "maxLength": 4}
    assert judged(service, schema, ['"abc"', '"xabc"', '"xxabc"']) == ['"abc"', '"xabc"']


def test_an_alternative_without_anchors_never_implies_a_max_length(service):
    schema = {"type": "string", "pattern": "^a$|b", "maxLength": 1}
    assert judged(service, schema, ['"a"', '"b"', '"bb"']) == ['"a"', '"b"']


def test_a_pattern_whose_lengths_are_dropped_still_takes_every_spelling(service):
    schema = {"type": "string", "pattern": "^[0-9]{3}$", "minLength": 3, "maxLength": 3}
    assert judged(service, schema, ['"123"', '"12\\u0033"', '"12"']) == ['"123"', '"12\\u0033"']


def test_a_pattern_with_lengths_beside_a_ref_is_still_refused(service):
    # xgrammar reads no keyword beside a $ref: dropping the implied length must not let the pattern go unenforced.
    schema = {"pattern": "^[0-9]{3}$", "maxLength": 3, "$ref": "#/$defs/a", "$defs": {"a": {"type": "string"}}}
    assert "$ref" in refused(service, schema)
