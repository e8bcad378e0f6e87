"""The ``tagjit`` command as users and scripts call it."""

import json
import os
import subprocess
import sys

import pytest

from shared_data import TOKENIZERS

LLAMA3 = str(TOKENIZERS / "llama3" / "tokenizer.model")
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string"}},
          "required": ["n"], "additionalProperties": False}


def tagjit(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    exe = os.path.join(os.path.dirname(sys.executable), "tagjit")
    return subprocess.run([exe, *args], input=stdin, capture_output=True, timeout=120)


@pytest.fixture
def schema_path(tmp_path):
    p = tmp_path / "schema.json"
    p.write_text(json.dumps(SCHEMA))
    return str(p)


def test_compile_json_reports_time_rules_and_ebnf(schema_path):
    r = tagjit("compile", "--tokenizer", LLAMA3, "--schema", schema_path, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["compile_ms"] > 0 and out["rules"] > 1 and "root ::=" in out["ebnf"]


def test_compile_prints_ebnf_and_size(schema_path):
    r = tagjit("compile", "--tokenizer", LLAMA3, "--schema", schema_path)
    assert r.returncode == 0 and b"root ::=" in r.stdout and b"rules" in r.stderr


def test_check_prints_accept_or_reject_per_line(schema_path):
    lines = b'{"n": 1}\n{"n": 1, "s": "x"}\n{"s": "x"}\n{"n": 1, "extra": 2}\n{"n": 1\n'
    r = tagjit("check", "--tokenizer", LLAMA3, "--schema", schema_path, stdin=lines)
    assert r.returncode == 0
    assert r.stdout.decode().split() == ["accept", "accept", "reject", "reject", "reject"]


def test_check_takes_each_line_byte_for_byte(schema_path):
    r = tagjit("check", "--tokenizer", LLAMA3, "--schema", schema_path, stdin=b'{"n": 1} \n{"n": 1}\n')
    assert r.stdout.decode().split() == ["reject", "accept"]


def test_check_with_bad_schema_prints_reason_and_exits_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"type": "object", "properties": {"a": {"type": "strin"}}}')
    r = tagjit("check", "--tokenizer", LLAMA3, "--schema", str(bad), stdin=b"{}\n")
    assert r.returncode == 2 and b"/properties/a/type" in r.stderr


def test_check_regex(tmp_path):
    r = tagjit("check", "--tokenizer", LLAMA3, "--regex", "[0-9]{3}", stdin=b"123\n12\n")
    assert r.stdout.decode().split() == ["accept", "reject"]


def test_tokenizer_may_be_a_vocab_and_merges_directory(schema_path):
    r = tagjit("check", "--tokenizer", str(TOKENIZERS / "qwen2"), "--schema", schema_path, stdin=b'{"n": 5}\n')
    assert r.stdout.decode().split() == ["accept"]


TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def test_check_tool_calls_in_a_native_format(tmp_path):
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    texts = ['<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
             '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>',
             '<tool_call>\n{"name": "get_weather", "arguments": {"town": "Paris"}}\n</tool_call>']
    stdin = "".join(json.dumps(t) + "\n" for t in texts).encode()
    r = tagjit("check", "--tokenizer", LLAMA3, "--tools", str(tools), "--format", "hermes",
               "--tool-choice", "required", stdin=stdin)
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().split() == ["accept", "reject", "reject"]


def test_check_honours_any_order_keyword(tmp_path):
    schema = tmp_path / "any.json"
    schema.write_text(json.dumps({**SCHEMA, "x-any-order": True}))
    r = tagjit("check", "--tokenizer", LLAMA3, "--schema", str(schema),
               stdin=b'{"s": "x", "n": 1}\n{"s": "x"}\n{"n": 1, "n": 2}\n')
    assert r.stdout.decode().split() == ["accept", "reject", "reject"]


def test_lint_flags_decision_before_reasoning(tmp_path):
    schema = tmp_path / "judge.json"
    schema.write_text(json.dumps({"type": "object", "properties": {
        "verdict": {"enum": ["pass", "fail"]}, "reasoning": {"type": "string"}}}))
    r = tagjit("lint", str(schema))
    assert r.returncode == 1 and b"decision-before-reasoning" in r.stdout
