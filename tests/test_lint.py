"""Schema lint: decision fields before reasoning fields, and alphabetically sorted properties."""

from __future__ import annotations

import json

from tagjit.schema.lint import DECISION_BEFORE_REASONING, SORTED_PROPERTIES, Finding, lint_schema

from shared_data import schema_file

TRIAGE_LABEL_FIRST = {  # the seed's ticket classifier after sort_keys=True
    "type": "object",
    "properties": {"category": {"enum": ["billing", "bug", "account"]}, "reasoning": {"type": "string"}},
}
TRIAGE_REASONING_FIRST = {
    "type": "object",
    "properties": {"reasoning": {"type": "string"}, "category": {"enum": ["billing", "bug", "account"]}},
}


def rules(schema) -> list[tuple[str, str]]:
    return [(f.rule, f.path) for f in lint_schema(schema)]


def test_label_before_reasoning_is_flagged():
    findings = lint_schema(TRIAGE_LABEL_FIRST)
    assert [(f.rule, f.path) for f in findings] == [(DECISION_BEFORE_REASONING, "#")]
    assert "'category'" in findings[0].message and "'reasoning'" in findings[0].message


def test_reasoning_before_label_is_not_flagged():
    assert lint_schema(TRIAGE_REASONING_FIRST) == []


def test_boolean_and_number_fields_count_as_decisions():
    schema = {"type": "object", "properties": {"approved": {"type": "boolean"}, "x": {"type": "number"},
                                               "chain_of_thought": {"type": "string"}}}
    assert rules(schema) == [(DECISION_BEFORE_REASONING, "#")]


def test_short_label_names_count_as_decisions_whatever_their_type():
    schema = {"type": "object", "properties": {"verdict": {"type": "string"}, "explanation": {"type": "string"}}}
    assert rules(schema) == [(DECISION_BEFORE_REASONING, "#")]


def test_enum_named_reason_is_not_reasoning():
    schema = {"type": "object", "properties": {"score": {"type": "integer"}, "reason": {"enum": ["a", "b"]}}}
    assert lint_schema(schema) == []


def test_names_that_merely_contain_a_reasoning_word_are_not_reasoning():
    schema = {"type": "object", "properties": {"status": {"type": "integer"}, "reasonPhrase": {"type": "string"}}}
    assert lint_schema(schema) == []


def test_nested_object_is_reported_at_its_path():
    schema = {"type": "object", "properties": {"out": {"$ref": "#/$defs/t"}}, "$defs": {"t": TRIAGE_LABEL_FIRST}}
    assert rules(schema) == [(DECISION_BEFORE_REASONING, "#/$defs/t")]


def test_alphabetical_properties_are_flagged():
    schema = {"type": "object", "properties": {"a": {}, "b": {}, "c": {}}}
    assert rules(schema) == [(SORTED_PROPERTIES, "#")]


def test_two_sorted_properties_are_too_few_to_tell():
    assert lint_schema({"type": "object", "properties": {"a": {}, "b": {}}}) == []


def test_unsorted_properties_are_not_flagged():
    assert lint_schema({"type": "object", "properties": {"b": {}, "a": {}, "c": {}}}) == []


def test_sort_keys_round_trip_is_caught():
    schema = {"type": "object", "properties": {"summary": {"type": "string"}, "reasoning": {"type": "string"},
                                               "category": {"enum": ["x", "y"]}}}
    assert lint_schema(schema) == []
    resorted = json.loads(json.dumps(schema, sort_keys=True))
    assert sorted(rules(resorted)) == [(DECISION_BEFORE_REASONING, "#"), (SORTED_PROPERTIES, "#")]


def test_finding_is_a_plain_record():
    f = Finding("r", "#", "m")
    assert (f.rule, f.path, f.message) == ("r", "#", "m")


# -- real schemas (JSONSchemaBench) -------------------------------------------------------------

def test_real_sarif_suppression_puts_enums_before_justification():
    findings = [f for f in lint_schema(schema_file("JsonSchemaStore", "sarif-2.1.0.json"))
                if f.rule == DECISION_BEFORE_REASONING]
    assert [f.path for f in findings] == ["#/definitions/suppression"]
    assert "'justification'" in findings[0].message


def test_real_discount_tool_puts_percentage_before_reason():
    schema = schema_file("Glaiveai2K", "calculate_discounted_price_a93b7998.json")
    assert (DECISION_BEFORE_REASONING, "#/properties/discounts/items") in rules(schema)


def test_real_schema_with_identifier_then_rationale_is_not_flagged():
    schema = schema_file("Github_easy", "o76439.json")
    assert DECISION_BEFORE_REASONING not in {r for r, _ in rules(schema)}


def test_real_sorted_tool_parameters_are_flagged():
    schema = schema_file("Glaiveai2K", "analyze_social_media_sentiment_6ef0069e.json")
    assert (SORTED_PROPERTIES, "#") in rules(schema)


def test_real_hand_ordered_schema_is_not_flagged_as_sorted():
    schema = schema_file("Github_easy", "o11170.json")
    assert list(schema["properties"])[:2] == ["title", "description"]
    assert (SORTED_PROPERTIES, "#") not in rules(schema)
