"""A ``pattern`` is matched against the string a JSON text decodes to, not against its spelling: characters JSON
writes escaped (a quote, a backslash, a control character) are taken in their escaped spelling, and an escape never
stands for the characters it is spelled with. Checked on hand-picked texts, on generated strings against Python's
``re`` (ECMA-262 and ``re`` agree on these patterns), and on a real MaskBench schema."""

from __future__ import annotations

import json
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from shared_data import maskbench
from tagjit import CompileService
from tagjit.constraint import Constraint, Kind

UNTIMED = settings(deadline=None, max_examples=60)


def accepts(service: CompileService, schema, text: str) -> bool:
    g = service.grammar(Constraint.of(Kind.JSON, schema))
    return g.accept_string(text) and g.is_completed()


def judged(service: CompileService, schema, values: list[str]) -> list[str]:
    """The values whose JSON text the schema's grammar accepts, of those given."""
    return [v for v in values if accepts(service, schema, json.dumps(v))]


def test_a_pattern_matching_a_backslash_takes_it_escaped(service):
    schema = {"type": "string", "pattern": "^\\\\d+/\\\\d+$"}  # a real KNX schema: backslash, d, slash ...
    assert judged(service, schema, ["\\d/\\dd", "\\d/"]) == ["\\d/\\dd"]


def test_an_escape_never_stands_for_the_backslash_it_is_spelled_with(service):
    schema = {"type": "string", "pattern": "^a\\\\[bn]$"}  # a, backslash, then b or n
    assert accepts(service, schema, '"a\\\\b"')
    assert not accepts(service, schema, '"a\\b"')  # a + backspace
    assert not accepts(service, schema, '"a\\n"')  # a + newline


def test_a_pattern_matching_a_quote_takes_it_escaped(service):
    assert judged(service, {"type": "string", "pattern": '^say "hi"$'}, ['say "hi"', "say hi"]) == ['say "hi"']


def test_a_whitespace_class_takes_newline_and_tab_escapes(service):
    schema = {"type": "string", "pattern": "^a\\sb$"}
    assert judged(service, schema, ["a b", "a\nb", "a\tb", "ab"]) == ["a b", "a\nb", "a\tb"]


def test_a_raw_control_character_is_never_taken(service):
    assert not accepts(service, {"type": "string", "pattern": "^a\\sb$"}, '"a\nb"')


def test_a_dot_takes_quotes_and_backslashes_but_no_newline(service):
    schema = {"type": "string", "pattern": "^a.b$"}
    assert judged(service, schema, ['a"b', "a\\b", "a\nb", "a\u00e9b"]) == ['a"b', "a\\b", "a\u00e9b"]


def test_an_unanchored_pattern_takes_escapes_around_its_match(service):
    schema = {"type": "string", "pattern": "abc"}
    assert judged(service, schema, ['x"abc', "line\nabc\n", "\\abc", "ab\nc"]) == ['x"abc', "line\nabc\n", "\\abc"]


def test_a_pattern_beside_other_types_keeps_them(service):
    schema = {"type": ["string", "integer"], "pattern": "^\\\\x$"}
    assert accepts(service, schema, '"\\\\x"') and accepts(service, schema, "12")
    assert not accepts(service, schema, '"\\\\y"')


def test_a_pattern_interegular_cannot_read_is_still_compiled(service):
    schema = {"type": "string", "pattern": "^(?=a)[a-z]+$"}  # lookahead: left to xgrammar's regex rule as before
    service.validate(Constraint.of(Kind.JSON, schema))


def test_a_negated_class_is_exact_on_a_real_schema(service):
    # Angular's prerender target: "project:target[:configuration]"; xgrammar's regex rule took "chrome:latest:".
    schema = maskbench("Github_medium---o22092.json")["schema"]["properties"]["browserTarget"]
    assert judged(service, schema, ["app:build", "app:build:prod", "app:build:", "a b:c", 'a"b:c"d']) \
        == ["app:build", "app:build:prod", 'a"b:c"d']


PATTERNS = ["^[^:\\s]+:[^:\\s]+(:[^\\s]+)?$", "^a\\\\[bn]+$", '"[a-z]*"', "^\\s*x\\s*$", "^[ -~]{2,}$", "^.+$",
            "x\\\\", "^[^a]*$"]
ALPHABET = 'ax:b n"\\\t\n\x08\u00e9'


@UNTIMED
@given(st.sampled_from(PATTERNS), st.text(alphabet=ALPHABET, max_size=8))
def test_a_string_is_taken_exactly_when_the_pattern_searches_it(service, pattern, value):
    schema = {"type": "string", "pattern": pattern}
    assert accepts(service, schema, json.dumps(value)) == (re.search(pattern, value) is not None)


@UNTIMED
@given(st.sampled_from(PATTERNS), st.text(alphabet=ALPHABET, max_size=8))
def test_a_string_spelled_with_other_escapes_is_judged_the_same(service, pattern, value):
    schema = {"type": "string", "pattern": pattern}
    assert accepts(service, schema, unicode_escaped(value)) == (re.search(pattern, value) is not None)


def unicode_escaped(value: str) -> str:
    """The JSON text of a string with its quotes, backslashes and newlines spelled as ``\\uXXXX``."""
    return '"' + "".join(f"\\u{ord(c):04x}" if c in '"\\\n' else json.dumps(c)[1:-1] for c in value) + '"'


def test_a_long_pattern_naming_a_backslash_is_still_exact(service):
    codes = "|".join(f"code{i:02d}" for i in range(30))  # longer than SPELLED_PATTERN_CHARS
    schema = {"type": "string", "pattern": f"^(?:{codes})\\\\[nt]$"}
    assert judged(service, schema, ["code07\\n", "code07\n", "code07\\x"]) == ["code07\\n"]
    assert not accepts(service, schema, '"code07\\n"')  # code07 + newline
