"""Schema families tagjit now enforces exactly with its own rules: ``multipleOf`` (integer and decimal steps, with
bounds) and ``not`` (required names, types, enum/const values); the shapes it cannot write stay refused by name.

Each family is checked on hand-picked strings, against the ``jsonschema`` package on generated values (numbers
parsed as decimals: with floats, jsonschema itself finds 0.07 no multiple of 0.01), and on real schemas."""

from __future__ import annotations

import json
from decimal import Decimal

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared_data import maskbench
from tagjit import CompileService, UnsupportedFeatureError
from tagjit.constraint import Constraint, Kind
from tagjit.errors import EmptySchemaError
from tagjit.tools import build_tool_tag, load_format

UNTIMED = settings(deadline=None, max_examples=150)


def accepts(service: CompileService, schema, text: str) -> bool:
    g = service.grammar(Constraint.of(Kind.JSON, schema))
    return g.accept_string(text) and g.is_completed()


def valid(schema, text: str) -> bool:
    """jsonschema's verdict with every number read as a decimal (exact multipleOf arithmetic)."""
    exact = json.loads(json.dumps(schema), parse_float=Decimal)
    return jsonschema.Draft202012Validator(exact).is_valid(json.loads(text, parse_float=Decimal))


def refused(service: CompileService, schema) -> str:
    with pytest.raises(UnsupportedFeatureError) as err:
        service.validate(Constraint.of(Kind.JSON, schema))
    return err.value.feature


# -- multipleOf ------------------------------------------------------------------------------------

def test_an_integer_step_accepts_exactly_its_multiples(service):
    schema = {"type": "integer", "multipleOf": 7}
    for text in ["0", "7", "-7", "49", "700000000000000000000007"]:
        assert accepts(service, schema, text), text
    for text in ["1", "-8", "50", "7.0", "7e0", "700000000000000000000008"]:
        assert not accepts(service, schema, text), text


def test_a_decimal_step_accepts_numbers_with_at_most_its_fraction_digits(service):
    schema = {"type": "number", "multipleOf": 0.01}
    for text in ["0", "12", "0.07", "-3.5", "19.99", "1.50", "2.000"]:
        assert accepts(service, schema, text), text
    for text in ["0.001", "19.999", "1.005", "1.0001"]:
        assert not accepts(service, schema, text), text


def test_a_step_that_is_not_a_power_of_ten_is_exact(service):
    schema = {"type": "number", "multipleOf": 0.25}
    assert accepts(service, schema, "0.75") and accepts(service, schema, "-2.5") and accepts(service, schema, "3")
    assert not accepts(service, schema, "0.3") and not accepts(service, schema, "0.125")


def test_an_integer_step_on_a_number_accepts_only_zero_fractions(service):
    schema = {"type": "number", "multipleOf": 3}
    assert accepts(service, schema, "6") and accepts(service, schema, "6.00")
    assert not accepts(service, schema, "6.5") and not accepts(service, schema, "7")


def test_a_fractional_step_on_an_integer_keeps_the_integers_it_divides(service):
    schema = {"type": "integer", "multipleOf": 1.5}  # the integer multiples of 1.5 are the multiples of 3
    assert accepts(service, schema, "3") and accepts(service, schema, "-9")
    assert not accepts(service, schema, "4") and not accepts(service, schema, "1.5")


def test_both_bounds_are_kept_with_a_step(service):
    schema = {"type": "integer", "multipleOf": 16, "minimum": -2032, "maximum": 2031}
    for text in ["-2032", "0", "2016", "-16"]:
        assert accepts(service, schema, text), text
    for text in ["2032", "-2048", "8", "4096"]:
        assert not accepts(service, schema, text), text


def test_an_exclusive_minimum_of_zero_rejects_every_spelling_of_zero(service):
    schema = {"type": "number", "multipleOf": 0.01, "exclusiveMinimum": 0}
    assert accepts(service, schema, "0.01") and accepts(service, schema, "5")
    for text in ["0", "0.00", "-0.01"]:
        assert not accepts(service, schema, text), text


def test_a_bound_between_multiples_rounds_to_the_nearest_multiple_inside(service):
    schema = {"type": "number", "multipleOf": 0.5, "minimum": 0.3, "exclusiveMaximum": 2}
    assert accepts(service, schema, "0.5") and accepts(service, schema, "1.5")
    assert not accepts(service, schema, "0") and not accepts(service, schema, "2")


def test_multiple_of_one_on_a_nullable_number_means_a_nullable_integer(service):
    schema = {"type": ["number", "null"], "multipleOf": 1}
    assert accepts(service, schema, "3") and accepts(service, schema, "null")
    assert not accepts(service, schema, "3.5")


def test_a_step_beside_other_types_constrains_only_the_numbers(service):
    schema = {"type": ["integer", "string"], "multipleOf": 5, "minLength": 2}
    assert accepts(service, schema, "15") and accepts(service, schema, '"ab"')
    assert not accepts(service, schema, "16") and not accepts(service, schema, '"a"')


def test_a_step_with_no_multiple_in_range_accepts_no_value(service):
    with pytest.raises(EmptySchemaError, match="no multiple of 10"):
        service.validate(Constraint.of(Kind.JSON, {"type": "integer", "multipleOf": 10, "minimum": 1, "maximum": 9}))


def test_a_step_whose_automaton_is_too_large_is_refused_naming_it(service):
    schema = {"type": "integer", "multipleOf": 7919, "minimum": -10 ** 12, "maximum": 10 ** 12}
    assert refused(service, schema).startswith("multipleOf 7919")


def test_a_step_beside_a_ref_is_refused_naming_both(service):
    schema = {"$defs": {"n": {"type": "integer"}}, "$ref": "#/$defs/n", "multipleOf": 3}
    assert refused(service, schema) == "multipleOf together with $ref"


def test_a_step_is_enforced_inside_a_property(service):
    schema = {"type": "object", "properties": {"price": {"type": "number", "multipleOf": 0.01, "minimum": 0}},
              "required": ["price"]}
    assert accepts(service, schema, '{"price": 9.99}')
    assert not accepts(service, schema, '{"price": 9.999}') and not accepts(service, schema, '{"price": -1}')


def test_a_step_is_enforced_in_tool_arguments(svc):
    tool = {"type": "function", "function": {"name": "pay", "parameters": {
        "type": "object", "properties": {"cents": {"type": "integer", "multipleOf": 5}}, "required": ["cents"]}}}
    tag = build_tool_tag(load_format("hermes"), [tool], "required", True, svc.settings)
    c = Constraint.of(Kind.STRUCTURAL_TAG, tag)
    for args, ok in (({"cents": 15}, True), ({"cents": 16}, False)):
        g = svc.grammar(c)
        text = '<tool_call>\n{"name": "pay", "arguments": ' + json.dumps(args) + "}\n</tool_call>"
        assert (g.accept_string(text) and g.is_completed()) is ok


NUMERIC = [
    {"type": "number", "multipleOf": 0.01},
    {"type": "number", "multipleOf": 0.25, "minimum": 0, "maximum": 100},
    {"type": "number", "multipleOf": 2.5, "exclusiveMinimum": -10, "exclusiveMaximum": 10},
    {"type": "integer", "multipleOf": 12, "minimum": 0},
    {"type": "number", "multipleOf": 0.05, "maximum": -0.5},
]


@pytest.mark.parametrize("schema", NUMERIC, ids=lambda s: json.dumps(s))
@UNTIMED
@given(value=st.decimals(min_value=-1000, max_value=1000, places=3, allow_nan=False, allow_infinity=False))
def test_a_step_accepts_a_number_iff_jsonschema_validates_it(service, schema, value):
    text = format(value, "f")
    if schema["type"] == "integer" and value == value.to_integral_value():
        text = str(int(value))
    assert accepts(service, schema, text) == valid(schema, text)


@pytest.mark.parametrize("name", ["Github_easy---o46416.json", "Github_easy---o17460.json",
                                  "Github_medium---o43986.json"])
def test_real_schemas_with_a_step_accept_their_valid_instances_and_reject_the_invalid(service, name):
    case = maskbench(name)
    for t in case["tests"]:
        assert accepts(service, case["schema"], json.dumps(t["data"])) is t["valid"], t["description"]


# -- not -------------------------------------------------------------------------------------------

PAIR = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}


def test_not_required_of_one_name_forbids_that_name(service):
    schema = {**PAIR, "not": {"required": ["a"]}}
    assert accepts(service, schema, '{"b": 1}') and accepts(service, schema, "{}")
    assert not accepts(service, schema, '{"a": 1}') and not accepts(service, schema, '{"a": 1, "b": 2}')


def test_not_required_of_two_names_forbids_only_both_together(service):
    schema = {**PAIR, "not": {"required": ["a", "b"]}}
    assert accepts(service, schema, '{"a": 1}') and accepts(service, schema, '{"b": 1}')
    assert not accepts(service, schema, '{"a": 1, "b": 2}')


def test_not_required_of_a_required_name_leaves_the_other_absent(service):
    schema = {**PAIR, "required": ["a"], "not": {"required": ["a", "b"]}}
    assert accepts(service, schema, '{"a": 1}')
    assert not accepts(service, schema, '{"a": 1, "b": 2}') and not accepts(service, schema, '{"b": 2}')


def test_not_required_rejects_every_value_that_is_not_an_object(service):
    schema = {"not": {"required": ["a"]}}  # {"required": [...]} holds for non-objects, so "not" rejects them
    assert accepts(service, schema, "{}") and not accepts(service, schema, "1")
    assert not accepts(service, schema, '{"a": 1}')


def test_not_type_excludes_exactly_that_type(service):
    schema = {"not": {"type": ["null", "string"]}}
    assert accepts(service, schema, "1") and accepts(service, schema, "[]") and accepts(service, schema, "true")
    assert not accepts(service, schema, "null") and not accepts(service, schema, '"a"')


def test_not_enum_of_strings_excludes_them_in_every_spelling(service):
    schema = {"type": "string", "not": {"enum": ["logs", "a\"b"]}}
    assert accepts(service, schema, '"log"') and accepts(service, schema, '"logs2"') and accepts(service, schema, '""')
    assert accepts(service, schema, '"log\\u0053"')  # "logS"
    for text in ['"logs"', '"\\u006cogs"', '"\\u006Cog\\u0073"', '"a\\"b"', '"a\\u0022b"']:
        assert not accepts(service, schema, text), text


def test_not_const_beside_other_types_leaves_them_free(service):
    schema = {"type": ["string", "integer"], "not": {"const": "x"}}
    assert accepts(service, schema, "3") and accepts(service, schema, '"y"')
    assert not accepts(service, schema, '"x"')


def test_not_enum_on_an_enum_removes_those_values(service):
    schema = {"enum": ["a", "b", 3], "not": {"enum": ["b", 3.0]}}
    assert accepts(service, schema, '"a"')
    assert not accepts(service, schema, '"b"') and not accepts(service, schema, "3")


def test_not_of_the_empty_schema_forbids_an_optional_property(service):
    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"not": {}}}}
    assert accepts(service, schema, '{"a": "x"}')
    assert not accepts(service, schema, '{"a": "x", "b": 1}')


def test_not_of_a_ref_negates_its_definition(service):
    schema = {**PAIR, "$defs": {"has_a": {"required": ["a"]}}, "not": {"$ref": "#/$defs/has_a"}}
    assert accepts(service, schema, '{"b": 1}') and not accepts(service, schema, '{"a": 1}')


def test_not_of_a_ref_whose_definition_holds_a_ref_stays_refused_by_name(service):
    schema = {**PAIR, "$defs": {"has_a": {"properties": {"a": {"$ref": "#/$defs/int"}}, "required": ["a"]},
                                "int": {"type": "integer"}}, "not": {"$ref": "#/$defs/has_a"}}
    with pytest.raises(UnsupportedFeatureError, match=r"not: \{\$ref\}"):
        service.validate(Constraint.of(Kind.JSON, schema))


@pytest.mark.parametrize("name", ["Github_medium---o39168.json", "Github_medium---o44368.json"])
def test_real_schemas_with_not_of_a_ref_judge_their_instances_as_the_file_does(service, name):
    case = maskbench(name)
    for t in case["tests"]:
        assert accepts(service, case["schema"], json.dumps(t["data"])) is t["valid"], t["description"]


NOT_PATTERN = [{"type": "string", "not": {"pattern": "^a"}}, {"not": {"pattern": "x$"}, "maxLength": 3},
               {"type": ["string", "null"], "pattern": "^[ab]", "not": {"pattern": "b$"}}]


@pytest.mark.parametrize("schema", NOT_PATTERN, ids=range(len(NOT_PATTERN)))
@UNTIMED
@given(value=st.one_of(st.text(alphabet="abx@.e", max_size=6), st.sampled_from(
    ["a@b.co", "a@example.com", "ax", None, 1, "b@x.ax"])))
def test_not_pattern_takes_exactly_the_strings_outside_the_pattern(service, schema, value):
    assert accepts(service, schema, json.dumps(value)) == valid(schema, json.dumps(value))


def test_not_pattern_beside_a_format_takes_the_format_strings_outside_the_pattern(service):
    schema = {"type": "string", "format": "email", "not": {"pattern": "@example\\."}}
    assert accepts(service, schema, '"a@b.com"')
    assert not accepts(service, schema, '"a@example.com"') and not accepts(service, schema, '"ab"')


def test_not_enum_beside_lengths_and_a_pattern_excludes_the_values_in_every_spelling(service):
    schema = maskbench("Github_medium---o24621.json")["schema"]["definitions"]["name"]  # not: [test, source, ...]
    for text, ok in (('"tests"', True), ('"te"', True), ('"test"', False), ('"t\\u0065st"', False), ('"t"', False),
                     ('"Test"', False), ('"include"', False)):
        assert accepts(service, schema, text) is ok, text


def test_not_anyof_forbids_each_branch(service):
    schema = {**PAIR, "not": {"anyOf": [{"required": ["a"]}, {"required": ["b"]}]}}
    assert accepts(service, schema, "{}")
    assert not accepts(service, schema, '{"a": 1}') and not accepts(service, schema, '{"b": 1}')


def test_not_properties_rejects_objects_whose_member_its_schema_accepts(service):
    schema = {"type": "object", "properties": {"kind": {"type": "string"}, "n": {"type": "integer"}},
              "not": {"properties": {"kind": {"const": "x"}}, "required": ["kind"]}}
    assert accepts(service, schema, '{"kind": "y"}') and accepts(service, schema, '{"n": 1}')
    assert not accepts(service, schema, '{"kind": "x"}') and not accepts(service, schema, '{"kind": "x", "n": 1}')
    assert not accepts(service, schema, '"x"')  # properties and required hold for every non-object


def test_not_properties_with_type_object_lets_every_other_value_through(service):
    schema = {"type": ["object", "string"], "properties": {"kind": {"type": "string"}},
              "not": {"type": "object", "properties": {"kind": {"const": "x"}}}}
    assert accepts(service, schema, '"x"') and accepts(service, schema, '{"kind": "y"}')
    assert not accepts(service, schema, '{"kind": "x"}') and not accepts(service, schema, "{}")


# -- if / then / else --------------------------------------------------------------------------------

SHAPE = {"type": "object", "properties": {"kind": {"enum": ["circle", "square"]}, "radius": {"type": "number"},
                                          "side": {"type": "number"}},
         "required": ["kind"], "if": {"properties": {"kind": {"const": "circle"}}},
         "then": {"required": ["radius"]}, "else": {"required": ["side"]}}


def test_then_applies_where_the_condition_holds(service):
    assert accepts(service, SHAPE, '{"kind": "circle", "radius": 1}')
    assert not accepts(service, SHAPE, '{"kind": "circle", "side": 1}')


def test_else_applies_where_the_condition_fails(service):
    assert accepts(service, SHAPE, '{"kind": "square", "side": 2}')
    assert not accepts(service, SHAPE, '{"kind": "square", "radius": 2}')


def test_a_condition_on_an_absent_member_holds(service):
    schema = {**SHAPE, "required": []}  # properties holds of an object without "kind": then applies
    assert accepts(service, schema, '{"radius": 1}') and not accepts(service, schema, '{"side": 1}')


def test_the_members_keep_their_declared_order_under_a_condition(service):
    assert not accepts(service, SHAPE, '{"radius": 1, "kind": "circle"}')


def test_if_then_else_before_draft_7_constrain_nothing(service):
    schema = {**SHAPE, "$schema": "http://json-schema.org/draft-04/schema#"}
    assert accepts(service, schema, '{"kind": "circle", "side": 1}')


def test_then_without_if_constrains_nothing(service):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "then": {"required": ["a"]}}
    assert accepts(service, schema, "{}")


@given(kind=st.sampled_from(["circle", "square"]), members=st.sets(st.sampled_from(["radius", "side"])))
@UNTIMED
def test_a_condition_accepts_an_object_iff_jsonschema_validates_it(service, kind, members):
    text = json.dumps({"kind": kind, **{m: 1 for m in ["radius", "side"] if m in members}})
    assert accepts(service, SHAPE, text) == valid(SHAPE, text)


TWO_CONDITIONS = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"},
                                                   "c": {"type": "integer"}},
                  "allOf": [{"if": {"properties": {"a": {"const": "x"}}}, "then": {"required": ["b"]}},
                            {"if": {"properties": {"a": {"const": "y"}}}, "then": {"required": ["c"]}}]}


@given(a=st.sampled_from([None, "x", "y", "z"]), members=st.sets(st.sampled_from(["b", "c"])))
@UNTIMED
def test_two_conditions_under_allof_accept_an_object_iff_jsonschema_validates_it(service, a, members):
    value = {**({} if a is None else {"a": a}), **{m: 1 for m in ["b", "c"] if m in members}}
    assert accepts(service, TWO_CONDITIONS, json.dumps(value)) == valid(TWO_CONDITIONS, json.dumps(value))


def test_two_anyofs_under_allof_take_the_values_both_accept(service):
    schema = {"allOf": [{"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 2}]},
                        {"anyOf": [{"minimum": 3}, {"type": "string", "minLength": 2}]}]}
    texts = ["3", "2", '"ab"', '"a"', '"abc"', "true"]  # "a" passes minimum (numbers only) and maxLength
    assert [t for t in texts if accepts(service, schema, t)] == ["3", '"ab"', '"a"']
    assert [t for t in texts if valid(schema, t)] == ["3", '"ab"', '"a"']


def test_a_name_one_allof_part_forbids_is_forbidden_in_the_merged_object(service):
    schema = {"allOf": [{"type": "object", "properties": {"a": False}}, {"properties": {"b": {"type": "integer"}}}]}
    assert accepts(service, schema, '{"b": 1}') and not accepts(service, schema, '{"a": 1, "b": 1}')


def test_a_real_schema_with_if_then_else_judges_its_instances_as_the_file_does(service):
    case = maskbench("Github_easy---o4834.json")  # then/else: which names are required, by the value of "c"
    for t in case["tests"]:
        assert accepts(service, case["schema"], json.dumps(t["data"])) is t["valid"], t["description"]


@pytest.mark.parametrize("schema,feature", [
    ({"type": "string", "not": {"pattern": "(?<=a)b"}}, "not: {pattern} (with a lookahead or lookbehind)"),
    ({**SHAPE, "if": {"properties": {"radius": {"minimum": 2}}}}, "not: {minimum}"),
    ({"$defs": {"s": {"$ref": "#/$defs/t"}, "t": {"type": "string"}}, "not": {"$ref": "#/$defs/s"}}, "not: {$ref}"),
    ({"type": "number", "not": {"type": "integer"}}, "not: {type: integer} where numbers are allowed"),
    ({"type": "number", "not": {"const": 3}}, "not: {enum} with a value of type number"),
    ({"maxLength": 5, "not": {"const": "a"}}, "not: {enum} together with maxLength"),
    ({"type": "object", "additionalProperties": True, "not": {"required": ["a"]}}, "not: {required} where other"),
    ({"$defs": {"s": {"type": ["string", "null"]}}, "$ref": "#/$defs/s", "not": {"type": "null"}},
     "not together with $ref"),
])
def test_a_not_shape_tagjit_cannot_write_is_refused_naming_it(service, schema, feature):
    assert refused(service, schema).startswith(feature)


EXCLUDED = ["intramural", "", "a", "ab\n"]


@UNTIMED
@given(value=st.one_of(st.sampled_from(EXCLUDED), st.text(alphabet=st.sampled_from('ab\n"\\é\x01i'), max_size=4)),
       ascii_only=st.booleans())
def test_not_enum_accepts_a_string_iff_jsonschema_validates_it(service, value, ascii_only):
    schema = {"type": "string", "not": {"enum": EXCLUDED}}
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert accepts(service, schema, text) == valid(schema, text)


@pytest.mark.parametrize("name", ["Github_easy---o83707.json", "Github_medium---o7574.json",
                                  "Glaiveai2K---calculate_area_e1067200.json"])
def test_real_schemas_with_not_compile_and_judge_their_instances(service, name):
    case = maskbench(name)
    service.validate(Constraint.of(Kind.JSON, case["schema"]))
    for t in case["tests"]:
        assert accepts(service, case["schema"], json.dumps(t["data"])) is t["valid"], t["description"]


def test_real_mutually_exclusive_properties_are_never_both_accepted(service):
    case = maskbench("Github_medium---o79016.json")  # "Queue and exchange are mutually exclusive."
    both = {"is": "queue", "exchange": {"name": "e"}, "queue": {"name": "q"}}
    assert accepts(service, case["schema"], '{"is": "queue", "queue": {"name": "q"}}')
    assert not accepts(service, case["schema"], json.dumps(both))


def test_xgrammar_prints_a_string_const_as_the_one_literal_the_splice_swaps():
    import xgrammar as xgr

    from tagjit.build.printed import swap_const_literals

    grammar = xgr.Grammar.from_json_schema(json.dumps({"type": "object", "properties": {"a": {"const": "__x__"}}}))
    text, printed = swap_const_literals(str(grammar), {"__x__": "mine"})
    assert printed == ["__x__"] and "__x__" not in text and "mine" in text


def test_a_step_in_xml_arguments_is_refused_since_its_digits_cannot_be_bounded():
    from tagjit.build.grammars import json_schema_grammar
    from tagjit.build.printed import bound_numbers
    from tagjit.settings import Settings

    text = str(json_schema_grammar({"type": "integer", "multipleOf": 5}, Settings()).grammar)
    with pytest.raises(UnsupportedFeatureError, match="bounded count of digits"):
        bound_numbers(text, 32, 4)
