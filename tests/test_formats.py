"""``format`` values: specification formats enforced or refused by name, OpenAPI formats enforced, the rest
annotations (accepted, with a lint note), on real JSONSchemaBench schemas."""

from __future__ import annotations

import json

import pytest
import rfc3987
from hypothesis import given, settings
from hypothesis import strategies as st

from shared_data import maskbench, schema_file
from tagjit import CompileService, UnsupportedFeatureError
from tagjit.build.patterns import IPRIVATE, UCSCHAR, format_pattern
from tagjit.constraint import Constraint, Kind
from tagjit.schema.lint import UNKNOWN_FORMAT, lint_schema

USER = schema_file("Github_easy", "o39448.json")  # age int32, id int64, foo "bar", ref "ext-ref"
BINARY = schema_file("Github_easy", "o58618.json")  # binaryFormat "binary", byteFormat "byte"


def accepts_raw(service: CompileService, schema: dict, value: str) -> bool:
    """Whether the grammar takes the value written as models write non-ASCII text: raw UTF-8, not \\u escapes."""
    g = service.grammar(Constraint.of(Kind.JSON, schema))
    return g.accept_string(json.dumps(value, ensure_ascii=False)) and g.is_completed()


def accepts(service: CompileService, schema: dict, value: object) -> bool:
    g = service.grammar(Constraint.of(Kind.JSON, schema))
    return g.accept_string(json.dumps(value)) and g.is_completed()


@pytest.mark.parametrize("field,bound", [("age", 2 ** 31), ("id", 2 ** 63)])
def test_int32_and_int64_are_enforced_as_their_ranges(service, field, bound):
    assert accepts(service, USER, {"User": {field: bound - 1}})
    assert accepts(service, USER, {"User": {field: -bound}})
    assert not accepts(service, USER, {"User": {field: bound}})
    assert not accepts(service, USER, {"User": {field: -bound - 1}})


def test_a_range_tighter_than_int32_is_kept(service):
    schema = {"type": "integer", "format": "int32", "minimum": 0, "maximum": 10}
    assert accepts(service, schema, 10) and not accepts(service, schema, 11) and not accepts(service, schema, -1)


def test_byte_is_enforced_as_base64(service):
    assert accepts(service, BINARY, {"byteFormat": "aGVsbG8="})
    assert accepts(service, BINARY, {"byteFormat": ""})
    assert not accepts(service, BINARY, {"byteFormat": "not base64!"})
    assert not accepts(service, BINARY, {"byteFormat": "aGVsbG8"})


def test_binary_and_password_accept_any_string(service):
    assert accepts(service, BINARY, {"binaryFormat": "\u00ff raw bytes, any text"})
    assert accepts(service, {"type": "string", "format": "password"}, "hunter2 !")


def test_an_unknown_format_is_an_annotation_that_accepts_any_string(service):
    assert accepts(service, USER, {"User": {"foo": "anything at all", "ref": "#/x"}})


def test_an_unknown_format_gets_a_lint_note_at_its_path():
    notes = [(f.rule, f.path) for f in lint_schema(USER) if f.rule == UNKNOWN_FORMAT]
    assert notes == [(UNKNOWN_FORMAT, "#/properties/User/properties/foo"),
                     (UNKNOWN_FORMAT, "#/properties/User/properties/ref")]


def test_openapi_and_specification_formats_get_no_lint_note():
    assert not [f for f in lint_schema(BINARY) if f.rule == UNKNOWN_FORMAT]
    assert not [f for f in lint_schema({"type": "string", "format": "date-time"}) if f.rule == UNKNOWN_FORMAT]


@pytest.mark.parametrize("fmt", ["regex", "idn-email", "idn-hostname"])
def test_a_specification_format_tagjit_cannot_enforce_is_refused_by_name(service, fmt):
    with pytest.raises(UnsupportedFeatureError, match=f"format: {fmt}"):
        service.grammar(Constraint.of(Kind.JSON, {"type": "string", "format": fmt}))


@pytest.mark.parametrize("value,ok", [
    ("https://example.com/construction/123", True), ("mailto:ada@example.org", True), ("../a/b?q=1#top", True),
    ("//host/path", True), ("", True), ("a:b c", False), ("https://example.com/a b", False), ("%zz", False)])
def test_uri_reference_takes_a_uri_or_a_relative_reference(service, value, ok):
    assert accepts(service, {"type": "string", "format": "uri-reference"}, value) is ok


def test_a_real_schema_with_uri_references_takes_its_valid_instances(service):
    # Github_medium---o81880: "dir" and "url" are uri-references holding absolute URLs (xgrammar takes only relative).
    raw = maskbench("Github_medium---o81880.json")
    valid = [t["data"] for t in raw["tests"] if t["valid"]]
    assert valid and all(accepts(service, raw["schema"], v) for v in valid)


IRIS = ["https://例え.jp/パス?q=ü#frag", "urn:isbn:0451450523", "mailto:ada@example.org", "a:b", "x:/ü/",
        "http://u:p@host:80/a%20b", "ftp://ü.example/ä;type=i", "x:?\ue000", "a:\U0001F600", "news:comp.lang.python"]
NOT_IRIS = ["not-an-iri", "http://a b", "1a:b", "%zz", "", "//host/p", "x:#\ue000", "https://example.com/<a>",
            "a:b\x7f", "ü:x"]
RELATIVE = ["../a/ü", "//host/päth", "?q=1", "#top", "", "a/b:c"]


@pytest.mark.parametrize("value", IRIS)
def test_iri_takes_what_rfc_3987_calls_an_iri(service, value):
    assert rfc3987.match(value, rule="IRI")
    assert accepts_raw(service, {"type": "string", "format": "iri"}, value)


@pytest.mark.parametrize("value", NOT_IRIS + RELATIVE[:4])
def test_iri_rejects_what_rfc_3987_does_not_call_an_iri(service, value):
    assert not rfc3987.match(value, rule="IRI")
    assert not accepts_raw(service, {"type": "string", "format": "iri"}, value)


@pytest.mark.parametrize("value", IRIS + RELATIVE)
def test_iri_reference_takes_an_iri_or_a_relative_reference(service, value):
    assert rfc3987.match(value, rule="IRI_reference")
    assert accepts_raw(service, {"type": "string", "format": "iri-reference"}, value)


@pytest.mark.parametrize("value", ["http://a b", "1a:b", "%zz", "x:#\ue000", "a b"])
def test_iri_reference_rejects_what_rfc_3987_does_not_call_one(service, value):
    assert not rfc3987.match(value, rule="IRI_reference")
    assert not accepts_raw(service, {"type": "string", "format": "iri-reference"}, value)


def sampled(fmt: str) -> str:
    """The format's pattern with its Unicode classes cut to a few members of each (hypothesis takes a minute to read
    a class of all of Unicode's letters): the structure the property tests generate from stays the same."""
    return format_pattern(fmt).replace(UCSCHAR, "\u00e9\u4f8b\U0001F600\U000e1000").replace(IPRIVATE, "\ue000")


@settings(max_examples=150, deadline=None)
@given(value=st.from_regex(sampled("iri"), fullmatch=True))
def test_every_string_of_the_iri_language_is_an_iri_by_rfc_3987(value):
    assert rfc3987.match(value, rule="IRI"), value


@settings(max_examples=150, deadline=None)
@given(value=st.from_regex(sampled("iri-reference"), fullmatch=True))
def test_every_string_of_the_iri_reference_language_is_one_by_rfc_3987(value):
    assert rfc3987.match(value, rule="IRI_reference"), value


def test_a_real_schema_with_an_iri_judges_its_instances_as_the_file_does(service):
    # Github_easy---o76630: an xAPI account whose homePage is an iri ("https://example.com"; "not-an-iri" is not).
    raw = maskbench("Github_easy---o76630.json")
    assert len({t["valid"] for t in raw["tests"]}) == 2
    for t in raw["tests"]:
        assert accepts(service, raw["schema"], t["data"]) is t["valid"], t["data"]


@pytest.mark.parametrize("fmt", ["iri", "iri-reference"])
@pytest.mark.parametrize("beside", [{"maxLength": 40}, {"minLength": 3}, {"pattern": "^https"}])
def test_an_iri_beside_lengths_or_a_pattern_is_refused_by_name(service, fmt, beside):
    with pytest.raises(UnsupportedFeatureError, match=f"format: {fmt}"):
        service.grammar(Constraint.of(Kind.JSON, {"type": "string", "format": fmt, **beside}))
