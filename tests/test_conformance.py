"""JSON Schema conformance on real JSONSchemaBench / MaskBench schemas.

What benchmarks/conformance.py reports, as specifications: where xgrammar 0.2.8 silently drops a
constraint, tagjit either enforces it (the schema is rewritten into a form xgrammar enforces, or
the grammar is repaired) or refuses the schema naming the feature. Instances are checked as text
(``accept_string`` + ``is_completed``) against grammars compiled for the Llama-3 vocabulary.
"""

from __future__ import annotations

import json
import os

import pytest
import xgrammar as xgr
from hypothesis import given, settings
from hypothesis import strategies as st

from shared_data import SCHEMAS, maskbench
from tagjit import CompileService, ConstraintError, Settings, UnsupportedFeatureError
from tagjit.constraint import Constraint, Kind
from pools import UNHURRIED


def accepts(service: CompileService, schema, text: str) -> bool:
    g = service.grammar(Constraint.of(Kind.JSON, schema))
    return g.accept_string(text) and g.is_completed()


def xgrammar_accepts(info, schema, text: str) -> bool:
    """xgrammar's plain JSON-schema compile, as vLLM's xgrammar backend calls it."""
    compiled = xgr.GrammarCompiler(info, max_threads=1).compile_json_schema(json.dumps(schema))
    m = xgr.GrammarMatcher(compiled)
    return m.accept_string(text) and m.is_completed()


def dumps(data) -> str:
    return json.dumps(data, ensure_ascii=False)


# -- strings with minLength / maxLength ------------------------------------------------------------
# A real schema: a login form whose "password" has minLength 4 and maxLength 50.
LOGIN = maskbench("Github_easy---o17544.json")
LOGIN_VALID = next(t["data"] for t in LOGIN["tests"] if t["valid"])


def login(password: str) -> str:
    return dumps({**LOGIN_VALID, "password": password})


@pytest.mark.parametrize("password", ["pass", "pàßè", "\U0001F600abc"], ids=["ascii", "accents", "astral"])
def test_a_length_bounded_string_counts_characters_not_bytes(service, password):
    assert len(password) == 4
    assert accepts(service, LOGIN["schema"], login(password))


def test_length_bounds_hold_at_both_ends(service):
    assert accepts(service, LOGIN["schema"], login("é" * 50))  # 100 bytes of UTF-8, 50 characters
    assert not accepts(service, LOGIN["schema"], login("é" * 51))
    assert not accepts(service, LOGIN["schema"], login("abc"))


@pytest.mark.parametrize("password", ['pa"s', "p\\ss", "a\nss"], ids=["quote", "backslash", "newline"])
def test_an_escape_counts_as_one_character_in_a_length_bounded_string(service, password):
    """xgrammar refuses escapes there; tagjit's count rules (build.bounded_strings) take them."""
    assert accepts(service, LOGIN["schema"], login(password))


def test_raw_control_characters_are_rejected_in_a_length_bounded_string(service):
    raw_tab = login("xxxx").replace('"xxxx"', '"ab\tcd"')
    with pytest.raises(json.JSONDecodeError):
        json.loads(raw_tab)
    assert not accepts(service, LOGIN["schema"], raw_tab)


def test_xgrammar_plain_compile_allows_raw_tabs_in_length_bounded_strings(llama3_info):
    """Documents the xgrammar 0.2.8 defects tagjit repairs: invalid JSON accepted, escapes refused."""
    schema = LOGIN["schema"]
    assert xgrammar_accepts(llama3_info, schema, login("abcd"))
    assert not xgrammar_accepts(llama3_info, schema, login('pa"s'))
    assert not xgrammar_accepts(llama3_info, schema, login("pa\nss"))
    assert xgrammar_accepts(llama3_info, schema, login("xxxx").replace('"xxxx"', '"ab\tcd"'))


def test_structural_tag_content_gets_the_same_string_repair(service):
    fmt = {"type": "tag", "begin": "<r>", "end": "</r>",
           "content": {"type": "json_schema", "json_schema": LOGIN["schema"]}}
    g = service.grammar(Constraint.of(Kind.STRUCTURAL_TAG, {"type": "structural_tag", "format": fmt}))
    assert g.accept_string("<r>" + login("pàßè") + "</r>") and g.is_completed()
    g = service.grammar(Constraint.of(Kind.STRUCTURAL_TAG, {"type": "structural_tag", "format": fmt}))
    assert not g.accept_string("<r>" + login("xxxx").replace('"xxxx"', '"ab\tcd"'))


# -- constraints xgrammar drops, now enforced ------------------------------------------------------

def instances(name: str, valid: bool) -> list[str]:
    return [dumps(t["data"]) for t in maskbench(name)["tests"] if t["valid"] is valid]


ENFORCED = {
    # anyOf of "required" lists beside properties with minLength: xgrammar kept only the anyOf.
    "Github_easy---o65440.json": "anyOf with sibling keywords",
    # "required" keys that are not in "properties" (xgrammar's strict mode dropped them).
    "Github_easy---o10030.json": "required outside properties",
    # format on a node without "type" (xgrammar enforced nothing there).
    "Github_easy---o32962.json": "typeless format",
    # $ref to a draft-4 "id" anchor (xgrammar accepted anything there).
    "Github_easy---o35904.json": "anchor reference",
    # format: date with day 30/31 in February.
    "Glaiveai2K---book_flight_d310c236.json": "calendar dates",
    # additionalProperties: false beside an anyOf of required lists.
    "Github_easy---o69914.json": "additionalProperties beside anyOf",
}


@pytest.mark.parametrize("name", sorted(ENFORCED), ids=[ENFORCED[n] for n in sorted(ENFORCED)])
def test_invalid_instances_xgrammar_accepts_are_rejected(service, llama3_info, name):
    schema = maskbench(name)["schema"]
    leaked = [t for t in instances(name, False) if xgrammar_accepts(llama3_info, schema, t)]
    assert leaked, "xgrammar no longer accepts these: the rewrite may be obsolete"
    assert not [t for t in leaked if accepts(service, schema, t)]


@pytest.fixture(scope="module")
def lenient(llama3_info):
    """strict_mode off: objects take undeclared keys, as JSON Schema says (some valid instances have them)."""
    return CompileService(llama3_info, UNHURRIED.replace(strict_mode=False))


@pytest.mark.parametrize("name", sorted(ENFORCED), ids=[ENFORCED[n] for n in sorted(ENFORCED)])
def test_valid_instances_stay_accepted_after_the_rewrite(lenient, name):
    schema = maskbench(name)["schema"]
    assert all(accepts(lenient, schema, t) for t in instances(name, True))


# An item schema written by a tool from an example that held nothing: {"required": [], "properties": {}}.
SAYS_NOTHING = {"type": "array", "items": {"required": [], "properties": {}}}


def test_an_untyped_schema_whose_object_keywords_say_nothing_takes_any_value(lenient):
    assert accepts(lenient, SAYS_NOTHING, '["reading", 1, null, true, [], {"a": 1}]')


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8)


@settings(deadline=None, max_examples=100)
@given(value=JSON_VALUES)
def test_every_json_value_passes_an_untyped_schema_that_says_nothing(lenient, value):
    assert accepts(lenient, SAYS_NOTHING, dumps([value]))


def test_real_instances_under_an_untyped_schema_that_says_nothing_are_accepted(lenient):
    schema = maskbench("Github_medium---o7200.json")["schema"]  # hobbies: {"items": {"required": [], ...}}
    valid = instances("Github_medium---o7200.json", True)
    assert valid and all(accepts(lenient, schema, t) for t in valid)


def test_a_root_whose_object_keywords_say_nothing_still_asks_for_an_object(lenient):
    assert accepts(lenient, {"properties": {}, "required": []}, '{"a": 1}')
    assert not accepts(lenient, {"properties": {}, "required": []}, '"reading"')


def test_an_untyped_schema_with_object_keywords_that_constrain_still_takes_only_objects(lenient):
    schema = {"type": "array", "items": {"properties": {"a": {"type": "string"}}, "required": []}}
    assert accepts(lenient, schema, '[{"a": "x"}]')
    assert not accepts(lenient, schema, '["a"]')


def test_under_strict_mode_empty_properties_still_close_an_untyped_object(service):
    assert accepts(service, SAYS_NOTHING, "[{}]")
    assert not accepts(service, SAYS_NOTHING, '["reading"]')
    assert not accepts(service, SAYS_NOTHING, '[{"a": 1}]')


def test_unanchored_pattern_matches_anywhere_like_json_schema(service, llama3_info):
    import jsonschema

    bench = maskbench("Github_easy---o13111.json")  # backend_version: "pattern": "[0-9]+.[0-9]+.[0-9]+$"
    data = {**next(t["data"] for t in bench["tests"] if t["valid"]), "backend_version": "v1.2.3"}
    jsonschema.validate(data, bench["schema"])
    assert not xgrammar_accepts(llama3_info, bench["schema"], dumps(data))  # xgrammar anchors both ends
    assert accepts(service, bench["schema"], dumps(data))
    assert not accepts(service, bench["schema"], dumps({**data, "backend_version": "v1.2"}))


def test_leap_day_is_a_valid_date_only_in_leap_years(service):
    schema = maskbench("Glaiveai2K---book_flight_d310c236.json")["schema"]
    base = json.loads(instances("Glaiveai2K---book_flight_d310c236.json", True)[0])
    key = next(k for k, v in schema["properties"].items() if v.get("format") == "date")
    assert accepts(service, schema, dumps({**base, key: "2024-02-29"}))
    assert accepts(service, schema, dumps({**base, key: "2000-02-29"}))
    assert not accepts(service, schema, dumps({**base, key: "1900-02-29"}))
    assert not accepts(service, schema, dumps({**base, key: "2023-04-31"}))


# -- features refused with their name ----------------------------------------------------------------

def test_overlapping_one_of_is_refused_naming_it(service):
    with pytest.raises(UnsupportedFeatureError) as err:
        service.validate(Constraint.of(Kind.JSON, maskbench("Github_easy---o2231.json")["schema"]))
    assert err.value.feature.startswith("oneOf") and err.value.where


def test_a_size_bound_alone_takes_any_items_and_names(service):
    # xgrammar's strict mode read a missing items/additionalProperties beside a size bound as false
    assert accepts(service, {"type": "array", "minItems": 1}, '[1, "a"]')
    assert accepts(service, {"type": "array", "maxItems": 2}, '["a", 2]')
    assert not accepts(service, {"type": "array", "maxItems": 2}, "[1, 2, 3]")
    assert accepts(service, {"type": "object", "minProperties": 1}, '{"a": 1}')
    assert not accepts(service, {"type": "object", "minProperties": 1}, "{}")
    assert accepts(service, {"type": "object", "maxProperties": 1}, '{"a": 1}')


def test_an_explicit_additional_properties_true_survives_a_merge_with_combinator_branches(service):
    schema = {"type": "object", "additionalProperties": True, "properties": {"a": {"type": "string"}},
              "anyOf": [{"required": ["a"]}, {"required": ["b"]}]}
    assert accepts(service, schema, '{"a": "x", "z": 1}')  # strict mode closed the merged branches before


def test_unknown_keywords_beside_a_combinator_are_annotations(service):
    schema = {"type": "object", "translation": {"x": 1}, "properties": {"k": {"type": "string"}},
              "oneOf": [{"required": ["k"], "translation": {"x": 2}}, {"required": ["j"]}]}
    assert accepts(service, schema, '{"k": "v"}')


def test_pattern_with_format_is_enforced_as_both_languages(service):
    case = maskbench("Github_easy---o44051.json")  # "format": "uri" beside "pattern": "^(https|file)://"
    for t in case["tests"]:
        assert accepts(service, case["schema"], dumps(t["data"])) is t["valid"], t["description"]


def test_an_optional_property_whose_enum_fits_no_type_is_forbidden_and_the_rest_enforced(service):
    schema = maskbench("Github_easy---o30305.json")["schema"]  # "builtin": "type": "object" with string enum values
    service.validate(Constraint.of(Kind.JSON, schema))
    assert accepts(service, schema, '{"addvaryheader": "GLOBAL", "cmptype": "gzip"}')
    assert not accepts(service, schema, '{"addvaryheader": "GLOBAL", "builtin": "IMMUTABLE"}')
    assert not accepts(service, schema, '{"addvaryheader": "INVALID"}')


def test_a_required_property_whose_enum_fits_no_type_is_a_clear_error(service):
    schema = {**maskbench("Github_easy---o30305.json")["schema"], "required": ["builtin"]}
    with pytest.raises(ConstraintError, match="accepts no value"):
        service.validate(Constraint.of(Kind.JSON, schema))


def test_one_of_told_apart_by_a_discriminator_is_enforced_exactly(service):
    schema = {"oneOf": [
        {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}},
        {"type": "object", "properties": {"kind": {"const": "b"}, "x": {"type": "string"}}}]}
    assert accepts(service, schema, '{"kind": "a", "x": 1}')
    assert accepts(service, schema, '{"x": 1}')  # without "kind" only the first branch takes an integer x
    assert not accepts(service, schema, '{}')  # matches both branches
    assert not accepts(service, schema, '{"kind": "a", "x": "s"}')


# -- soundness over a real sample ------------------------------------------------------------------

def sample(step: int) -> list[str]:
    return sorted(os.listdir(SCHEMAS / "maskbench"))[::step]


@pytest.fixture(scope="module")
def textual():
    """Grammars compiled for an empty vocabulary: text acceptance is the same, compiles are fast."""
    return CompileService(xgr.TokenizerInfo([]), UNHURRIED)


def test_no_invalid_instance_is_accepted_on_a_maskbench_sample(textual):
    leaks = []
    for name in sample(7):
        schema = maskbench(name)["schema"]
        try:
            textual.compile(Constraint.of(Kind.JSON, schema))
        except ConstraintError:
            continue
        leaks += [(name, t) for t in instances(name, False) if accepts(textual, schema, t)]
    assert not leaks


