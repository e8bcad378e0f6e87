"""``format`` values: specification formats enforced or refused by name, OpenAPI formats enforced, the rest
annotations (accepted, with a lint note), on real JSONSchemaBench schemas."""

from __future__ import annotations

import json

import pytest

from shared_data import maskbench, schema_file
from tagjit import CompileService, UnsupportedFeatureError
from tagjit.constraint import Constraint, Kind
from tagjit.schema.lint import UNKNOWN_FORMAT, lint_schema

USER = schema_file("Github_easy", "o39448.json")  # age int32, id int64, foo "bar", ref "ext-ref"
BINARY = schema_file("Github_easy", "o58618.json")  # binaryFormat "binary", byteFormat "byte"


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


@pytest.mark.parametrize("fmt", ["regex", "idn-email", "idn-hostname", "iri"])
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
