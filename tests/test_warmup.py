"""Warm-up at start-up: the constraints of a warm-up file are compiled before any request."""

import json

import pytest

from pools import UNHURRIED
from tagjit import CompileService, ConstraintError
from tagjit.constraint import Constraint, Kind
from tagjit.compile.warmup import load_warmup

SCHEMA = {"type": "object", "properties": {"w": {"type": "integer"}}, "required": ["w"]}
TOOL = {"type": "function", "function": {"name": "ping", "parameters": {
    "type": "object", "properties": {"host": {"type": "string"}}, "required": ["host"]}}}


def test_warmup_file_compiles_schemas_and_tool_tags(llama3_info, tmp_path):
    path = tmp_path / "warm.json"
    path.write_text(json.dumps({"schemas": [SCHEMA], "tools": [{"format": "hermes", "tools": [TOOL]}]}))
    svc = CompileService(llama3_info, UNHURRIED)
    constraints = load_warmup(str(path))
    assert svc.warmup(constraints) == 2
    assert svc.cached(Constraint.of(Kind.JSON, SCHEMA)) is not None
    assert all(svc.cached(c) is not None for c in constraints)


def test_a_list_is_a_list_of_schemas(tmp_path):
    path = tmp_path / "warm.json"
    path.write_text(json.dumps([SCHEMA, {"type": "string"}]))
    assert [c.kind for c in load_warmup(str(path))] == [Kind.JSON, Kind.JSON]


def test_bad_entries_are_skipped_not_fatal(llama3_info, tmp_path):
    path = tmp_path / "warm.json"
    path.write_text(json.dumps([{"type": "objec"}, SCHEMA]))
    svc = CompileService(llama3_info, UNHURRIED)
    assert svc.warmup(load_warmup(str(path))) == 1


def test_malformed_file_is_a_clear_error(tmp_path):
    path = tmp_path / "warm.json"
    path.write_text("{not json")
    with pytest.raises(ConstraintError, match="not valid JSON"):
        load_warmup(str(path))


def prepared_service(info, **settings):
    """A service started as an engine starts it, under settings no other test uses (so it is new)."""
    from tagjit.compile.service import start_service

    return start_service(info, UNHURRIED.replace(**settings))


def test_start_service_builds_the_tokenizer_tables_before_returning(llama3_info):
    svc = prepared_service(llama3_info, cache_bytes=(64 << 20) + 1)
    assert all(table.done() for table in svc._tables)
    assert list(svc.prepared) == ["tables", "json", "tool_tag"]


def test_start_service_compiles_a_json_schema_and_a_tool_tag_before_the_first_request(llama3_info):
    from tagjit.compile.warmup import PREPARE_FORMAT, PREPARE_SCHEMA, PREPARE_TOOL
    from tagjit import tools

    svc = prepared_service(llama3_info, cache_bytes=(64 << 20) + 2)
    tag = tools.build_tool_tag(tools.load_format(PREPARE_FORMAT), [PREPARE_TOOL], "required", True, svc.settings)
    assert svc.cached(Constraint.of(Kind.JSON, PREPARE_SCHEMA)) is not None
    assert svc.cached(Constraint.of(Kind.STRUCTURAL_TAG, tag)) is not None


def test_a_service_is_prepared_once_however_often_an_engine_starts_it(llama3_info):
    from tagjit import metrics

    def counted() -> float:
        return metrics.REGISTRY.get_sample_value("tagjit_warmup_milliseconds_count", {"step": "json"}) or 0.0

    first = prepared_service(llama3_info, cache_bytes=(64 << 20) + 3)
    before = counted()
    again = prepared_service(llama3_info, cache_bytes=(64 << 20) + 3)
    assert again is first and again.prepared == first.prepared
    assert counted() == before


def test_each_start_up_step_is_on_the_warmup_metric(llama3_info):
    from tagjit import metrics

    def count(step: str) -> float:
        return metrics.REGISTRY.get_sample_value("tagjit_warmup_milliseconds_count", {"step": step}) or 0.0

    before = {step: count(step) for step in ("tables", "json", "tool_tag")}
    prepared_service(llama3_info, cache_bytes=(64 << 20) + 4)
    assert {step: count(step) - n for step, n in before.items()} == {"tables": 1, "json": 1, "tool_tag": 1}


def test_preparing_the_checks_validates_the_prepare_schema_without_a_tokenizer():
    from tagjit.compile.validation import _validated, _validation_key
    from tagjit.compile.warmup import PREPARE_SCHEMA, prepare_validation

    settings = UNHURRIED.replace(cache_bytes=(64 << 20) + 5)
    steps = prepare_validation(settings)
    assert list(steps) == ["check_json", "check_tool_tag"]
    assert _validated.get(_validation_key(Constraint.of(Kind.JSON, PREPARE_SCHEMA), settings)) is not None


def test_each_check_preparation_step_is_on_the_warmup_metric():
    from tagjit import metrics, tools
    from tagjit.compile.warmup import prepare_validation

    def count(step: str) -> float:
        return metrics.REGISTRY.get_sample_value("tagjit_warmup_milliseconds_count", {"step": step}) or 0.0

    before = {step: count(step) for step in ("check_json", "check_tool_tag")}
    prepare_validation(UNHURRIED, tools.load_format("qwen3_coder"))
    assert {step: count(step) - n for step, n in before.items()} == {"check_json": 1, "check_tool_tag": 1}
