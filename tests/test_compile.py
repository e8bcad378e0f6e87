"""Compiling each kind of constraint vLLM and SGLang send, and refusing bad ones with the reason."""

import json

import pytest

from tagjit import ConstraintError, Settings, UnsupportedFeatureError
from tagjit.runtime.matcher import Matcher
from tagjit.constraint import Constraint, Kind

from shared_data import maskbench, schema_file


def accepts(service, constraint: Constraint, text: str) -> bool:
    g = Matcher(service.compile(constraint), vocab_size=service.vocab_size)
    return g.accept_string(text) and g.is_completed()


@pytest.mark.parametrize("name", ["Github_medium---o90958.json", "Github_medium---o17417.json",
                                  "Github_easy---o46262.json", "Github_medium---o48421.json",
                                  "Glaiveai2K---calculate_area_69514181.json"])
def test_maskbench_schema_accepts_valid_and_rejects_invalid_instances(service, name):
    bench = maskbench(name)
    c = Constraint.of(Kind.JSON, bench["schema"])
    for case in bench["tests"]:
        assert accepts(service, c, json.dumps(case["data"])) == case["valid"], case


def test_json_schema_from_jsonschemabench_compiles(service):
    schema = schema_file("Github_easy", "o10008.json")
    compiled = service.compile(Constraint.of(Kind.JSON, schema))
    assert compiled.nbytes > 0


def test_json_object_accepts_any_object_only(service):
    c = Constraint.of(Kind.JSON_OBJECT, "")
    assert accepts(service, c, '{"a": [1, {"b": null}]}')
    assert not accepts(service, c, "[1, 2]")


def test_regex_matches_whole_text(service):
    c = Constraint.of(Kind.REGEX, r"[A-Z]{3}-\d{4}")
    assert accepts(service, c, "ABC-1234")
    assert not accepts(service, c, "ABC-123")


def test_choice_accepts_exactly_the_choices(service):
    c = Constraint.of(Kind.CHOICE, ["yes", "no", 'say "maybe"'])
    assert accepts(service, c, 'say "maybe"')
    assert not accepts(service, c, "yesno")


def test_ebnf_grammar(service):
    c = Constraint.of(Kind.GRAMMAR, 'root ::= "(" root ")" | "x"')
    assert accepts(service, c, "((x))")
    assert not accepts(service, c, "((x)")


def test_lark_grammar(service):
    c = Constraint.of(Kind.GRAMMAR, 'start: "a" b\nb: "b"+\n')
    assert accepts(service, c, "abbb")


def test_structural_tag_format_form(service):
    tag = {"type": "structural_tag", "format": {
        "type": "tag", "begin": "<answer>", "end": "</answer>",
        "content": {"type": "json_schema", "json_schema": {"type": "object", "properties": {"x": {"type": "integer"}},
                                                           "required": ["x"]}}}}
    c = Constraint.of(Kind.STRUCTURAL_TAG, tag)
    assert accepts(service, c, '<answer>{"x": 3}</answer>')
    assert not accepts(service, c, '<answer>{"x": "3"}</answer>')


def test_structural_tag_legacy_form(service):
    tag = {"type": "structural_tag",
           "structures": [{"begin": "<f=add>", "schema": {"type": "object", "properties": {"a": {"type": "integer"}},
                                                          "required": ["a"]}, "end": "</f>"}],
           "triggers": ["<f="]}
    c = Constraint.of(Kind.STRUCTURAL_TAG, tag)
    assert accepts(service, c, 'free text <f=add>{"a": 1}</f> more text')
    assert not accepts(service, c, 'free text <f=add>{"a": "x"}</f>')


def test_a_legacy_structure_without_a_schema_takes_any_object(service):
    tag = {"type": "structural_tag", "structures": [{"begin": "<f=ping>", "schema": None, "end": "</f>"}],
           "triggers": ["<f="]}
    c = Constraint.of(Kind.STRUCTURAL_TAG, tag)
    assert accepts(service, c, 'text <f=ping>{"a": [1]}</f>')
    assert not accepts(service, c, 'text <f=ping>"now"</f>')


@pytest.mark.parametrize("kind,source,reason", [
    (Kind.JSON, '{"type": "object"', "not valid JSON"),
    (Kind.JSON, '{"type": "objec"}', "invalid JSON schema at '/type'"),
    (Kind.JSON, '{"type": "object", "required": "a"}', "invalid JSON schema at '/required'"),
    (Kind.REGEX, "(unclosed", "invalid regex"),
    (Kind.GRAMMAR, "root ::= missing_rule", "missing_rule"),
    (Kind.STRUCTURAL_TAG, '{"format": {"type": "no_such_format"}}', "no_such_format"),
    (Kind.STRUCTURAL_TAG, '{"structures": [{"begin": "<a>"}], "triggers": ["<a"]}', "needs 'begin', 'schema' and 'end'"),
    (Kind.CHOICE, "[]", "non-empty list"),
])
def test_bad_constraint_is_refused_with_its_reason(service, kind, source, reason):
    with pytest.raises(ConstraintError, match=None) as err:
        service.validate(Constraint.of(kind, source))
    assert reason in str(err.value)


@pytest.mark.parametrize("schema,feature", [
    ({"type": "object", "not": {"minProperties": 2}}, "not: {minProperties}"),
    ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "uniqueItems"),
    ({"type": "integer", "multipleOf": 7919, "minimum": -10 ** 12, "maximum": 10 ** 12}, "multipleOf 7919"),
    ({"if": {"type": "string", "minLength": 3}, "then": {"maxLength": 5}}, "not: {type, minLength}' at #/if"),
    ({"type": "string", "format": "regex"}, "format: regex"),
    ({"allOf": [{"type": "string", "pattern": "a"}, {"type": "string", "pattern": "b"}]}, "allOf"),
    ({"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}}, "$ref"),
])
def test_unenforceable_feature_is_named_not_dropped(service, schema, feature):
    with pytest.raises(UnsupportedFeatureError) as err:
        service.validate(Constraint.of(Kind.JSON, schema))
    assert feature in str(err.value)


def test_all_of_is_enforced_exactly_where_it_can_be_merged(service):
    c = Constraint.of(Kind.JSON, {"allOf": [{"type": "string"}, {"enum": ["a", "b", 3]}]})
    assert accepts(service, c, '"a"')
    assert not accepts(service, c, '"c"') and not accepts(service, c, "3")


def test_unsupported_feature_inside_a_structural_tag_is_named(service):
    tag = {"format": {"type": "json_schema", "json_schema": {"type": "array", "uniqueItems": True}}}
    with pytest.raises(UnsupportedFeatureError, match="uniqueItems"):
        service.validate(Constraint.of(Kind.STRUCTURAL_TAG, tag))


def test_deeply_nested_schema_is_refused_cleanly(service):
    schema = '{"type": "array", "items": ' * 2000 + '{"type": "integer"}' + "}" * 2000
    with pytest.raises(ConstraintError, match="nest"):
        service.validate(Constraint.of(Kind.JSON, schema))


def test_compile_cache_returns_the_same_grammar(service):
    c = Constraint.of(Kind.REGEX, "cache-me-[0-9]+")
    assert service.compile(c) is service.compile(c)


def test_schemas_differing_only_in_property_order_compile_to_different_grammars(service):
    a = {"type": "object", "properties": {"label": {"type": "string"}, "why": {"type": "string"}},
         "required": ["label", "why"]}
    b = {"type": "object", "properties": {"why": {"type": "string"}, "label": {"type": "string"}},
         "required": ["why", "label"]}
    ca, cb = Constraint.of(Kind.JSON, a), Constraint.of(Kind.JSON, b)
    assert service.compile(ca) is not service.compile(cb)
    assert accepts(service, ca, '{"label": "x", "why": "y"}') and not accepts(service, ca, '{"why": "y", "label": "x"}')
    assert accepts(service, cb, '{"why": "y", "label": "x"}')


def test_a_trusted_constraint_is_not_rebuilt_by_validation(monkeypatch):
    from tagjit.compile import service as compiler
    from tagjit.compile import validation

    trusted = Constraint.of(Kind.REGEX, "trusted-[a-z]{3}")
    other = Constraint.of(Kind.REGEX, "untrusted-[a-z]{3}")
    compiler.trust(trusted)

    def refuse(*_args, **_kwargs):
        raise ConstraintError("built again")

    monkeypatch.setattr(validation, "build_with_relaxations", refuse)
    compiler.validate(trusted)
    with pytest.raises(ConstraintError, match="built again"):
        compiler.validate(other)


def test_the_service_and_the_api_server_share_one_validation(service, monkeypatch):
    from tagjit.compile import service as compiler
    from tagjit.compile import validation

    c = Constraint.of(Kind.REGEX, "shared-validation-[0-9]{2}")
    compiler.validate(c, service.settings)  # the API server's check (vLLM)

    def refuse(*_args, **_kwargs):
        raise ConstraintError("validated twice")

    monkeypatch.setattr(validation, "build_with_relaxations", refuse)
    service.validate(c)  # the engine's check (SGLang) finds it done


def decision_first_findings() -> float:
    """How many decision-before-reasoning lint findings this process has counted."""
    from tagjit.metrics import LINT

    return LINT.labels("decision-before-reasoning")._value.get()


def decision_first(case: str) -> Constraint:
    """A schema whose enum decision precedes its reasoning (one lint finding), made distinct by ``case``."""
    return Constraint.of(Kind.JSON, {"type": "object", "properties": {
        "verdict": {"enum": ["yes", "no"]}, "reasoning": {"type": "string"}, "case": {"const": case}}})


def test_validation_lints_a_schema_once_whichever_engine_asks(service):
    from tagjit.compile import service as compiler

    c = decision_first("lint-once")
    before = decision_first_findings()
    service.validate(c)  # SGLang's path
    service.validate(c)
    assert decision_first_findings() == before + 1
    compiler.validate(c, service.settings)  # vLLM's API-server path
    assert decision_first_findings() == before + 1


def test_validating_an_already_compiled_constraint_still_lints_it(service):
    c = decision_first("lint-after-compile")
    service.compile(c)  # compiled first (a warm-up, or an earlier request), never validated
    assert service.cached(c) is not None
    before = decision_first_findings()
    service.validate(c)  # SGLang's path: the memory cache holds it, the lint still runs
    assert decision_first_findings() == before + 1
    service.validate(c)
    assert decision_first_findings() == before + 1


def large_tool_tag_text(first: int = 0) -> str:
    """A 40-tool hermes tag (~45 KB) written with indentation, so its canonical form is not known yet."""
    from tagjit.tools import bfcl
    from tagjit.tools import build_tool_tag

    from shared_data import DATA

    tools = bfcl.load_tools(DATA / "bfcl", strict=True)[first:first + 40]
    return json.dumps(build_tool_tag("hermes", tools, "required", True, Settings()), indent=1)


def test_a_large_new_constraint_is_keyed_on_the_pool_not_on_the_callers_thread(service, monkeypatch):
    import threading

    from tagjit import constraint as spec

    keyed_on: list[str] = []
    original = spec._canonical_json

    def recording(*args):
        keyed_on.append(threading.current_thread().name)
        return original(*args)

    recording.cache, recording.remember = original.cache, original.remember
    monkeypatch.setattr(spec, "_canonical_json", recording)
    c = Constraint(Kind.STRUCTURAL_TAG, large_tool_tag_text(100))
    assert service.cached(c) is None and not keyed_on
    compiled = service.submit(c).result()
    assert keyed_on and threading.current_thread().name not in keyed_on
    assert service.cached(c) is compiled


def test_the_same_large_text_submitted_twice_at_once_compiles_once(service):
    c = Constraint(Kind.STRUCTURAL_TAG, large_tool_tag_text(200))
    first, second = service.submit(c), service.submit(c)
    assert first.result() is second.result()


def test_a_large_text_formatted_otherwise_finds_the_compiled_constraint(service):
    text = large_tool_tag_text(300)
    compiled = service.compile(Constraint(Kind.STRUCTURAL_TAG, text))
    other = Constraint(Kind.STRUCTURAL_TAG, json.dumps(json.loads(text), indent=3))
    assert service.submit(other).result() is compiled
