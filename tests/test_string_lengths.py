"""``minLength``/``maxLength`` on a string (no pattern or format), enforced exactly by tagjit's count rules
(``build.bounded_strings``): lengths count decoded characters, so every escape (``\\n``, ``\\"``, ``\\u00e9``, a
surrogate pair) is one character. xgrammar's bounded string takes no escape at all; tagjit keeps it only above
``MAX_COUNTED`` characters, where its count rules would compile slower than xgrammar's repetition.

Checked on hand-picked strings, against the ``jsonschema`` package on generated strings, and on real schemas."""

from __future__ import annotations

import json

import jsonschema
import pytest
import xgrammar as xgr
from hypothesis import given, settings
from hypothesis import strategies as st

from pools import UNHURRIED
from shared_data import maskbench
from tagjit import CompileService, Constraint, Settings
from tagjit.build.bounded_strings import MAX_COUNTED
from tagjit.build.grammars import json_schema_grammar
from tagjit.constraint import Kind
from tagjit.tools import build_tool_tag

UNTIMED = settings(deadline=None, max_examples=150)
LOGIN = maskbench("Github_easy---o17544.json")  # a login form: "password" has minLength 4 and maxLength 50
LOGIN_VALID = next(t["data"] for t in LOGIN["tests"] if t["valid"])


@pytest.fixture(scope="module")
def plain() -> CompileService:
    """A compile service without a vocabulary: grammars only, so that many generated schemas compile quickly."""
    return CompileService(xgr.TokenizerInfo([]), UNHURRIED)


def accepts(svc: CompileService, schema, text: str) -> bool:
    g = svc.grammar(Constraint.of(Kind.JSON, schema))
    return g.accept_string(text) and g.is_completed()


def login(password: str, ascii_only: bool = False) -> str:
    return json.dumps({**LOGIN_VALID, "password": password}, ensure_ascii=ascii_only)


def printed(schema) -> str:
    return str(json_schema_grammar(schema, Settings()).grammar)


@pytest.mark.parametrize("password", ['pa"s', "p\\ss", "a\nss", "\t\r\b\f", "a/b/"],
                         ids=["quote", "backslash", "newline", "controls", "slash"])
def test_an_escape_counts_as_one_character(plain, password):
    assert len(password) == 4
    assert accepts(plain, LOGIN["schema"], login(password))


def test_a_unicode_escape_and_a_surrogate_pair_count_as_one_character_each(plain):
    text = login("xxxx").replace('"xxxx"', '"\\u00e9\\uD83D\\ude00ab"')
    assert json.loads(text)["password"] == "é😀ab"
    assert accepts(plain, LOGIN["schema"], text)


def test_the_bounds_count_decoded_characters_at_both_ends(plain):
    assert accepts(plain, LOGIN["schema"], login('"' * 50))  # 100 characters of JSON, 50 decoded
    assert not accepts(plain, LOGIN["schema"], login('"' * 51))
    assert accepts(plain, LOGIN["schema"], login("\n!\n!"))
    assert not accepts(plain, LOGIN["schema"], login("\n!\n"))


def test_a_lone_surrogate_escape_is_not_a_character(plain):
    for lone in ["\\ud83d", "\\ude00", "\\ud83dabc"]:
        assert not accepts(plain, LOGIN["schema"], login("xxxx").replace('"xxxx"', f'"ab{lone}cd"')), lone


def test_a_raw_control_character_is_still_rejected(plain):
    assert not accepts(plain, LOGIN["schema"], login("xxxx").replace('"xxxx"', '"ab\tcd"'))


def test_a_minimum_length_alone_counts_escapes_and_has_no_upper_bound(plain):
    schema = {"type": "string", "minLength": 3}
    assert accepts(plain, schema, '"\\n\\"\\\\"') and accepts(plain, schema, json.dumps("x" * 500))
    assert not accepts(plain, schema, '"\\n\\""')


def test_lengths_beside_other_types_constrain_only_the_strings(plain):
    schema = {"type": ["string", "null", "integer"], "maxLength": 2}
    assert accepts(plain, schema, '"\\n\\n"') and accepts(plain, schema, "null") and accepts(plain, schema, "123")
    assert not accepts(plain, schema, '"\\n\\n\\n"')


def test_strings_of_one_grammar_share_their_count_rules():
    text = printed({"type": "object", "properties": {"a": {"type": "string", "maxLength": 40},
                                                   "b": {"type": "string", "maxLength": 30}}})
    counts = [line for line in text.splitlines() if line.startswith("tagjit_len_") and "_s" in line.split(" ::=")[0]]
    assert len(counts) == 41  # the 30-character string reads on the last 31 counts of the 40-character one


@pytest.mark.parametrize("bounds,counted", [
    ({"maxLength": MAX_COUNTED}, True), ({"maxLength": MAX_COUNTED + 1}, False),
    ({"minLength": MAX_COUNTED}, True), ({"minLength": MAX_COUNTED + 1}, False)])
def test_count_rules_are_written_up_to_the_largest_counted_bound(bounds, counted):
    assert ("tagjit_len_" in printed({"type": "string", **bounds})) is counted


def test_above_the_largest_counted_bound_the_token_filter_counts_and_takes_escapes(plain):
    schema = {"type": "string", "maxLength": MAX_COUNTED + 1}
    assert "tagjit_len_" not in printed(schema)
    assert accepts(plain, schema, json.dumps("é" * (MAX_COUNTED + 1), ensure_ascii=False))
    assert not accepts(plain, schema, json.dumps("é" * (MAX_COUNTED + 2), ensure_ascii=False))
    assert accepts(plain, schema, '"\\n"')
    assert accepts(plain, schema, json.dumps("\n" * (MAX_COUNTED + 1)))
    assert not accepts(plain, schema, json.dumps("\n" * (MAX_COUNTED + 2)))


@pytest.mark.parametrize("name", ["Github_easy---o17544.json", "Github_medium---o6212.json",
                                  "Github_medium---o6213.json", "Github_medium---o71820.json"])
def test_real_schemas_with_escapes_in_bounded_strings_judge_their_instances(plain, name):
    case = maskbench(name)
    for t in case["tests"]:
        assert accepts(plain, case["schema"], json.dumps(t["data"])) is t["valid"], t["description"]


CHARS = st.sampled_from(['a', 'é', '"', '\\', '\n', '\t', '\x01', '/', '😀', '\u2028', ' '])
BOUNDS = [{"maxLength": 3}, {"minLength": 2, "maxLength": 5}, {"minLength": 4}, {"minLength": 0, "maxLength": 0},
          {"minLength": 3, "maxLength": 3}]


@pytest.mark.parametrize("bounds", BOUNDS, ids=lambda b: json.dumps(b))
@UNTIMED
@given(value=st.text(alphabet=CHARS, max_size=7), ascii_only=st.booleans())
def test_a_string_is_accepted_iff_jsonschema_validates_it(plain, bounds, value, ascii_only):
    schema = {"type": "string", **bounds}
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert accepts(plain, schema, text) == jsonschema.Draft202012Validator(schema).is_valid(value)


@pytest.mark.parametrize("bounds", BOUNDS, ids=lambda b: json.dumps(b))
@UNTIMED
@given(value=st.text(alphabet=CHARS, max_size=7), at=st.integers(0, 20),
       junk=st.sampled_from(['\\', '\\u', '\\ud83d', '\\x', '\\U0041', '\t', '"']))
def test_a_string_with_a_broken_escape_or_a_raw_control_character_is_rejected(plain, bounds, value, at, junk):
    body = json.dumps(value)[1:-1]
    i = at % (len(body) + 1)
    while i > 0 and body[i - 1] == "\\":  # insert between two spellings, not inside one
        i -= 1
    text = '"' + body[:i] + junk + body[i:] + '"'
    try:
        json.loads(text)
        is_json = not any(0xD800 <= ord(c) <= 0xDFFF for c in json.loads(text))
    except json.JSONDecodeError:
        is_json = False
    if not is_json:
        assert not accepts(plain, {"type": "string", **bounds}, text), text


# -- tool arguments in XML formats -------------------------------------------------------------------

TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
    "o": {"type": "object", "properties": {"s": {"type": "string", "maxLength": 3}}, "required": ["s"]}},
    "required": ["o"]}}}


def xml_accepts(svc: CompileService, value: str) -> bool:
    tag = build_tool_tag("qwen3_coder", [TOOL], "required", True, Settings())
    g = svc.grammar(Constraint.of("structural_tag", tag))
    text = f"<tool_call>\n<function=f>\n<parameter=o>\n{value}\n</parameter>\n</function>\n</tool_call>"
    return g.accept_string(text) and g.is_completed()


def test_a_bounded_string_inside_json_xml_arguments_counts_escapes_and_never_writes_a_raw_less_than(plain):
    assert xml_accepts(plain, '{"s": "a\\nb"}') and xml_accepts(plain, '{"s": "\\u003c"}')
    assert not xml_accepts(plain, '{"s": "a\\nbc"}') and not xml_accepts(plain, '{"s": "<"}')
