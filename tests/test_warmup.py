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
