"""Numbers tagjit writes itself because xgrammar 0.2.8 does not write them exactly: ``enum``/``const`` number values
(xgrammar prints 0.4 as 0.40000000000000002 and 9.0 as 9 only) and number ranges (xgrammar writes at most 6 fraction
digits; it refuses an integer bound that is not whole or lies outside int64).

An enum or const number is accepted in the spellings ``build.numbers.value_spellings`` lists: the plain decimal
(trailing zeros allowed, an integral value with or without a fraction) and the normalised scientific form (json.dumps
writes one of the two). A range accepts every plain-decimal spelling of every number in it. Each is checked on
hand-picked strings, against the ``jsonschema`` package on generated values (read as decimals), and on real schemas.
"""

from __future__ import annotations

import json
from decimal import Decimal

import jsonschema
import pytest
import xgrammar as xgr
from hypothesis import given, settings
from hypothesis import strategies as st

from pools import UNHURRIED
from shared_data import maskbench
from tagjit import CompileService, Constraint, Settings
from tagjit.build.grammars import json_schema_grammar
from tagjit.build.printed import bound_numbers
from tagjit.constraint import Kind
from tagjit.errors import ConstraintError, EmptySchemaError
from tagjit.tools import build_tool_tag

UNTIMED = settings(deadline=None, max_examples=150)


@pytest.fixture(scope="module")
def plain() -> CompileService:
    """A compile service without a vocabulary: grammars only, so that many generated schemas compile quickly."""
    return CompileService(xgr.TokenizerInfo([]), UNHURRIED)


def accepts(svc: CompileService, schema, text: str) -> bool:
    g = svc.grammar(Constraint.of(Kind.JSON, schema))
    return g.accept_string(text) and g.is_completed()


def valid(schema, text: str) -> bool:
    """jsonschema's verdict with every number read as a decimal (0.40 equals 0.4, 6.0 equals 6)."""
    exact = json.loads(json.dumps(schema), parse_float=Decimal)
    return jsonschema.Draft202012Validator(exact).is_valid(json.loads(text, parse_float=Decimal))


def printed(schema) -> str:
    return str(json_schema_grammar(schema, Settings()).grammar)


# -- enum and const values -------------------------------------------------------------------------

def test_a_float_in_an_enum_accepts_its_shortest_spelling(plain):
    schema = {"type": "number", "enum": [0.1, 0.4]}
    assert accepts(plain, schema, "0.4") and accepts(plain, schema, "0.1")
    assert not accepts(plain, schema, "0.40000000000000002")  # xgrammar's spelling is another decimal


def test_a_float_in_an_enum_accepts_trailing_zeros(plain):
    schema = {"enum": [0.4]}
    assert accepts(plain, schema, "0.40") and accepts(plain, schema, "0.4000")


def test_a_value_json_dumps_writes_with_an_exponent_is_accepted_as_written_and_as_a_plain_decimal(plain):
    schema = {"const": 1e-05}
    for text in ["1e-05", "1e-5", "1E-05", "1.0e-5", "1e-005", "0.00001", "0.000010"]:
        assert accepts(plain, schema, text), text
    for text in ["1e-6", "1e5", "0.0001", "-1e-05"]:
        assert not accepts(plain, schema, text), text


def test_a_large_integer_value_is_accepted_in_full_and_in_scientific_form(plain):
    schema = {"enum": [10 ** 20]}
    for text in ["100000000000000000000", "1e+20", "1e20", "1.0E+020", "100000000000000000000.0"]:
        assert accepts(plain, schema, text), text
    assert not accepts(plain, schema, "1e+21") and not accepts(plain, schema, "10000000000000000000")


def test_an_integral_float_accepts_the_integer_spelling_and_a_fraction_of_zeros(plain):
    schema = {"enum": [9.0]}
    for text in ["9", "9.0", "9.00", "9e0", "9E+00"]:
        assert accepts(plain, schema, text), text
    for text in ["9.", "9.01", "90", "09"]:
        assert not accepts(plain, schema, text), text


def test_an_integer_value_accepts_a_fraction_of_zeros_as_json_schema_equality_says(plain):
    schema = {"type": "integer", "enum": [6, 7]}
    assert accepts(plain, schema, "6") and accepts(plain, schema, "6.0") and accepts(plain, schema, "7.00")
    assert not accepts(plain, schema, "6.5") and not accepts(plain, schema, "8")


def test_a_negative_value_needs_its_sign(plain):
    schema = {"const": -2.5}
    assert accepts(plain, schema, "-2.5") and accepts(plain, schema, "-2.50") and accepts(plain, schema, "-2.5e0")
    assert not accepts(plain, schema, "2.5")


def test_zero_is_accepted_with_either_sign_any_zero_fraction_and_any_exponent(plain):
    schema = {"const": 0}
    for text in ["0", "-0", "0.0", "-0.000", "0e0", "0E-7", "0.0e+12"]:
        assert accepts(plain, schema, text), text
    for text in ["00", "0.1", "1e0"]:
        assert not accepts(plain, schema, text), text


def test_only_the_listed_spellings_of_a_value_are_accepted(plain):
    """Equal values in other forms (a mantissa not in one-digit form) stay out: value_spellings lists what is in."""
    schema = {"const": 0.45}
    assert accepts(plain, schema, "0.45") and accepts(plain, schema, "4.5e-1")
    assert not accepts(plain, schema, "45e-2") and not accepts(plain, schema, "0.045e1")


def test_numbers_in_an_enum_of_mixed_types_keep_the_other_values(plain):
    schema = {"enum": ["a", 0.5, None, True, 3]}
    for text in ['"a"', "0.5", "0.50", "null", "true", "3", "3.0"]:
        assert accepts(plain, schema, text), text
    for text in ['"b"', "0.6", "false", "4", '"0.5"']:
        assert not accepts(plain, schema, text), text


def test_a_number_inside_an_object_const_takes_the_same_spellings(plain):
    schema = {"type": "object", "properties": {"p": {"const": {"x": 0.1, "n": 2}}}, "required": ["p"]}
    assert accepts(plain, schema, '{"p": {"x": 0.10, "n": 2.0}}')
    assert not accepts(plain, schema, '{"p": {"x": 0.2, "n": 2}}')


def test_an_enum_of_equal_numbers_is_written_once(plain):
    assert printed({"enum": [1, 1.0, 1.00]}).count('"1"') == 2  # the plain and the scientific spelling


def test_a_real_schema_with_a_float_enum_accepts_its_valid_instance(plain):
    case = maskbench("Github_medium---o35905.json")  # "limit": 0.4 from enum [0.1, 0.2, ..., 1.0]
    for t in case["tests"]:
        assert accepts(plain, case["schema"], json.dumps(t["data"])) is t["valid"], t["description"]


ENUMS = [[0.1, 0.4, 0.7], [1e-05, 2.5e-07, 3.25], [9.0, 6, -1.5], [1e+20, 1.5e300, 0], [123456.789, -0.001]]


def spellings_of(d: Decimal, style: int, zeros: int, upper: bool) -> str:
    """One of the spellings value_spellings lists: plain (style 0) or scientific with its exponent variants."""
    sign, digits, exp = d.normalize().as_tuple()
    minus = "-" if sign else ""
    s = "".join(map(str, digits))
    if d == 0:
        return ("-" if style % 2 else "") + "0" + ("." + "0" * zeros if zeros else "") + ("e-3" if style > 1 else "")
    if style == 0:
        text = format(abs(d.normalize()), "f")
        if zeros:
            text += ("" if "." in text else ".") + "0" * zeros
        return minus + text
    a = len(s) - 1 + exp
    mantissa = s[0] + ("." + s[1:] if len(s) > 1 else "") + (("" if len(s) > 1 else ".") + "0" * zeros if zeros else "")
    exponent = f"{a:+d}" if style == 1 else f"{a:d}" if style == 2 else f"{a:+04d}"
    return f"{minus}{mantissa}{'E' if upper else 'e'}{exponent}"


@pytest.mark.parametrize("values", ENUMS, ids=lambda v: json.dumps(v))
@UNTIMED
@given(data=st.data(), style=st.integers(0, 3), zeros=st.integers(0, 3), upper=st.booleans())
def test_an_enum_accepts_a_listed_spelling_iff_jsonschema_validates_its_value(plain, values, data, style, zeros,
                                                                              upper):
    schema = {"enum": values}
    value = data.draw(st.one_of(st.sampled_from(values), st.floats(allow_nan=False, allow_infinity=False),
                                st.decimals(-1000, 1000, places=4, allow_nan=False, allow_infinity=False)))
    d = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    text = spellings_of(d, style, zeros, upper)
    assert accepts(plain, schema, text) == valid(schema, text), text


@pytest.mark.parametrize("values", ENUMS, ids=lambda v: json.dumps(v))
@UNTIMED
@given(data=st.data(), digit=st.integers(0, 9), where=st.integers(0, 40))
def test_an_enum_rejects_a_value_with_one_digit_changed(plain, values, data, digit, where):
    value = data.draw(st.sampled_from(values))
    text = json.dumps(value)
    at = [i for i, ch in enumerate(text) if ch.isdigit()]
    i = at[where % len(at)]
    mutated = text[:i] + str(digit) + text[i + 1:]
    if mutated.startswith(("0", "-0")) and len(mutated.lstrip("-")) > 1 and mutated.lstrip("-")[1].isdigit():
        return  # a leading zero is not JSON
    assert accepts(plain, {"enum": values}, mutated) == valid({"enum": values}, mutated), mutated


# -- ranges ----------------------------------------------------------------------------------------

def test_a_number_with_a_bound_accepts_any_count_of_fraction_digits(plain):
    schema = {"type": "number", "minimum": 0}
    for text in ["0.0160425", "0", "7", "123.456789123456789", "0.00000000001"]:
        assert accepts(plain, schema, text), text
    for text in ["-1", "-0.0000001", "00", ".5", "1."]:
        assert not accepts(plain, schema, text), text


def test_an_exclusive_bound_of_zero_rejects_every_spelling_of_zero(plain):
    schema = {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}
    for text in ["0.5", "0.0000001", "0.99999999999"]:
        assert accepts(plain, schema, text), text
    for text in ["0", "0.0", "0.000", "-0", "1", "1.0", "1.00001"]:
        assert not accepts(plain, schema, text), text


def test_a_fractional_bound_is_compared_digit_by_digit_past_its_last_digit(plain):
    schema = {"type": "number", "minimum": 0.5, "maximum": 3.25}
    for text in ["0.5", "0.50000", "3.25", "3.2500", "3.2499999", "1"]:
        assert accepts(plain, schema, text), text
    for text in ["0.4999999", "3.2500001", "3.3", "4"]:
        assert not accepts(plain, schema, text), text


def test_a_negative_range_keeps_its_sign(plain):
    schema = {"type": "number", "maximum": -0.001}
    assert accepts(plain, schema, "-0.001") and accepts(plain, schema, "-0.0010") and accepts(plain, schema, "-7")
    for text in ["-0.0009", "0", "-0", "0.001"]:
        assert not accepts(plain, schema, text), text


def test_negative_zero_is_in_a_range_that_holds_zero(plain):
    schema = {"type": "number", "minimum": 0, "maximum": 1}
    assert accepts(plain, schema, "-0") and accepts(plain, schema, "-0.00")
    assert not accepts(plain, schema, "-0.1")


def test_a_range_is_written_without_exponents_as_before(plain):
    assert not accepts(plain, {"type": "number", "minimum": 0}, "1e2")


def test_an_integer_bound_that_is_not_whole_is_enforced(plain):
    schema = {"type": "integer", "minimum": 1.5, "exclusiveMaximum": 4.5}
    assert accepts(plain, schema, "2") and accepts(plain, schema, "4")
    for text in ["1", "5", "2.0", "1.5"]:
        assert not accepts(plain, schema, text), text


def test_an_integer_bound_outside_int64_is_enforced(plain):
    schema = {"type": "integer", "minimum": -10 ** 20, "maximum": 18446744073709551615}
    for text in ["0", "-100000000000000000000", "18446744073709551615", "9223372036854775808"]:
        assert accepts(plain, schema, text), text
    for text in ["-100000000000000000001", "18446744073709551616", "1.5"]:
        assert not accepts(plain, schema, text), text


def test_an_integer_range_within_int64_stays_xgrammars():
    assert "tagjit_range_" not in printed({"type": "integer", "minimum": -5, "exclusiveMaximum": 2 ** 63 - 1})
    assert "tagjit_range_" in printed({"type": "number", "minimum": -5})


def test_a_range_beside_other_types_constrains_only_the_numbers(plain):
    schema = {"type": ["number", "string", "null"], "minimum": 2.5, "maxLength": 2}
    assert accepts(plain, schema, "2.75") and accepts(plain, schema, '"ab"') and accepts(plain, schema, "null")
    assert not accepts(plain, schema, "2.4") and not accepts(plain, schema, '"abc"')


def test_a_range_with_no_number_in_it_accepts_no_value(plain):
    with pytest.raises(EmptySchemaError, match="no number lies within its bounds"):
        plain.validate(Constraint.of(Kind.JSON, {"type": "number", "minimum": 5, "maximum": 3}))


def test_an_empty_range_beside_other_types_leaves_them(plain):
    schema = {"type": ["number", "string"], "minimum": 5, "maximum": 3}
    assert accepts(plain, schema, '"x"') and not accepts(plain, schema, "4")


@pytest.mark.parametrize("name", ["Github_medium---o3914.json", "Github_medium---o45806.json",
                                  "Github_medium---o83275.json"])
def test_real_schemas_with_ranges_accept_their_valid_instances_and_reject_the_invalid(plain, name):
    case = maskbench(name)
    for t in case["tests"]:
        assert accepts(plain, case["schema"], json.dumps(t["data"])) is t["valid"], t["description"]


BOUNDS = st.one_of(st.none(), st.decimals(-1000, 1000, places=4, allow_nan=False, allow_infinity=False))


@UNTIMED
@given(lo=BOUNDS, hi=BOUNDS, lo_open=st.booleans(), hi_open=st.booleans(), integer=st.booleans(),
       value=st.decimals(-1200, 1200, places=6, allow_nan=False, allow_infinity=False), zeros=st.integers(0, 2))
def test_a_range_accepts_a_number_iff_jsonschema_validates_it(plain, lo, hi, lo_open, hi_open, integer, value, zeros):
    schema: dict = {"type": "integer" if integer else "number"}
    if lo is not None:
        schema["exclusiveMinimum" if lo_open else "minimum"] = float(lo)
    if hi is not None:
        schema["exclusiveMaximum" if hi_open else "maximum"] = float(hi)
    if integer and value == value.to_integral_value():
        text = str(int(value))
    else:
        text = format(value, "f") + ("0" * zeros if "." in format(value, "f") else "")
    try:
        got = accepts(plain, schema, text)
    except ConstraintError:
        got = False  # no number in range: the schema accepts nothing (jsonschema must agree)
    assert got == valid(schema, text), (schema, text)


# -- tool arguments in XML formats -------------------------------------------------------------------

TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
    "x": {"type": "number", "minimum": 0}, "e": {"enum": [0.4, 2]}}, "required": ["x"]}}}


def qwen_call(params: list[tuple[str, str]]) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params)
    return f"<tool_call>\n<function=f>\n{body}</function>\n</tool_call>"


def xml_accepts(svc: CompileService, params: list[tuple[str, str]]) -> bool:
    g = svc.grammar(Constraint.of("structural_tag", build_tool_tag("qwen3_coder", [TOOL], "required", True,
                                                                   Settings())))
    return g.accept_string(qwen_call(params)) and g.is_completed()


def test_a_range_in_xml_arguments_is_enforced_not_refused(plain):
    assert xml_accepts(plain, [("x", "0.0160425")]) and xml_accepts(plain, [("x", "1"), ("e", "0.40")])
    assert not xml_accepts(plain, [("x", "-1")]) and not xml_accepts(plain, [("x", "1"), ("e", "0.5")])


def test_a_range_in_xml_arguments_keeps_digits_bounded_so_float_stays_finite(plain):
    assert not xml_accepts(plain, [("x", "9" * 400)])


def test_bounding_a_range_bounds_each_of_its_digit_loops():
    text = printed({"type": "number", "minimum": 0, "maximum": 1})
    assert "[0]*" in text and "[0-9]*" in text
    bounded = bound_numbers(text, 100, 2)
    assert "[0]{0, 100}" in bounded and "[0-9]{0, 100}" in bounded
    assert "[0]*" not in bounded and "[0-9]*" not in bounded
