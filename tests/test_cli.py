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
    r = tagjit("check", "--tokenizer", LLAMA3, "--schema", schema_path, stdin=b'{"n": 1} \n{"n":\t1}\n')
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
