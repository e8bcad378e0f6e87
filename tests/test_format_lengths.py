"""``format`` together with ``minLength``/``maxLength``, enforced exactly: the format's language as a regex through
build.patterns' automaton times a length counter. Generated strings are judged against the format alone (tagjit's
enforcement without lengths) and their length; hand-picked ones; real MaskBench schemas."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared_data import SCHEMAS, maskbench
from tagjit import CompileService, UnsupportedFeatureError
from tagjit.build.patterns import format_pattern
from tagjit.constraint import Constraint, Kind
from tagjit.errors import EmptySchemaError
from test_pattern_lengths import _spell, accepts, judged, refused, valid

UNTIMED = settings(deadline=None, max_examples=20, suppress_health_check=[HealthCheck.filter_too_much,
                                                                         HealthCheck.too_slow])

# format, minLength, maxLength
FORMATS = [
    ("email", 6, 20),
    ("hostname", 3, 12),
    ("ipv4", 9, 13),
    ("ipv6", 4, 20),
    ("uuid", 36, 36),
    ("date", 10, 10),
    ("date-time", 20, 26),
    ("time", 9, 14),
    ("duration", 3, 8),
    ("uri", 4, 24),
    ("uri-reference", 0, 16),
    ("uri-template", 0, 12),
    ("json-pointer", 1, 10),
    ("relative-json-pointer", 2, 9),
    ("byte", 4, 12),
]
IDS = [f for f, _, _ in FORMATS]
VARIABLE = [f for f in FORMATS if f[0] not in ("uuid", "date")]  # formats whose values vary in length


def _schema(fmt: str, lo: int, hi: int) -> dict:
    return {"type": "string", "format": fmt, "minLength": lo, "maxLength": hi}


def _in_format(service: CompileService, fmt: str, value: str) -> bool:
    """Whether the format alone, as tagjit enforces it without lengths, accepts the value."""
    return accepts(service, {"type": "string", "format": fmt}, json.dumps(value))


_PRINTABLE = st.characters(min_codepoint=0x20, max_codepoint=0x7E, exclude_characters='"\\')


def _instances(fmt: str):
    # Printable ASCII without '"' and '\\': xgrammar's format-only rules read the JSON text, not the decoded string.
    return st.from_regex(re.compile(format_pattern(fmt), re.ASCII), fullmatch=True, alphabet=_PRINTABLE)


@pytest.mark.parametrize("fmt,lo,hi", FORMATS, ids=IDS)
@UNTIMED
@given(data=st.data())
def test_values_in_the_format_within_the_lengths_are_accepted_in_any_spelling(service, fmt, lo, hi, data):
    value = data.draw(_instances(fmt).filter(lambda s: lo <= len(s) <= hi))
    assert _in_format(service, fmt, value), value  # the regex is the language the format alone accepts
    assert valid(_schema(fmt, lo, hi), value)
    assert accepts(service, _schema(fmt, lo, hi), _spell(value, data)), value


@pytest.mark.parametrize("fmt,lo,hi", VARIABLE, ids=[f for f, _, _ in VARIABLE])
@UNTIMED
@given(value=st.data())
def test_values_in_the_format_outside_the_lengths_are_rejected(service, fmt, lo, hi, value):
    v = value.draw(_instances(fmt).filter(lambda s: not lo <= len(s) <= hi and len(s) < 60))
    assert _in_format(service, fmt, v), v
    assert not accepts(service, _schema(fmt, lo, hi), json.dumps(v)), v


@pytest.mark.parametrize("fmt,lo,hi", FORMATS, ids=IDS)
@UNTIMED
@given(data=st.data())
def test_a_mutated_value_is_accepted_iff_the_format_alone_accepts_it_and_its_length_fits(service, fmt, lo, hi, data):
    value = data.draw(_instances(fmt).filter(lambda s: len(s) < 40))
    chars = list(value)
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(chars)))
        c = data.draw(st.sampled_from("aZ09-.:@/%T_ !~#"))
        if chars and i < len(chars) and data.draw(st.booleans()):
            chars[i] = c if data.draw(st.booleans()) else ""
        else:
            chars.insert(i, c)
    mutated = "".join(chars)
    expected = _in_format(service, fmt, mutated) and lo <= len(mutated) <= hi
    assert accepts(service, _schema(fmt, lo, hi), json.dumps(mutated)) == expected, mutated


@pytest.mark.parametrize("fmt,lo,hi,good,bad", [
    ("email", 5, 12, ["a@b.cd", "first@ex.io"], ["a@b", "first.last@example.com", "a@b.c", "ab.cd", "a@@b.cd"]),
    ("ipv4", 8, 11, ["10.0.0.1", "192.168.0.1"], ["1.2.3.4", "192.168.100.1", "10.0.0.256", "10.0.0"]),
    ("uuid", 1, 40, ["123e4567-e89b-12d3-a456-426614174000"], ["123e4567-e89b-12d3-a456-42661417400",
                                                             "123e4567-e89b-12d3-a456-42661417400g"]),
    ("date", 10, 10, ["2024-02-29"], ["2023-02-29", "2024-2-29", "2024-02-290"]),
    ("date-time", 1, 20, ["2024-01-01T12:00:00Z"], ["2024-01-01T12:00:00.5Z", "2024-01-01 12:00:00Z"]),
    ("hostname", 1, 9, ["a.example", "localhost"], ["a.example.com", "-a.b", "a..b", ""]),
    ("byte", 4, 8, ["aGk=", "aGVsbG8="], ["", "aGVsbG8hIQ==", "aGk", "a Gk="]),
])
def test_hand_picked_values_too_short_too_long_or_outside_the_format_are_rejected(service, fmt, lo, hi, good, bad):
    schema = _schema(fmt, lo, hi)
    assert judged(service, schema, [json.dumps(v) for v in good + bad]) == [json.dumps(v) for v in good]


def test_format_pattern_and_lengths_are_intersected(service):
    schema = {"type": "string", "format": "email", "pattern": "\\.org$", "minLength": 8, "maxLength": 9}
    assert judged(service, schema, ['"ab@cd.org"', '"a@cd.org"', '"ab@cd.com"', '"abc@cd.org"', '"a@bc.orgx"',
                                    '"@abcd.org"', '"a@c.org"']) == ['"ab@cd.org"', '"a@cd.org"']


def test_date_with_a_pattern_and_lengths_keeps_the_calendar(service):
    schema = {"type": "string", "format": "date", "pattern": "-02-", "maxLength": 10}
    assert judged(service, schema, ['"2024-02-29"', '"2023-02-29"', '"2024-03-29"']) == ['"2024-02-29"']


def test_byte_beside_a_length_is_base64_not_only_a_length(service):
    schema = {"type": "string", "format": "byte", "maxLength": 8}
    assert accepts(service, schema, '"aGk="') and not accepts(service, schema, '"not b64"')


def test_an_annotation_format_beside_a_length_is_just_the_length(service):
    for fmt in ("html-selector", "password", "binary"):
        schema = {"type": "string", "format": fmt, "minLength": 2, "maxLength": 3}
        assert judged(service, schema, ['"a"', '"a b"', '"#x"', '"abcd"']) == ['"a b"', '"#x"'], fmt


def test_the_rule_sits_inside_properties_whose_order_is_kept(service):
    schema = {"type": "object", "properties": {"mail": {"type": "string", "format": "email", "maxLength": 8},
                                               "n": {"type": "integer"}}, "required": ["mail", "n"]}
    assert accepts(service, schema, '{"mail": "a@b.cd", "n": 1}')
    assert not accepts(service, schema, '{"n": 1, "mail": "a@b.cd"}')
    assert not accepts(service, schema, '{"mail": "ab@cd.efg", "n": 1}')
    assert not accepts(service, schema, '{"mail": "a.b.cd", "n": 1}')


def test_other_types_beside_the_format_stay_free(service):
    schema = {"type": ["string", "null"], "format": "ipv4", "maxLength": 8}
    assert judged(service, schema, ["null", '"1.2.3.4"', '"10.20.3.4"', '"1.2.3"']) == ["null", '"1.2.3.4"']


def test_a_format_no_string_of_the_length_is_in_accepts_no_value(service):
    with pytest.raises(EmptySchemaError, match=r"no string of its length is in its format \(uuid\)"):
        service.validate(Constraint.of(Kind.JSON, {"type": "string", "format": "uuid", "maxLength": 35}))
    schema = {"type": ["string", "null"], "format": "uuid", "minLength": 37}
    assert accepts(service, schema, "null") and not accepts(service, schema, '"123e4567-e89b-12d3-a456-426614174000"')


@pytest.mark.parametrize("schema,feature", [
    ({"type": "string", "format": "uri", "minLength": 1, "maxLength": 2000},
     "minLength/maxLength together with format: uri (an automaton of more than 4096 states with its lengths)"),
    ({"type": "string", "format": "idn-email", "maxLength": 9}, "format: idn-email"),
    ({"type": "string", "format": "email", "pattern": "(?=a)", "maxLength": 9},
     "pattern with a lookahead or lookbehind together with minLength/maxLength"),
])
def test_what_cannot_be_written_exactly_is_refused_naming_the_format(service, schema, feature):
    assert refused(service, schema) == feature


# MaskBench files whose format beside a length now compiles: email 3..255, hostname ..255, date-time 1.., email and
# the annotation "domainname" ..255.
REAL = ["Github_easy---o58907.json", "Github_medium---o55337.json", "Github_medium---o53616.json",
        "Github_medium---o55361.json"]


@pytest.mark.parametrize("name", REAL)
def test_real_schemas_with_a_format_and_lengths_compile_and_judge_their_instances(service, name):
    case = maskbench(name)
    service.validate(Constraint.of(Kind.JSON, case["schema"]))
    assert case["tests"]
    for t in case["tests"]:
        assert accepts(service, case["schema"], json.dumps(t["data"])) == t["valid"], t["description"]


def _format_length_files() -> list[str]:
    def nodes(n):
        if isinstance(n, dict):
            yield n
            for v in n.values():
                yield from nodes(v)
        elif isinstance(n, list):
            for v in n:
                yield from nodes(v)

    return [path.name for path in sorted((SCHEMAS / "maskbench").glob("Github_*.json"))
            if any(isinstance(n.get("format"), str) and ("minLength" in n or "maxLength" in n)
                   for n in nodes(json.loads(path.read_text())["schema"]))]


def test_real_schemas_with_a_format_and_lengths_are_refused_for_it_only_when_the_automaton_is_too_large(service):
    # 38 files: 12 as one automaton of format and lengths; email up to 1024 characters and uri-reference up to 2000
    # as the format's automaton beside the filter's count; one uri of 1 to 255 characters stays refused (a minimum
    # beside a format is one automaton or none), and a few refuse an overlapping oneOf
    names = _format_length_files()
    compiled, refusals = 0, []
    for name in names:
        try:
            service.validate(Constraint.of(Kind.JSON, maskbench(name)["schema"]))
            compiled += 1
        except UnsupportedFeatureError as e:
            if "format" in e.feature:
                refusals.append(e.feature)
    assert len(names) >= 30 and compiled >= 30
    assert all(f.endswith("(an automaton of more than 4096 states with its lengths)") for f in refusals), refusals
    assert len(refusals) <= 1, refusals
