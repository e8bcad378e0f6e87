"""Whitespace between JSON tokens is bounded: the default style (json.dumps spacing) has no free whitespace, and
the free style's bound is configurable."""

import pytest

from tagjit import CompileService, Matcher, Settings
from tagjit.constraint import Constraint, Kind
from pools import UNHURRIED
from tool_calls import hermes_call_verdicts

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


@pytest.fixture(scope="module")
def bound1(llama3_info) -> CompileService:
    """The free style at the default bound: compact JSON, json.dumps spacing, one newline between items."""
    return CompileService(llama3_info, UNHURRIED.replace(json_style="free"))


def accepts(service: CompileService, text: str) -> bool:
    g = Matcher(service.compile(Constraint.of(Kind.JSON, SCHEMA)), vocab_size=service.vocab_size)
    return g.accept_string(text) and g.is_completed()


@pytest.mark.parametrize("text", ['{"a":1}', '{"a": 1}', '{\n"a": 1\n}'], ids=["compact", "json.dumps", "newlines"])
def test_bound_1_accepts_the_usual_spellings(bound1, text):
    assert accepts(bound1, text)


def test_bound_1_refuses_whitespace_before_a_colon_or_comma_where_no_printer_puts_it(bound1):
    assert accepts(bound1, '{"a": 1 }')
    assert not accepts(bound1, '{"a" : 1}')
    g = Matcher(bound1.compile(Constraint.of(Kind.JSON_OBJECT, "")), vocab_size=bound1.vocab_size)
    assert g.accept_string('{"a": [1, 2], "b": 2') and not g.accept_string(' ,')


def test_unbounded_whitespace_is_allowed_before_a_colon(llama3_info):
    free = CompileService(llama3_info, UNHURRIED.replace(max_whitespace=None))
    assert accepts(free, '{"a" : 1}')


def test_default_takes_json_dumps_spacing_only(service):
    assert service.settings.dumps_spacing
    assert accepts(service, '{"a": 1}')
    assert not accepts(service, '{"a":1}')
    assert not accepts(service, '{\n"a": 1\n}')


@pytest.mark.parametrize("style", ["auto", "free"])
def test_indentation_is_refused(llama3_info, style):
    s = CompileService(llama3_info, UNHURRIED.replace(json_style=style))
    assert not accepts(s, '{\n    "a": 1\n}')


def test_free_bound_rejects_a_long_run_of_spaces(bound1):
    limit = bound1.settings.max_whitespace
    assert limit is not None
    assert accepts(bound1, "{" + " " * limit + '"a": 1}')
    assert not accepts(bound1, "{" + " " * (limit + 1) + '"a": 1}')


def test_bound_is_configurable(llama3_info):
    compact = CompileService(llama3_info, UNHURRIED.replace(max_whitespace=0))
    assert accepts(compact, '{"a":1}')
    assert not accepts(compact, '{"a": 1}')


def test_unbounded_when_configured(llama3_info):
    free = CompileService(llama3_info, UNHURRIED.replace(max_whitespace=None))
    assert accepts(free, "{" + " " * 200 + '"a": 1}')


def test_json_object_requests_are_bounded_too(service):
    g = Matcher(service.compile(Constraint.of(Kind.JSON_OBJECT, "")), vocab_size=service.vocab_size)
    assert not (g.accept_string("{" + " " * 50 + "}") and g.is_completed())


def test_structural_tag_json_content_is_bounded(service):
    tag = {"format": {"type": "json_schema", "json_schema": SCHEMA}}
    g = Matcher(service.compile(Constraint.of(Kind.STRUCTURAL_TAG, tag)), vocab_size=service.vocab_size)
    assert not (g.accept_string("{" + " " * 50 + '"a": 1}') and g.is_completed())


def test_structural_tag_json_content_is_compact_under_compact_settings(llama3_info):
    compact = CompileService(llama3_info, UNHURRIED.replace(max_whitespace=0))
    tag = {"format": {"type": "json_schema", "json_schema": SCHEMA}}
    accepts = []
    for text in ('{"a":1}', '{"a": 1}'):
        g = Matcher(compact.compile(Constraint.of(Kind.STRUCTURAL_TAG, tag)), vocab_size=compact.vocab_size)
        accepts.append(g.accept_string(text) and g.is_completed())
    assert accepts == [True, False]


# ws before ':' / before ',' / after both (json.dumps spacing)
SPACINGS = ['{"base" : 1, "height": 2}', '{"base": 1 , "height": 2}', '{"base": 1, "height": 2}']


@pytest.mark.parametrize("whole", [False, True], ids=["per-tool parts", "whole tag"])
def test_tool_call_arguments_refuse_whitespace_before_a_colon_or_comma(service, whole):
    assert hermes_call_verdicts(service, whole, SPACINGS) == [False, False, True]


@pytest.mark.parametrize("whole", [False, True], ids=["per-tool parts", "whole tag"])
def test_unbounded_whitespace_allows_it_in_tool_call_arguments(llama3_info, whole):
    free = CompileService(llama3_info, UNHURRIED.replace(max_whitespace=None))
    assert hermes_call_verdicts(free, whole, SPACINGS) == [True, True, True]
