"""Constraint keys: content-addressed and order-preserving."""

from tagjit.constraint import Constraint, Kind


def test_key_ignores_formatting_whitespace():
    a = Constraint.of(Kind.JSON, '{"type": "object",  "properties": {"a": {"type": "string"}}}')
    b = Constraint.of(Kind.JSON, '{"type":"object","properties":{"a":{"type":"string"}}}')
    assert a.key() == b.key()


def test_key_keeps_property_order():
    a = Constraint.of(Kind.JSON, {"type": "object", "properties": {"label": {}, "reasoning": {}}})
    b = Constraint.of(Kind.JSON, {"type": "object", "properties": {"reasoning": {}, "label": {}}})
    assert a.key() != b.key()


def test_canonical_text_is_never_sorted():
    c = Constraint.of(Kind.JSON, '{"properties": {"z": {}, "a": {}}, "type": "object"}')
    assert c.canonical() == '{"properties":{"z":{},"a":{}},"type":"object"}'


def test_kinds_are_part_of_the_key():
    assert Constraint.of(Kind.REGEX, "a+").key() != Constraint.of(Kind.GRAMMAR, "a+").key()


def test_salt_separates_tokenizers():
    c = Constraint.of(Kind.REGEX, "a+")
    assert c.key("tokenizer-1") != c.key("tokenizer-2")


def test_a_constraint_built_from_an_object_holds_its_canonical_text():
    c = Constraint.of(Kind.JSON, {"type": "object", "properties": {"z": {}, "é": {}}})
    assert c.source == c.canonical() == '{"type":"object","properties":{"z":{},"é":{}}}'


def test_a_constraint_of_canonical_text_keys_like_the_same_text_formatted_otherwise():
    canonical = Constraint.of_canonical(Kind.STRUCTURAL_TAG, '{"type":"structural_tag","format":{"type":"any_text"}}')
    spaced = Constraint.of(Kind.STRUCTURAL_TAG, '{"type": "structural_tag", "format": {"type": "any_text"}}')
    assert canonical.key("salt") == spaced.key("salt")
